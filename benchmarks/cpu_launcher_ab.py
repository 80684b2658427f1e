"""The cpu compiled launcher against the Python launch loop, on the ONNX test models.

For each model of ``tests/frontend/onnx/models`` (dynamo exports, batch 1, float32): compile for
cpu, check that the compiled call (``CpuProgram``, ``fusec.targets.cpu.program``) gives
the Python loop's results bit for bit (max abs difference printed), then time both,
alternating call by call in the same process (the machine's load hits both alike):
medians and minima in ms, the load average, and the first compiled call's seconds (its
segments compile then, or load from Numba's cache).

    NUMBA_NUM_THREADS=1 python benchmarks/cpu_launcher_ab.py [--models resnet18,bert] [--calls 300]

With ``--out DIR`` the rows also go to ``DIR/cpu-launcher.md`` and ``.json`` (``runner.Table``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()

import numpy as np  # noqa: E402

import fusec  # noqa: E402
from fusec.api import import_onnx  # noqa: E402
from fusec.runtime.launch import Program  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "tests" / "frontend" / "onnx" / "models"
CASES = {
    "resnet18": ("x", (1, 3, 64, 64)),
    "mobilenet_v2": ("x", (1, 3, 64, 64)),
    "bert": ("inputs_embeds", (1, 64, 64)),
    "gpt2": ("inputs_embeds", (1, 64, 64)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", type=Path, help="also write cpu-launcher.md/.json here")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        input_name, shape = CASES[name]
        result = import_onnx(MODELS / f"{name}.dynamo.onnx", input_shapes={input_name: shape})
        program = fusec.compile(result.module, target="cpu").program
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        old = Program.__call__(program, [x])
        start = time.perf_counter()
        new = program([x])
        first = time.perf_counter() - start
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(old, new, strict=True))
        loop, compiled = [], []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            Program.__call__(program, [x])
            t1 = time.perf_counter()
            program([x])
            t2 = time.perf_counter()
            loop.append((t1 - t0) * 1e3)
            compiled.append((t2 - t1) * 1e3)
        print(
            f"{name}: {len(program.kernels)} kernels, {program.boundaries} boundaries, "
            f"max diff {diff}; Python loop {statistics.median(loop):.3f} (min {min(loop):.3f}) "
            f"ms, compiled {statistics.median(compiled):.3f} (min {min(compiled):.3f}) ms; "
            f"first compiled call {first:.2f} s; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        rows.append(
            {
                "model": name,
                "kernels": len(program.kernels),
                "boundaries": program.boundaries,
                "max_diff": diff,
                "python_loop_ms": statistics.median(loop),
                "python_loop_min_ms": min(loop),
                "compiled_ms": statistics.median(compiled),
                "compiled_min_ms": min(compiled),
                "first_compiled_call_s": first,
            }
        )
    if args.out and rows:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from runner import write_table

        title = (
            f"The compiled cpu launcher vs the Python launch loop, {args.calls} alternated calls "
            "(median and min ms)"
        )
        stem = write_table(args.out, "cpu-launcher", "cpu", list(rows[0]), rows, title)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
