"""Running cpu kernels: flat float32 arrays in and out, 16-bit tensors converted around."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from fusec.codegen import KernelSource
from fusec.ir.dtypes import numpy_dtype
from fusec.runtime.launch import Allocator, Launch
from fusec.targets.cpu import affinity
from fusec.targets.cpu.buffers import shared_pool


class CpuBackend:
    """Numba cpu kernels: flat float32 arrays in, flat float32 arrays out."""

    def __init__(self, cache=None) -> None:
        from fusec.runtime.cache import default_cache
        from fusec.targets.cpu.threads import configure

        configure()  # before Numba starts its thread pool: see fusec.targets.cpu.threads
        self.cache = cache if cache is not None else default_cache()
        #: outputs (and values between launches) without a caller's allocator
        self.pool = shared_pool()
        #: id(launch) -> its output shapes and casts (the launches live as long as the
        #: Program that owns this backend)
        self._plans: dict[int, tuple[list[tuple[int, ...]], list[np.dtype | None]]] = {}

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        module = self.cache.load_module(kernel.source, target="cpu")
        return getattr(module, kernel.entry)

    def run(
        self, launch: Launch, fn: Callable[..., Any], inputs: list[Any], alloc: Allocator | None
    ) -> list[Any]:
        flat_in = [_as_f32(a).reshape(-1) for a in inputs]
        shapes, casts = self._outputs(launch)
        outs = [(alloc or self.pool.empty)(shape, _F32) for shape in shapes]
        if not all(o.flags.c_contiguous and o.dtype == _F32 for o in outs):
            raise ValueError("the allocator must return C-contiguous float32 arrays")
        args = [*flat_in, *(o.reshape(-1) for o in outs)]
        if _threadsafe_layer():
            affinity.run(fn, args)
        else:
            with _WORKQUEUE_LOCK:
                affinity.run(fn, args)
        if not casts:
            return outs
        pairs = zip(outs, casts, strict=True)
        return [out if dtype is None else out.astype(dtype) for out, dtype in pairs]

    def _outputs(self, launch: Launch) -> tuple[list[tuple[int, ...]], list[np.dtype | None]]:
        """The launch's output shapes and, for 16-bit outputs, the dtype to round to
        (an empty list when all are float32); worked out on its first run."""
        plan = self._plans.get(id(launch))
        if plan is None:
            specs = launch.kernel.outputs
            dtypes = [np.dtype(numpy_dtype(spec.dtype)) for spec in specs]
            casts = [None if d == _F32 else d for d in dtypes]
            plan = ([tuple(spec.shape) for spec in specs], casts if any(casts) else [])
            self._plans[id(launch)] = plan
        return plan

    def to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def prepare(self, layout: str, array: np.ndarray) -> np.ndarray:
        """``array`` in ``layout``: "strips" (a GEMM's B as ``gemm_packed`` reads it) or
        "strips_t" (the same from B^T), flat float32."""
        from fusec.targets.cpu.microkernel import pack_strips

        if layout in ("strips", "strips_t"):
            return pack_strips(_as_f32(array), transposed=layout == "strips_t")
        raise ValueError(f"the cpu backend has no layout {layout!r}")


_F32 = np.dtype(np.float32)

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
    if type(array) is np.ndarray and array.dtype == _F32 and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=np.float32)
