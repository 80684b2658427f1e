"""The cpu target's compiled launcher: a whole program called as one Numba function.

``Program`` runs a call as a Python loop over the launches (``Backend.run``: each
launch converts its arguments, allocates its outputs, sets up BLAS and thread
placement, calls the generated ``launch``, which takes a workspace and a fresh
block counter): ~5 us a launch, as much as the compute of a model at batch 1
(issue 30). ``CpuProgram`` plans instead, when it is built:

* a **buffer plan** (``plan_buffers``): every value the kernels compute gets a byte
  offset in one arena, reused by liveness (a value's bytes are free once its last
  reader has run; a kernel never writes over its own operands: no in-place), 64-byte
  aligned; a reshape (view launch) shares its operand's bytes. The constants (and the
  laid-out ones, ``KernelSource.prepared_inputs``) are packed once into a second array.
  A returned value is written straight into an array of its own, allocated per call
  (the caller keeps it): fresh arrays, never views of the arena.
* **segments**: runs of kernels that have an njit entry (``KernelSource.compiled_entry``,
  ``fusec.targets.cpu.entry``) become one generated ``@cached_njit`` function that
  slices the arena into each kernel's flat arrays and calls the entries in order,
  with the scratch and block counter they share, each by its address
  (``entry_call.call_entry``: linking the kernels in made a segment as slow to compile
  as the kernels themselves); a kernel without one (a copy kernel,
  a numpy reduction, Winograd filters of a weight given as an argument) runs its Python
  ``launch`` on views of the same arena between segments (``boundaries`` counts them).

A call then checks the arguments, takes its thread's arena (made once per thread and
program, so concurrent callers never share one), allocates the outputs, and makes one
njit call per segment inside the backend's ``call_scope`` (BLAS at one thread, the
threads' placement) and ``affinity.run``. In steady state that allocates nothing but
the outputs and enters a fixed number of Python frames whatever the number of kernels
(tests/targets/cpu/test_cpu_program.py counts both).

Compiling: the kernels a program launches and its program module are compiled at
once on its first call, each distinct module once, the entries and segments for the
types the call passes (``compile_jobs``; ``fusec.runtime.compile_pool`` runs them in
worker processes); the program then loads them all from the kernel cache.

A call with a ``recorder`` (``fusec profile`` times each kernel) runs the same plan
split into one segment a kernel (``build_segments(split=True)``), each timed: the kernels
read and write the arena's bytes as an ordinary call's do. Timed through the Python path
instead (its own outputs a launch), MobileNetV3-L b8's kernels summed to 19.1 ms against
17.2 for a call, its stem to 1023 us against 688 in the program. The Python path stays
for every call when
``FUSEC_CPU_LAUNCHER=python`` is set as the program is built, or when ``compiled_reason``
says why a program cannot be compiled (16-bit float values: rounded between kernels by
the Python path; an element type the arena does not hold).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.ir import SSAValue

from fusec.dialect.ops import spec_of
from fusec.environ import getenv
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.memory import check_bytes
from fusec.runtime.launch import Allocator, LaunchRecorder, Program
from fusec.targets.cpu import affinity, blas
from fusec.targets.cpu.entry import NAME as ENTRY_NAME
from fusec.targets.cpu.tasks import num_threads

if TYPE_CHECKING:
    from fusec.runtime.compile_pool import Job

#: ``FUSEC_CPU_LAUNCHER=python`` runs every call through the Python launch loop.
ENV_VAR = "FUSEC_CPU_LAUNCHER"
#: Byte alignment of every buffer in the arenas (a cache line, an AVX-512 vector).
ALIGN = 64
#: The element types an arena holds, as the generated code names them.
_DTYPES = {
    "float32": "np.float32",
    "int64": "np.int64",
    "int32": "np.int32",
    "bool": "np.bool_",
    "int8": "np.int8",
    "uint8": "np.uint8",
}
#: The quantized element types held in another dtype (issue 31), as the cpu kernels hold
#: them (``backend._storage``): float8 codes as uint8, 4-bit integers as 8-bit values.
_STORED = {"f8E4M3FN": "uint8", "f8E5M2": "uint8", "i4": "int8", "ui4": "uint8"}


@dataclass(frozen=True)
class Place:
    """Where a value's elements live during a call: an argument (``index``), an output
    (``index``), the constants array or the arena (``offset`` in bytes)."""

    kind: str  # "arg" | "out" | "const" | "arena"
    index: int
    size: int
    dtype: np.dtype


@dataclass
class Step:
    """One kernel launch of the plan: its kernel's index in ``Program.launches`` and the
    places of its operands and results, in order."""

    launch: int
    ins: list[Place]
    outs: list[Place]


@dataclass
class BufferPlan:
    """The arena layout of a program (see the module docstring)."""

    steps: list[Step] = field(default_factory=list)
    #: Bytes of the values' part of the arena (the kernels' shared scratch follows it).
    value_bytes: int = 0
    scratch_floats: int = 0
    #: The constants array and, per returned value, its place and shape.
    constants: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint8))
    returns: list[tuple[Place, tuple[int, ...]]] = field(default_factory=list)
    #: Shape and dtype of each output array a call allocates.
    outputs: list[tuple[tuple[int, ...], np.dtype]] = field(default_factory=list)
    #: Arguments the kernels read in another dtype (float8 codes, 4-bit integers as
    #: bytes: ``_STORED``): (index, that dtype); and per returned value the element type
    #: to give it back in, where it is held in another (else None).
    stored_args: list[tuple[int, np.dtype]] = field(default_factory=list)
    restored: list[np.dtype | None] = field(default_factory=list)

    @property
    def output_sizes(self) -> list[tuple[tuple[int, ...], np.dtype, bool]]:
        """``outputs`` with whether each is large enough for the buffer pool."""
        sizes = self.__dict__.get("_output_sizes")
        if sizes is None:
            from fusec.targets.cpu.buffers import MIN_BYTES

            sizes = [
                (shape, dtype, math.prod(shape) * dtype.itemsize >= MIN_BYTES)
                for shape, dtype in self.outputs
            ]
            self.__dict__["_output_sizes"] = sizes
        return sizes

    @property
    def arena_bytes(self) -> int:
        return self.value_bytes + 4 * self.scratch_floats


class CpuProgram(Program):
    """A cpu ``Program`` whose calls run as compiled segments (see the module docstring)."""

    def _target_setup(self) -> None:
        """The buffer plan of compiled calls (``Program.__init__`` calls it last)."""
        #: The entry function's name (the program module's header; a program from the
        #: program cache, ``fusec.targets.cpu.program_cache``, has no ``function``).
        self.entry_name: str = self.function.sym_name.data
        #: Why calls take the Python launch loop (None: they run compiled).
        self.compiled_reason: str | None = None
        if getenv(ENV_VAR, "").strip().lower() == "python":
            self.compiled_reason = f"{ENV_VAR}=python"
        self.plan: BufferPlan | None = None
        if self.compiled_reason is None:
            try:
                self.plan = plan_buffers(self)
            except _NotCompiled as why:
                self.compiled_reason = str(why)
        self._segments: list[Any] | None = None
        #: The steps of a recorded call: one segment a kernel (built on demand).
        self._split: list[Any] | None = None
        #: Every kernel compiled, serial and free of BLAS calls (``bare_program``): a call
        #: runs its segments without the thread placement and the BLAS thread count.
        self._bare = False
        self._local = threading.local()

    @property
    def boundaries(self) -> int:
        """Kernels run from Python between compiled segments (no njit entry)."""
        if self.plan is None:
            return len(self.kernels)
        return sum(self.launches[s.launch].kernel.compiled_entry is None for s in self.plan.steps)

    def __call__(
        self,
        args: Sequence[Any],
        *,
        alloc: Allocator | None = None,
        recorder: LaunchRecorder | None = None,
    ) -> tuple:
        plan = self.plan
        if plan is None:
            return super().__call__(args, alloc=alloc, recorder=recorder)
        arrays = self._arguments(args)
        for k, dtype in plan.stored_args:  # float8 codes, 4-bit integers as bytes
            arrays[k] = _stored(arrays[k], dtype)
        for k, array in enumerate(arrays):
            if not (array.flags.c_contiguous and array.flags.writeable):
                arrays[k] = np.array(array, order="C")  # the compiled entries take these only
        check_bytes(self.call_bytes, self._buffers_name)
        segments = self._segments if self._segments is not None else self._build()
        if recorder is not None:
            segments = self._timed(recorder)
        state = self._local.__dict__.get("state") or self._state()
        outs = self._outputs(plan, alloc)
        state.counter[1] = num_threads()  # the entries' task count (CompiledEntry)
        if self._bare:  # no parallel kernel, no BLAS: no placement, no BLAS thread count
            for segment in segments:
                segment(state, arrays, outs)
            return tuple(_returned(plan, arrays, outs))
        # the backend's call_scope, without its generator (~3 us a call)
        single, placed = blas.single_threaded(), affinity.Scope()
        single.__enter__()
        try:
            placed.__enter__()
            try:
                for segment in segments:
                    segment(state, arrays, outs)
            finally:
                placed.__exit__()
        finally:
            single.__exit__()
        return tuple(_returned(plan, arrays, outs))

    def _timed(self, recorder: LaunchRecorder) -> list[Callable]:
        """One step a kernel (``split_segments``, built on the first recorded call), each
        inside the recorder's span for its launch."""
        assert self.plan is not None
        fns = self.load()  # (takes the lock itself)
        with self._lock:
            if self._split is None:
                self._split = build_segments(self, self.plan, fns, self._bare, split=True)
        span = recorder.spans(None)
        labels = [self.launches[step.launch].label for step in self.plan.steps]
        return [_spanned(run, span, label) for run, label in zip(self._split, labels, strict=True)]

    def _outputs(self, plan: BufferPlan, alloc: Allocator | None) -> list[np.ndarray]:
        if alloc is None:  # small ones from malloc's heap, large ones from the pool
            pooled = self.backend.pool.empty
            return [
                pooled(shape, dtype) if large else np.empty(shape, dtype)
                for shape, dtype, large in plan.output_sizes
            ]
        outs = [alloc(shape, dtype) for shape, dtype in plan.outputs]
        for out, (shape, dtype) in zip(outs, plan.outputs, strict=True):
            if not out.flags.c_contiguous or out.dtype != dtype or out.shape != shape:
                raise ValueError("the allocator must return C-contiguous arrays of the dtype asked")
        return outs

    def _state(self) -> _ThreadState:
        """This thread's arena and counter, made on its first call (filled with NaN
        bytes: a kernel reading a value nothing wrote sees NaN, never stale data)."""
        assert self.plan is not None
        arena = np.full(max(ALIGN, self.plan.arena_bytes), 0xFF, dtype=np.uint8)
        state = _ThreadState(arena, self.plan.constants, np.zeros(2, np.int64))
        self._local.state = state
        return state

    def _compile_ahead(self, step: Callable[[str, float], None]) -> set[str]:
        """Compile the kernel modules and the program module the kernel cache misses at
        once, in worker processes (``fusec.runtime.compile_pool``): each module once
        however many launches share it, with the entries and segments for the argument
        types this program calls them with; ``load`` then loads them all from the cache."""
        from fusec.runtime.compile_pool import compile_ahead

        jobs, names = compile_jobs(self)
        cache = self.backend.cache
        missing = [k for k, job in enumerate(jobs) if not cache.has_module(job.source)]
        reported: set[str] = set()

        def done(index: int, seconds: float) -> None:
            for k, name in enumerate(names[missing[index]]):
                step(name, seconds if k == 0 else 0.0)  # the wall time, once
                reported.add(name)

        compile_ahead(cache, [jobs[k] for k in missing], done)
        return reported

    def _build(self) -> list[Any]:
        """Load the kernels and the program module (its segments compile on first call)."""
        fns = self.load()
        with self._lock:
            if self._segments is None:
                assert self.plan is not None
                self._bare = bare_program(self, self.plan)
                self._segments = build_segments(self, self.plan, fns, self._bare)
            return self._segments


