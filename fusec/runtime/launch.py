"""Run a compiled function: one kernel launch per ``ai.fused`` group, in order.

``Program(module, entry, target)`` walks the entry function once
(``plan_launches``): dense ``arith.constant`` values are materialised, every
``ai.fused`` group gets its kernel from the target (``Target.generate``), and
``func.return`` names the results. Calling the program feeds the arguments
through the launches, keeping values in a dict.

A target plugs in a ``Backend`` (``Target.backend``), which turns a
``KernelSource`` into a callable and moves arrays in and out; a target whose
values live on a device subclasses ``Program`` instead (``Target.program``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from fusec.codegen import KernelSource
from fusec.codegen.view import VIEW_KIND
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.shapes import ShapeError
from fusec.ir.constants import constant_value, is_constant
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.memory import check_bytes, tensor_bytes
from fusec.ir.module import check_arguments, entry_function
from fusec.runtime import progress
from fusec.target import Target, get_target

if TYPE_CHECKING:
    import numpy as np

#: The kernel name inside every generated source (the launches name them k0, k1, ...).
SOURCE_NAME = "kernel"

#: (shape, numpy dtype) -> a new array. Tests pass one that fills with NaN.
Allocator = Callable[[tuple[int, ...], "np.dtype"], "np.ndarray"]  # (numpy: TYPE_CHECKING)


class Backend(Protocol):
    """What a target provides to ``Program``."""

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        """The callable running ``kernel``'s entry (compiled or loaded from the cache)."""

    def run(
        self, launch: Launch, fn: Callable[..., Any], inputs: list[Any], alloc: Allocator | None
    ) -> list[Any]:
        """Run one launch on the input values; return its output values, allocated by
        ``alloc`` where the backend allocates host arrays (None: the backend's own way)."""

    def to_host(self, value: Any) -> np.ndarray:
        """A result value as a numpy array."""

    def call_scope(self) -> contextlib.AbstractContextManager[Any]:
        """Entered once around all the launches of a call: what every launch would
        otherwise set up and undo for itself (the cpu backend: BLAS at one thread)."""

    def prepare(self, layout: str, array: np.ndarray) -> Any:
        """A constant in the layout a kernel names in ``KernelSource.prepared_inputs``
        (only targets whose kernels name one need it)."""


@dataclass
class Launch:
    """One kernel launch: the group's kernel and where its operands and results live."""

    kernel: KernelSource
    operands: list[SSAValue]
    results: list[SSAValue]

    @property
    def label(self) -> str:
        """The NVTX range name: the generated kernel name and the group's kind."""
        return f"fusec {self.kernel.name} ({self.kernel.kind})"

    @property
    def is_view(self) -> bool:
        """A reshape: no kernel, the result aliases the operand's buffer."""
        return self.kernel.kind == VIEW_KIND


@dataclass
class LaunchPlan:
    """The entry function as constants, kernel launches (in order) and returned values."""

    function: func.FuncOp
    constants: dict[SSAValue, np.ndarray] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    returns: list[SSAValue] = field(default_factory=list)
    #: Bytes of the constants and of every value one call computes.
    call_bytes: int = 0

    @property
    def kernels(self) -> list[KernelSource]:
        """The kernels launched, in order (a view is none)."""
        return [launch.kernel for launch in self.launches if not launch.is_view]


