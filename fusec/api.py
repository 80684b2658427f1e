"""The Python API: ``parse``, ``compile``, ``reference`` and ``CompiledModule``.

This is a stable contract: other parts of fusec and its users build on it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, overload

from xdsl.dialects.builtin import ModuleOp

from fusec.codegen import KernelSource
from fusec.errors import FusecError, SourceLocation

if TYPE_CHECKING:
    from fusec.frontend.onnx_dynamic import DynamicModel
    from fusec.runtime.specialize import DynamicCompiledModule

#: One generated kernel (one launch): name, fused kind, target, source, I/O types.
Kernel = KernelSource


@dataclass
class PassTiming:
    name: str
    seconds: float
    #: ``time.perf_counter()`` when it began (0.0: not recorded).
    start: float = 0.0


def parse(text_or_path: str | Path) -> ModuleOp:
    """Parse and verify ai IR from text or from a file path; raise FusecError if bad."""
    from fusec.frontend.mlir import parse_module, read_source

    text, name = read_source(text_or_path)
    return parse_module(text, name)


def from_onnx(
    model_or_path: Any,
    *,
    weights_as_args: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> ModuleOp | DynamicModel:
    """Import an ONNX model (a ``ModelProto`` or a .onnx path) as a verified ai module.

    Initializers become ``arith.constant`` ops, or with ``weights_as_args`` extra
    function arguments after the graph inputs, in initializer order.
    ``input_shapes`` ({input name: shape}) fixes dynamic input dimensions; every
    node whose inputs are then constants (shape arithmetic, masks, position ids)
    is evaluated at import.

    A model with a dynamic input dimension that ``input_shapes`` leaves open (a
    ``dim_param`` such as ``"batch"``) gives a ``DynamicModel`` instead: its symbolic
    signature (``str()`` is its IR), which ``compile`` turns into a module that
    imports and compiles the model once per set of input shapes it is called with.
    """
    from fusec.frontend.onnx_dynamic import DynamicModel

    result = import_onnx(model_or_path, weights_as_args=weights_as_args, input_shapes=input_shapes)
    return result if isinstance(result, DynamicModel) else result.module


def import_onnx(
    model_or_path: Any,
    *,
    weights_as_args: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Any:
    """``from_onnx`` with what the import did: an ``ImportResult`` (``.module``;
    ``.evaluated``, the nodes folded at import by operator; ``.recognized``, what the
    ``recognize-patterns`` pass of the default pipeline rewrites in it; ``.summary()``),
    or for a model with dynamic dimensions the ``DynamicModel`` (``.module`` is its
    symbolic signature; nothing is evaluated until it is compiled for a shape)."""
    from fusec.extras import require

    require("onnx", "importing ONNX")
    from fusec.frontend.onnx_dynamic import dynamic_model
    from fusec.frontend.onnx_import import import_onnx as import_model
    from fusec.passes.recognize import recognize

    read = dynamic_model(model_or_path, weights_as_args=weights_as_args, input_shapes=input_shapes)
    if read.dynamic is not None:
        return read.dynamic
    result = import_model(
        read.model,
        weights_as_args=weights_as_args,
        input_shapes=read.input_shapes,
        source=read.source,
    )
    result.recognized.update(recognize(result.module.clone()))
    return result


def from_torch(program_or_module: Any, example_inputs: Sequence[Any] | None = None) -> ModuleOp:
    """Import a PyTorch program as a verified ai module: a ``torch.export``
    ``ExportedProgram``, an ``nn.Module`` (exported on ``example_inputs``, a tuple of
    tensors) or the path of a ``.pt2`` file saved by ``torch.export.save``. Parameters,
    buffers and constants become ``arith.constant`` ops; user inputs the arguments."""
    from fusec.extras import require

    try:
        require("torch", "importing a PyTorch program")
    except FusecError as err:
        if isinstance(program_or_module, str | Path):  # the file it could not read
            err.location = SourceLocation(str(program_or_module), 0, 0)
        raise
    from fusec.frontend.torch_export import from_torch as import_program

    return import_program(program_or_module, example_inputs)


def print_ir(module: ModuleOp, *, locations: bool = False) -> str:
    """The IR text of ``module`` in custom (pretty) form, with ``loc(...)`` if ``locations``."""
    if not locations:
        return str(module) + "\n"
    from io import StringIO

    from xdsl.printer import Printer

    out = StringIO()
    Printer(stream=out, print_debuginfo=True).print_op(module)
    return out.getvalue() + "\n"


def run_pipeline(
    module: ModuleOp,
    pipeline: str | None = None,
    *,
    after_pass: Callable[[str, ModuleOp], None] | None = None,
    timings: list[PassTiming] | None = None,
    source_text: str | None = None,
    target: str | None = None,
    sms: int = 0,
    tuned: bool = False,
) -> ModuleOp:
    """Run a pass pipeline (default ``fusec-default``) in place and re-verify.

    ``target`` names the back end the result is for: the fusion passes then
    form only groups that target generates, and fuses only where it gains
    (a pass's own ``target=`` option wins). ``None``: the rules alone decide.
    ``sms`` is the SM count the cuda tiles are chosen for (0: an H200's; the pass never
    asks the machine, ``compile`` resolves it; ``tile-gemm{sms=N}`` wins), ``tuned``
    whether they may come from ``fusec tune`` records (``tile-gemm{tuned=true}``).
    """
    from xdsl.utils.exceptions import DiagnosticException

    from fusec.dialect import make_context
    from fusec.ir.diagnostics import verify_module
    from fusec.passes import build_pipeline

    ctx = make_context()
    clock = {"t": time.perf_counter()}

    def callback(previous, mod, _next) -> None:
        now = time.perf_counter()
        if previous is not None:
            if timings is not None:
                timings.append(PassTiming(previous.name, now - clock["t"], clock["t"]))
            if after_pass is not None:
                after_pass(previous.name, mod)
        clock["t"] = time.perf_counter()

    passes = build_pipeline(pipeline, callback, target=target, sms=sms, tuned=tuned)
    try:
        passes.apply(ctx, module)
    except DiagnosticException as err:
        raise FusecError(f"pass failed: {err}") from None
    verify_module(module, source_text)
    return module


class CompiledModule:
    """A compiled ai module: final IR, generated kernels, and a callable entry point.

    Calling it with numpy arrays runs the entry function and returns one array,
    or a tuple when the function has several results.
    """

    def __init__(
        self,
        module: ModuleOp,
        *,
        target: str,
        entry: str | None = None,
        kernels: Sequence[KernelSource] = (),
        runner: Callable[[Sequence[Any]], tuple[Any, ...]] | None = None,
        timings: Sequence[PassTiming] = (),
        pipeline: str | None = None,
        remarks: Mapping[str, list[Any]] | None = None,
        phases: Sequence[PassTiming] = (),
    ) -> None:
        from fusec.ir.module import entry_function

        self.module = module
        self.target = target
        self.entry = entry_function(module, entry).sym_name.data
        self.kernels: list[KernelSource] = list(kernels)
        #: Wall-clock seconds of each pass, and of each phase of ``compile``: parse,
        #: passes, code generation (the kernels' JIT compilation is on the first call).
        self.timings = list(timings)
        self.phases = list(phases)
        self.pipeline = pipeline
        self._runner = runner
        self._remarks = dict(remarks or {})

    @property
    def ir(self) -> str:
        return print_ir(self.module)

    @property
    def program(self) -> Any:
        """The target's runtime program (None when compiled with ``executable=False``):
        its launches, and on the cuda target its CUDA graphs (``program.graphs``)."""
        return self._runner

    def __call__(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        """Run the entry function. On a device target (cuda) the work is queued on
        the caller's current stream (torch's or cupy's), or on ``stream`` when given."""
        if kwargs:
            raise FusecError(
                f"@{self.entry} takes its arguments by position, not by keyword "
                f"(got {', '.join(kwargs)})"
            )
        if stream is not None and not getattr(self._runner, "takes_stream", False):
            raise FusecError(f"stream= needs a target with streams (cuda), not '{self.target}'")
        if self._runner is None:
            raise FusecError(
                f"this module was compiled for target '{self.target}' without a runtime "
                "(executable=False): compile it again to run it"
            )
        if stream is not None:
            results = self._runner(args, stream=stream)  # type: ignore[call-arg]
        else:
            results = self._runner(args)
        return results[0] if len(results) == 1 else tuple(results)

    def remarks(self) -> list[Any]:
        """Why each producer -> consumer edge left between kernels was not fused
        (``fusec.passes.fusion.remarks.Remark``; ``str()`` of one is its line): as the
        fusion pass recorded its decisions, or, for a function no fusion pass ran on,
        judged now under the pipeline's rules; then why a group runs on a fallback
        rather than the target's fused kernel (``fusec.codegen.KernelRemark``)."""
        from fusec.passes.fusion.driver import pipeline_rules
        from fusec.passes.fusion.remarks import functions, fusion_remarks

        names = [fn.sym_name.data for fn in functions(self.module)]
        kernels = [k.remark for k in self.kernels if k.remark is not None]
        if names and all(name in self._remarks for name in names):
            return [r for name in names for r in self._remarks[name]] + kernels
        rules = pipeline_rules(self.pipeline, target=self.target)
        return fusion_remarks(self.module, rules) + kernels

    def assembly(self, arch: str) -> list[tuple[KernelSource, str]]:
        """Each kernel with its target assembly for ``arch`` (PTX on cuda); no device needed."""
        from fusec.target import get_target

        target = get_target(self.target)
        return [(kernel, target.assembly(kernel, arch)) for kernel in self.kernels]

    def native_sources(self) -> list[tuple[KernelSource, str | None]]:
        """Each kernel with the source in another language its module links (the CUDA C++
        of a Tensor Core GEMM), or None; no device needed."""
        from fusec.target import get_target

        target = get_target(self.target)
        return [(kernel, target.native_source(kernel)) for kernel in self.kernels]

    def tune(self, reps: int = 20) -> list:
        """Time candidate configurations of the kernels on this machine's device and record
        the fastest (``fusec tune``); compile again to use them."""
        from fusec.target import get_target

        return get_target(self.target).tune(self.module, self.entry, reps)

    def capture(self, *args: Any) -> Any:
        """Record one call on ``args`` as a device graph (targets with devices only).

        On cuda: a ``CudaGraph``; write new data into its ``.inputs``, call
        ``.replay()``, read ``.outputs``.
        """
        capture = getattr(self._runner, "capture", None)
        if capture is None:
            raise FusecError(f"graph capture needs a device target, not '{self.target}'")
        return capture(*args)

    def __repr__(self) -> str:
        return (
            f"CompiledModule(entry=@{self.entry}, target={self.target!r}, "
            f"kernels={len(self.kernels)})"
        )


def target_names() -> list[str]:
    """The registered targets (``fusec.target.REGISTRY``), ``auto`` not included."""
    from fusec.target import REGISTRY

    return list(REGISTRY)


def pipeline_names() -> list[str]:
    """The named pass pipelines (``fusec.passes.named_pipelines``)."""
    from fusec.passes import named_pipelines

    return list(named_pipelines())


def resolve_target(target: str) -> str:
    """The concrete target name for ``target`` (``auto``: the best available one)."""
    from fusec.target import resolve_target as resolve

    return resolve(target, available=False).name


class _CompileOptions(TypedDict, total=False):
    """``compile``'s keyword arguments, for its overloads (the defaults and their meaning
    are the implementation's)."""

    target: str
    pipeline: str | None
    entry: str | None
    after_pass: Callable[[str, ModuleOp], None] | None
    executable: bool
    sms: int
    tuned: bool
    max_specializations: int | None
    precision: str


@overload
def compile(  # noqa: A001
    text_or_path: str | Path | ModuleOp, **options: Unpack[_CompileOptions]
) -> CompiledModule: ...


@overload
def compile(  # noqa: A001
    text_or_path: DynamicModel, **options: Unpack[_CompileOptions]
) -> DynamicCompiledModule: ...


def compile(  # noqa: A001 - the public name is part of the API contract
    text_or_path: str | Path | ModuleOp | DynamicModel,
    *,
    target: str = "auto",
    pipeline: str | None = None,
    entry: str | None = None,
    after_pass: Callable[[str, ModuleOp], None] | None = None,
    executable: bool = True,
    sms: int = 0,
    tuned: bool = False,
    max_specializations: int | None = None,
    precision: str = "ieee",
) -> CompiledModule | DynamicCompiledModule:
    """Parse (unless given a module), run the pipeline for the target and build a
    CompiledModule.

    The target is resolved first (``auto``: the best available one) and the
    fusion passes plan for it; ``pipeline`` defaults to the target's own
    (``fusec-default``; ``fusec-cuda`` adds the Tensor Core tiling). Each
    ``ai.fused`` group becomes one generated kernel, compiled (or loaded from
    the kernel cache) on the first call; an op that the pipeline leaves outside
    every group is an error naming it.
    Only ``target="reference"`` interprets the IR (the numpy executor): it is
    never chosen behind the caller's back. With ``executable=False`` the
    kernels are generated but no runtime is built, so a target that is not
    usable here (cuda without a GPU) can still show its kernels. ``sms`` names the
    GPU's SM count the cuda tiles are chosen for (0: the usable GPU's, else an H200's:
    the target resolves it here, once, and the passes are given it), so that the same
    inputs give the same kernels on every machine. ``tuned`` lets the cuda tiles come
    from ``fusec tune`` records in the kernel cache (an explicit input: without it the
    kernels depend on the inputs and ``sms`` alone).

    A ``DynamicModel`` (``from_onnx`` of a model with dynamic dimensions) gives a
    ``DynamicCompiledModule`` (``fusec.runtime.specialize``): each call with a new
    set of input shapes imports the model for them and compiles it as above (the
    other arguments apply to each), up to ``max_specializations`` sets (default
    ``$FUSEC_MAX_SPECIALIZATIONS``, else 8); ``.specializations`` lists them.

    ``precision`` is the maths of f32 matmul, conv and attention: ``"ieee"`` (the default,
    IEEE f32) or ``"tf32"`` (the counterpart of ``torch.set_float32_matmul_precision(
    "high")``): the cuda target may then run them on the Tensor Cores with tf32 operands
    and f32 accumulation (about 1e-3 relative error). It is recorded on the module
    (``fusec.precision``, shown in the IR, in the cache keys and the kernel headers); the
    cpu and reference targets accept it and compute in IEEE f32 all the same.
    """
    from fusec.frontend.mlir import parse_module, read_source
    from fusec.ir.module import check_precision, precision_of, set_precision
    from fusec.runtime.launch import plan_launches
    from fusec.target import resolve_target as resolve

    check_precision(precision)
    chosen = resolve(target, available=executable)
    if not isinstance(text_or_path, str | Path | ModuleOp):
        # each specialization compiled with these options (the target resolved once)
        each: _CompileOptions = {
            "target": chosen.name,
            "pipeline": pipeline,
            "entry": entry,
            "after_pass": after_pass,
            "executable": executable,
            "sms": sms,
            "tuned": tuned,
            "precision": precision,
        }
        return _compile_dynamic(
            text_or_path,
            functools.partial(compile, **each),
            target=chosen.name,
            max_specializations=max_specializations,
        )
    if max_specializations is not None:
        raise FusecError("max_specializations= applies to models with dynamic dimensions only")
    source_text = source_name = None
    clock = time.perf_counter()
    if isinstance(text_or_path, ModuleOp):
        module = text_or_path.clone()
    else:
        source_text, source_name = read_source(text_or_path)
        module = parse_module(source_text, source_name)
    read = "copy the module" if source_text is None else "parse"
    if precision != "ieee":  # "ieee" leaves a module's own attribute (or its absence) alone
        set_precision(module, precision)
    precision_of(module, source_text)  # a bad fusec.precision in the text: a located error
    phases = [PassTiming(read, time.perf_counter() - clock, clock)]
    timings: list[PassTiming] = []
    from fusec.passes.fusion.remarks import collect

    clock = time.perf_counter()
    with collect() as reported:  # the fusion passes' own why-not-fused record
        run_pipeline(
            module,
            pipeline if pipeline is not None else chosen.pipeline,
            after_pass=after_pass,
            timings=timings,
            source_text=source_text,
            target=chosen.name,
            sms=chosen.resolve_sms(sms),
            tuned=tuned,
        )
    phases.append(PassTiming("passes", time.perf_counter() - clock, clock))
    clock = time.perf_counter()
    try:
        runner = chosen.program(module, entry) if executable else None
        if not chosen.generates_kernels:
            kernels: list[KernelSource] = []
        elif runner is not None:
            kernels = list(runner.kernels)
        else:
            kernels = plan_launches(module, entry, chosen).kernels
    except FusecError as err:  # a code generator's error knows the op, not the text
        _quote_source(err, source_text, source_name)
        raise
    phases.append(PassTiming("code generation", time.perf_counter() - clock, clock))
    return CompiledModule(
        module,
        target=chosen.name,
        entry=entry,
        kernels=kernels,
        runner=runner,
        timings=timings,
        pipeline=pipeline,
        remarks=reported,
        phases=phases,
    )


def compile_onnx(
    path: str | Path,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    target: str = "auto",
    pipeline: str | None = None,
    entry: str | None = None,
) -> CompiledModule | DynamicCompiledModule:
    """``compile(from_onnx(path, input_shapes=...), ...)`` through the program cache
    (``fusec.targets.cpu.program_cache``): on the cpu target, a model compiled before with
    the same shapes, options and fusec comes back ready to run without importing the
    model (no ``onnx`` import, no pass, no code generation, no constant layout); its
    ``.ir`` and ``.module`` compile the model again when asked. A miss compiles as
    ``compile`` does and stores the program. ``FUSEC_PROGRAM_CACHE=0`` turns it off."""
    from fusec.target import resolve_target as resolve
    from fusec.targets.cpu import program_cache as programs

    chosen = resolve(target, available=True).name
    key = None
    if chosen == "cpu" and programs.enabled() and Path(path).is_file():
        # (a path that is no file gets from_onnx's diagnostic below)
        from fusec.runtime.cache import default_cache

        cache = default_cache()
        options = {
            "shapes": sorted((k, tuple(v)) for k, v in (input_shapes or {}).items()),
            "target": chosen,
            "pipeline": pipeline,
            "entry": entry,
        }
        key = programs.program_key(programs.file_digest(path), options)
        clock = time.perf_counter()
        program = programs.load(cache, key)
        if program is not None:
            phase = PassTiming("program cache", time.perf_counter() - clock, clock)

            def rebuild() -> CompiledModule:
                fresh = compile(
                    from_onnx(path, input_shapes=input_shapes),
                    target=chosen,
                    pipeline=pipeline,
                    entry=entry,
                )
                assert isinstance(fresh, CompiledModule)
                return fresh

            return CachedCompiledModule(
                program, rebuild, target=chosen, pipeline=pipeline, phases=[phase]
            )
    model = from_onnx(path, input_shapes=input_shapes)
    compiled = compile(model, target=chosen, pipeline=pipeline, entry=entry)
    if key is not None and isinstance(compiled, CompiledModule) and compiled.program is not None:
        programs.store(cache, key, compiled.program)
    return compiled


class CachedCompiledModule(CompiledModule):
    """A ``CompiledModule`` from the program cache: its program and kernels are the
    stored ones; the IR (``module``, ``ir``, ``remarks``) is rebuilt when first asked."""

    def __init__(
        self,
        program: Any,
        rebuild: Callable[[], CompiledModule],
        *,
        target: str,
        pipeline: str | None = None,
        phases: Sequence[PassTiming] = (),
    ) -> None:
        # CompiledModule.__init__ reads the module; here it is rebuilt only when asked
        self.target = target
        self.entry = program.entry_name
        self.kernels = list(program.kernels)
        self.timings = []
        self.phases = list(phases)
        self.pipeline = pipeline
        self._runner = program
        self._remarks = {}
        self._rebuild = rebuild
        self._rebuilt: CompiledModule | None = None

    @property
    def module(self) -> ModuleOp:  # type: ignore[override]
        if self._rebuilt is None:
            self._rebuilt = self._rebuild()
        return self._rebuilt.module

    def remarks(self) -> list[Any]:
        self.module  # noqa: B018 - rebuilt, so that its remarks are the fusion pass's
        assert self._rebuilt is not None
        return self._rebuilt.remarks()


def _compile_dynamic(
    model: Any, compile_one: Callable[[ModuleOp], CompiledModule], **options: Any
) -> DynamicCompiledModule:
    """The DynamicCompiledModule of ``model`` (``fusec.runtime.specialize``); anything
    but a DynamicModel gets ``read_source``'s error (not IR text or a path)."""
    from fusec.frontend.mlir import read_source
    from fusec.frontend.onnx_dynamic import DynamicModel
    from fusec.runtime.specialize import DynamicCompiledModule

    if not isinstance(model, DynamicModel):
        read_source(model)  # raises: "expected IR text or a file path, got ..."
        raise AssertionError(f"read_source took a {type(model).__name__}")
    return DynamicCompiledModule(model, compile_one, **options)


def _quote_source(err: FusecError, text: str | None, name: str | None) -> None:
    """Give an error located in ``text`` (named ``name``) but without its source line
    that line."""
    from fusec.errors import line_of

    where = err.location
    if err.source_line is None and where is not None and text is not None and where.file == name:
        err.source_line = line_of(text, where.line)


@overload
def reference(
    text_or_path: str | Path | ModuleOp, *, entry: str | None = ...
) -> CompiledModule: ...


@overload
def reference(text_or_path: DynamicModel, *, entry: str | None = ...) -> DynamicCompiledModule: ...


def reference(
    text_or_path: str | Path | ModuleOp | DynamicModel, *, entry: str | None = None
) -> CompiledModule | DynamicCompiledModule:
    """A CompiledModule that runs the IR as written on the numpy reference executor
    (for a DynamicModel, one such module per set of input shapes, the model imported
    for each and run with no pass)."""
    from fusec.target import get_target

    if not isinstance(text_or_path, str | Path | ModuleOp):
        one = functools.partial(reference, entry=entry)
        return _compile_dynamic(text_or_path, one, target="reference")
    module = text_or_path if isinstance(text_or_path, ModuleOp) else parse(text_or_path)
    runner = get_target("reference").program(module, entry)
    return CompiledModule(module, target="reference", entry=entry, runner=runner)


def reference_outputs(
    text_or_path: str | Path | ModuleOp, args: Sequence[Any], *, entry: str | None = None
) -> tuple[Any, ...]:
    """Every result of the entry function on ``args``, computed by the reference
    executor in float64 (the exact maths the IR means; casts are the identity)."""
    from fusec.runtime.reference import run_reference

    module = text_or_path if isinstance(text_or_path, ModuleOp) else parse(text_or_path)
    return run_reference(module, args, entry=entry, precision="float64")