@dataclass
class _ThreadState:
    arena: np.ndarray
    constants: np.ndarray
    counter: np.ndarray
    #: Python boundary steps' flat views of the arenas, made once per thread.
    views: dict[int, list[np.ndarray | None]] = field(default_factory=dict)


class _NotCompiled(Exception):
    """Why a program runs through the Python launch loop."""


# ------------------------------------------------------------------ the buffer plan


def plan_buffers(program: Program) -> BufferPlan:
    """Places for every value of ``program`` (see the module docstring)."""
    plan = BufferPlan()
    places: dict[Any, Place] = {}
    args = program.function.body.block.args
    for i, arg in enumerate(args):
        places[arg] = Place("arg", i, _size(arg), _dtype(arg))
        if _dtype(arg) != _declared(arg):
            plan.stored_args.append((i, _dtype(arg)))
    plan.constants = _pack_constants(program, places)
    roots = _roots(program)
    returned = _output_roots(program, roots, places, plan)
    last = _last_uses(program, roots)
    arena = _Arena()
    for i, launch in enumerate(program.launches):
        if launch.is_view:
            continue
        for value in launch.results:
            if value not in returned:
                places[value] = Place(
                    "arena", arena.take(_nbytes(value)), _size(value), _dtype(value)
                )
        ins = [
            _operand_place(program, launch, k, places, roots) for k in range(len(launch.operands))
        ]
        plan.steps.append(Step(i, ins, [places[v] for v in launch.results]))
        for value in [v for v, at in last.items() if at == i and places[v].kind == "arena"]:
            arena.give(places[value].index, _nbytes(value))
            del last[value]
    plan.value_bytes = _aligned(arena.end)
    threads = _threads()
    entries = [program.launches[s.launch].kernel.compiled_entry for s in plan.steps]
    plan.scratch_floats = max([e.scratch_floats(threads) for e in entries if e] + [0])
    plan.returns = [
        (_place_of(v, places, roots), tuple(spec_of(v.type).shape)) for v in program.returns
    ]
    restored = [None if _dtype(v) == _declared(v) else _declared(v) for v in program.returns]
    plan.restored = restored if any(d is not None for d in restored) else []
    return plan