def plan_launches(module: ModuleOp, entry: str | None, target: Target) -> LaunchPlan:
    """Generate the kernel of every ``ai.fused`` group of the entry function, named
    ``k0``, ``k1``... in order; any other ai op is a located error."""
    plan = LaunchPlan(entry_function(module, entry))
    ops = list(plan.function.body.block.ops)
    values = [r for op in ops if not isinstance(op, func.ReturnOp) for r in op.results]
    # every value of a call (the constants too) at float32, before anything is allocated
    plan.call_bytes = tensor_bytes([spec_of(v.type).shape for v in values], 4)
    check_bytes(plan.call_bytes, f"the buffers of @{plan.function.sym_name.data}")
    step = progress.task(progress.GENERATING, sum(isinstance(op, ai.FusedOp) for op in ops))
    for op in ops:
        if is_constant(op):
            dtype = numpy_dtype(spec_of(op.result.type).dtype)
            plan.constants[op.result] = constant_value(op, dtype)
        elif isinstance(op, ai.FusedOp):
            # Generated under one fixed name, so that identical groups (the layers of
            # a model) are one source: compiled and cached once.
            start = time.perf_counter()
            kernel = target.generate(op, SOURCE_NAME)
            kernel = replace(kernel, name=f"k{len(plan.launches)}")
            plan.launches.append(Launch(kernel, list(op.inputs), list(op.results)))
            step(kernel.name, time.perf_counter() - start)
        elif isinstance(op, func.ReturnOp):
            plan.returns = list(op.arguments)
        else:
            from fusec.codegen.expr import error_at

            refusal = target.can_generate(op) if isinstance(op, ai.AiOp) else None
            if refusal is not None:  # why the planner left it out
                raise error_at(op, f"cannot run on target '{target.name}': {refusal}")
            raise error_at(
                op,
                f"is outside any ai.fused group: the '{target.name}' target runs fused "
                "groups only (run the fusion pipeline, e.g. fusec-default, or interpret "
                "the IR on the numpy reference executor with target 'reference')",
            )
    return plan


