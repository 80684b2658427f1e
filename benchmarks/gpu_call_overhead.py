"""Host-side cost of one fusec call on the cuda target, with torch tensors.

Small shapes keep the GPU idle, so the loop time is the Python + launch cost per
call; a cProfile of the same loop says where it goes. Compares torch eager.

    python benchmarks/gpu_call_overhead.py
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gpu_bench import layernorm_ir, softmax_ir  # noqa: E402


def per_call_us(fn, calls: int = 3000) -> float:
    import torch

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> int:
    import torch

    import fusec

    rows, cols = 64, 4096
    x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
    g = torch.randn(cols, device="cuda", dtype=torch.float16)
    b = torch.randn(cols, device="cuda", dtype=torch.float16)
    ln = fusec.compile(layernorm_ir(rows, cols), target="cuda", pipeline="infer-shapes")
    sm = fusec.compile(softmax_ir(rows, cols), target="cuda", pipeline="infer-shapes")
    cases = {
        "fusec layernorm (3 inputs)": lambda: ln(x, g, b),
        "fusec softmax (1 input)": lambda: sm(x),
        "torch eager layer_norm": lambda: torch.nn.functional.layer_norm(x, (cols,), g, b),
        "torch eager softmax": lambda: torch.softmax(x, -1),
    }
    for name, fn in cases.items():
        print(f"{name:32s} {per_call_us(fn):8.1f} us per call (host)")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        ln(x, g, b)
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
