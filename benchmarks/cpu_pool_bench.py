"""Max pooling on the cpu target against onnxruntime's MaxPool (issue 30), one process.

ResNet's 3x3/2 pad-1 max pool after the stem, at the test model's size (1x16x32x32, a few
microseconds of work: fusec's ``fusec profile`` of ResNet-18 gave it 31 us against
onnxruntime's 4) and at ResNet-50's (1x64x112x112). For each thread count, fusec (Numba's
``set_num_threads``) and an onnxruntime session (intra-op threads) run in alternating
samples of ``--calls`` calls each; a sample's time is its mean per call (one call is a few
microseconds, under the clock's useful resolution). Prints medians and minima in us,
and the load average before and after. Both results are checked against the float64
reference first.

    python benchmarks/cpu_pool_bench.py [--samples 15] [--calls 200] [--threads 1,2] [--out DIR]

With ``--out`` the rows also go to ``<out>/cpu-pool.md`` and ``.json`` (``runner.Table``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()  # before numpy: OpenBLAS reads its settings when it loads

import numba  # noqa: E402
import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import cpu_vs_ort as B  # noqa: E402

import fusec  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402

#: Seconds between two samples: longer than onnxruntime's pool spins after its last call
#: (the spinning threads would take the cores from the fusec sample that follows).
SETTLE_S = 0.2
#: (N, C, H, W) of the pooled input: ResNet-18 test model, ResNet-50 at 224x224.
SHAPES = [(1, 16, 32, 32), (1, 64, 112, 112)]


def pool_model(shape):
    n, c, h, w = shape
    out = (n, c, (h - 1) // 2 + 1, (w - 1) // 2 + 1)
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    )
    graph = helper.make_graph(
        [node],
        "maxpool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def sample(fn, calls: int) -> float:
    """Mean us per call over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", type=Path, help="also write cpu-pool.md/.json here")
    args = parser.parse_args()
    rows = []
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()}")
    print("| shape | threads | fusec us median (min) | onnxruntime us median (min) |")
    print("| --- | --- | --- | --- |")
    for shape in SHAPES:
        model = pool_model(shape)
        x = rng.standard_normal(shape).astype(np.float32)
        module = fusec.from_onnx(model)
        compiled = fusec.compile(module, target="cpu")
        ref = run_reference(module, [x], precision="float64")[0]
        for threads in map(int, args.threads.split(",")):
            numba.set_num_threads(threads)
            session = B.ort_session(model, threads)
            runs = {
                "fusec": lambda compiled=compiled, x=x: compiled(x),
                "ort": lambda s=session, x=x: s.run(None, {"x": x})[0],
            }
            for name, fn in runs.items():
                err = B.rel_err(fn(), ref)
                if not err < 1e-6:
                    raise SystemExit(f"{name} is wrong at {shape}: {err:.2e}")
            calls = max(5, args.calls if shape[1] * shape[2] < 1e5 else args.calls // 20)
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.samples):
                for name, fn in runs.items():
                    times[name].append(sample(fn, calls))
                    time.sleep(SETTLE_S)
            cells = [f"{statistics.median(t):.1f} ({min(t):.1f})" for t in times.values()]
            print(f"| {'x'.join(map(str, shape))} | {threads} | {cells[0]} | {cells[1]} |")
            row: dict = {"shape": "x".join(map(str, shape)), "threads": threads}
            for name, t in times.items():
                row |= {f"{name}_us": statistics.median(t), f"{name}_min_us": min(t)}
            rows.append(row)
    print(f"load average at end: {os.getloadavg()}")
    if args.out:
        from runner import write_table

        title = (
            f"MaxPool 3x3/2 pad 1 on the cpu target vs onnxruntime, us per call (median of "
            f"{args.samples} alternated samples)"
        )
        stem = write_table(args.out, "cpu-pool", "cpu", list(rows[0]), rows, title)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