def _roots(program: Program) -> dict[SSAValue, SSAValue]:
    """Each value to the value whose bytes it shares (a reshape's operand, followed)."""
    roots: dict[SSAValue, SSAValue] = {}
    for launch in program.launches:
        if launch.is_view:
            source = launch.operands[0]
            roots[launch.results[0]] = roots.get(source, source)
    return roots


def _output_roots(
    program: Program, roots: dict, places: dict[Any, Place], plan: BufferPlan
) -> set[SSAValue]:
    """Kernel results that are returned (or shared by a returned reshape): each gets an
    output array of its own, allocated per call."""
    computed = {v for launch in program.launches if not launch.is_view for v in launch.results}
    returned: set[SSAValue] = set()
    for value in program.returns:
        root = roots.get(value, value)
        if root in computed and root not in returned:
            returned.add(root)
            shape = tuple(spec_of(root.type).shape)
            places[root] = Place("out", len(plan.outputs), _size(root), _dtype(root))
            plan.outputs.append((shape, _dtype(root)))
    return returned


def _last_uses(program: Program, roots: dict) -> dict[SSAValue, int]:
    """The last launch reading each computed value's bytes (its own launch when unread)."""
    last: dict[SSAValue, int] = {}
    for i, launch in enumerate(program.launches):
        if launch.is_view:
            continue
        for value in launch.results:
            last.setdefault(value, i)
        for value in launch.operands:
            root = roots.get(value, value)
            if root in last:
                last[root] = i
    return last


