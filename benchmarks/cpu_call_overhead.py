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

``--torch-backend MODEL`` (needs torch and torchvision; one thread) measures instead what a
``torch.compile(backend="fusec")`` call of a zoo model (``models_gpu.py``'s, f32, batch 1)
costs around its partition's compiled program, in one process, medians of ``--calls``
calls: the backend call and the partition's compiled module on the same input,
alternated; then, each call after a 32 MB copy (the weights' stream evicts the caches),
Dynamo with a backend that returns a stored result (its guards and frame alone), the same
under ``torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)``, and fusec's
backend with its partition's run replaced by the stored result (cold and warm):

    python benchmarks/cpu_call_overhead.py --torch-backend mobilenet_v3_large --calls 200
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


def median_ms(fn, calls: int, before=None) -> float:
    """Median milliseconds of ``fn()`` over ``calls`` calls, ``before()`` untimed first."""
    times = []
    for _ in range(calls):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def torch_backend_costs(name: str, calls: int) -> None:
    """The ``--torch-backend`` table (module docstring)."""
    import torch

    import fusec.torch as fusec_torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import models_gpu as zoo

    torch.set_num_threads(1)
    zoo.import_torchvision()
    model = zoo.build(name, False)
    x = torch.randn(1, 3, 128, 128)  # the cpu zoo's image (models_cpu.py)
    big = np.ones(32 << 17)  # 32 MB of float64
    scratch = np.empty_like(big)

    def evict() -> None:
        np.copyto(scratch, big)

    rows: list[tuple[str, float]] = []
    with torch.no_grad():
        stored = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="fusec", dynamic=False)
        compiled(x)
        (partition,) = fusec_torch.compiled_partitions()
        xn = x.numpy()
        backend, direct = [], []
        for _ in range(calls):
            backend.append(median_ms(lambda: compiled(x), 1))
            direct.append(median_ms(lambda: partition(xn), 1))
        rows += [
            ("backend call (warm, alternated)", float(np.median(backend))),
            ("its partition's compiled module alone", float(np.median(direct))),
        ]
        torch._dynamo.reset()
        trivial = torch.compile(model, backend=lambda gm, a: lambda *args: (stored,))
        trivial(x)
        rows.append(("Dynamo, a stored result (cold)", median_ms(lambda: trivial(x), calls, evict)))
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            cold = median_ms(lambda: trivial(x), calls, evict)
        rows.append(("... under skip_guard_eval_unsafe (cold)", cold))
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="fusec", dynamic=False)
        outs = compiled(x)
        run = fusec_torch._FusecCall.run
        fusec_torch._FusecCall.run = lambda self, tensors: [outs]  # the program stubbed
        try:
            stubbed = median_ms(lambda: compiled(x), calls, evict)
            rows.append(("fusec backend, program stubbed (cold)", stubbed))
            stubbed = median_ms(lambda: compiled(x), calls)
            rows.append(("fusec backend, program stubbed (warm)", stubbed))
        finally:
            fusec_torch._FusecCall.run = run
    print(f"| {name} b1, one thread, torch {torch.__version__} | median ms a call |")
    print("| --- | ---: |")
    for what, ms in rows:
        print(f"| {what} | {ms:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="also write cpu-call-overhead.md/.json here")
    parser.add_argument("--torch-backend", metavar="MODEL", help="the backend's costs instead")
    args = parser.parse_args()
    if args.torch_backend:
        torch_backend_costs(args.torch_backend, args.calls)
        return
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
