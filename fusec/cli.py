"""The ``fusec`` command line.

Every failure caused by the input prints ``FILE:LINE:COL: error: ...`` (with
the source line and a caret where known) and exits with status 1; no Python
traceback reaches the user. The exit statuses tell the outcomes apart
(``fusec.errors.ExitCode``, listed in ``fusec --help``). Heavy modules (xDSL,
numpy, the targets) are imported only inside the commands, so ``fusec --help``
is quick; the lists of targets and pipelines in the help are read from their
registries only when the help is shown.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fusec._version import __version__
from fusec.errors import ExitCode, internal_error

#: Filled in from the registries when the help is shown (``_Parser.format_help``).
_TARGETS, _PIPELINES = "{targets}", "{pipelines}"
_TARGETS_HELP = f"auto (the best available one, the default) or one of: {_TARGETS}"
_ENTRY_HELP = "entry function name (default: the single public one)"
_PIPELINE_HELP = (
    f"xDSL pass-pipeline spec; a named pipeline ({_PIPELINES}) expands in it "
    "(default: the target's own, fusec-default or fusec-cuda)"
)
#: Standard input in place of a file name.
STDIN = "-"

_EPILOG = """\
exit status:
  0    success
  1    bad input: a located diagnostic (FILE:LINE:COL: error: ...)
  2    bad command line: an unknown option, command or choice
  3    a result did not match: run --check, conformance
  70   a bug in fusec (one line; FUSEC_DEBUG=1 shows the traceback)
  130  interrupted
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (the exit statuses' table); help texts
    wrapped at spaces only, never inside a hyphenated name (fusec-default)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help names the registered targets and pipelines: read
    from their registries (which take a while to import) only when it is shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)  # the subcommands' parsers too
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        for action in self._actions:
            if action.help and (_TARGETS in action.help or _PIPELINES in action.help):
                action.help = _with_registries(action.help)
        return super().format_help()


def _with_registries(text: str) -> str:
    from fusec.api import pipeline_names, target_names

    return text.replace(_TARGETS, ", ".join(target_names())).replace(
        _PIPELINES, ", ".join(pipeline_names())
    )


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


def _timed(command: Any, args: argparse.Namespace) -> int:
    """``command(args, timing)`` under ``--timing`` (its report on stderr), if asked."""
    timing = _timing(args)
    with timing or contextlib.nullcontext():
        code = command(args, timing)
    if timing is not None:
        sys.stderr.write(timing.report())
    return code


def cmd_compile(args: argparse.Namespace) -> int:
    return _timed(_compile, args)


def _compile(args: argparse.Namespace, timing: Any) -> int:
    from fusec.api import compile as fusec_compile
    from fusec.api import print_ir

    def after_pass(name: str, module) -> None:
        sys.stderr.write(f"// -----// IR Dump After {name} //----- //\n{print_ir(module)}\n")

    # `fusec compile` runs nothing: kernels (and their assembly) need no device
    gpu_code = args.emit in ("ptx", "cuda")  # PTX and generated C++: the cuda target's
    target = "cuda" if gpu_code and args.target == "auto" else args.target
    compiled = fusec_compile(
        _timed_source(args, timing),
        target=target,
        pipeline=args.pipeline,
        entry=args.entry,
        after_pass=after_pass if args.print_ir_after_all else None,
        executable=False,
        sms=args.sms,
        tuned=args.tuned,
        precision=args.precision,
    )
    if timing is not None:
        timing.add_compile(compiled.phases, compiled.timings)
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
    if args.remarks:
        sys.stderr.write("".join(f"{remark}\n" for remark in compiled.remarks()))
    return ExitCode.OK


def _timing(args: argparse.Namespace) -> Any:
    """The ``--timing`` measurements of this command, or None without the flag."""
    if not args.timing:
        return None
    from fusec.tools.timing import Timing

    return Timing()


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


def _is_torch_program(path: str) -> bool:
    """A program saved by ``torch.export.save`` (the PyTorch front end reads it)."""
    return str(path).lower().endswith(".pt2")