def _operand_place(program: Program, launch: Any, k: int, places: dict, roots: dict) -> Place:
    layout = dict(launch.kernel.prepared_inputs).get(k)
    value = launch.operands[k]
    if layout is not None:
        return places[(value, layout)]
    return _place_of(value, places, roots)


def _place_of(value: SSAValue, places: dict, roots: dict) -> Place:
    place = places[roots.get(value, value)]
    return Place(place.kind, place.index, _size(value), place.dtype)


def _pack_constants(program: Program, places: dict[Any, Place]) -> np.ndarray:
    """One byte array holding every constant (in the dtype the kernels read it in) and
    every laid-out constant, 64-byte aligned; their places recorded in ``places``."""
    arrays: list[tuple[Any, np.ndarray]] = []
    for value, array in program.constants.items():
        arrays.append((value, _stored(array, _dtype(value)).reshape(-1)))
    for key, array in program.prepared_constants.items():
        arrays.append((key, np.ascontiguousarray(array, dtype=np.float32).reshape(-1)))
    offset = 0
    spans = []
    for key, array in arrays:
        spans.append((key, offset, array))
        offset = _aligned(offset + array.nbytes)
    packed = np.zeros(max(offset, ALIGN), dtype=np.uint8)
    for key, start, array in spans:
        packed[start : start + array.nbytes] = array.view(np.uint8)
        places[key] = Place("const", start, array.size, array.dtype)
    return packed


