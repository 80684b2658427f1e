"""Which CUDA stream a call runs on: the caller's, named without ambiguity.

Everything a call on the ``cuda`` target launches (Numba kernels, direct
``cuLaunchKernel`` calls, copies, and the PyTorch ops of fallback groups) is
enqueued on one stream, the caller's:

* torch tensors: torch's current stream on their device;
* cupy arrays: cupy's current stream;
* other device arrays (numba, ``__cuda_array_interface__``, DLPack): the
  legacy default stream, after the stream each array's interface names;
* numpy arrays: a stream of fusec's own, synchronised before returning;
* ``stream=`` given explicitly (a torch, cupy or numba stream, anything with
  ``__cuda_stream__``, or a raw handle): that stream.

The raw handle 0 is ambiguous. To torch and cupy it is the legacy default
stream (both issue it through the CUDA runtime built without per-thread
default streams); to cuda-bindings, and so to Numba's launches, it is the
per-thread default stream when ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1``.
Every handle is therefore normalised once: 0 becomes ``CU_STREAM_LEGACY`` (1)
or ``CU_STREAM_PER_THREAD`` (2), which mean the same to every API.

For the PyTorch ops of a fallback group the stream must be a torch stream
object. ``torch.cuda.ExternalStream(0)`` is NOT the default stream: PyTorch
treats a zero pointer as "no pointer" and hands out a new stream from its
pool, which does not wait for the caller's work (that was a data race). So the
legacy stream maps to ``torch.cuda.default_stream()`` and only real stream
pointers go through ``ExternalStream``. The per-thread default stream has no
torch equivalent: a fallback group on it is an error, never a silent race.
"""

from __future__ import annotations

import os
from typing import Any

from fusec.errors import FusecError

LEGACY = 1  # CU_STREAM_LEGACY
PER_THREAD = 2  # CU_STREAM_PER_THREAD


def bindings_zero() -> int:
    """What a raw 0 means to cuda-bindings (and so to Numba): its documented switch."""
    value = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0").strip()
    return PER_THREAD if value not in ("", "0") else LEGACY


def stream_ptr(stream: Any) -> int:
    """The raw ``CUstream`` value of a numba, torch, cupy or cuda.core stream (0 as given)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (numba, cuda.core)
        return int(stream.__cuda_stream__()[1])
    for attr in ("cuda_stream", "ptr"):  # torch, cupy
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    handle = getattr(stream, "handle", stream)  # an old numba Stream
    handle = getattr(handle, "value", handle)
    try:
        return int(handle) if handle is not None else 0
    except TypeError:  # the simulator's streams have no handle
        return 0


def normalised(raw: int, zero_means: int = LEGACY) -> int:
    """``raw`` with the ambiguous 0 replaced by what it means to its issuer."""
    return zero_means if raw == 0 else raw


def explicit_handle(stream: Any) -> int:
    """The normalised handle of a ``stream=`` argument.

    A numba stream's 0 means what it means to cuda-bindings; any other 0 (an
    int, torch's or cupy's null stream) the legacy default stream.
    """
    raw = stream_ptr(stream)
    numba_made = type(stream).__module__.split(".")[0] == "numba"
    return normalised(raw, bindings_zero() if numba_made else LEGACY)


class StreamRef:
    """A CUDA stream by its normalised raw handle.

    ``torch`` is the torch stream object when the caller gave one (or None);
    ``current`` says the handle is the caller's current torch stream, so torch
    work needs no stream switch. The numba Stream object is made only when
    needed (copies, the simulator), so a direct launch never touches numba.
    """

    __slots__ = ("ptr", "torch", "current", "_numba")

    def __init__(
        self, ptr: int, numba_stream: Any = None, torch_stream: Any = None, current: bool = False
    ) -> None:
        self.ptr = ptr
        self.torch = torch_stream
        self.current = current
        self._numba = numba_stream

    @property
    def numba(self) -> Any:
        if self._numba is None:
            from fusec.targets.cuda.env import numba_cuda, simulator_enabled

            cuda = numba_cuda()
            if simulator_enabled() or self.ptr == 0:
                self._numba = cuda.default_stream()
            elif self.ptr == LEGACY:
                self._numba = cuda.legacy_default_stream()
            elif self.ptr == PER_THREAD:
                self._numba = cuda.per_thread_default_stream()
            else:
                self._numba = _external(self.ptr)
        return self._numba

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)

    def synchronize(self) -> None:
        self.numba.synchronize()

    def torch_stream(self, torch: Any, device: Any = None) -> Any:
        """This stream as a torch stream object, for PyTorch's ops."""
        if self.torch is not None:
            return self.torch
        if self.ptr in (0, LEGACY):
            return torch.cuda.default_stream(device)
        if self.ptr == PER_THREAD:
            raise FusecError(
                "conv/matmul groups run through PyTorch, which cannot enqueue work on the "
                "per-thread default stream: call with stream=... naming another stream"
            )
        stream = _torch_streams.get((self.ptr, device))
        if stream is None:
            stream = torch.cuda.ExternalStream(self.ptr, device=device)
            _torch_streams[(self.ptr, device)] = stream
        return stream


_numba_streams: dict[int, Any] = {}
_torch_streams: dict[tuple[int, Any], Any] = {}
_refs: dict[int, StreamRef] = {}


def _external(ptr: int) -> Any:
    stream = _numba_streams.get(ptr)
    if stream is None:
        from fusec.targets.cuda.env import numba_cuda

        stream = _numba_streams[ptr] = numba_cuda().external_stream(ptr)
    return stream


def stream_ref(ptr: int) -> StreamRef:
    """The (shared) reference of a normalised handle."""
    ref = _refs.get(ptr)
    if ref is None:
        ref = _refs[ptr] = StreamRef(ptr)
    return ref


_current_torch_refs: dict[int, StreamRef] = {}


def current_torch_ref(ptr: int) -> StreamRef:
    """The reference of torch's current stream, whose raw handle is ``ptr`` (0: legacy)."""
    ref = _current_torch_refs.get(ptr)
    if ref is None:
        ref = _current_torch_refs[ptr] = StreamRef(normalised(ptr), current=True)
    return ref


def wait_for(stream: StreamRef, producer: int) -> None:
    """Order ``stream`` after the work queued so far on the raw stream ``producer``."""
    if producer in (0, stream.ptr):
        return
    from cuda.bindings import driver as drv

    err, event = drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    if int(err) != 0:
        raise FusecError(f"CUDA driver error {err} creating an event")
    try:
        drv.cuEventRecord(event, drv.CUstream(producer))
        drv.cuStreamWaitEvent(drv.CUstream(stream.ptr), event, 0)
    finally:
        drv.cuEventDestroy(event)  # released once the wait is done: safe to destroy now
