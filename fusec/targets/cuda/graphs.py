"""Whole-program CUDA graphs: a program called with torch tensors records its launches
once and replays them as one graph launch per call.

At batch 1 a compiled model is launch-bound: tens to hundreds of kernels of a few
microseconds each, every one of them a Python call and a ``cuLaunchKernel``. A CUDA
graph replays all of them with one launch (what ``torch.compile(mode="reduce-overhead")``
does). ``ProgramGraphs`` does it behind the ordinary call, keyed by (device, stream):

1. the first call of a key runs launch by launch (``WARMUP_CALLS``): kernels load,
   tensor maps and scratch buffers are made, none of which should happen in a capture;
2. the next call records the program on *static* inputs (device copies of the
   arguments) with the driver's stream capture (``DriverCapture``, relaxed mode, as
   ``CudaProgram.capture`` does); every buffer the recorded launches touch is kept
   alive with the graph, so the caching allocator never hands their memory out again;
3. every later call copies its arguments into the static inputs (on the call's stream),
   replays the graph on the call's stream and returns copies of the static results, so
   a result the caller keeps is never overwritten by the next call (unlike a bare
   graph's outputs).

Each key has its own graph and buffers, so calls on two streams never share memory; one
lock per graph makes the copy-in, replay and copy-out of a call one unit for threads
sharing a stream. A key whose capture fails runs launch by launch from then on, and
says why once (``RuntimeWarning``). At most ``LIMIT`` keys are recorded per program.

Not graphed: calls with anything but torch tensors (numpy callers pay host copies that
dwarf the launches; cupy and numba callers keep the direct path), and programs with a
PyTorch fallback group: its ops allocate and free temporaries inside PyTorch, which only
``torch.cuda.graph``'s private pool makes safe to record, and a failed capture under
``torch.cuda.graph`` left PyTorch's random number generator unusable in the process
("Offset increment outside graph capture", seen on the H200 with EfficientNet-B0).
``FUSEC_CUDA_GRAPHS=0`` (read at each call) turns graphs off, and
``compiled.program.graphs = None`` turns them off for one compiled module.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fusec.environ import getenv

#: Calls of a key that run launch by launch before its graph is recorded.
WARMUP_CALLS = 1
#: Graphs (device, stream pairs) recorded per program at most.
LIMIT = 4

#: ``run(args, adapter, stream_ref, fns, poison) -> results``: one call, launch by launch.
Run = Callable[[Sequence[Any], Any, Any, list, bool], tuple]


def graphs_enabled() -> bool:
    """False when ``FUSEC_CUDA_GRAPHS`` is set to 0 (or off/false/no)."""
    return getenv("FUSEC_CUDA_GRAPHS", "1").strip().lower() not in ("0", "off", "false", "no")


class DriverCapture:
    """Records a call with the driver's stream capture and launches the graph.

    ``keeping(list)`` is the program's switch that keeps every buffer of the call alive
    in that list (``CudaProgram._keep``): intermediates must outlive the capture.
    """

    def __init__(self, keeping: Callable[[list | None], None]) -> None:
        self.keeping = keeping

    def record(self, run: Run, inputs: list, adapter: Any, fns: list) -> tuple[Any, tuple, list]:
        """(graph, outputs, buffers kept alive) of one call of ``run`` on ``inputs``."""
        from cuda.bindings import driver as drv

        from fusec.targets.cuda.adapters import _check
        from fusec.targets.cuda.dependent import instantiate
        from fusec.targets.cuda.env import numba_cuda
        from fusec.targets.cuda.streams import StreamRef, stream_ptr
        from fusec.targets.cuda.tensormaps import pin_live_tensor_maps

        recorder = capture_stream(numba_cuda())
        ref = StreamRef(stream_ptr(recorder), recorder, current=True)
        self._rehearse(run, inputs, adapter, ref, fns)
        handle = drv.CUstream(stream_ptr(recorder))
        _check(
            drv.cuStreamBeginCapture(handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
        )
        kept: list = list(inputs)
        self.keeping(kept)
        try:
            # torch allocations stay on torch's current stream, outside the capture: the
            # buffers are kept alive, and the kernels are what is recorded
            outputs = run(inputs, adapter, ref, fns, False)
        except BaseException as err:
            drv.cuStreamEndCapture(handle)
            raise CaptureFailed(f"{type(err).__name__}: {err} (at {_innermost(err)})") from err
        finally:
            self.keeping(None)
        graph = _check(drv.cuStreamEndCapture(handle))
        executable = instantiate(graph)  # (programmatic edges between the kernels)
        pin_live_tensor_maps()  # the graph reads tensor maps from their slots for good
        return (graph, executable), tuple(outputs), kept

    def _rehearse(self, run: Run, inputs: list, adapter: Any, ref: Any, fns: list) -> None:
        """One call with every buffer kept alive to its end, as the capture keeps them, then
        all of them freed: PyTorch's allocator grows its cache to the capture's footprint
        here, so that the capture allocates from the cache. A ``cudaMalloc`` inside the
        capture can synchronise the legacy stream with the capturing one
        (``cudaErrorStreamCaptureImplicit`` on the H200 at EfficientNet-B0 batch 32: its
        kept intermediates outgrew the cache of the launch-by-launch calls).

        The capture stream is non-blocking: nothing orders it after the copies into the
        static inputs (queued on torch's stream), so the device is synchronised first (once
        per recorded key), and the rehearsal reads this call's data (token ids included)."""
        adapter.torch.cuda.synchronize(adapter.device)
        rehearsal: list = []
        self.keeping(rehearsal)
        try:
            run(inputs, adapter, ref, fns, False)
        finally:
            self.keeping(None)
        adapter.torch.cuda.synchronize(adapter.device)  # before the buffers go back
        rehearsal.clear()

    @staticmethod
    def launch(graph: Any, stream_ptr: int) -> None:
        from cuda.bindings import driver as drv

        from fusec.targets.cuda.adapters import _check

        _check(drv.cuGraphLaunch(graph[1], drv.CUstream(stream_ptr)))


