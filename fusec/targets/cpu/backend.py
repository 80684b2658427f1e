"""Running cpu kernels: flat float32 arrays in and out, 16-bit tensors converted around."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusec.codegen import KernelSource
from fusec.ir.dtypes import FLOAT8_TYPES, is_float, numpy_dtype
from fusec.runtime.launch import Allocator, Launch
from fusec.targets.cpu import affinity, blas
from fusec.targets.cpu.buffers import MIN_BYTES, shared_pool


class CpuBackend:
    """Numba cpu kernels: flat float32 arrays in, flat float32 arrays out."""

    def __init__(self, cache=None) -> None:
        from fusec.runtime.cache import default_cache
        from fusec.targets.cpu.threads import configure

        configure()  # before Numba starts its thread pool: see fusec.targets.cpu.threads
        self.cache = cache if cache is not None else default_cache()
        #: outputs (and values between launches) without a caller's allocator
        self.pool = shared_pool()
        #: id(launch) -> its outputs' plan (the launches live as long as the Program that
        #: owns this backend)
        self._plans: dict[int, _OutputPlan] = {}

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        module = self.cache.load_module(kernel.source, target="cpu")
        return getattr(module, kernel.entry)

    def run(
        self, launch: Launch, fn: Callable[..., Any], inputs: list[Any], alloc: Allocator | None
    ) -> list[Any]:
        plan = self._plans.get(id(launch)) or self._plan(launch)
        if plan.input_dtypes:
            args = [_as(a, d).reshape(-1) for a, d in zip(inputs, plan.input_dtypes, strict=True)]
        else:
            args = [_as_f32(a).reshape(-1) for a in inputs]
        if alloc is None:
            outs = [
                np.empty(size, dtype).reshape(shape) if small else self.pool.empty(shape, dtype)
                for shape, size, small, dtype in plan.outputs
            ]
        else:
            outs = [alloc(shape, dtype) for shape, _, _, dtype in plan.outputs]
            stored = [dtype for _, _, _, dtype in plan.outputs]
            if not all(
                o.flags.c_contiguous and o.dtype == d for o, d in zip(outs, stored, strict=True)
            ):
                raise ValueError("the allocator must return C-contiguous arrays of the dtype asked")
        args += [o.reshape(-1) for o in outs]
        run_kernel(fn, args)
        if not plan.casts:
            return outs
        pairs = zip(outs, plan.casts, strict=True)
        return [out if dtype is None else _restore(out, dtype) for out, dtype in pairs]

    def _plan(self, launch: Launch) -> _OutputPlan:
        """The launch's outputs, worked out on its first run."""
        specs = launch.kernel.outputs
        dtypes = [np.dtype(numpy_dtype(spec.dtype)) for spec in specs]
        stored = [_storage(spec.dtype) for spec in specs]
        casts = [None if d == s else d for d, s in zip(dtypes, stored, strict=True)]
        outputs = []
        for spec, dtype in zip(specs, stored, strict=True):
            shape = tuple(spec.shape)
            size = math.prod(shape)
            outputs.append((shape, size, size * dtype.itemsize < MIN_BYTES, dtype))
        ins = [_storage(spec.dtype) for spec in launch.kernel.inputs]
        input_dtypes = ins if any(d != _F32 for d in ins) else []
        plan = _OutputPlan(outputs, casts if any(casts) else [], input_dtypes)
        self._plans[id(launch)] = plan
        return plan

    def to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    @contextlib.contextmanager
    def call_scope(self) -> Iterator[None]:
        """What each launch would set up for itself, once for the call: BLAS at one thread
        (the kernels that call sgemm hold it too, ``blas.single_threaded``, and nested
        that costs nothing) and the threads' placement (``affinity.Scope``)."""
        with blas.single_threaded(), affinity.Scope():
            yield

    def prepare(self, layout: str, array: np.ndarray) -> np.ndarray:
        """``array`` in ``layout``, flat float32: "strips" (a GEMM's B as ``gemm_packed``
        reads it), "strips_t" (the same from B^T), "expert_strips_t" (an (E, N, K) stack of
        experts' weights, each one's B^T as "strips_t", one after another), "q8_strips" /
        "q8_strips_t" (a B of int8 codes as ``gemm_q8_packed`` reads it, its bytes),
        "strips_kcrs" (a K x C x R x S conv weight as the B^T of a (C*R*S) x K GEMM),
        "q8_krsc" (a K x C x R x S weight of int8 codes, its columns in (r, s, c) order, as
        ``gemm_q8_bytes`` reads it), "q8_rows" (a K x C x R x S weight of int8 codes as
        ``gemm_q8_rows``' W: rows in (r, s, c) order, each tap's C padded to whole quads),
        "winograd:<groups>[:4]" (3x3 conv weights as G g G^T, ``winograd.prepare_winograd``)
        or "depthwise_lanes:<block>" (a depthwise weight tap-major per block of channels,
        ``depthwise.pack_lanes``)."""
        from fusec.targets.cpu.microkernel import pack_strips
        from fusec.targets.cpu.winograd import prepare_winograd

        if layout in ("strips", "strips_t"):
            return pack_strips(_as_f32(array), transposed=layout == "strips_t")
        if layout == "expert_strips_t":  # (E, N, K) experts: each one's B^T, one after another
            return np.concatenate([pack_strips(w, transposed=True) for w in _as_f32(array)])
        if layout in ("q8_strips", "q8_strips_t"):
            from fusec.targets.cpu.gemm_int8 import pack_q8

            return pack_q8(array, transposed=layout == "q8_strips_t")
        if layout == "q8_krsc":
            from fusec.targets.cpu.gemm_int8 import pack_q8

            krsc = np.asarray(array).transpose(0, 2, 3, 1)
            return pack_q8(krsc.reshape(krsc.shape[0], -1), transposed=True)
        if layout == "q8_rows":
            from fusec.targets.cpu.gemm_int8 import pack_q8_rows

            k, cg, r, s = np.shape(array)
            krsc = np.zeros((k, r, s, -(-cg // 4) * 4), np.int8)
            krsc[..., :cg] = np.asarray(array).transpose(0, 2, 3, 1)
            return pack_q8_rows(krsc.reshape(k, -1))
        if layout == "strips_kcrs":
            return pack_strips(_as_f32(array).reshape(array.shape[0], -1), transposed=True)
        if layout.startswith("winograd:"):
            return prepare_winograd(layout, array)
        if layout.startswith("depthwise_lanes:"):
            from fusec.targets.cpu.depthwise import pack_lanes

            return pack_lanes(_as_f32(array), int(layout.split(":")[1]))
        raise ValueError(f"the cpu backend has no layout {layout!r}")


_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)

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


def run_kernel(fn: Callable[..., Any], args: list[Any]) -> None:
    """``fn(*args)`` with the calling thread's Numba threads placed (``affinity.run``),
    serialised while Numba's threading layer may be workqueue."""
    if _threadsafe_layer():
        affinity.run(fn, args)
    else:
        with _WORKQUEUE_LOCK:
            affinity.run(fn, args)


@dataclass(frozen=True)
class _OutputPlan:
    """A launch's outputs: shape, element count, whether it is small enough for a plain
    ``np.empty`` (``buffers.MIN_BYTES``; larger ones come from the pool) and the dtype
    the kernel stores, and, for 16-bit outputs, the dtype to round to (an empty list when
    none is). ``input_dtypes``: the dtype each input is passed in, when one is not
    float32 (an integer or bool tensor; else empty, every input float32)."""

    outputs: list[tuple[tuple[int, ...], int, bool, np.dtype]]
    casts: list[np.dtype | None]
    input_dtypes: list[np.dtype] = field(default_factory=list)


def _storage(dtype: str) -> np.dtype:
    """The dtype a cpu kernel holds a tensor of element type ``dtype`` in: float32 for
    every float type (16-bit ones are converted around the call), uint8 codes for the
    float8 types (issue 31: Numba has no float8), int8 / uint8 values for the 4-bit
    integers, else its own."""
    if is_float(dtype):
        return _F32
    if dtype in FLOAT8_TYPES or dtype == "ui4":
        return _U8
    if dtype == "i4":
        return np.dtype(np.int8)  # the value, sign-extended (ml_dtypes keeps a nibble)
    return np.dtype(numpy_dtype(dtype))


def _as(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if type(array) is np.ndarray and array.dtype == dtype and array.flags.c_contiguous:
        return array
    if dtype == _U8 and np.asarray(array).dtype.name.startswith("float8"):
        return np.ascontiguousarray(array).view(_U8)  # a float8 tensor: its codes
    return np.ascontiguousarray(array, dtype=dtype)


def _restore(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A kernel's output in its element type: float8 codes viewed as float8, 16-bit
    floats rounded from float32."""
    if dtype.name.startswith("float8"):
        return out.view(dtype)
    return out.astype(dtype)


def _as_f32(array: np.ndarray) -> np.ndarray:
    if type(array) is np.ndarray and array.dtype == _F32 and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=np.float32)
