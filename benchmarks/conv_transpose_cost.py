"""ConvTranspose on the cpu target (an ai.conv2d of the zero-inserted input, issue 29) against
onnxruntime on one thread, alternating calls in one process: medians and minima. With
stride s the conv runs over s * s times the input, so it does s^2 times the direct form's
multiply-adds (the stride-2 case); the stride-1 case is the same conv either way.

    NUMBA_NUM_THREADS=1 python benchmarks/conv_transpose_cost.py [--out benchmarks/results]

One thread each; with ``--out`` the rows also go to ``<out>/conv-transpose.md`` and ``.json``
(the runners' results format, ``runner.Table``).

At bb26f0a (2026-12-02, load 2.2 on the shared 2-core machine, one thread each, 40 calls):
stride 2 (128 -> 64 channels, 16x16, k4): fusec 2.47 ms median / 2.18 ms min, onnxruntime
0.52 / 0.48 ms (4.7x); stride 1 (64 -> 64, 32x32, k3): fusec 0.42 / 0.39 ms, onnxruntime
0.56 / 0.51 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "frontend" / "onnx"))
from onnx_nets import node_model  # noqa: E402

#: (in channels, out channels, input H = W, kernel, stride, padding)
CASES = [(128, 64, 16, 4, 2, 1), (64, 64, 32, 3, 1, 1)]


def label(cin: int, cout: int, hw: int, k: int, s: int, p: int) -> str:
    return f"cin {cin} cout {cout} {hw}x{hw} k{k} s{s} p{p}"


def model(cin: int, cout: int, hw: int, k: int, s: int, p: int) -> tuple[Any, np.ndarray]:
    """The one-node ConvTranspose model (seeded weights) and an input."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
    w = rng.standard_normal((cin, cout, k, k)).astype(np.float32) * 0.05
    onnx_model = node_model(
        "ConvTranspose", {"x": x}, weights={"w": w}, opset=22, strides=[s, s], pads=[p] * 4
    )
    return onnx_model, x


def main() -> None:
    import onnxruntime as ort

    import fusec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write conv-transpose.md/.json here")
    args = parser.parse_args()
    rows = []
    for case in CASES:
        m, x = model(*case)
        f = fusec.compile(fusec.from_onnx(m), target="cpu")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        want = sess.run(None, {"x": x})[0]
        got = f(x)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        tf, to = [], []
        for _ in range(3):
            f(x)
            sess.run(None, {"x": x})
        for _ in range(40):
            t = time.perf_counter()
            f(x)
            tf.append(time.perf_counter() - t)
            t = time.perf_counter()
            sess.run(None, {"x": x})
            to.append(time.perf_counter() - t)
        print(
            f"{label(*case)}: rel L2 {err:.1e}; fusec cpu median "
            f"{statistics.median(tf) * 1e3:.2f} ms min {min(tf) * 1e3:.2f}; onnxruntime (1 thread) "
            f"median {statistics.median(to) * 1e3:.2f} ms min {min(to) * 1e3:.2f}; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        rows.append(
            {
                "case": label(*case),
                "rel_l2": float(err),
                "fusec_ms": statistics.median(tf) * 1e3,
                "fusec_min_ms": min(tf) * 1e3,
                "onnxruntime_ms": statistics.median(to) * 1e3,
                "onnxruntime_min_ms": min(to) * 1e3,
            }
        )
    if args.out:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from runner import write_table

        title = "ConvTranspose on the cpu target vs onnxruntime (1 thread), 40 alternated calls"
        stem = write_table(args.out, "conv-transpose", "cpu", list(rows[0]), rows, title)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
