"""Host side of the linked kernels: load a cubin, encode tensor maps, launch on a stream.

The kernel layer under the GEMM (``gemm.host.GemmKernel``), conv (``conv.host``) and
attention launchers; it was the GEMM's own host module, which the others borrowed from.

A call on buffers seen before costs one dictionary lookup and one
``cuLaunchKernel`` on the caller's stream: nothing is encoded, allocated,
copied or synchronised. What a launch needs is prepared once per (stream,
operand addresses, output address) and kept (``Prepared``):

* Tensor maps (TMA descriptors) live in device memory, 128 bytes each, and the
  kernel gets their addresses (Numba kernels cannot take ``__grid_constant__``
  parameters). A map depends only on (address, type, dims, strides, box), so
  ``_MapCache`` keeps one per key. A new map is written into a pinned host
  slot and copied to its device slot with ``cuMemcpyHtoDAsync`` on the stream
  of the kernel that first reads it: stream-ordered, never a synchronous copy.
  Inside a CUDA graph capture the copy is made at once on a stream of the slab's
  own and waited for (the map is written before the graph exists): a copy queued
  on the capturing stream would be a node of the graph, made again at every replay.
  Another stream that later reads the map waits for that copy through an event
  (only if it has not completed yet). Slots are written once; when a slab of
  slots is full a new one is started and the old one is freed only once no
  kernel can read it: after events recorded on the default streams that used it
  have completed (no device synchronisation), or after a context synchronisation
  when one of the caller's own streams used it (that stream may be destroyed by
  then; ``_MapCache._retire``). No slot is rewritten under a running kernel.
* The kernel's parameter block (ctypes) is built once per key.

TMA needs every row stride to be a multiple of 16 bytes. An operand whose
contiguous dimension is not a multiple of 8 elements (K = 77, say) is first
copied to a buffer with a padded pitch by ``cuMemcpy2DAsync`` on the caller's
stream, before the kernel on the same stream (its data may change between
calls, so that copy is made on every call); the tensor map keeps the true
size, so TMA zero-fills the padding and no kernel clears it. The padded buffer
is allocated once per (stream, operand, size). Every other operand is read in
place.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass, field
from typing import Any

from fusec.errors import FusecError
from fusec.targets.cuda.streams import LEGACY, PER_THREAD

_MAP_BYTES = 128
_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING: no implicit order with the legacy stream
_SLOTS = 512
_DEFAULT_STREAMS = frozenset({LEGACY, PER_THREAD})  # live as long as the context
_PREPARED_LIMIT = 256  # launch parameter blocks kept per kernel (a new stream or buffer adds one)


def driver() -> Any:
    """``cuda.bindings.driver`` (tests replace it with a recording fake)."""
    from cuda.bindings import driver as drv

    return drv


def make_context_current() -> None:
    """Make the primary context (Numba's) current in this thread (tests replace it)."""
    from fusec.targets.cuda.env import numba_cuda

    numba_cuda().current_context()


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


# ------------------------------------------------------------------ tensor maps


@dataclass
class _Slab:
    """Device slots for tensor maps and their pinned host mirror (the copies' source)."""

    device: int
    host: int
    used: int = 0
    streams: set[int] = field(default_factory=set)
    pinned: bool = False  # a CUDA graph reads its slots: never freed
    upload: Any = None  # the stream of its uploads during graph captures (made on demand)


@dataclass
class _Slot:
    address: int
    stream: int  # the stream its upload was queued on
    event: Any  # recorded after the upload; None once known complete (or never needed)


class _MapCache:
    """Tensor maps in device memory, keyed by everything they encode (module docstring)."""

    def __init__(self) -> None:
        self.slots: dict[tuple, _Slot] = {}
        self.slab: _Slab | None = None
        self.retired: list[tuple[_Slab, list[Any]]] = []
        self.generation = 0  # bumped when slots are dropped: prepared launches are rebuilt
        self.lock = threading.Lock()

    def get(self, key: tuple, encode, stream: int) -> int:
        """Device address of the map ``key``, usable by work queued next on ``stream``."""
        with self.lock:
            drv = driver()
            slot = self.slots.get(key)
            if slot is None:
                slot = self._upload(drv, key, encode(), stream)
            elif slot.event is not None and slot.stream != stream:
                self._order_after_upload(drv, slot, stream)
            if self.slab is not None:
                self.slab.streams.add(stream)
            return slot.address

    def _upload(self, drv: Any, key: tuple, tensor_map: Any, stream: int) -> _Slot:
        handle = drv.CUstream(stream)
        capturing = _capturing(drv, handle)
        if not capturing:  # cuMemFree synchronises: never inside a graph capture
            self._free_finished(drv)
        if self.slab is None or self.slab.used == _SLOTS:
            self._new_slab(drv, capturing)
        slab = self.slab
        assert slab is not None
        offset = _MAP_BYTES * slab.used
        slab.used += 1
        slab.streams.add(stream)
        words = (ctypes.c_uint64 * 16)(*[int(v) for v in tensor_map.opaque])
        ctypes.memmove(slab.host + offset, ctypes.addressof(words), _MAP_BYTES)
        target = drv.CUdeviceptr(slab.device + offset)
        if capturing:
            self._upload_now(drv, slab, target, offset)
            event = None
        else:
            _check(drv.cuMemcpyHtoDAsync(target, slab.host + offset, _MAP_BYTES, handle))
            event = _check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING))
            _check(drv.cuEventRecord(event, handle))
        slot = _Slot(slab.device + offset, stream, event)
        self.slots[key] = slot
        return slot

    @staticmethod
    def _upload_now(drv: Any, slab: _Slab, target: Any, offset: int) -> None:
        """Write a map during a graph capture, before the graph exists: copied on the
        slab's own non-blocking stream (not captured) and waited for. Legal inside the
        capture because ``DriverCapture`` records in relaxed mode (a stream other than the
        capturing one may be synchronised) on a non-blocking stream (nothing on the
        legacy stream waits for it).

        Queued on the capturing stream, the copy would be a node of the graph, made again
        at every replay: on the H200 the capture's buffers were not all the rehearsal's, so
        28-38 maps missed the cache while recording EfficientNet-B0 at batch 1 and a
        4-layer Llama block at batch 8, and each replay made that many 128-byte copies
        before its kernels (0.626 -> 0.720 ms and 0.82 -> 0.95 ms a call, the same program
        otherwise). A slot written at once also stays right after a capture that failed
        (a map uploaded as a copy node never was: reading one gave
        ``CUDA_ERROR_ILLEGAL_INSTRUCTION``, EfficientNet-B0 batch 32)."""
        if slab.upload is None:
            slab.upload = _check(drv.cuStreamCreate(_NON_BLOCKING))
        _check(drv.cuMemcpyHtoDAsync(target, slab.host + offset, _MAP_BYTES, slab.upload))
        _check(drv.cuStreamSynchronize(slab.upload))

    def _order_after_upload(self, drv: Any, slot: _Slot, stream: int) -> None:
        """Make ``stream`` wait for the map's upload if it may still be in flight."""
        (err,) = drv.cuEventQuery(slot.event)
        if int(err) == 0:
            _check(drv.cuEventDestroy(slot.event))
            slot.event = None
        else:
            _check(drv.cuStreamWaitEvent(drv.CUstream(stream), slot.event, 0))

    def _new_slab(self, drv: Any, capturing: bool = False) -> None:
        if self.slab is not None and capturing:
            # inside a graph capture no event may be recorded on the streams that used the
            # slab (on the legacy stream: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, seen on the
            # H200 with BERT's 219 maps a call), and the graph may read its slots: pinned
            self.slab.pinned = True
            self.retired.append((self.slab, []))
            self._drop_slots(drv)
        elif self.slab is not None:
            self._retire(drv, self.slab)
        size = _MAP_BYTES * _SLOTS
        device = int(_check(drv.cuMemAlloc(size)))
        host = int(_check(drv.cuMemHostAlloc(size, 0)))
        self.slab = _Slab(device, host)

    def _retire(self, drv: Any, slab: _Slab) -> None:
        """Retire a full slab (outside a capture): freed once nothing queued can read it.

        On the default streams, which live as long as the context, events recorded now
        say when every stream that used the slab got past its kernels (no synchronisation).
        Any other stream is the caller's and may be gone by now (a Numba or CuPy stream
        destroyed after its work, as ``fusec tune``'s were: recording on its stale handle
        failed with ``CUDA_ERROR_CONTEXT_IS_DESTROYED`` on the H200, and a handle reused
        by a new stream would not order after the old one's work), so a slab that such a
        stream used is freed after a context synchronisation: one every ``_SLOTS`` new
        maps on that path, none on the default streams'."""
        if slab.streams <= _DEFAULT_STREAMS:
            events = []
            for stream in slab.streams:
                event = _check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING))
                _check(drv.cuEventRecord(event, drv.CUstream(stream)))
                events.append(event)
        else:
            _check(drv.cuCtxSynchronize())
            events = []  # everything queued so far has finished: freed below
        self.retired.append((slab, events))
        self._drop_slots(drv)
        if not events:
            self._free_finished(drv)

    def _drop_slots(self, drv: Any) -> None:
        """Forget every slot of the retired slab (prepared launches are rebuilt)."""
        for slot in self.slots.values():
            if slot.event is not None:
                _check(drv.cuEventDestroy(slot.event))
        self.slots.clear()
        self.generation += 1

    def _free_finished(self, drv: Any) -> None:
        keep = []
        for slab, events in self.retired:
            if all(int(drv.cuEventQuery(e)[0]) == 0 for e in events):
                for event in events:
                    _check(drv.cuEventDestroy(event))
                if not slab.pinned:  # a pinned slab's memory is a graph's for good
                    _check(drv.cuMemFree(drv.CUdeviceptr(slab.device)))
                    _check(drv.cuMemFreeHost(slab.host))
                    if slab.upload is not None:
                        _check(drv.cuStreamDestroy(slab.upload))
            else:
                keep.append((slab, events))
        self.retired = keep


