"""fusec's cpu calls with and without Numba's workers pinned (``FUSEC_CPU_PIN``), after pauses.

A call made a few ms after the previous one finds the Numba worker asleep, and
the scheduler may wake it on the caller's CPU: the call's halves then run one
after the other (``fusec.targets.cpu.affinity``). This runs fusec alone (no
other library in the process) on graphs of ``cpu_vs_ort.py``, ``--calls`` calls
after each pause of ``--pauses`` ms, in processes alternating
``FUSEC_CPU_PIN=0`` and ``=1`` (``--pairs`` of them), and prints per process and
pause the wall median and minimum and the calls slower than 1.5x that
minimum (a call whose two halves ran one after the other takes ~2x).

    python benchmarks/cpu_pin_ab.py [--graphs attention,softmax] [--pauses 0,20,100]
                                    [--calls 40] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def child(graph: str, pauses: list[float], calls: int) -> dict:
    """Run in a fresh process: time ``graph`` after each pause; return the timings."""
    sys.path.insert(0, str(HERE))
    import cpu_vs_ort  # configures the thread pools before numpy loads

    import fusec
    from fusec.targets.cpu import affinity

    case = next(c for c in cpu_vs_ort.cases(quick=False) if c.name == graph)
    compiled = fusec.compile(fusec.from_onnx(case.model), target="cpu")
    for _ in range(3):
        compiled(*case.inputs)
    walls: dict[str, list[float]] = {}
    for pause in pauses:
        ts = []
        for _ in range(calls):
            time.sleep(pause / 1e3)
            start = time.perf_counter()
            compiled(*case.inputs)
            ts.append((time.perf_counter() - start) * 1e3)
        walls[f"{pause:g}"] = ts
    placement = affinity.current()
    return {
        "walls": walls,
        "pinned": placement is not None and placement.reason is None,
        "reason": None if placement is None else placement.reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="attention,softmax")
    parser.add_argument("--pauses", default="0,20,100", help="ms, comma-separated")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    pauses = [float(p) for p in args.pauses.split(",")]
    if args.child:
        print(json.dumps(child(args.child, pauses, args.calls)))
        return
    print(f"load average before: {os.getloadavg()}")
    print("| graph | FUSEC_CPU_PIN | pause ms | median ms | min ms | slow calls |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for graph in args.graphs.split(","):
        for _ in range(args.pairs):
            for pin in ("0", "1"):
                command = [sys.executable, __file__, "--child", graph]
                command += ["--pauses", args.pauses, "--calls", str(args.calls)]
                env = os.environ | {"FUSEC_CPU_PIN": pin}
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                result = json.loads(out.stdout.splitlines()[-1])
                label = pin if pin == "0" or result["pinned"] else f"1 ({result['reason']})"
                for pause, ts in result["walls"].items():
                    slow = sum(t > 1.5 * min(ts) for t in ts)
                    print(
                        f"| {graph} | {label} | {pause} | {statistics.median(ts):.2f} "
                        f"| {min(ts):.2f} | {slow}/{len(ts)} |",
                        flush=True,
                    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
