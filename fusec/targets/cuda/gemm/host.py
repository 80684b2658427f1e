"""Host side of the Hopper GEMM: load the cubin, encode tensor maps, launch on a stream.

Tensor maps (TMA descriptors) live in device memory, 128 bytes each, and the
kernel gets their addresses (Numba kernels cannot take ``__grid_constant__``
parameters). A map depends only on (address, type, dims, strides, box), so
maps are cached under that key: a call on buffers seen before encodes and
uploads nothing. The upload is a synchronous ``cuMemcpyHtoD`` (done once per
new buffer); when the slab of map slots is full, the device is synchronised
before the slots are reused, so no kernel in flight reads a rewritten map.

TMA needs every row stride to be a multiple of 16 bytes. An operand whose
contiguous dimension is not a multiple of 8 elements (K = 77, say) is first
copied to a buffer with a padded pitch by ``cuMemcpy2DAsync`` on the caller's
stream, before the kernel on the same stream; the tensor map
keeps the true size, so TMA zero-fills the padding and no kernel clears it.
The copy costs one read and one write of that operand; the padded buffer is
kept per (stream, operand, size) and reused by later calls. Every other
operand is read in place.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

from fusec.errors import FusecError
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import tile_count

_MAP_BYTES = 128
_SLOTS = 1024


def _check(result: Any) -> Any:
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise FusecError(f"CUDA driver error {int(err)} ({err}) in the GEMM host code")
    return values[0] if len(values) == 1 else tuple(values) if values else None


@dataclass(frozen=True)
class Operand:
    """An A or B operand as stored: ``batch`` x ``rows`` x ``cols``, row-major, contiguous
    (``batch`` is 1 for an operand broadcast over the batch)."""

    ptr: int
    rows: int
    cols: int
    batch: int = 1


class _MapCache:
    """Tensor maps in device memory, keyed by everything they encode."""

    def __init__(self) -> None:
        self.slots: dict[tuple, int] = {}
        self.slab = 0
        self.stream: Any = None
        self.lock = threading.Lock()

    def get(self, key: tuple, encode) -> int:
        with self.lock:
            address = self.slots.get(key)
            if address is not None:
                return address
            from cuda.bindings import driver as drv

            if not self.slab:
                self.slab = int(_check(drv.cuMemAlloc(_MAP_BYTES * _SLOTS)))
            if len(self.slots) == _SLOTS:
                _check(drv.cuCtxSynchronize())  # no kernel may still read a slot we rewrite
                self.slots.clear()
            address = self.slab + _MAP_BYTES * len(self.slots)
            words = (ctypes.c_uint64 * 16)(*[int(v) for v in encode().opaque])
            # through a private non-blocking stream: a synchronous copy on the legacy stream
            # is illegal while a (blocking) stream is being captured into a CUDA graph
            if self.stream is None:
                flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
                self.stream = _check(drv.cuStreamCreate(flags))
            dst = drv.CUdeviceptr(address)
            _check(drv.cuMemcpyHtoDAsync(dst, ctypes.addressof(words), _MAP_BYTES, self.stream))
            _check(drv.cuStreamSynchronize(self.stream))
            self.slots[key] = address
            return address


_maps = _MapCache()


def _encode(dtype: str, ptr: int, cols: int, rows: int, batch: int, pitch: int, box: tuple):
    from cuda.bindings import driver as drv

    kind = {
        "f16": drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        "bf16": drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    }[dtype]
    dims = [drv.cuuint64_t(cols), drv.cuuint64_t(rows), drv.cuuint64_t(batch)]
    strides = [drv.cuuint64_t(pitch), drv.cuuint64_t(pitch * rows)]
    boxes = [drv.cuuint32_t(b) for b in box]
    ones = [drv.cuuint32_t(1)] * 3
    return _check(
        drv.cuTensorMapEncodeTiled(
            kind,
            drv.cuuint32_t(3),
            ptr,
            dims,
            strides,
            boxes,
            ones,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    )


def tensor_map(dtype: str, op: Operand, pitch: int, box: tuple) -> int:
    """Device address of the tensor map of ``op`` (row pitch ``pitch`` bytes) with ``box``."""
    key = (dtype, op.ptr, op.cols, op.rows, op.batch, pitch, box)
    return _maps.get(key, lambda: _encode(dtype, op.ptr, op.cols, op.rows, op.batch, pitch, box))


class GemmKernel:
    """A loaded GEMM cubin: launch it with ``__call__``."""

    def __init__(self, spec: cpp.GemmSpec, cubin: bytes) -> None:
        from cuda.bindings import driver as drv

        from fusec.targets.cuda.env import numba_cuda

        numba_cuda().current_context()  # make the primary context current (Numba's)
        self.spec = spec
        self.drv = drv
        self.module = _check(drv.cuModuleLoadData(cubin))
        count = int(_check(drv.cuModuleGetFunctionCount(self.module)))
        functions = _check(drv.cuModuleEnumerateFunctions(count, self.module))
        functions = functions if isinstance(functions, (list, tuple)) else [functions]
        if len(functions) != 1:
            raise FusecError(f"GEMM cubin holds {len(functions)} kernels, expected 1")
        self.function = functions[0]
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(drv.cuFuncSetAttribute(self.function, attr, spec.config.smem_bytes))
        self.lock = threading.Lock()
        #: padded copies of operands TMA cannot read in place, per (stream, operand, bytes):
        #: reused across calls, ordered by the stream (copy, then the kernel that reads it)
        self.scratch: dict[tuple, int] = {}

    def __call__(
        self,
        a: Operand,
        b: Operand,
        out: int,
        extras: tuple[int, ...],
        m: int,
        n: int,
        k: int,
        batches: int,
        stream: int = 0,
        sms: int = 132,
    ) -> None:
        """``out[z] = epilogue(A[z] @ B[z])`` for z < batches, queued on ``stream``."""
        spec, config, drv = self.spec, self.spec.config, self.drv
        if m <= 0 or n <= 0 or batches <= 0:
            return
        if k <= 0:
            raise FusecError("the GEMM kernel needs K >= 1")
        if len(extras) != len(spec.epilogue.extras):
            raise FusecError(
                f"epilogue takes {len(spec.epilogue.extras)} inputs, got {len(extras)}"
            )
        handle = drv.CUstream(stream)
        a_box = (64, config.bm, 1) if spec.a_major == "k" else (64, 64, 1)
        b_box = (64, config.bn, 1) if spec.b_major == "k" else (64, 64, 1)
        with self.lock:
            a, a_pitch = self._pitched(a, "a", stream, handle)
            b, b_pitch = self._pitched(b, "b", stream, handle)
            map_a = tensor_map(spec.dtype, a, a_pitch, a_box)
            map_b = tensor_map(spec.dtype, b, b_pitch, b_box)
            tiles = tile_count(config, m, n, batches)
            grid = min(tiles, sms)
            values: list[Any] = [ctypes.c_uint64(v) for v in (map_a, map_b, out, *extras)]
            values += [ctypes.c_int32(v) for v in (m, n, k, batches)]
            pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            _check(
                drv.cuLaunchKernel(
                    self.function,
                    grid,
                    1,
                    1,
                    config.threads,
                    1,
                    1,
                    config.smem_bytes,
                    handle,
                    ctypes.addressof(pointers),
                    0,
                )
            )

    def _pitched(self, op: Operand, role: str, stream: int, handle: Any) -> tuple[Operand, int]:
        """``op`` and its row pitch in bytes; a padded copy (on ``stream``) when the pitch is
        not a multiple of 16 bytes or the base is not 16-byte aligned (TMA's rules)."""
        drv = self.drv
        pitch = op.cols * 2
        if pitch % 16 == 0 and op.ptr % 16 == 0:
            return op, pitch
        padded = -(-pitch // 16) * 16
        rows = op.rows * op.batch
        key = (stream, role, padded * rows)
        ptr = self.scratch.get(key)
        if ptr is None:
            ptr = self.scratch[key] = int(_check(drv.cuMemAlloc(padded * rows)))
        copy = drv.CUDA_MEMCPY2D()
        copy.srcMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.srcDevice = drv.CUdeviceptr(op.ptr)
        copy.srcPitch = pitch
        copy.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.dstDevice = drv.CUdeviceptr(ptr)
        copy.dstPitch = padded
        copy.WidthInBytes = pitch
        copy.Height = rows
        _check(drv.cuMemcpy2DAsync(copy, handle))
        return Operand(ptr, op.rows, op.cols, op.batch), padded