def _capturing(drv: Any, handle: Any) -> bool:
    status = _check(drv.cuStreamIsCapturing(handle))
    return int(status) != int(drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


_maps = _MapCache()


def pin_live_tensor_maps() -> None:
    """Keep every slab of tensor maps alive now for the life of the process.

    Called after a CUDA graph is recorded: its kernel nodes hold the device addresses
    of the maps they read, so their slabs may never be freed when they are retired.
    Every map a graph can reference lives in a slab alive at the end of its capture
    (retiring a slab drops its slots), so this pins exactly those slabs.
    """
    with _maps.lock:
        if _maps.slab is not None:
            _maps.slab.pinned = True
        for slab, _events in _maps.retired:
            slab.pinned = True


def maps_generation() -> int:
    """Changes whenever cached tensor-map addresses become invalid (prepared launches too)."""
    return _maps.generation


#: TMA's element type of each operand type: float8 codes move as bytes (issue 31)
_TMA_TYPES = {
    "f16": "FLOAT16",
    "bf16": "BFLOAT16",
    "f32": "FLOAT32",
    "f8E4M3FN": "UINT8",
    "f8E5M2": "UINT8",
}


def _encode(dtype: str, ptr: int, cols: int, rows: int, batch: int, pitch: int, box: tuple):
    drv = driver()
    name = _TMA_TYPES[dtype]
    kind = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}")
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


