"""Per-call cost of a compiled cpu function around its kernels (a benchmark).

Two graphs: a 64-element add + relu (one serial kernel: the call is almost all
overhead) and the same at 2**16 elements (a parallel kernel: the thread pool
wakes each call). For each: the whole call (``CompiledModule.__call__``: the
compiled launcher, ``fusec.targets.cpu.program``), the same call through the Python
launch loop (``Program.__call__``, what ``FUSEC_CPU_LAUNCHER=python`` runs), the
generated ``launch`` alone, and the compiled call's overhead over it. Best of
``--rounds`` rounds of ``--calls`` calls, wall and process CPU time per call, in
microseconds.

    python benchmarks/cpu_call_overhead.py [--rounds 15] [--calls 2000] [--out benchmarks/results]

With ``--out`` the rows also go to ``<out>/cpu-call-overhead.md`` and ``.json`` (the
runners' results format, ``runner.Table``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()

import numpy as np  # noqa: E402

import fusec  # noqa: E402
from fusec.runtime.launch import Program  # noqa: E402


def graph(n: int) -> str:
    t = f"tensor<{n}xf32>"
    return (
        f"func.func @f(%x: {t}, %y: {t}) -> {t} {{\n"
        f"  %a = ai.add %x, %y : {t} * {t}\n"
        f"  %r = ai.relu %a : {t}\n"
        f"  return %r : {t}\n}}\n"
    )


def best(fn, rounds: int, calls: int) -> tuple[float, float]:
    """Least wall and least CPU microseconds per call over the rounds."""
    walls, cpus = [], []
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        walls.append((time.perf_counter() - start) / calls * 1e6)
        cpus.append((time.process_time() - start_cpu) / calls * 1e6)
    return min(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="also write cpu-call-overhead.md/.json here")
    args = parser.parse_args()
    rows = []
    print(
        "| elements | call us (wall / CPU) | Python loop us (wall / CPU) | launch alone us "
        "| overhead us (wall / CPU) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in (64, 1 << 16):
        compiled = fusec.compile(graph(n), target="cpu")
        rng = np.random.default_rng(0)
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        out = np.empty(n, np.float32)
        compiled(x, y)
        (launch,) = compiled._runner.load()
        program = compiled.program
        call = best(lambda: compiled(x, y), args.rounds, args.calls)  # noqa: B023
        loop = best(lambda: Program.__call__(program, [x, y]), args.rounds, args.calls)  # noqa: B023
        alone = best(lambda: launch(x, y, out), args.rounds, args.calls)  # noqa: B023
        print(
            f"| {n} | {call[0]:.1f} / {call[1]:.1f} | {loop[0]:.1f} / {loop[1]:.1f} | "
            f"{alone[0]:.1f} / {alone[1]:.1f} | "
            f"{call[0] - alone[0]:.1f} / {call[1] - alone[1]:.1f} |"
        )
        rows.append(
            {
                "elements": n,
                "call_us": call[0],
                "call_cpu_us": call[1],
                "python_loop_us": loop[0],
                "python_loop_cpu_us": loop[1],
                "launch_us": alone[0],
                "launch_cpu_us": alone[1],
                "overhead_us": call[0] - alone[0],
                "overhead_cpu_us": call[1] - alone[1],
            }
        )
    if args.out:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from runner import write_table

        title = (
            f"Per-call cost of a compiled cpu function (add + relu), best of {args.rounds} "
            f"rounds of {args.calls} calls, us per call"
        )
        stem = write_table(args.out, "cpu-call-overhead", "cpu", list(rows[0]), rows, title)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