class _Arena:
    """First-fit allocation of byte ranges, freed ranges merged with their neighbours."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # (offset, bytes), sorted
        self.end = 0

    def take(self, nbytes: int) -> int:
        nbytes = _aligned(max(nbytes, 1))
        for k, (start, size) in enumerate(self.free):
            if size >= nbytes:
                if size == nbytes:
                    del self.free[k]
                else:
                    self.free[k] = (start + nbytes, size - nbytes)
                return start
        start, self.end = self.end, self.end + nbytes
        return start

    def give(self, start: int, nbytes: int) -> None:
        self.free.append((start, _aligned(max(nbytes, 1))))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for begin, size in self.free:
            if merged and merged[-1][0] + merged[-1][1] == begin:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((begin, size))
        self.free = merged


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _size(value: SSAValue) -> int:
    return math.prod(spec_of(value.type).shape)


def _declared(value: SSAValue) -> np.dtype:
    return np.dtype(numpy_dtype(spec_of(value.type).dtype))


def _stored(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as the kernels hold it in ``dtype``: a float8 tensor's codes (a view),
    a 4-bit integer's values as bytes, any other converted."""
    array = np.ascontiguousarray(array)
    if array.dtype.name.startswith("float8") and dtype == np.uint8:
        return array.view(np.uint8)
    return np.ascontiguousarray(array, dtype=dtype)


