"""Whole-program CUDA graphs: a program called with torch tensors records its launches
once and replays them as one graph launch per call.

At batch 1 a compiled model is launch-bound: tens to hundreds of kernels of a few
microseconds each, every one of them a Python call and a ``cuLaunchKernel``. A CUDA
graph replays all of them with one launch (what ``torch.compile(mode="reduce-overhead")``
does). ``ProgramGraphs`` does it behind the ordinary call, keyed by (device, stream):

1. the first call of a key runs launch by launch (``WARMUP_CALLS``): kernels load, torch
   fallback groups create their library handles, tensor maps and scratch buffers are
   made, none of which may happen inside a capture;
2. the next call records the program on *static* inputs (device copies of the
   arguments) in a graph of its own memory pool (``torch.cuda.graph``): every
   intermediate and result lives in that pool, valid across replays;
3. every later call copies its arguments into the static inputs (on the call's stream;
   skipped for an argument that *is* the static input), replays the graph on the call's
   stream and returns copies of the static results, so a result the caller keeps is
   never overwritten by the next call (unlike a bare graph's outputs).

Each key has its own graph and static buffers, so calls on two streams never share
memory; one lock per graph makes the copy-in, replay and copy-out of a call one unit
for threads sharing a stream. A key whose capture fails (an op that synchronises,
say) runs launch by launch from then on, and says why once (``RuntimeWarning``).
At most ``LIMIT`` keys are recorded per program; calls past it run launch by launch.

Only torch tensors are graphed: numpy callers pay host copies that dwarf the launches,
and cupy/numba callers keep the direct path. ``FUSEC_CUDA_GRAPHS=0`` (read at each
call) or ``fusec.compile(..., cuda_graphs=False)`` turns it off.
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


@dataclass
class Recorded:
    """One key's graph: its static inputs and results, and the lock of its calls."""

    graph: Any
    inputs: list[Any]
    outputs: tuple
    lock: threading.Lock = field(default_factory=threading.Lock)
    replays: int = 0


@dataclass
class ProgramGraphs:
    """The graphs of one program, by (device index, stream handle)."""

    run: Run
    specs: Sequence[Any]  # the program's argument TensorSpecs
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
            return self._replay(recorded, args)
        if recorded is None and self._should_record(key) and self._fits(args, adapter):
            recorded = self._record(key, args, adapter, fns)
            if recorded is not None:
                return self._replay(recorded, args)
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
        from fusec.targets.cuda.gemm.host import pin_live_tensor_maps
        from fusec.targets.cuda.streams import current_torch_ref

        torch = adapter.torch
        device = adapter.device
        caller = torch.cuda.current_stream(device)
        inputs = [torch.empty(a.shape, dtype=a.dtype, device=device).copy_(a) for a in args]
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream(device=device)
        side.wait_stream(caller)
        try:
            # relaxed: the first launch of a kernel on a new stream may allocate its
            # scratch buffer (cuMemAlloc), which a stricter capture mode refuses
            with torch.cuda.graph(graph, stream=side, capture_error_mode="relaxed"):
                ref = current_torch_ref(int(side.cuda_stream))
                outputs = self.run(inputs, adapter, ref, fns, False)
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
        pin_live_tensor_maps()  # the graph reads tensor maps from their slots for good
        caller.wait_stream(side)
        recorded = Recorded(graph, inputs, tuple(outputs))
        with self.lock:
            self.recorded[key] = recorded
        return recorded

    @staticmethod
    def _replay(recorded: Recorded, args: Sequence[Any]) -> tuple:
        with recorded.lock:
            for static, arg in zip(recorded.inputs, args, strict=True):
                if arg.data_ptr() != static.data_ptr():
                    static.copy_(arg)
            recorded.graph.replay()
            recorded.replays += 1
            return tuple(out.clone() for out in recorded.outputs)
