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
import warnings
from collections.abc import Sequence
from pathlib import Path

#: The targets, as the registry lists them (``fusec.target.REGISTRY``).
_TARGETS_HELP = "auto (the best available), reference, or a registered back end (cpu, cuda)"

EXIT_OK, EXIT_ERROR = 0, 1


def _write_atomically(path: str, text: str | bytes) -> None:
    """Write ``text`` to ``path`` whole (never half a file), or a located FusecError."""
    from fusec.errors import FusecError, SourceLocation
    from fusec.ir.files import write_atomically

    target = Path(path)
    where = SourceLocation(str(path), 0, 0)
    if not str(path):
        raise FusecError("cannot write the output: the file name is empty")
    if target.is_dir():
        raise FusecError("cannot write the output: it is a directory, not a file name", where)
    try:
        write_atomically(target, text)
    except OSError as err:  # disk full, no such folder, a directory made meanwhile
        raise FusecError(f"cannot write the output: {err.strerror or err}", where) from None


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

    # `fusec compile` runs nothing: kernels (and their assembly) need no device
    gpu_code = args.emit in ("ptx", "cuda")  # PTX and generated C++: the cuda target's
    target = "cuda" if gpu_code and args.target == "auto" else args.target
    compiled = fusec_compile(
        _source(args),
        target=target,
        pipeline=args.pipeline,
        entry=args.entry,
        after_pass=after_pass if args.print_ir_after_all else None,
        executable=False,
    )
    parts = []
    if args.emit in ("ir", "all"):
        parts.append(compiled.ir)
    if args.emit in ("kernels", "all"):
        if not compiled.kernels:
            parts.append(f"// no kernels generated for target '{compiled.target}'\n")
        for kernel in compiled.kernels:
            parts.append(f"// ===== kernel {kernel.name} ({kernel.kind}) =====\n{kernel.source}\n")
    if args.emit == "cuda":
        for kernel, text in compiled.native_sources():
            text = text or "// no generated C++: a Numba kernel or the PyTorch fallback\n"
            parts.append(f"// ===== kernel {kernel.name} ({kernel.kind}) CUDA C++ =====\n{text}\n")
    if args.emit == "ptx":
        for kernel, text in compiled.assembly(args.arch):
            parts.append(
                f"// ===== kernel {kernel.name} ({kernel.kind}) PTX for {args.arch} =====\n{text}\n"
            )
    _emit("".join(parts), args.output)
    if args.timing:
        total = sum(t.seconds for t in compiled.timings)
        sys.stderr.write("pass timing:\n")
        for t in compiled.timings:
            sys.stderr.write(f"  {t.seconds * 1e3:9.3f} ms  {t.name}\n")
        sys.stderr.write(f"  {total * 1e3:9.3f} ms  total\n")
    if args.remarks:
        sys.stderr.write("".join(f"{remark}\n" for remark in compiled.remarks()))
    return EXIT_OK