def _restored(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A value held in another dtype (``_stored``) back in its element type."""
    return array.view(dtype) if dtype.name.startswith("float8") else array.astype(dtype)


def _dtype(value: SSAValue) -> np.dtype:
    """The dtype the cpu kernels hold ``value`` in; 16-bit floats and types no arena
    holds are not compiled (``_NotCompiled``)."""
    spec = spec_of(value.type)
    if spec.dtype in _STORED:
        return np.dtype(_STORED[spec.dtype])
    dtype = np.dtype(numpy_dtype(spec.dtype))
    if dtype.kind == "f" and dtype.itemsize != 4:
        raise _NotCompiled(
            f"a {spec.dtype} value: 16-bit floats are rounded between kernels by the "
            "Python launch loop"
        )
    if dtype.name not in _DTYPES:
        raise _NotCompiled(f"a {spec.dtype} value: the compiled launcher holds no {dtype}")
    return dtype


def _nbytes(value: SSAValue) -> int:
    return _size(value) * _dtype(value).itemsize


def _threads() -> int:
    from fusec.targets.cpu.host import numba_threads

    return numba_threads()


def _returned(plan: BufferPlan, arrays: list[np.ndarray], outs: list[np.ndarray]) -> list[Any]:
    """The call's results: output arrays (reshaped where a reshape is returned), or the
    argument or constant a result is (as the Python loop returns them)."""
    results = []
    for k, (place, shape) in enumerate(plan.returns):
        if place.kind == "out":
            array = outs[place.index]
        elif place.kind == "arg":
            array = arrays[place.index]
        else:
            flat = plan.constants[place.index : place.index + place.size * place.dtype.itemsize]
            array = flat.view(place.dtype).copy()
        restored = plan.restored[k] if plan.restored else None
        if restored is not None:
            array = _restored(array, restored)
        results.append(array if array.shape == shape else array.reshape(shape))
    return results


# ------------------------------------------------------------- compiling ahead


def compile_jobs(program: CpuProgram) -> tuple[list[Job], list[list[str]]]:
    """What compiling ``program`` takes: a job per distinct kernel source (with its
    entry's signatures) and one for the program module (its segments' signatures),
    and the names of the kernels of each job (none for the program module)."""
    from fusec.runtime.compile_pool import Job
    from fusec.targets.cpu.entry_call import entry_signature

    steps = {s.launch: s for s in program.plan.steps} if program.plan is not None else {}
    by_source: dict[str, tuple[list[str], dict[Any, None]]] = {}
    for index, launch in enumerate(program.launches):
        if launch.is_view:
            continue
        names, signatures = by_source.setdefault(launch.kernel.source, ([], {}))
        names.append(launch.kernel.name)
        step = steps.get(index)
        if step is not None and launch.kernel.compiled_entry is not None:
            signatures[entry_signature([p.dtype for p in step.ins + step.outs])] = None
    jobs = [
        Job(source, "cpu", tuple((ENTRY_NAME, sig) for sig in signatures))
        for source, (_, signatures) in by_source.items()
    ]
    kernel_names = [names for names, _ in by_source.values()]
    segments = _segments_job(program)
    if segments is not None:
        jobs.append(segments)
        kernel_names.append([])
    return jobs, kernel_names


def _segments_job(program: CpuProgram) -> Job | None:
    """The program module's job: each segment compiled for the types of a call's
    arguments (``_compiled_step``: the arenas, then the arguments and outputs as a call
    passes them, C-contiguous and writable), so that the first call finds it in the
    cache; None when the program runs no segment or an argument's type is unknown."""
    from numba import types
    from numba.np.numpy_support import from_dtype

    from fusec.runtime.compile_pool import Job

    plan = program.plan
    if plan is None or any(spec is None for spec in program._arg_specs):
        return None
    runs = [run for run, _ in segment_runs(program, plan) if run]
    if not runs:
        return None
    arrays = [(len(shape), dtype) for shape, dtype in program._arg_specs]  # type: ignore[misc]
    for k, dtype in plan.stored_args:
        arrays[k] = (arrays[k][0], dtype)
    arrays += [(len(shape), dtype) for shape, dtype in plan.outputs]
    i64, u8 = types.Array(types.int64, 1, "C"), types.Array(types.uint8, 1, "C")
    signature = (i64, types.Array(types.int64, 2, "C"), u8, u8, i64)
    signature += tuple(types.Array(from_dtype(d), ndim, "C") for ndim, d in arrays)
    source = program_source(program, plan, runs)
    return Job(source, "cpu", tuple((f"segment{k}", signature) for k in range(len(runs))))


# ------------------------------------------------------------- the program module


def segment_runs(
    program: Program, plan: BufferPlan, split: bool = False
) -> list[tuple[list[Step], Step | None]]:
    """The plan's steps in call order: each a run of kernels with an njit entry (one
    compiled segment; empty before a kernel run from Python) paired with None, or an
    empty run paired with a kernel run from Python. ``split``: every compiled kernel a
    run of its own (a recorded call times each)."""
    runs: list[tuple[list[Step], Step | None]] = []
    for step in plan.steps:
        if program.launches[step.launch].kernel.compiled_entry is None:
            runs.append(([], step))
        else:
            if split or not runs or runs[-1][1] is not None:
                runs.append(([], None))
            runs[-1][0].append(step)
    return runs


def bare_program(program: Program, plan: BufferPlan) -> bool:
    """Whether every kernel of ``plan`` runs compiled (an njit entry), on the calling
    thread alone (no ``parallel=True`` stage) and calls no BLAS (no ``sgemm``): then a call
    needs neither the thread placement (``affinity``) nor the BLAS thread count around its
    segments. After a kernel that streams its weights (Linear(2048, 1000) at batch 1: 8 MB
    a call) every piece of Python runs with cold caches: the two scopes and
    ``affinity.run`` cost ~50 us a call there, the kernel ~290 (benchmarks/results/
    cpu-notes.md). The sources are read as text, conservatively: a comment showing such a
    call keeps the scopes."""
    kernels = [program.launches[step.launch].kernel for step in plan.steps]
    return all(
        k.compiled_entry is not None
        and "parallel=True" not in k.source
        and not _BLAS_CALL.search(k.source)
        for k in kernels
    )


#: A call of the BLAS in a kernel's source (its import line names the functions only).
_BLAS_CALL = re.compile(r"\bsgemm(_acc)?\(")


def build_segments(
    program: CpuProgram, plan: BufferPlan, fns: list[Any], bare: bool = False, split: bool = False
) -> list[Callable]:
    """The call's steps: one per compiled segment (its generated function, bound to its
    entries' addresses) and one per kernel run from Python (its ``launch`` on views of
    the arenas); ``bare`` (``bare_program``): the segments called as they are, not
    through ``backend.run_kernel``; ``split``: a segment a kernel (``segment_runs``)."""
    pairs = segment_runs(program, plan, split)
    runs = [run for run, _ in pairs]
    python = [boundary for _, boundary in pairs]
    source = program_source(program, plan, [r for r in runs if r])
    module = program.backend.cache.load_module(source, target="cpu")
    steps: list[Callable] = []
    number = 0
    for run, boundary in zip(runs, python, strict=True):
        if boundary is not None:
            steps.append(_python_step(boundary, fns[boundary.launch]))
        elif run:
            addresses = np.array([_entry_address(s, fns[s.launch]) for s in run], np.int64)
            stages = _stage_table([fns[s.launch] for s in run])
            segment = getattr(module, f"segment{number}")
            steps.append(_compiled_step(segment, addresses, stages, bare))
            number += 1
    return steps


def _entry_address(step: Step, launch_fn: Any) -> int:
    """The address of the step's kernel entry compiled (or loaded from Numba's cache) for
    the flat arrays of the step's places (``entry_call.entry_signature``)."""
    import sys

    from fusec.targets.cpu.entry_call import entry_signature

    module = sys.modules[launch_fn.__module__]
    dispatcher = getattr(module, ENTRY_NAME)
    signature = entry_signature([p.dtype for p in step.ins + step.outs])
    dispatcher.compile(signature)
    result = dispatcher.overloads[signature]
    return int(result.library.get_pointer_to_function(result.fndesc.llvm_func_name))


def _stage_table(launch_fns: list[Any]) -> np.ndarray:
    """Row k: the addresses of the stages of kernel k of a segment (its module's ``STAGES``)."""
    import sys

    from fusec.targets.cpu.entry_call import stage_address

    rows = []
    for fn in launch_fns:
        module = sys.modules[fn.__module__]
        rows.append([stage_address(getattr(module, name)) for name in module.STAGES])
    table = np.zeros((len(rows), max([len(r) for r in rows] + [1])), np.int64)
    for k, row in enumerate(rows):
        table[k, : len(row)] = row
    return table


def program_source(program: CpuProgram, plan: BufferPlan, runs: list[list[Step]]) -> str:
    """The generated module: one ``segment<i>(entries, stages, arena, consts, counter, a0..,
    o0..)`` per run of compiled kernels, ``entries`` their addresses in order and row k of
    ``stages`` the addresses of kernel k's stages."""
    n_args = len(program._arg_specs)  # one per parameter, known or not
    params = ["entries", "stages", "arena", "consts", "counter"]
    params += [f"a{i}" for i in range(n_args)] + [f"o{j}" for j in range(len(plan.outputs))]
    lines = [
        f"# fusec program: @{_identifier(program)}, {len(plan.steps)} kernel launches, "
        f"{len(runs)} compiled segment(s) (fusec.targets.cpu.program)",
        "import numpy as np",
        "",
        "from fusec.targets.cpu.abi import cached_njit, call_entry, flat_view",
    ]
    scratch = f"flat_view(arena, {plan.value_bytes}, {plan.scratch_floats}, np.float32)"
    for number, run in enumerate(runs):
        lines += ["", "", '@cached_njit(fastmath=False, error_model="numpy")']
        lines.append(f"def segment{number}({', '.join(params)}):")
        lines.append(f"    scratch = {scratch}")
        for k, step in enumerate(run):
            name = program.launches[step.launch].kernel.name
            arrays = [_array_text(p) for p in step.ins + step.outs]
            lines.append(f"    # {name}")
            arguments = [f"entries[{k}]", *arrays, "scratch", "counter", f"stages[{k}]"]
            lines.append(f"    call_entry({', '.join(arguments)})")
    return "\n".join(lines) + "\n"


def _identifier(program: CpuProgram) -> str:
    name = program.entry_name
    return name if re.fullmatch(r"[A-Za-z0-9_.$-]{1,80}", name) else "<function>"


def _array_text(place: Place) -> str:
    """The flat array of ``place`` in the generated segment (``entry_call.flat_view``)."""
    dtype = _DTYPES[place.dtype.name]
    if place.kind in ("arg", "out"):
        return f"flat_view({place.kind[0]}{place.index}, 0, {place.size}, {dtype})"
    source = "consts" if place.kind == "const" else "arena"
    return f"flat_view({source}, {place.index}, {place.size}, {dtype})"


def _compiled_step(
    segment: Any, addresses: np.ndarray, stages: np.ndarray, bare: bool = False
) -> Callable:
    from fusec.targets.cpu.backend import run_kernel

    def run(state: _ThreadState, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        args = [addresses, stages, state.arena, state.constants, state.counter, *arrays, *outs]
        run_kernel(segment, args)

    def run_bare(state: _ThreadState, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        segment(addresses, stages, state.arena, state.constants, state.counter, *arrays, *outs)

    return run_bare if bare else run


def _spanned(step: Callable, span: Any, label: str) -> Callable:
    """``step`` run inside ``span(label)`` (a launch recorder's timing)."""

    def run(state: _ThreadState, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        with span(label):
            step(state, arrays, outs)

    return run


def _python_step(step: Step, fn: Any) -> Callable:
    from fusec.targets.cpu.backend import run_kernel

    def run(state: _ThreadState, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        views = state.views.get(step.launch)
        if views is None:
            views = state.views[step.launch] = [_flat(state, p) for p in step.ins + step.outs]
        args = [
            v if v is not None else _call_array(p, arrays, outs)
            for v, p in zip(views, step.ins + step.outs, strict=True)
        ]
        run_kernel(fn, args)

    return run


def _flat(state: _ThreadState, place: Place) -> np.ndarray | None:
    """A flat view of an arena place (None: an argument or output, new each call)."""
    if place.kind not in ("const", "arena"):
        return None
    source = state.constants if place.kind == "const" else state.arena
    end = place.index + place.size * place.dtype.itemsize
    return source[place.index : end].view(place.dtype)


def _call_array(place: Place, arrays: list[np.ndarray], outs: list[np.ndarray]) -> np.ndarray:
    array = arrays[place.index] if place.kind == "arg" else outs[place.index]
    return array.reshape(-1)