def _source(args: argparse.Namespace):
    """What to compile: the path of an .mlir file, the IR text on stdin (``-``), or the
    module imported from an .onnx file (with ``--input-shape``)."""
    from fusec.errors import FusecError

    if args.file == STDIN:
        if args.input_shape:
            raise FusecError("--input-shape applies to .onnx models only")
        return _read_stdin()
    if _is_torch_program(args.file):
        if args.input_shape:
            raise FusecError("--input-shape applies to .onnx models only")
        from fusec.api import from_torch

        return from_torch(args.file)
    if _is_onnx(args.file):
        from xdsl.dialects.builtin import ModuleOp  # loaded by fusec.api already

        from fusec.api import from_onnx

        imported = from_onnx(args.file, input_shapes=_input_shapes(args.input_shape))
        return imported if isinstance(imported, ModuleOp) else _specialized(imported, args)
    if args.input_shape:
        raise FusecError("--input-shape applies to .onnx models only")
    return Path(args.file)  # always a path (a file name may hold a newline or a brace)


def _specialized(model: Any, args: argparse.Namespace) -> Any:
    """A model with dynamic dimensions (a ``DynamicModel``) imported for the shapes of
    the ``--inputs`` arrays (``run``, ``profile``); without them, a FusecError that
    asks for ``--input-shape``: a command compiles one program, for one shape."""
    from fusec.errors import FusecError, SourceLocation

    if getattr(args, "inputs", None):
        from fusec.tools.runner import npz_argument_shapes

        shapes = npz_argument_shapes(args.inputs, model.argument_names)
        return model.specialize(model.bind(shapes)[1])
    example = " ".join(
        f"--input-shape {t.name}={'x'.join(_example_dims(t.dims))}"
        for t in model.inputs
        if t.dims is None or not all(isinstance(d, int) for d in t.dims)
    )
    inputs = " or --inputs FILE.npz (their shapes)" if hasattr(args, "inputs") else ""
    raise FusecError(
        f"{model.dynamic_dims()}: this command compiles one program, so it needs "
        f"their sizes: give {example}{inputs}; `fusec import` prints the symbolic signature, "
        "and fusec.compile(fusec.from_onnx(path)) compiles once per shape it is called with",
        SourceLocation(args.file, 0, 0),
    )


def _example_dims(dims: Any) -> list[str]:
    """``N`` for each dynamic dimension, the size of each static one (``N`` twice: any rank)."""
    if dims is None:
        return ["N", "N"]
    return [str(d) if isinstance(d, int) else "N" for d in dims]


def _timed_source(args: argparse.Namespace, timing: Any):
    """``_source``, its ONNX import timed as a phase of ``--timing``."""
    if timing is None or not _is_onnx(args.file):
        return _source(args)
    with timing.phase("ONNX import"):
        return _source(args)


#: How ``fusec.compile`` names IR given as text, and how a diagnostic names stdin.
_TEXT_NAME, _STDIN_NAME = "<string>", "<stdin>"


def _read_stdin() -> str:
    """The IR text on stdin (``-``): given to ``compile`` as text, with a newline (a
    single line without one could read as a file name)."""
    from fusec.errors import FusecError, SourceLocation

    try:
        text = sys.stdin.buffer.read().decode("utf-8-sig")
    except (OSError, ValueError) as err:  # a closed stdin, bytes that are not UTF-8
        raise FusecError(f"cannot read the IR: {err}", SourceLocation(_STDIN_NAME, 0, 0)) from None
    return text if text.endswith("\n") else text + "\n"


def _diagnostic(err: Any, args: argparse.Namespace) -> str:
    """The FusecError's text; IR read from stdin is named ``<stdin>``, not ``<string>``."""
    import dataclasses

    where = err.location
    if getattr(args, "file", None) == STDIN and where is not None and where.file == _TEXT_NAME:
        err.location = dataclasses.replace(where, file=_STDIN_NAME)
    return err.format()


