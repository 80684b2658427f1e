"""The stream check shared by the GPU benchmarks (gpu_bench, conv_attn_bench, models_bench).

CUDA events recorded on the caller's stream around ``calls`` back-to-back calls, against the
wall clock up to a device-wide synchronize: work a call queues on another stream (not ordered
after the caller's) ends after the end event, so the wall clock then exceeds the event span;
work ordered on the caller's stream makes the two agree. Each benchmark judges the pair.
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