def tensor_map(dtype: str, op: Operand, pitch: int, box: tuple, stream: int = 0) -> int:
    """Device address of the tensor map of ``op`` (row pitch ``pitch`` bytes) with ``box``,
    readable by kernels queued on ``stream`` from now on."""
    key = (dtype, op.ptr, op.cols, op.rows, op.batch, pitch, box)
    encode = lambda: _encode(dtype, op.ptr, op.cols, op.rows, op.batch, pitch, box)  # noqa: E731
    return _maps.get(key, encode, stream)


# ----------------------------------------------------------------------- launch


@dataclass
class Prepared:
    """Everything one launch needs, built once per (stream, addresses, sizes)."""

    generation: int
    stream: Any  # CUstream
    grid: int
    params: int  # address of the void* array cuLaunchKernel reads
    keep: tuple  # the ctypes objects behind ``params``
    copies: tuple  # padded-pitch copies to queue before the kernel (CUDA_MEMCPY2D)


class LoadedKernel:
    """A loaded cubin of one kernel (the GEMM or one of its auxiliary kernels)."""

    def __init__(self, cubin: bytes, smem_bytes: int = 0) -> None:
        make_context_current()
        drv = driver()
        self.drv = drv
        self.module = _check(drv.cuModuleLoadData(cubin))
        count = int(_check(drv.cuModuleGetFunctionCount(self.module)))
        functions = _check(drv.cuModuleEnumerateFunctions(count, self.module))
        functions = functions if isinstance(functions, (list, tuple)) else [functions]
        if len(functions) != 1:
            raise FusecError(f"a fusec cubin holds {len(functions)} kernels, expected 1")
        self.function = functions[0]
        self.smem_bytes = smem_bytes
        if smem_bytes:
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(drv.cuFuncSetAttribute(self.function, attr, smem_bytes))

    def launch_raw(self, grid: int, threads: int, stream: Any, params: int) -> None:
        """Queue one launch on ``stream`` (a CUstream) with the parameter block ``params``."""
        (err,) = self.drv.cuLaunchKernel(
            self.function, grid, 1, 1, threads, 1, 1, self.smem_bytes, stream, params, 0
        )
        if int(err) != 0:
            raise FusecError(f"CUDA driver error {int(err)} ({err}) launching a fusec kernel")