#: one capture stream per (thread, device), never destroyed: the tensor-map cache records
#: events on every stream that uploaded maps when it retires a slab
#: (``tensormaps._MapCache``), and an event recorded on a destroyed stream's handle
#: crashed the process (SIGSEGV in ``cuEventRecord`` on the H200, a capture stream of
#: an earlier call collected by Numba). Captures are rare: a few streams per process.
_CAPTURE_STREAMS: dict[tuple[int, int], Any] = {}


def _nonblocking_stream(cuda: Any) -> Any:
    """A Numba stream over a new driver stream made with ``CU_STREAM_NON_BLOCKING``."""
    from cuda.bindings import driver as drv

    from fusec.targets.cuda.adapters import _check

    handle = _check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING))
    return cuda.external_stream(int(handle))


def capture_stream(cuda: Any) -> Any:
    """This thread's capture stream on the current device (created once, kept), a Numba
    stream over a driver stream made with ``CU_STREAM_NON_BLOCKING``. A blocking stream
    that captures fails any work that synchronises with the legacy stream: PyTorch's
    allocator growing its pool (``cudaMalloc``) for an output during the capture failed
    with "operation would make the legacy stream depend on a capturing blocking stream"
    (H200, a LayerNorm kernel and the GEMM reading its output, ``CudaGraph``)."""
    key = (threading.get_ident(), int(cuda.get_current_device().id))
    stream = _CAPTURE_STREAMS.get(key)
    if stream is None:
        stream = _CAPTURE_STREAMS[key] = _nonblocking_stream(cuda)
    return stream


class CaptureFailed(RuntimeError):
    """A call could not be recorded; the message names the innermost frame that failed."""


