"""The stream check shared by the GPU benchmarks (gpu_bench, conv_attn_bench, models_bench).

CUDA events recorded on the caller's stream around ``calls`` back-to-back calls, against the
wall clock up to a device-wide synchronize: work a call queues on another stream (not ordered
after the caller's) ends after the end event, so the wall clock then exceeds the event span;
work ordered on the caller's stream makes the two agree (``agree``). ``checked_loop`` runs the
loop up to three times: a busy host wakes from the synchronize late in one loop (the GPU lane's
14 workers once added 0.28 ms to a 1 ms loop of copies), where work on another stream lengthens
the wall clock of every loop.
"""

from __future__ import annotations

import time


def loop_event_and_wall_ms(fn, calls: int = 20, warmup: int = 1) -> tuple[float, float]:
    """(events ms, wall-clock ms) of ``calls`` back-to-back calls of ``fn`` after
    ``warmup`` calls and a synchronize."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record(stream)
    for _ in range(calls):
        fn()
    end.record(stream)
    torch.cuda.synchronize()
    return start.elapsed_time(end), (time.perf_counter() - t0) * 1e3


def agree(events_ms: float, wall_ms: float) -> bool:
    """Whether a loop's wall clock is within 10% + 0.1 ms of its event span."""
    return wall_ms <= 1.1 * events_ms + 0.1


def checked_loop(
    fn, calls: int = 20, warmup: int = 1, attempts: int = 3
) -> tuple[float, float, bool]:
    """(events ms, wall-clock ms, agree) of the first of up to ``attempts`` loops of
    ``loop_event_and_wall_ms`` that agrees, else of the closest."""
    best: tuple[float, float, bool] | None = None
    for _ in range(attempts):
        events, wall = loop_event_and_wall_ms(fn, calls, warmup)
        if agree(events, wall):
            return events, wall, True
        if best is None or wall - events < best[1] - best[0]:
            best = (events, wall, False)
    assert best is not None
    return best