def allocate(sizes: dict[str, int]) -> dict[str, int]:
    """Device buffers of ``sizes`` bytes (16 at least), by name: a launcher's scratch for one
    stream (kept for the launcher's life; the stream orders the calls that share them)."""
    drv = driver()
    return {name: int(_check(drv.cuMemAlloc(max(size, 16)))) for name, size in sizes.items()}


def parameter_block(u64s: Any, i32s: Any) -> tuple[int, tuple]:
    """(address of the void* array cuLaunchKernel reads, the ctypes objects to keep alive)."""
    values = [ctypes.c_uint64(v) for v in u64s] + [ctypes.c_int32(v) for v in i32s]
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    return ctypes.addressof(pointers), (values, pointers)


def encode_tiled(
    dtype: str, ptr: int, dims: tuple, strides: tuple, box: tuple, steps: tuple | None = None
):
    """A 128-byte-swizzled tiled tensor map; ``dims``/``box`` innermost first, ``strides`` in
    bytes for dims 1.. (TMA needs them multiples of 16); ``steps`` the box's traversal
    strides (default 1: every element)."""
    from cuda.bindings import driver as drv

    kind = {
        "f16": drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        "bf16": drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    }[dtype]
    return _check(
        drv.cuTensorMapEncodeTiled(
            kind,
            drv.cuuint32_t(len(dims)),
            ptr,
            [drv.cuuint64_t(d) for d in dims],
            [drv.cuuint64_t(s) for s in strides],
            [drv.cuuint32_t(b) for b in box],
            [drv.cuuint32_t(t) for t in steps or (1,) * len(dims)],
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    )


def tensor_map_nd(
    dtype: str,
    ptr: int,
    dims: tuple,
    strides: tuple,
    box: tuple,
    stream: int,
    steps: tuple | None = None,
) -> int:
    """Device address of the (cached) tensor map, usable by work queued next on ``stream``
    (a new map is uploaded stream-ordered, ``_MapCache``)."""
    key = ("nd", dtype, ptr, dims, strides, box, steps)
    encode = functools.partial(encode_tiled, dtype, ptr, dims, strides, box, steps)
    return _maps.get(key, encode, stream)


class LinkedKernel:
    """A loaded cubin of a linked kernel (the conv's, attention's, the relayout copy's): its
    functions by name (``extern "C"``) and the Numba kernel."""

    def __init__(self, cubin: bytes, smem_bytes: int, named: tuple[str, ...] = ()) -> None:
        from cuda.bindings import driver as drv

        from fusec.targets.cuda.env import numba_cuda

        numba_cuda().current_context()  # the primary context (Numba's) is current
        self.drv = drv
        self.module = _check(drv.cuModuleLoadData(cubin))
        self.named = {
            name: _check(drv.cuModuleGetFunction(self.module, name.encode())) for name in named
        }
        count = int(_check(drv.cuModuleGetFunctionCount(self.module)))
        functions = _check(drv.cuModuleEnumerateFunctions(count, self.module))
        functions = functions if isinstance(functions, (list, tuple)) else [functions]
        known = {int(f) for f in self.named.values()}
        rest = [f for f in functions if int(f) not in known]
        if len(rest) != 1:
            raise FusecError(f"cubin holds {len(rest)} unnamed kernels, expected the Numba one")
        self.function = rest[0]
        self.smem_bytes = smem_bytes
        if smem_bytes > 48 * 1024:
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(drv.cuFuncSetAttribute(self.function, attr, smem_bytes))
        self.lock = threading.Lock()
        self.scratch: dict[tuple, int] = {}
        self.streams: dict[int, Any] = {}

    def stream(self, stream: int) -> Any:
        handle = self.streams.get(stream)
        if handle is None:
            handle = self.streams[stream] = self.drv.CUstream(stream)
        return handle

    def buffer(self, key: tuple, size: int) -> int:
        """A device scratch buffer kept under ``key`` (callers put the stream in it)."""
        ptr = self.scratch.get(key)
        if ptr is None:
            ptr = self.scratch[key] = int(_check(self.drv.cuMemAlloc(max(size, 16))))
        return ptr

    def launch(self, function: Any, grid, threads: int, smem: int, handle: Any, args) -> None:
        """``function<<<grid, threads, smem, handle>>>(args)``; ``grid`` an int or (x, y, z),
        ``args`` (ctypes type, value) pairs."""
        gx, gy, gz = (grid, 1, 1) if isinstance(grid, int) else grid
        values = [kind(v) for kind, v in args]
        pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        _check(
            self.drv.cuLaunchKernel(
                function, gx, gy, gz, threads, 1, 1, smem, handle, ctypes.addressof(pointers), 0
            )
        )