def _input_shapes(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``--input-shape NAME=2x3x4`` (repeated) -> {name: shape}; ``NAME=`` is a scalar."""
    from fusec.errors import FusecError

    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d <= 0 for d in shape):
            raise FusecError(
                f"--input-shape {spec!r}: expected NAME=DIMS with positive dimensions "
                "joined by 'x', e.g. x=1x3x224x224"
            )
        if name in shapes:
            raise FusecError(f"--input-shape: '{name}' is given twice")
        shapes[name] = shape
    return shapes


def _is_onnx(path: str) -> bool:
    return str(path).lower().endswith(".onnx")


def _source(args: argparse.Namespace):
    """What to compile: the path of an .mlir file, or the module imported from an
    .onnx file (with ``--input-shape``)."""
    from fusec.errors import FusecError

    if _is_onnx(args.file):
        from fusec.api import from_onnx

        return from_onnx(args.file, input_shapes=_input_shapes(args.input_shape))
    if args.input_shape:
        raise FusecError("--input-shape applies to .onnx models only")
    return Path(args.file)  # always a path (a file name may hold a newline or a brace)


def cmd_import(args: argparse.Namespace) -> int:
    from fusec.api import import_onnx, print_ir

    result = import_onnx(
        args.file,
        weights_as_args=args.weights_as_args,
        input_shapes=_input_shapes(args.input_shape),
    )
    _emit(print_ir(result.module, locations=True), args.output)
    sys.stderr.write(f"{args.file}: {result.summary()}\n")
    if result.recognized:  # what the default pipeline's recognize-patterns will rewrite
        found = ", ".join(f"{name} {n}" for name, n in sorted(result.recognized.items()))
        sys.stderr.write(f"{args.file}: recognize-patterns (in fusec-default) rewrites: {found}\n")
    return EXIT_OK


def cmd_conformance(args: argparse.Namespace) -> int:
    from fusec.extras import require

    require("onnx", "fusec conformance")
    from fusec.tools.conformance import run_conformance

    if args.all:  # the whole suite as the measure: pass / refused / wrong per operator
        from fusec.tools.conformance import measure_all

        right = measure_all(args.op, target=args.target, verbose=args.verbose)
        return EXIT_OK if right else EXIT_ERROR
    report = run_conformance(args.op or None, target=args.target)
    sys.stdout.write(report.format(verbose=args.verbose))
    return EXIT_ERROR if report.count("failed") else EXIT_OK


def _add_input_shape(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=DIMS",
        help="an ONNX model input's static shape, e.g. x=1x3x224x224 (fixes dynamic "
        "dimensions; repeat for several inputs)",
    )


def _add_onnx_commands(sub) -> None:
    imp = sub.add_parser("import", help="import an ONNX model as ai IR (with loc(...) names)")
    imp.add_argument("file", help="input .onnx model")
    imp.add_argument("-o", "--output", help="write the IR here instead of stdout")
    _add_input_shape(imp)
    imp.add_argument(
        "--weights-as-args",
        action="store_true",
        help="initializers become function arguments (after the inputs) instead of constants",
    )
    imp.set_defaults(handler=cmd_import)

    conf = sub.add_parser(
        "conformance", help="run ONNX's backend node tests of the supported operators"
    )
    conf.add_argument("--op", action="append", metavar="NAME", help="only this operator (repeats)")
    conf.add_argument("--target", default="auto", help=_TARGETS_HELP)
    conf.add_argument("-v", "--verbose", action="store_true", help="also list skipped cases")
    conf.add_argument(
        "--all",
        action="store_true",
        help="every float case of the suite, unsupported operators included: "
        "pass / refused / wrong per operator (-v lists the refusals)",
    )
    conf.set_defaults(handler=cmd_conformance)


def cmd_run(args: argparse.Namespace) -> int:
    from fusec.targets.cpu.threads import configure

    configure()  # thread-pool settings, before numpy and Numba start (fusec.targets.cpu.threads)
    from fusec.tools import runner

    result = runner.run(
        _source(args),
        target=args.target,
        pipeline=args.pipeline,
        entry=args.entry,
        inputs=args.inputs,
        seed=args.seed if args.random_inputs else None,
        check_results=args.check,
    )
    sys.stdout.write("".join(f"{line}\n" for line in result.lines()))
    if args.output is not None:
        _write_atomically(args.output, runner.outputs_npz(result.outputs))
    return EXIT_OK if result.passed else EXIT_ERROR


def _add_run_command(sub) -> None:
    run = sub.add_parser("run", help="compile and run the entry function on inputs")
    run.add_argument("file", help="input .mlir file or .onnx model")
    _add_input_shape(run)
    run.add_argument("--inputs", metavar="FILE.npz", help="arguments, by name or arr_0, arr_1, ...")
    run.add_argument("--random-inputs", action="store_true", help="draw standard-normal inputs")
    run.add_argument("--seed", type=int, default=0, help="seed of --random-inputs (default 0)")
    run.add_argument("--target", default="auto", help=_TARGETS_HELP)
    run.add_argument("--pipeline", help="xDSL pass-pipeline spec (default: fusec-default)")
    run.add_argument("--entry", help="entry function name (default: the single public one)")
    run.add_argument("-o", "--output", metavar="FILE.npz", help="save the results here")
    run.add_argument(
        "--check",
        action="store_true",
        help="compare with the float64 reference, rounded as a fused and as an op-by-op "
        "program rounds 16-bit values; exit 1 on a FAIL (f32 1e-4, f16/bf16 1e-2, by the "
        "lowest precision a value passed through)",
    )
    run.set_defaults(handler=cmd_run)


def cmd_viz(args: argparse.Namespace) -> int:
    from fusec.api import compile as fusec_compile
    from fusec.tools.viz import picture_format, render

    picture_format(args.output)  # a bad suffix fails before any work
    # The picture needs the fused IR only: no kernels are generated.
    compiled = fusec_compile(
        _source(args), target="reference", pipeline=args.pipeline, entry=args.entry
    )
    _write_atomically(args.output, render(compiled.module, args.output))
    return EXIT_OK


def _add_viz_command(sub) -> None:
    viz = sub.add_parser(
        "viz", help="draw the op graph with fusion groups as clusters coloured by kind"
    )
    viz.add_argument("file", help="input .mlir file or .onnx model")
    _add_input_shape(viz)
    viz.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="graph.svg|graph.dot|graph.html",
        help="the picture; its suffix picks the format (SVG needs no Graphviz)",
    )
    viz.add_argument("--pipeline", help="xDSL pass-pipeline spec (default: fusec-default)")
    viz.add_argument("--entry", help="entry function name (default: the single public one)")
    viz.set_defaults(handler=cmd_viz)


def cmd_tune(args: argparse.Namespace) -> int:
    from fusec.api import compile as fusec_compile

    compiled = fusec_compile(  # the cuda target's IR: tune builds and times the candidates
        _source(args), target="cuda", pipeline=args.pipeline, entry=args.entry, executable=False
    )
    results = compiled.tune(reps=args.reps)
    if not results:
        sys.stdout.write("no Tensor Core GEMM group to tune\n")
    for result in results:
        sys.stdout.write(f"group #{result.group} ({result.problem}):\n")
        for text, ms in sorted(result.timings.items(), key=lambda kv: kv[1]):
            mark = "  <- recorded" if text == result.best else ""
            sys.stdout.write(f"  {text:52s} {ms:9.4f} ms{mark}\n")
        sys.stdout.write(f"  record: {result.path}\n")
    return EXIT_OK


def _add_tune_command(sub) -> None:
    tune = sub.add_parser(
        "tune",
        help="time a few Tensor Core tile configurations of each GEMM group on this GPU and "
        "record the fastest in the kernel cache (the tile-gemm pass then uses it)",
    )
    tune.add_argument("file", help="input .mlir file or .onnx model")
    _add_input_shape(tune)
    tune.add_argument("--pipeline", help="xDSL pass-pipeline spec (default: fusec-cuda)")
    tune.add_argument("--entry", help="entry function name (default: the single public one)")
    tune.add_argument("--reps", type=int, default=20, help="launches timed per candidate")
    tune.set_defaults(handler=cmd_tune)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusec", description="fusec: an operator-fusion compiler for AI graphs"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    comp = sub.add_parser("compile", help="parse, verify, run the pipeline, print the IR")
    comp.add_argument("file", help="input .mlir file or .onnx model")
    _add_input_shape(comp)
    comp.add_argument("-o", "--output", help="write the result here instead of stdout")
    comp.add_argument(
        "--emit",
        choices=("ir", "kernels", "all", "ptx", "cuda"),
        default="ir",
        help="what to print: the IR, the kernel modules, PTX, or the generated CUDA C++ of "
        "the Tensor Core GEMM groups (ptx and cuda need no GPU)",
    )
    comp.add_argument(
        "--arch", default="sm_90", help="GPU architecture for --emit ptx (sm_90a for GEMMs)"
    )
    comp.add_argument("--pipeline", help="xDSL pass-pipeline spec (default: fusec-default)")
    comp.add_argument("--target", default="auto", help=_TARGETS_HELP)
    comp.add_argument("--entry", help="entry function name (default: the single public one)")
    comp.add_argument("--print-ir-after-all", action="store_true", help="IR after each pass")
    comp.add_argument("--timing", action="store_true", help="time each pass (to stderr)")
    comp.add_argument(
        "--remarks",
        action="store_true",
        help="why each producer -> consumer edge left between kernels was not fused (to stderr)",
    )
    comp.set_defaults(handler=cmd_compile)
    _add_onnx_commands(sub)
    _add_run_command(sub)
    _add_tune_command(sub)
    _add_viz_command(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``fusec: warning: MESSAGE`` for fusec's own warnings; Python's format for others."""
    from fusec.errors import FusecWarning

    if issubclass(category, FusecWarning):
        (file or sys.stderr).write(f"fusec: warning: {message}\n")
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main(argv: Sequence[str] | None = None) -> int:
    from fusec.errors import FusecError

    args = build_parser().parse_args(argv)
    shown, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        return args.handler(args)
    except FusecError as err:
        sys.stderr.write(err.format() + "\n")
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_OK
    except MemoryError as err:  # tensors too large for this machine: the input's size
        sys.stderr.write(f"error: out of memory{f' ({err})' if str(err) else ''}\n")
        return EXIT_ERROR
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
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
