"""Per-launch GPU times for ``fusec.profile``: CUDA events around every launch.

``EventLaunchRecorder`` is the cuda program's ``LaunchRecorder``
(``fusec.runtime.launch``). A timed call runs launch by launch on a stream of
the recorder's own (never as a CUDA graph replay: a graph is one launch, its
kernels' times are not separable), with an event recorded on that stream before
and after each launch (a Numba kernel, a linked Tensor Core kernel, or the
PyTorch ops of a fallback group) and around the whole call.

An event pair times what the GPU did between the two events. If the GPU is
idle, waiting for the host to issue the next launch, that wait would count as
the kernel's time. So each timed call is queued behind a short sleep kernel
(``hold``), long enough for the host to issue every launch of the call before
the GPU reaches the first: the kernels then run back to back and each pair
times its kernel alone. Whether that held is checked on every call (the
call's start event must still be pending when the host has issued the last
launch); a call that outran its hold is timed again with a longer one, and
after three tries it is reported (``notes``) rather than hidden.

Under Numba's CUDA simulator, events record no time; kernels run
synchronously in Python there, so the host clock times them, and ``device()``
says so.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from fusec.ir.dtypes import element_type_of
from fusec.runtime.launch import CallTimes, HostLaunchRecorder, Span
from fusec.targets.cuda.adapters import TORCH_DTYPES, _device_copy, host_storage
from fusec.targets.cuda.env import numba_cuda, simulator_enabled

#: Bounds of the sleep a timed call is queued behind (seconds), and its first length.
HOLD_MIN, HOLD_MAX, HOLD_FIRST = 50e-6, 0.25, 2e-3
#: Tries of a call that outran its hold before its times are reported as they are.
TRIES = 3
#: The sleep kernel sleeps in steps of this many nanoseconds (PTX caps one at 1 ms).
_STEP_NS = 100_000


class EventLaunchRecorder:
    """Times a cuda program's launches with CUDA events on a stream of its own."""

    def __init__(self) -> None:
        self.cuda = numba_cuda()
        self.simulated = simulator_enabled()
        self.stream = self.cuda.stream()
        self.hold_seconds = HOLD_FIRST
        #: calls whose launches were not all queued before the GPU reached them
        self.outran = 0
        self.calls = 0
        self._host = HostLaunchRecorder()
        self._spans: list[tuple[str, Any, Any]] = []
        self._pool: list[Any] = []
        self._used = 0
        self._hold_kernel: Any = None

    # ------------------------------------------------------------ the hook
    def spans(self, stream: Any) -> Span:
        if self.simulated:
            return self._host.spans(stream)
        numba_stream = stream.numba  # the StreamRef the program runs on: ours
        return lambda label: self._span(label, numba_stream)

    @contextlib.contextmanager
    def _span(self, label: str, stream: Any) -> Iterator[None]:
        from fusec.runtime.launch import nvtx_range

        start, end = self._event(), self._event()
        start.record(stream)
        with nvtx_range(label):
            yield
        end.record(stream)
        self._spans.append((label, start, end))

    def _event(self) -> Any:
        """A timing event, reused from call to call (creating one costs a driver call)."""
        if self._used == len(self._pool):
            self._pool.append(self.cuda.event(timing=True))
        self._used += 1
        return self._pool[self._used - 1]

    # ------------------------------------------------------------- calls
    def inputs(self, arrays: Sequence[np.ndarray]) -> list[Any]:
        """Device-resident arguments: torch tensors where torch can hold them (its
        caching allocator makes a call allocate without synchronising), else Numba
        device arrays."""
        torch = _torch_on_gpu()
        if torch is None or self.simulated:
            return [_device_copy(a) for a in arrays]
        tensors = [_torch_tensor(torch, a) if isinstance(a, np.ndarray) else a for a in arrays]
        torch.cuda.synchronize()  # the uploads are done before the recorder's stream reads them
        return tensors

    def time_call(self, program: Any, args: Sequence[Any]) -> CallTimes:
        if self.simulated:
            self._host._times = []
            start = time.perf_counter()
            program(args, stream=self.stream, recorder=self)
            total = time.perf_counter() - start
            return CallTimes(self._host._times, total, total)
        self.calls += 1
        for _ in range(TRIES):
            times, queued = self._held_call(program, args)
            if queued:
                return times
            self.hold_seconds = min(HOLD_MAX, 2 * max(self.hold_seconds, times.host))
        self.outran += 1
        return times

    def _held_call(self, program: Any, args: Sequence[Any]) -> tuple[CallTimes, bool]:
        """One call queued behind the hold: its times, and whether every launch was
        issued before the GPU reached the call."""
        self._spans, self._used = [], 0
        self._hold(self.hold_seconds)
        begin = self._event()
        begin.record(self.stream)
        start = time.perf_counter()
        program(args, stream=self.stream, recorder=self)
        host = time.perf_counter() - start
        queued = not begin.query()
        end = self._event()
        end.record(self.stream)
        end.synchronize()
        launches = [(label, a.elapsed_time(b) / 1e3) for label, a, b in self._spans]
        return CallTimes(launches, begin.elapsed_time(end) / 1e3, host), queued

    def _hold(self, seconds: float) -> None:
        """Queue a kernel that sleeps about ``seconds`` on the recorder's stream."""
        if self._hold_kernel is None:
            cuda = self.cuda

            @cuda.jit
            def hold(steps: int) -> None:
                for _ in range(steps):
                    cuda.nanosleep(_STEP_NS)

            self._hold_kernel = hold
        steps = max(1, round(max(HOLD_MIN, seconds) / (_STEP_NS * 1e-9)))
        self._hold_kernel[1, 1, self.stream](steps)

    def time_plain(self, program: Any, args: Sequence[Any]) -> float:
        start = time.perf_counter()
        program(args, stream=self.stream)
        self.stream.synchronize()
        return time.perf_counter() - start

    # -------------------------------------------------------- what it says
    def device(self) -> str:
        if self.simulated:
            return "CUDA simulator (kernels emulated in Python, timed by the host clock)"
        name = self.cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)

    def notes(self, program: Any) -> list[str]:
        """What a reader of the times must know: graphs off, and any call that outran
        its hold (its kernel times may include the GPU waiting for the host)."""
        graphs = getattr(program, "graphs", None)
        replayed = graphs is not None and any(r.replays for r in graphs.recorded.values())
        plain = "replays a CUDA graph" if replayed else "runs launch by launch"
        notes = [
            "CUDA graphs are off in the timed calls: a graph replay is one launch, so its "
            f"kernels cannot be timed apart (an ordinary call of this program {plain})"
        ]
        if self.simulated:
            return notes
        notes.append(
            "each timed call is queued behind a "
            f"{self.hold_seconds * 1e3:.2f} ms sleep kernel, so that its launches run back "
            "to back and an event pair times its kernel alone, not the host issuing it"
        )
        if self.outran:
            notes.append(
                f"{self.outran} of {self.calls} timed call(s) outran the sleep (the host "
                "was still issuing launches, or waited for the GPU, when the GPU reached "
                "the call): their kernel times may include the GPU waiting for the host"
            )
        return notes


def _torch_on_gpu() -> Any:
    """torch, when it is installed and sees a GPU; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_tensor(torch: Any, array: np.ndarray) -> Any:
    """``array`` as a tensor on the current GPU, stored as the kernels store its element
    type (``host_storage``: bfloat16 and float8 through their bits, which torch cannot read
    from ml_dtypes' arrays, 4-bit codes by value, a byte each)."""
    dtype = element_type_of(array.dtype, floats_only=False)
    if dtype is None:
        return torch.from_numpy(np.ascontiguousarray(array)).cuda()
    stored = torch.from_numpy(host_storage(array, dtype))
    return stored.view(getattr(torch, TORCH_DTYPES[dtype])).cuda()
