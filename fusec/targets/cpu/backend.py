"""Running cpu kernels: flat float32 arrays in and out, 16-bit tensors converted around."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from fusec.codegen import KernelSource
from fusec.ir.dtypes import numpy_dtype
from fusec.runtime.launch import Allocator, Launch


class CpuBackend:
    """Numba cpu kernels: flat float32 arrays in, flat float32 arrays out."""

    def __init__(self, cache=None) -> None:
        from fusec.runtime.cache import default_cache
        from fusec.targets.cpu.threads import configure

        configure()  # before Numba starts its thread pool: see fusec.targets.cpu.threads
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
