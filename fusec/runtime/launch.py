"""Run a compiled function: one kernel launch per ``ai.fused`` group, in order.

``Program(module, entry, target)`` walks the entry function once: dense
``arith.constant`` values are materialised, every ``ai.fused`` group gets its
kernel from the code generator (``fusec.codegen.generate``) and the kernel
cache, and ``func.return`` names the results. Calling the program feeds the
arguments through the launches, keeping values in a dict.

Targets plug in through ``BACKENDS``: a backend turns a ``KernelSource`` into
a callable and moves arrays in and out. ``CpuBackend`` is here; the CUDA
backend (its own module) registers itself under ``"cuda"`` the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from fusec.codegen import KernelSource, generate
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.runtime.dtypes import numpy_dtype
from fusec.runtime.memory import check_bytes, tensor_bytes
from fusec.runtime.reference import check_arguments, constant_value, entry_function

#: (shape, numpy dtype) -> a new array. Tests pass one that fills with NaN.
Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]

#: target -> "module:Class" of its backend.
BACKENDS: dict[str, str] = {
    "cpu": "fusec.runtime.launch:CpuBackend",
    "cuda": "fusec.runtime.cuda:CudaBackend",
}


class Backend(Protocol):
    """What a target provides to ``Program``."""

    target: str

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        """The callable running ``kernel``'s entry (compiled or loaded from the cache)."""

    def run(
        self, launch: Launch, fn: Callable[..., Any], inputs: list[Any], alloc: Allocator
    ) -> list[Any]:
        """Run one launch on the input values; return its output values."""

    def to_host(self, value: Any) -> np.ndarray:
        """A result value as a numpy array."""


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


def backend_for(target: str, cache=None) -> Backend:
    spec = BACKENDS.get(target)
    if spec is None:
        raise FusecError(f"no runtime for target '{target}' (known: {', '.join(BACKENDS)})")
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module), cls)(cache=cache)


class Program:
    """The entry function of a module, lowered to a sequence of kernel launches."""

    def __init__(
        self, module: ModuleOp, entry: str | None = None, target: str = "cpu", cache=None
    ) -> None:
        self.function = entry_function(module, entry)
        self.backend = backend_for(target, cache)
        self.constants: dict[SSAValue, np.ndarray] = {}
        self.launches: list[Launch] = []
        self.returns: list[SSAValue] = []
        self._plan()
        self._fns: list[Callable[..., Any]] | None = None
        self._lock = threading.Lock()

    @property
    def kernels(self) -> list[KernelSource]:
        return [launch.kernel for launch in self.launches]

    def load(self) -> list[Callable[..., Any]]:
        """Compile (or load from the kernel cache) every kernel; the first call does it."""
        with self._lock:
            if self._fns is None:
                self._fns = [self.backend.load(launch.kernel) for launch in self.launches]
            return self._fns

    def _plan(self) -> None:
        target = self.backend.target
        ops = list(self.function.body.block.ops)
        values = [r for op in ops if not isinstance(op, func.ReturnOp) for r in op.results]
        # every value of a call (and the constants) at float32, before anything is allocated
        self.call_bytes = tensor_bytes([spec_of(v.type).shape for v in values], 4)
        check_bytes(self.call_bytes, f"the buffers of @{self.function.sym_name.data}")
        for op in ops:
            if isinstance(op, arith.ConstantOp):
                dtype = numpy_dtype(spec_of(op.result.type).dtype)
                self.constants[op.result] = constant_value(op).astype(dtype)
            elif isinstance(op, ai.FusedOp):
                name = f"k{len(self.launches)}"
                kernel = generate(op, target, name)
                self.launches.append(Launch(kernel, list(op.inputs), list(op.results)))
            elif isinstance(op, func.ReturnOp):
                self.returns = list(op.arguments)
            else:
                from fusec.codegen.expr import error_at

                raise error_at(
                    op,
                    f"is outside any ai.fused group: the '{target}' target runs fused "
                    "groups only (run the fusion pipeline, e.g. fusec-default, or interpret "
                    "the IR on the numpy reference executor with target 'reference')",
                )

    def __call__(self, args: Sequence[Any], *, alloc: Allocator | None = None) -> tuple:
        """Run the function on numpy ``args``; return all its results as numpy arrays."""
        arrays = check_arguments(self.function, args)
        check_bytes(self.call_bytes, f"the buffers of @{self.function.sym_name.data}")
        values: dict[SSAValue, Any] = dict(self.constants)
        values.update(zip(self.function.body.block.args, arrays, strict=True))
        alloc = alloc or _empty
        for launch, fn in zip(self.launches, self.load(), strict=True):
            inputs = [values[v] for v in launch.operands]
            with nvtx_range(launch.label):
                outputs = self.backend.run(launch, fn, inputs, alloc)
            values.update(zip(launch.results, outputs, strict=True))
        return tuple(self.backend.to_host(values[v]) for v in self.returns)


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


class CpuBackend:
    """Numba cpu kernels: flat float32 arrays in, flat float32 arrays out."""

    target = "cpu"

    def __init__(self, cache=None) -> None:
        from fusec.runtime.cache import default_cache
        from fusec.runtime.threads import configure

        configure()  # before Numba starts its thread pool: see fusec.runtime.threads
        self.cache = cache if cache is not None else default_cache()

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        module = self.cache.load_module(kernel.source, target="cpu")
        return getattr(module, kernel.entry)

    def run(
        self, launch: Launch, fn: Callable[..., Any], inputs: list[Any], alloc: Allocator
    ) -> list[Any]:
        flat_in = [_as_f32(a).reshape(-1) for a in inputs]
        outs = [alloc(spec.shape, np.dtype(np.float32)) for spec in launch.kernel.outputs]
        if not all(o.flags.c_contiguous and o.dtype == np.float32 for o in outs):
            raise ValueError("the allocator must return C-contiguous float32 arrays")
        if _threadsafe_layer():
            fn(*flat_in, *(o.reshape(-1) for o in outs))
        else:
            with _WORKQUEUE_LOCK:
                fn(*flat_in, *(o.reshape(-1) for o in outs))
        results = []
        for out, spec in zip(outs, launch.kernel.outputs, strict=True):
            dtype = numpy_dtype(spec.dtype)
            results.append(out if dtype == np.float32 else out.astype(dtype))
        return results

    def to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)


#: Serialises kernel calls while Numba's threading layer may be "workqueue", which
#: aborts the process when parallel kernels run from two Python threads at once.
_WORKQUEUE_LOCK = threading.Lock()
_THREADSAFE: bool | None = None


def _threadsafe_layer() -> bool:
    """True once Numba has started a threading layer other than workqueue (omp, tbb)."""
    global _THREADSAFE
    if _THREADSAFE is None:
        import numba

        try:
            _THREADSAFE = numba.threading_layer() != "workqueue"
        except ValueError:  # no parallel kernel has run yet: the layer is not chosen
            return False
    return _THREADSAFE


def _as_f32(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32)


_nvtx: Any = None


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
