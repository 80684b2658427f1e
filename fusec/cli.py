"""The ``fusec`` command line.

Every failure caused by the input prints ``FILE:LINE:COL: error: ...`` (with
the source line and a caret where known) and exits with status 1; no Python
traceback reaches the user. Heavy modules (xDSL, numpy) are imported only
inside the commands, so ``fusec --help`` is instant.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

EXIT_OK, EXIT_ERROR = 0, 1


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: never half a file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or Path("."), prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _emit(text: str, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.write(text)
    else:
        _write_atomically(output, text)


def cmd_compile(args: argparse.Namespace) -> int:
    from fusec.api import compile as fusec_compile
    from fusec.api import print_ir

    def after_pass(name: str, module) -> None:
        sys.stderr.write(f"// -----// IR Dump After {name} //----- //\n{print_ir(module)}\n")

    compiled = fusec_compile(
        args.file,
        target=args.target,
        pipeline=args.pipeline,
        entry=args.entry,
        after_pass=after_pass if args.print_ir_after_all else None,
    )
    parts = []
    if args.emit in ("ir", "all"):
        parts.append(compiled.ir)
    if args.emit in ("kernels", "all"):
        if not compiled.kernels:
            parts.append(f"// no kernels generated for target '{compiled.target}'\n")
        for kernel in compiled.kernels:
            parts.append(f"// ===== kernel {kernel.name} ({kernel.kind}) =====\n{kernel.source}\n")
    _emit("".join(parts), args.output)
    if args.timing:
        total = sum(t.seconds for t in compiled.timings)
        sys.stderr.write("pass timing:\n")
        for t in compiled.timings:
            sys.stderr.write(f"  {t.seconds * 1e3:9.3f} ms  {t.name}\n")
        sys.stderr.write(f"  {total * 1e3:9.3f} ms  total\n")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusec", description="fusec: an operator-fusion compiler for AI graphs"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    comp = sub.add_parser("compile", help="parse, verify, run the pipeline, print the IR")
    comp.add_argument("file", help="input .mlir file")
    comp.add_argument("-o", "--output", help="write the result here instead of stdout")
    comp.add_argument("--emit", choices=("ir", "kernels", "all"), default="ir")
    comp.add_argument("--pipeline", help="xDSL pass-pipeline spec (default: fusec-default)")
    comp.add_argument("--target", default="auto", help="auto, reference, cpu or cuda")
    comp.add_argument("--entry", help="entry function name (default: the single public one)")
    comp.add_argument("--print-ir-after-all", action="store_true", help="IR after each pass")
    comp.add_argument("--timing", action="store_true", help="time each pass (to stderr)")
    comp.set_defaults(handler=cmd_compile)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from fusec.errors import FusecError

    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except FusecError as err:
        sys.stderr.write(err.format() + "\n")
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("fusec: interrupted\n")
        return 130
    except Exception as err:  # a bug in fusec, not bad input: say so plainly
        if os.environ.get("FUSEC_DEBUG"):
            raise
        sys.stderr.write(
            f"fusec: internal error: {type(err).__name__}: {err}\n"
            "  (this is a bug in fusec; rerun with FUSEC_DEBUG=1 for the traceback)\n"
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