def cmd_import(args: argparse.Namespace) -> int:
    from fusec.api import import_onnx, print_ir

    if _is_torch_program(args.file):
        return _import_torch_program(args)
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
    return ExitCode.OK


def _import_torch_program(args: argparse.Namespace) -> int:
    """``fusec import model.pt2``: a saved torch.export program as ai IR."""
    from fusec.api import from_torch, print_ir
    from fusec.errors import FusecError

    if args.input_shape or args.weights_as_args:
        raise FusecError("--input-shape and --weights-as-args apply to .onnx models only")
    _emit(print_ir(from_torch(args.file), locations=True), args.output)
    return ExitCode.OK


def cmd_conformance(args: argparse.Namespace) -> int:
    from fusec.extras import require

    require("onnx", "fusec conformance")
    from fusec.tools.conformance import run_conformance, shown_progress

    if args.all:  # the whole suite as the measure: pass / refused / wrong per operator
        from fusec.tools.conformance import measure_all

        right = measure_all(args.op, target=args.target, verbose=args.verbose, quiet=args.quiet)
        return ExitCode.OK if right else ExitCode.CHECK_FAILED
    with shown_progress(not args.quiet) as progress:
        report = run_conformance(args.op or None, target=args.target, progress=progress)
    sys.stdout.write(report.format(verbose=args.verbose))
    return ExitCode.CHECK_FAILED if report.count("failed") else ExitCode.OK


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress on stderr (shown for work over a second: a bar on a terminal, "
        "plain lines otherwise)",
    )


def _add_program_command(sub, name: str, summary: str) -> argparse.ArgumentParser:
    """The subcommand ``name`` on one program ``file`` (``_FILE_HELP``), with the
    ``--input-shape`` options that fix an ONNX model's dynamic dimensions."""
    parser = sub.add_parser(name, help=summary)
    parser.add_argument("file", help=_FILE_HELP)
    _add_input_shape(parser)
    return parser


def _add_input_shape(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=DIMS",
        help="an ONNX model input's static shape, e.g. x=1x3x224x224 (fixes dynamic "
        "dimensions; repeat for several inputs)",
    )


def _add_onnx_commands(sub) -> None:
    imp = sub.add_parser(
        "import",
        help="import an ONNX model or a torch.export program (.pt2) as ai IR (with loc(...))",
    )
    imp.add_argument("file", help="input .onnx model or .pt2 program (torch.export.save)")
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
    _add_quiet(conf)
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
    return _timed(_run, args)


def _run(args: argparse.Namespace, timing: Any) -> int:
    from fusec.tools import runner
    from fusec.tools.progress import showing_runtime_progress

    with showing_runtime_progress(not args.quiet):
        result = runner.run(
            _timed_source(args, timing),
            target=args.target,
            pipeline=args.pipeline,
            entry=args.entry,
            inputs=args.inputs,
            seed=args.seed if args.random_inputs else None,
            check_results=args.check,
            timing=timing,
            precision=args.precision,
        )
    sys.stdout.write("".join(f"{line}\n" for line in result.lines()))
    if args.output is not None:
        _write_atomically(args.output, runner.outputs_npz(result.outputs))
    return ExitCode.OK if result.passed else ExitCode.CHECK_FAILED


def _add_precision(parser) -> None:
    parser.add_argument(
        "--precision",
        choices=("ieee", "tf32"),
        default="ieee",
        help="the maths of f32 matmul, conv and attention: ieee (IEEE f32, the default) or "
        "tf32 (the cuda target runs them on the Tensor Cores with tf32 operands, f32 "
        "accumulation; the cpu and reference targets compute IEEE f32 all the same)",
    )


