"""Time ``fusec.compile`` (parse + fusec-default, reference target) on long elementwise chains.

    python benchmarks/fusion_scaling.py 800 1600 3200

Run it once with PYTHONPATH pointing at an older checkout for the baseline.
The chain alternates relu and exp on tensor<64xf32>; the last column is the
number of kernels the planner made.
"""

from __future__ import annotations

import sys
import time

import fusec


def chain(n: int) -> str:
    lines = ["func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {"]
    prev = "%x"
    for i in range(n):
        op = "ai.exp" if i % 2 else "ai.relu"
        lines.append(f"  %v{i} = {op} {prev} : tensor<64xf32>")
        prev = f"%v{i}"
    lines.append(f"  return {prev} : tensor<64xf32>\n}}")
    return "\n".join(lines)


def main() -> None:
    for n in map(int, sys.argv[1:] or ["800", "1600", "3200"]):
        start = time.perf_counter()
        compiled = fusec.compile(chain(n), target="reference")
        seconds = time.perf_counter() - start
        print(f"{n:6d} ops  {seconds:7.2f} s  {compiled.ir.count('ai.fused')} kernels", flush=True)


if __name__ == "__main__":
    main()
