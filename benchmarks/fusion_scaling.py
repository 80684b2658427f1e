"""Time ``fusec.compile`` (parse + fusec-default, reference target) on long elementwise chains.

    python benchmarks/fusion_scaling.py 800 1600 3200 [--out benchmarks/results]

Run it once with PYTHONPATH pointing at an older checkout for the baseline.
The chain alternates relu and exp on tensor<64xf32>; the last column is the
number of kernels the planner made. With ``--out`` the rows also go to
``<out>/fusion-scaling.md`` and ``.json`` (the runners' results format, ``runner.Table``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import fusec

sys.path.insert(0, str(Path(__file__).resolve().parent))


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", type=int, nargs="*", default=[800, 1600, 3200])
    parser.add_argument("--out", type=Path, help="also write fusion-scaling.md/.json here")
    args = parser.parse_args()
    rows = []
    for n in args.ops:
        start = time.perf_counter()
        compiled = fusec.compile(chain(n), target="reference")
        seconds = time.perf_counter() - start
        kernels = compiled.ir.count("ai.fused")
        print(f"{n:6d} ops  {seconds:7.2f} s  {kernels} kernels", flush=True)
        rows.append({"ops": n, "compile_s": seconds, "kernels": kernels})
    if args.out:
        from runner import write_table

        title = "fusec.compile (reference target) of relu/exp chains on tensor<64xf32>"
        stem = write_table(
            args.out, "fusion-scaling", "cpu", ["ops", "compile_s", "kernels"], rows, title
        )
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