def _add_run_command(sub) -> None:
    run = _add_program_command(sub, "run", "compile and run the entry function on inputs")
    run.add_argument("--inputs", metavar="FILE.npz", help="arguments, by name or arr_0, arr_1, ...")
    run.add_argument("--random-inputs", action="store_true", help="draw standard-normal inputs")
    run.add_argument("--seed", type=int, default=0, help="seed of --random-inputs (default 0)")
    run.add_argument("--target", default="auto", help=_TARGETS_HELP)
    run.add_argument("--pipeline", help=_PIPELINE_HELP)
    _add_precision(run)
    run.add_argument("--entry", help=_ENTRY_HELP)
    run.add_argument("-o", "--output", metavar="FILE.npz", help="save the results here")
    run.add_argument(
        "--check",
        action="store_true",
        help="compare with the float64 reference, rounded as a fused and as an op-by-op "
        "program rounds 16-bit values; exit 3 on a FAIL (f32 1e-4, f16/bf16 1e-2, by the "
        "lowest precision a value passed through; f32 1e-2 under --precision tf32 on cuda)",
    )
    run.add_argument(
        "--timing",
        action="store_true",
        help="where the time went (to stderr): start-up, imports, parse, each pass, code "
        "generation, JIT compile, first call",
    )
    _add_quiet(run)
    run.set_defaults(handler=cmd_run)


def cmd_profile(args: argparse.Namespace) -> int:
    from fusec.targets.cpu.threads import configure

    configure()  # thread-pool settings, before numpy and Numba start (as ``run``)
    from fusec.tools.profile import profile
    from fusec.tools.progress import showing_runtime_progress

    for output in (args.html, args.json):  # a bad output name fails before any work
        if output is not None:
            _check_output_name(output)
    with showing_runtime_progress(not args.quiet):
        result = profile(
            _source(args),
            target=args.target,
            pipeline=args.pipeline,
            entry=args.entry,
            inputs=args.inputs,
            seed=args.seed,
            repeat=args.repeat,
            warmup=args.warmup,
        )
    sys.stdout.write(result.table(top=args.top))
    if args.html is not None:
        _write_atomically(args.html, result.html())
    if args.json is not None:
        import json

        _write_atomically(args.json, json.dumps(result.to_dict(), indent=1) + "\n")
    return ExitCode.OK


def _check_output_name(path: str) -> None:
    from fusec.errors import FusecError, SourceLocation

    if not path or Path(path).is_dir():
        raise FusecError(
            "cannot write the output: it is a directory, not a file name"
            if path
            else "cannot write the output: the file name is empty",
            SourceLocation(path, 0, 0) if path else None,
        )
    folder = Path(path).parent
    if not folder.is_dir():
        raise FusecError(
            f"cannot write the output: no folder '{folder}'", SourceLocation(path, 0, 0)
        )