class Program:
    """The entry function of a module, lowered to a sequence of kernel launches."""

    def __init__(
        self,
        module: ModuleOp,
        entry: str | None = None,
        target: str | Target = "cpu",
        cache: Any = None,
    ) -> None:
        self.target = get_target(target) if isinstance(target, str) else target
        self.backend = self.target.backend(cache)
        plan = plan_launches(module, entry, self.target)
        self.function = plan.function
        #: Constants the kernels read as they are, and those laid out for a kernel
        #: ((value, layout) -> array: ``KernelSource.prepared_inputs``).
        self.constants = dict(plan.constants)
        self.prepared_constants: dict[tuple[SSAValue, str], Any] = {}
        self.launches = plan.launches
        self.returns = plan.returns
        self.call_bytes = plan.call_bytes
        self._fns: list[Callable[..., Any] | None] | None = None
        self._lock = threading.Lock()
        self._plan_host_steps()
        self._target_setup()

    def _target_setup(self) -> None:
        """What a target's program sets up once the launches are planned (none here)."""

    def _plan_host_steps(self) -> None:
        """Number every value once and note each argument's shape and dtype, so that a
        call indexes lists and compares tuples: hashing IR values and reading types
        through xDSL cost more than a small kernel (measured ~25 us a call before)."""
        import numpy as np

        params = self.function.function_type.inputs.data
        # values, and (constant, layout) pairs of constants a kernel takes laid out
        slot: dict[Any, int] = {arg: k for k, arg in enumerate(self.function.body.block.args)}
        for value in self.constants:
            slot[value] = len(slot)
        read_as_they_are = set(self.returns)
        self._host_steps: list[tuple[Launch, list[int], list[int]]] = []
        for launch in self.launches:
            ins = [slot[v] for v in launch.operands]
            laid_out = dict(launch.kernel.prepared_inputs)
            read_as_they_are.update(v for i, v in enumerate(launch.operands) if i not in laid_out)
            for index, layout in laid_out.items():
                ins[index] = self._prepared_slot(launch, index, layout, slot)
            for value in launch.results:
                slot[value] = len(slot)
            self._host_steps.append((launch, ins, [slot[v] for v in launch.results]))
        # a constant read only laid out is kept only so
        for value in {v for v, _ in self.prepared_constants} - read_as_they_are:
            del self.constants[value]
        self._host_constants = [(slot[v], a) for v, a in self.constants.items()]
        self._host_constants += [(slot[key], a) for key, a in self.prepared_constants.items()]
        self._host_returns = [slot[v] for v in self.returns]
        self._buffers_name = f"the buffers of @{self.function.sym_name.data}"
        self._host_slots = len(slot)
        self._arg_specs: list[tuple[tuple[int, ...], np.dtype] | None] = []
        for param in params:
            try:
                spec = spec_of(param)
                self._arg_specs.append((tuple(spec.shape), np.dtype(numpy_dtype(spec.dtype))))
            except ShapeError:  # check_arguments reports it, naming the parameter
                self._arg_specs.append(None)

    def _prepared_slot(self, launch: Launch, index: int, layout: str, slot: dict) -> int:
        """The slot of ``launch``'s constant operand ``index`` laid out in ``layout``
        (``KernelSource.prepared_inputs``), laid out by the backend the first time."""
        value = launch.operands[index]
        if (value, layout) not in slot:
            if value not in self.constants:
                raise ValueError(
                    f"{launch.label}: operand {index} in layout {layout!r} is not a constant"
                )
            slot[value, layout] = len(slot)
            self.prepared_constants[value, layout] = self.backend.prepare(
                layout, self.constants[value]
            )
        return slot[value, layout]

    def _arguments(self, args: Sequence[Any]) -> list[np.ndarray]:
        """``args`` as numpy arrays when they match the signature exactly (the fast
        path); otherwise ``check_arguments`` converts them or says which is wrong."""
        import numpy as np

        specs = self._arg_specs
        if len(args) == len(specs):
            arrays = []
            for arg, spec in zip(args, specs, strict=True):
                if (
                    type(arg) is not np.ndarray
                    or spec is None
                    or arg.shape != spec[0]
                    or arg.dtype != spec[1]
                ):
                    break
                arrays.append(arg)
            else:
                return arrays
        return check_arguments(self.function, args)

    @property
    def kernels(self) -> list[KernelSource]:
        """The kernels launched, in order (a view is none)."""
        return [launch.kernel for launch in self.launches if not launch.is_view]

    def load(self) -> list[Callable[..., Any] | None]:
        """Compile (or load from the kernel cache) every kernel; the first call does it.
        Each kernel is reported to the progress listeners (``fusec.runtime.progress``)."""
        with self._lock:
            if self._fns is None:
                step = progress.task(progress.COMPILING, len(self.kernels))
                reported = self._compile_ahead(step)
                fns: list[Callable[..., Any] | None] = []
                for launch in self.launches:
                    if launch.is_view:
                        fns.append(None)
                        continue
                    start = time.perf_counter()
                    fns.append(self.backend.load(launch.kernel))
                    if launch.kernel.name not in reported:
                        step(launch.kernel.name, time.perf_counter() - start)
                self._fns = fns
            return self._fns

    def _compile_ahead(self, step: Callable[[str, float], None]) -> set[str]:
        """Compile kernels before ``load`` loads them one by one, reporting each to
        ``step``; returns the names reported. A target that compiles its kernels at
        once (the cpu target, in worker processes) does it here; by default none."""
        return set()

    def __call__(
        self,
        args: Sequence[Any],
        *,
        alloc: Allocator | None = None,
        recorder: LaunchRecorder | None = None,
    ) -> tuple:
        """Run the function on numpy ``args``; return all its results as numpy arrays.
        ``recorder`` (``fusec.profile``) times each kernel launch; without one a call
        pays nothing for it (the check is once a call, not once a launch)."""
        import numpy as np

        values: list[Any] = [None] * self._host_slots
        values[: len(args)] = self._arguments(args)
        check_bytes(self.call_bytes, self._buffers_name)
        for index, array in self._host_constants:
            values[index] = array
        fns = self._fns if self._fns is not None else self.load()
        run = self.backend.run
        if recorder is not None:
            run = _recorded(run, recorder.spans(None))
        with self.backend.call_scope():
            for fn, (launch, ins, outs) in zip(fns, self._host_steps, strict=True):
                inputs = [values[k] for k in ins]
                if fn is None:  # a view: the operand's buffer under the result's shape
                    outputs = [np.asarray(inputs[0]).reshape(launch.kernel.outputs[0].shape)]
                elif _nvtx is False:
                    outputs = run(launch, fn, inputs, alloc)
                else:
                    with nvtx_range(launch.label):
                        outputs = run(launch, fn, inputs, alloc)
                for k, out in zip(outs, outputs, strict=True):
                    values[k] = out
        to_host = self.backend.to_host
        return tuple(to_host(values[k]) for k in self._host_returns)

    def launch_recorder(self) -> LaunchRecorder:
        """A recorder timing this program's launches with the host's clock
        (``fusec.profile``); a device target's program returns its own."""
        return HostLaunchRecorder()