def _innermost(err: BaseException) -> str:
    """``file:line (function)`` of the innermost fusec frame of ``err``'s traceback (the
    call that failed may be a library's, so the place in fusec that made it is named)."""
    import os
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if f"{os.sep}fusec{os.sep}" in f.filename] or frames
    if not ours:
        return "unknown"
    last = ours[-1]
    return f"{last.filename}:{last.lineno} ({last.name})"


@dataclass
class Recorded:
    """One key's graph: its static inputs and results, every buffer it touches, and the
    lock of its calls."""

    graph: Any
    inputs: list[Any]
    outputs: tuple
    kept: list[Any]
    lock: threading.Lock = field(default_factory=threading.Lock)
    replays: int = 0


@dataclass
class ProgramGraphs:
    """The graphs of one program, by (device index, stream handle)."""

    run: Run
    specs: Sequence[Any]  # the program's argument TensorSpecs
    capture: Any  # DriverCapture, or a stand-in with its record and launch
    warmup_calls: int = WARMUP_CALLS
    limit: int = LIMIT
    calls: dict[tuple[int, int], int] = field(default_factory=dict)
    recorded: dict[tuple[int, int], Recorded] = field(default_factory=dict)
    failed: dict[tuple[int, int], str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, args: Sequence[Any], adapter: Any, stream_ref: Any, fns: list) -> tuple:
        """One call of torch tensors on torch's current stream (the caller made
        ``stream_ref`` current): replayed, recorded, or run launch by launch."""
        key = (int(adapter.device.index or 0), int(stream_ref.ptr))
        recorded = self.recorded.get(key)
        if recorded is not None and self._fits(args, adapter):
            return self._replay(recorded, args, stream_ref.ptr)
        if recorded is None and self._should_record(key) and self._fits(args, adapter):
            recorded = self._record(key, args, adapter, fns)
            if recorded is not None:
                return self._replay(recorded, args, stream_ref.ptr)
        return self.run(args, adapter, stream_ref, fns, False)

    def _should_record(self, key: tuple[int, int]) -> bool:
        with self.lock:
            if key in self.failed or len(self.recorded) >= self.limit:
                return False
            seen = self.calls.get(key, 0)
            self.calls[key] = seen + 1
            return seen >= self.warmup_calls

    def _fits(self, args: Sequence[Any], adapter: Any) -> bool:
        """Arguments the graph can take: the program's shapes and types, on its device
        (anything else runs launch by launch, which reports the mismatch)."""
        dtypes = adapter.torch_dtypes
        for arg, spec in zip(args, self.specs, strict=True):
            if arg.shape != spec.shape or arg.dtype != dtypes[spec.dtype]:
                return False
            if arg.device != adapter.device:
                return False
        return True

    def _record(
        self, key: tuple[int, int], args: Sequence[Any], adapter: Any, fns: list
    ) -> Recorded | None:
        torch = adapter.torch
        inputs = [torch.empty(a.shape, dtype=a.dtype, device=adapter.device) for a in args]
        for static, arg in zip(inputs, args, strict=True):
            static.copy_(arg)  # the capture's rehearsal runs on this call's data (token ids)
        try:
            graph, outputs, kept = self.capture.record(self.run, inputs, adapter, fns)
        except Exception as err:  # noqa: BLE001 - any capture failure: launch by launch
            with self.lock:
                self.failed[key] = f"{type(err).__name__}: {err}"
            warnings.warn(
                f"fusec: CUDA graph capture failed ({self.failed[key]}); this program runs "
                "launch by launch on this stream",
                RuntimeWarning,
                stacklevel=4,
            )
            return None
        recorded = Recorded(graph, inputs, outputs, kept)
        with self.lock:
            self.recorded[key] = recorded
        return recorded

    def _replay(self, recorded: Recorded, args: Sequence[Any], stream_ptr: int) -> tuple:
        with recorded.lock:
            for static, arg in zip(recorded.inputs, args, strict=True):
                static.copy_(arg)
            self.capture.launch(recorded.graph, stream_ptr)
            recorded.replays += 1
            return tuple(out.clone() for out in recorded.outputs)