def _whole_number(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (``what`` names it in the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive = _whole_number(1, "a positive whole number")
_count = _whole_number(0, "a whole number >= 0")


def _add_profile_command(sub) -> None:
    prof = _add_program_command(
        sub,
        "profile",
        "time every kernel of a compiled graph: kind, how it runs, time, share, FLOPs, "
        "bytes, achieved rates and the device roofline",
    )
    prof.add_argument(
        "--inputs",
        metavar="FILE.npz",
        help="arguments, by name or arr_0, arr_1, ... (default: standard-normal random ones)",
    )
    prof.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    prof.add_argument("--target", default="auto", help=_TARGETS_HELP)
    prof.add_argument("--pipeline", help=_PIPELINE_HELP)
    prof.add_argument("--entry", help=_ENTRY_HELP)
    prof.add_argument(
        "--repeat", type=_positive, default=20, help="timed calls after warm-up (default 20)"
    )
    prof.add_argument(
        "--warmup",
        type=_count,
        default=3,
        help="ordinary calls before timing (default 3; at least one runs: it compiles)",
    )
    prof.add_argument(
        "--top", type=_positive, default=15, help="kernels listed before 'other' (default 15)"
    )
    prof.add_argument(
        "--html",
        metavar="FILE.html",
        help="also write the table beside the fusion graph as one HTML page",
    )
    prof.add_argument(
        "--json", metavar="FILE.json", help="also write the measurements as JSON (every kernel)"
    )
    _add_quiet(prof)
    prof.set_defaults(handler=cmd_profile)


def cmd_viz(args: argparse.Namespace) -> int:
    from fusec.api import compile as fusec_compile
    from fusec.tools.viz import picture_format, render

    picture_format(args.output)  # a bad suffix fails before any work
    # The picture needs the fused IR only: no kernels are generated.
    compiled = fusec_compile(
        _source(args), target="reference", pipeline=args.pipeline, entry=args.entry
    )
    _write_atomically(args.output, render(compiled.module, args.output))
    return ExitCode.OK


def _add_viz_command(sub) -> None:
    viz = _add_program_command(
        sub, "viz", "draw the op graph with fusion groups as clusters coloured by kind"
    )
    viz.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="graph.svg|graph.dot|graph.html",
        help="the picture; its suffix picks the format (SVG needs no Graphviz)",
    )
    viz.add_argument("--pipeline", help=_PIPELINE_HELP)
    viz.add_argument("--entry", help=_ENTRY_HELP)
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
    return ExitCode.OK


def _add_tune_command(sub) -> None:
    tune = _add_program_command(
        sub,
        "tune",
        "time a few Tensor Core tile configurations of each GEMM group on this GPU and "
        "record the fastest in the kernel cache (`fusec compile --tuned` then uses it)",
    )
    tune.add_argument("--pipeline", help=_PIPELINE_HELP)
    tune.add_argument("--entry", help=_ENTRY_HELP)
    tune.add_argument("--reps", type=int, default=20, help="launches timed per candidate")
    tune.set_defaults(handler=cmd_tune)


_FILE_HELP = "input .mlir file, .onnx model, .pt2 torch.export program, or - for the IR on stdin"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fusec",
        description="fusec: an operator-fusion compiler for AI graphs",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    comp = _add_program_command(sub, "compile", "parse, verify, run the pipeline, print the IR")
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
    comp.add_argument(
        "--sms",
        type=_positive,
        default=0,
        metavar="N",
        help="the GPU's SM count the cuda tiles are chosen for (default: the GPU's, or an "
        "H200's 132 without one); give it for the same kernels on every machine",
    )
    comp.add_argument(
        "--tuned",
        action="store_true",
        help="take the cuda tiles from this machine's `fusec tune` records in the kernel "
        "cache where one matches (default: the heuristic's, from the IR and --sms alone)",
    )
    _add_precision(comp)
    comp.add_argument("--pipeline", help=_PIPELINE_HELP)
    comp.add_argument("--target", default="auto", help=_TARGETS_HELP)
    comp.add_argument("--entry", help=_ENTRY_HELP)
    comp.add_argument("--print-ir-after-all", action="store_true", help="IR after each pass")
    comp.add_argument(
        "--timing",
        action="store_true",
        help="where the time went (to stderr): start-up, imports, parse, each pass, code "
        "generation",
    )
    comp.add_argument(
        "--remarks",
        action="store_true",
        help="why each producer -> consumer edge left between kernels was not fused (to stderr)",
    )
    comp.set_defaults(handler=cmd_compile)
    _add_onnx_commands(sub)
    _add_run_command(sub)
    _add_profile_command(sub)
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
    """The ``fusec`` command; its exit status is an ``ExitCode`` (argparse exits with 2
    itself on a bad command line)."""
    from fusec.errors import FusecError

    args = build_parser().parse_args(argv)
    shown, warnings.showwarning = warnings.showwarning, _show_warning
    try:
        return args.handler(args)
    except FusecError as err:
        sys.stderr.write(_diagnostic(err, args) + "\n")
        return ExitCode.BAD_INPUT
    except BrokenPipeError:
        return ExitCode.OK
    except MemoryError as err:  # tensors too large for this machine: the input's size
        sys.stderr.write(f"error: out of memory{f' ({err})' if str(err) else ''}\n")
        return ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("fusec: interrupted\n")
        return ExitCode.INTERRUPTED
    except Exception as err:  # a bug in fusec, not bad input: say so plainly
        return internal_error("fusec", err)
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