#: Opens the span one launch runs in, given the launch's label (``Launch.label``).
Span = Callable[[str], contextlib.AbstractContextManager[Any]]


class LaunchRecorder(Protocol):
    """Times every kernel launch of the calls it is passed to (``Program(...,
    recorder=...)``): the program asks it once per call for the span each launch runs
    in, so a call without a recorder has no per-launch cost. A view (reshape) is no
    launch and is not timed. ``fusec.tools.profile`` drives one through a call
    (``time_call``) and reads its times."""

    def spans(self, stream: Any) -> Span:
        """The span factory for one call on ``stream`` (None on a host target)."""

    def inputs(self, arrays: Sequence[np.ndarray]) -> list[Any]:
        """The arguments as a timed call takes them (device-resident on a GPU)."""

    def time_call(self, program: Program, args: Sequence[Any]) -> CallTimes:
        """Run one call through the recorder: each launch's seconds and the call's."""

    def time_plain(self, program: Program, args: Sequence[Any]) -> float:
        """Wall seconds of one ordinary call (no recorder), results ready."""

    def device(self) -> str:
        """What ran the kernels, in words (e.g. the GPU's name)."""

    def notes(self, program: Program) -> list[str]:
        """What a reader of the times must know about how they were taken."""


@dataclass
class CallTimes:
    """One recorded call: (launch label, seconds) for each kernel launch in order, the
    whole call's seconds on the clock that timed the launches (``total``), and the
    host's seconds to issue the call (``host``: on a GPU the launches are queued)."""

    launches: list[tuple[str, float]]
    total: float
    host: float


class HostLaunchRecorder:
    """Launch times from ``time.perf_counter`` around each launch (a host target: a
    launch returns when its kernel is done)."""

    def __init__(self) -> None:
        self._times: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def _span(self, label: str) -> Any:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._times.append((label, time.perf_counter() - start))

    def spans(self, stream: Any) -> Span:
        return self._span

    def inputs(self, arrays: Sequence[np.ndarray]) -> list[Any]:
        return list(arrays)

    def time_call(self, program: Program, args: Sequence[Any]) -> CallTimes:
        self._times = []
        start = time.perf_counter()
        program(args, recorder=self)
        total = time.perf_counter() - start
        return CallTimes(self._times, total, total)

    def time_plain(self, program: Program, args: Sequence[Any]) -> float:
        start = time.perf_counter()
        program(args)
        return time.perf_counter() - start

    def device(self) -> str:
        return host_cpu_name()

    def notes(self, program: Program) -> list[str]:
        return []


def host_cpu_name() -> str:
    """The host CPU's model name (Linux's /proc/cpuinfo), else the machine type."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.machine() or platform.processor() or "unknown CPU"


def _recorded(run: Callable[..., list[Any]], span: Span) -> Callable[..., list[Any]]:
    """``Backend.run`` with each launch inside ``span`` (a recorder's)."""

    def timed(launch: Launch, fn: Callable[..., Any], inputs: list[Any], alloc: Any) -> list[Any]:
        with span(launch.label):
            return run(launch, fn, inputs, alloc)

    return timed


_nvtx: Any = None  # the nvtx module, False when it is not installed, None: not looked yet


def nvtx_range(name: str) -> Any:
    """An NVTX range named ``name`` when the ``nvtx`` package is importable, else a no-op."""
    global _nvtx
    if _nvtx is None:
        try:
            import nvtx

            _nvtx = nvtx
        except ImportError:
            _nvtx = False
    if _nvtx is False:
        return contextlib.nullcontext()
    return _nvtx.annotate(name, domain="fusec")
