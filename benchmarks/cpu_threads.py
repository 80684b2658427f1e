"""Per-core speed and 2-thread scaling of fusec's cpu kernels against onnxruntime.

For the rows of ``cpu_vs_ort.py`` that stay behind (attention, softmax, MLP), one process
runs fusec and onnxruntime (a session per thread count) at 1 and 2 threads, each in a
block of calls of its own, ``--pause`` seconds apart (as in ``cpu_vs_ort.py``), and
prints wall-clock medians and minima in ms. Blocks, not alternated calls: onnxruntime's
pool spins for tens of ms after each call, and alternated, that spinning thread shared
fusec's pinned worker's CPU (attention 7.4 ms median at 2 threads against 5.3 in a block
of its own); ``SETTLE_S`` separates the blocks. The thread count of
fusec is Numba's (``numba.set_num_threads``); onnxruntime's is its intra-op count.

    python benchmarks/cpu_threads.py [--rounds 30] [--pause 0.02] [--out DIR]

writes ``cpu-threads.md`` to DIR when given.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()  # before numpy: OpenBLAS reads its settings when it loads

import numba  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import cpu_vs_ort as B  # noqa: E402
from bench_common import commit  # noqa: E402

import fusec  # noqa: E402

#: Seconds between two blocks: longer than onnxruntime's spin after its last call.
SETTLE_S = 0.2


def cases(rng) -> list:
    return [
        B.attention_case(rng, 1, 12, 512, 64),
        B.softmax_case(rng, 4096, 1024),
        B.mlp_case(rng, 1024, 512, 2048),
    ]


def measure(case, rounds: int, pause: float) -> dict[tuple[str, int], list[float]]:
    compiled = fusec.compile(fusec.from_onnx(case.model), target="cpu")
    sessions = {t: B.ort_session(case.model, t) for t in (1, 2)}
    feed = {i.name: a for i, a in zip(sessions[1].get_inputs(), case.inputs, strict=True)}
    times: dict[tuple[str, int], list[float]] = {}
    for threads in (1, 2):
        numba.set_num_threads(threads)
        runs = {
            "fusec": lambda: compiled(*case.inputs),
            "onnxruntime": lambda t=threads: sessions[t].run(None, feed),
        }
        for name, fn in runs.items():  # one block each: see the module docstring
            fn()
            fn()
            time.sleep(SETTLE_S)
            for _ in range(rounds):
                time.sleep(pause)
                start = time.perf_counter()
                fn()
                times.setdefault((name, threads), []).append((time.perf_counter() - start) * 1e3)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pause", type=float, default=0.02)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if numba.config.NUMBA_NUM_THREADS < 2:
        raise SystemExit("needs 2 CPUs")
    rng = np.random.default_rng(0)
    stamp = datetime.datetime.now(datetime.UTC)
    lines = [
        f"# fusec cpu kernels at 1 and 2 threads vs onnxruntime ({stamp:%Y-%m-%d %H:%M} UTC, "
        f"commit {commit(missing='unknown')})",
        "",
        f"Wall ms, median (min) of {args.rounds} calls {args.pause * 1e3:.0f} ms apart, a block "
        f"per implementation; load average {os.getloadavg()[0]:.2f} at the start.",
        "",
        "| graph | fusec 1 thread | ort 1 thread | fusec 2 threads | ort 2 threads "
        "| ort / fusec 1 | ort / fusec 2 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in cases(rng):
        t = measure(case, args.rounds, args.pause)
        med = {k: statistics.median(v) for k, v in t.items()}
        cell = {k: f"{statistics.median(v):.2f} ({min(v):.2f})" for k, v in t.items()}
        lines.append(
            f"| {case.name} | {cell['fusec', 1]} | {cell['onnxruntime', 1]} | "
            f"{cell['fusec', 2]} | {cell['onnxruntime', 2]} | "
            f"{med['onnxruntime', 1] / med['fusec', 1]:.2f}x | "
            f"{med['onnxruntime', 2] / med['fusec', 2]:.2f}x |"
        )
        print(lines[-1], flush=True)
    lines.append(f"\nLoad average at the end {os.getloadavg()[0]:.2f}.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cpu-threads.md").write_text(text)


if __name__ == "__main__":
    main()
