"""Per-call overhead of ``@fusec.fuse`` on a tiny graph (issue 5: target < 50 us on the CPU).

A cached call of the decorated function does: the signature lookup, the
argument routing and the call of the ``CompiledModule``. This script times

* ``fused``:    ``block(x, b)``, the decorated function (signature cache hit);
* ``compiled``: ``block.compiled(x, b)(x, b)``, the same CompiledModule called directly;
* ``kernel``:   the generated kernel alone, called on preallocated flat buffers
  (when the target is ``cpu``; it reaches into ``fusec.runtime.launch.Program``);

and reports ``fused - compiled`` (what the decorator adds) and ``fused - kernel``
(everything fusec adds around the kernel: signature lookup, argument checks,
float32 staging of the inputs, output allocation, the launch). Each figure is
the median over repeats of the mean of a batch of calls, so it includes the
machine's load: the JSON records the load average.

    python benchmarks/trace_overhead.py [--target cpu] [--calls 2000] [--repeats 15]
        [--out benchmarks/results/trace-overhead-DATE.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import fusec
from fusec import ops


def per_call(fn, calls: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the mean seconds per call of ``fn()``."""
    for _ in range(calls // 10 + 1):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def raw_kernel(compiled, x, b):
    """A zero-argument callable running just the single kernel, or None if not reachable."""
    program = getattr(compiled, "_runner", None)
    fns = getattr(program, "_fns", None)
    if not fns or len(fns) != 1 or compiled.target != "cpu":
        return None
    values = dict(program.constants)
    values.update(zip(program.function.body.block.args, (x, b), strict=True))
    launch = program.launches[0]
    flat_in = [np.asarray(values[v], np.float32).reshape(-1) for v in launch.operands]
    outs = [np.empty(x.size, np.float32) for _ in launch.results]
    kernel = fns[0]
    return lambda: kernel(*flat_in, *outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", help="also write the result (with date and machine) here")
    args = parser.parse_args()

    @fusec.fuse(target=args.target)
    def block(x, b):
        return ops.relu(x * 2.0 + b)

    rng = np.random.default_rng(0)
    x = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    assert np.allclose(block(x, b), np.maximum(x * 2 + b, 0), rtol=1e-6)
    compiled = block.compiled(x, b)

    fused_s = per_call(lambda: block(x, b), args.calls, args.repeats)
    compiled_s = per_call(lambda: compiled(x, b), args.calls, args.repeats)
    kernel = raw_kernel(compiled, x, b)
    kernel_s = per_call(kernel, args.calls, args.repeats) if kernel else None
    us = 1e6
    result = {
        "target": compiled.target,
        "graph": "relu(x * 2 + b), x and b: 8 x f32",
        "fused_call_us": round(fused_s * us, 2),
        "compiled_module_call_us": round(compiled_s * us, 2),
        "kernel_call_us": round(kernel_s * us, 2) if kernel_s is not None else None,
        "decorator_overhead_us": round((fused_s - compiled_s) * us, 2),
        "overhead_beyond_kernel_us": round((fused_s - kernel_s) * us, 2) if kernel_s else None,
        "traces": block.trace_count,
    }
    result["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    result["machine"] = {
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "fusec": fusec.__version__,
    }
    result["command"] = "python benchmarks/trace_overhead.py " + " ".join(
        f"--{k} {v}"
        for k, v in (("target", args.target), ("calls", args.calls), ("repeats", args.repeats))
    )
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
