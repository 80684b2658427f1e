"""Real models end to end: fusec vs onnxruntime (cpu) and vs PyTorch (cuda).

The models are those of ``tests/frontend/onnx/models`` (MobileNetV2, ResNet-18 with
narrowed channels, a 2-layer BERT encoder, a 2-layer GPT-2; random weights),
imported from their ``dynamo`` exports with fixed input shapes, at batch 1
(latency) and a throughput batch. Every fusec result is checked first.

``--target cpu`` (default): fusec's cpu target vs onnxruntime's CPU execution
provider (all graph optimisations, one intra-op thread per core), on the same
inputs and the same ONNX file; fusec must match onnxruntime elementwise
(``tests/numerics.py`` tolerances). Wall-clock medians after warm-up. Every
thread pool waits passively (OpenMP, OpenBLAS, onnxruntime's intra-op pool
without spinning): on a small shared machine, a pool spinning after its own
work steals the cores the next call needs, whichever runtime it belongs to.

``--target cuda`` (on a GPU machine with torch, torchvision and transformers):
fusec's cuda target called with torch tensors vs the same architectures in
PyTorch eager and ``torch.compile`` (built by ``export_models.py``'s
builders, float32 with TF32 off everywhere, as fusec keeps IEEE float32).
fusec is checked against its own numpy reference executor at batch 1.
Timing: CUDA events on the caller's stream (torch's current stream), median
of the runs, each timing also checked against the wall clock of a loop of
back-to-back calls (a mismatch marks the row and exits 1).

    python benchmarks/models_bench.py --threads 1 --out benchmarks/results   # cpu
    python benchmarks/models_bench.py --target cuda --out benchmarks/results
    python benchmarks/models_bench.py --target cuda --quick --budget 100 --out "$OUT"

On cuda the transformers come first (their attention is one ``ai.attention``
kernel each layer; in float32 it runs through PyTorch, the flash kernel being
f16/bf16). ``--budget S`` starts no new case after S seconds (the table says
which were skipped), ``--models`` picks models, ``--no-torch-compile`` drops the
torch.compile baseline (its compile time dominates a short device run). The
commit is ``FUSEC_COMMIT`` when set (a checkout without git), else git's.

``--threads N`` sets every cpu thread pool (Numba, OpenBLAS, onnxruntime's
intra-op pool) to N threads (default: all cores). On a machine shared with
other work, one thread each gives stable numbers: a parallel region waits for
its slowest thread, and a loaded scheduler makes that one late.

writes ``models-small-<target>.md`` and ``.json`` (date, machine, commit).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench_common import commit, cpu_name, write_results  # beside this script
from stream_timing import checked_loop  # beside this script

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "frontend" / "onnx" / "models"
sys.path.insert(0, str(ROOT / "tests"))  # numerics.py: the tests' one comparison

#: model -> (input name, batch-1 shape, throughput batch)
CASES = {
    "mobilenet_v2": ("x", (1, 3, 64, 64), 32),
    "resnet18": ("x", (1, 3, 64, 64), 32),
    "bert": ("inputs_embeds", (1, 64, 64), 16),
    "gpt2": ("inputs_embeds", (1, 64, 64), 16),
}
EXPORT = "dynamo"


def shapes(name: str, quick: bool) -> list[tuple[int, ...]]:
    _, one, batch = CASES[name]
    return [one] if quick else [one, (batch, *one[1:])]


def wall_ms(fn, seconds: float = 1.0, warmup: int = 3) -> dict:
    """Median (and min) wall-clock ms of ``fn()``, repeated for about ``seconds``."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < seconds and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "runs": len(times)}


def _kernel_summary(compiled) -> str:
    kinds: dict[str, int] = {}
    for kernel in compiled.kernels:
        kinds[kernel.kind] = kinds.get(kernel.kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


# ------------------------------------------------------------------ cpu


def run_cpu(quick: bool, threads: int) -> tuple[list[dict], dict]:
    import numpy as np
    import onnxruntime
    from numerics import compare

    import fusec
    from fusec.api import import_onnx

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    rows = []
    for name in CASES:
        path = MODELS / f"{name}.{EXPORT}.onnx"
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        input_name = CASES[name][0]
        for shape in shapes(name, quick):
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            t0 = time.perf_counter()
            result = import_onnx(path, input_shapes={input_name: shape})
            compiled = fusec.compile(result.module, target="cpu")
            got = compiled(x)
            first_s = time.perf_counter() - t0
            got = got if isinstance(got, tuple) else (got,)
            want = session.run(None, {input_name: x})
            checks = [compare(g, w) for g, w in zip(got, want, strict=True)]
            fusec_t = wall_ms(lambda x=x, compiled=compiled: compiled(x))
            feeds = {input_name: x}
            ort_t = wall_ms(lambda feeds=feeds, session=session: session.run(None, feeds))
            row = {
                "model": name,
                "file": path.name,
                "input": list(shape),
                "onnx_nodes": result.nodes,
                "fusec_kernels": len(compiled.kernels),
                "kernel_kinds": _kernel_summary(compiled),
                "fusec_ms": fusec_t["median_ms"],
                "fusec_min_ms": fusec_t["min_ms"],
                "onnxruntime_ms": ort_t["median_ms"],
                "onnxruntime_min_ms": ort_t["min_ms"],
                "speedup_vs_onnxruntime": ort_t["median_ms"] / fusec_t["median_ms"],
                "first_call_s": first_s,
                "passed": all(c.passed for c in checks),
                "rel_l2": max(c.rel_l2 for c in checks),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    import numba

    numba_threads = numba.config.NUMBA_NUM_THREADS
    env = {
        "machine": f"{cpu_name()}, {os.cpu_count()} cores ({numba_threads} Numba threads)",
        "onnxruntime": onnxruntime.__version__,
        "numba": numba.__version__,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "threads": threads,
    }
    return rows, env


def cpu_markdown(rows: list[dict], env: dict, stamp: str, revision: str) -> str:
    import numpy as np

    lines = [
        f"# fusec cpu vs onnxruntime on real models, {stamp}",
        "",
        f"Machine: {env['machine']}; onnxruntime {env['onnxruntime']} (CPU provider, all "
        f"graph optimisations, {env['threads']} intra-op thread(s), no spinning), Numba "
        f"{env['numba']} (passive OpenMP/OpenBLAS waits), "
        f"numpy {np.__version__}; commit {revision}; load average {env['load_average']:.2f} "
        "(the machine is shared: its other users add noise). Models from "
        "`tests/frontend/onnx/models` (dynamo exports, random weights, float32); medians of "
        "wall-clock calls after warm-up (the JSON has the minima). fusec is checked "
        "against onnxruntime first (elementwise, tests/numerics.py tolerances; rel L2 "
        'shown). "first call" is import + compile + the first run (kernels from the '
        "cache when warm). The ratio is of the medians.",
        "",
        "| model | input | ONNX nodes | fusec kernels | fusec ms (min) | onnxruntime ms (min) "
        "| onnxruntime / fusec | first call s | check | rel L2 |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {'x'.join(map(str, r['input']))} | {r['onnx_nodes']} | "
            f"{r['fusec_kernels']} ({r['kernel_kinds']}) | {r['fusec_ms']:.2f} "
            f"({r['fusec_min_ms']:.2f}) | {r['onnxruntime_ms']:.2f} "
            f"({r['onnxruntime_min_ms']:.2f}) | {r['speedup_vs_onnxruntime']:.2f}x | "
            f"{r['first_call_s']:.1f} | {'PASS' if r['passed'] else 'FAIL'} | "
            f"{r['rel_l2']:.1e} |"
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ cuda

WARMUP, REPS = 10, 50


def event_ms(torch, fn) -> float:
    """Median ms of ``fn`` by CUDA events on torch's current stream."""
    for _ in range(WARMUP):
        fn()
    stream = torch.cuda.current_stream()
    pairs = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        pairs.append((start, end))
    torch.cuda.synchronize()
    return float(statistics.median(s.elapsed_time(e) for s, e in pairs))


def stream_check(torch, fn, calls: int = 20) -> dict:
    """Events on the caller's stream vs wall clock to a device-wide sync, over ``calls``
    back-to-back calls: work on another stream would make the events too short."""
    events, wall, ok = checked_loop(fn, calls, warmup=3)
    return {"loop_event_ms": events, "loop_wall_ms": wall, "ok": ok}


#: cuda: the transformers first (attention), then the CNNs
CUDA_ORDER = ("gpt2", "bert", "resnet18", "mobilenet_v2")


def run_cuda(
    quick: bool, models: list[str], budget: float | None, with_compile: bool
) -> tuple[list[dict], dict]:
    import numpy as np
    import torch
    from numerics import compare

    import fusec
    from fusec.api import import_onnx

    sys.path.insert(0, str(MODELS))
    import export_models  # noqa: E402 - the same builders the ONNX files came from

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    rows = []
    skipped = []
    start = time.perf_counter()
    for name in models:
        path = MODELS / f"{name}.{EXPORT}.onnx"
        input_name = CASES[name][0]
        model = export_models.build(name).to(dev)
        compiled_torch = torch.compile(model) if with_compile else None
        for shape in shapes(name, quick):
            if budget is not None and time.perf_counter() - start > budget:
                skipped.append(f"{name} {'x'.join(map(str, shape))}")
                continue
            x_host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            x = torch.from_numpy(x_host).to(dev)
            result = import_onnx(path, input_shapes={input_name: shape})
            t0 = time.perf_counter()
            compiled = fusec.compile(result.module, target="cuda")
            got = compiled(x)
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            got = got if isinstance(got, tuple) else (got,)
            row = {"model": name, "file": path.name, "input": list(shape)}
            if shape[0] == 1:  # fusec vs its numpy reference executor: the ground truth
                want = fusec.reference(result.module)(x_host)
                want = want if isinstance(want, tuple) else (want,)
                checks = [compare(g.cpu().numpy(), w) for g, w in zip(got, want, strict=True)]
                row["passed"] = all(c.passed for c in checks)
                row["rel_l2"] = max(c.rel_l2 for c in checks)
            with torch.no_grad():
                fusec_ms = event_ms(torch, lambda x=x, compiled=compiled: compiled(x))
                check = stream_check(torch, lambda x=x, compiled=compiled: compiled(x))
                eager_ms = event_ms(torch, lambda x=x, model=model: model(x))
                compile_ms = None
                if compiled_torch is not None:
                    compile_ms = event_ms(torch, lambda x=x, fn=compiled_torch: fn(x))
            ort_ms = _onnxruntime_cuda_ms(torch, path, input_name, x)
            row.update(
                {
                    "onnx_nodes": result.nodes,
                    "fusec_kernels": len(compiled.kernels),
                    "kernel_kinds": _kernel_summary(compiled),
                    "fusec_ms": fusec_ms,
                    "torch_eager_ms": eager_ms,
                    "torch_compile_ms": compile_ms,
                    "onnxruntime_cuda_ms": ort_ms,
                    "first_call_s": first_s,
                    "stream_check": check,
                }
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    env = {
        "machine": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "skipped": skipped,
        "seconds": time.perf_counter() - start,
    }
    return rows, env


def _onnxruntime_cuda_ms(torch, path: Path, input_name: str, x) -> float | None:
    """onnxruntime's CUDA execution provider on the same file, with I/O bound to the
    device (no copies timed), when the installed onnxruntime has that provider."""
    try:
        import numpy as np
        import onnxruntime
    except ImportError:
        return None
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return None
    session = onnxruntime.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
    binding = session.io_binding()
    binding.bind_input(input_name, "cuda", 0, np.float32, tuple(x.shape), x.data_ptr())
    for output in session.get_outputs():
        binding.bind_output(output.name, "cuda")
    return event_ms(torch, lambda: session.run_with_iobinding(binding))


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def cuda_markdown(rows: list[dict], env: dict, stamp: str, revision: str) -> str:
    lines = [
        f"# fusec cuda vs PyTorch on real models, {stamp}",
        "",
        f"Device: {env['machine']}; torch {env['torch']} (CUDA {env['cuda']}); commit "
        f"{revision}. float32 everywhere, TF32 off (fusec keeps IEEE float32). Models from "
        "`tests/frontend/onnx/models` (dynamo exports for fusec, the same architectures built by "
        "export_models.py for PyTorch). CUDA events on the caller's stream, median of "
        f"{REPS} runs after {WARMUP} warm-up calls; each fusec timing is checked against "
        "the wall clock of 20 back-to-back calls. fusec is checked against its numpy "
        "reference executor at batch 1.",
        "",
        "onnxruntime's CUDA provider is timed too when the installed onnxruntime has it "
        "(its runs are not necessarily on torch's stream: those times are indicative).",
        "",
        "| model | input | fusec kernels | fusec ms | eager ms | torch.compile ms "
        "| onnxruntime-cuda ms | eager / fusec | compile / fusec | check | rel L2 "
        "| stream check |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        check = "-" if "passed" not in r else ("PASS" if r["passed"] else "FAIL")
        rel = "-" if "rel_l2" not in r else f"{r['rel_l2']:.1e}"
        sc = r["stream_check"]
        lines.append(
            f"| {r['model']} | {'x'.join(map(str, r['input']))} | "
            f"{r['fusec_kernels']} ({r['kernel_kinds']}) | {r['fusec_ms']:.3f} | "
            f"{r['torch_eager_ms']:.3f} | {_ms(r['torch_compile_ms'])} | "
            f"{_ms(r['onnxruntime_cuda_ms'])} | "
            f"{r['torch_eager_ms'] / r['fusec_ms']:.2f}x | "
            f"{_ratio(r['torch_compile_ms'], r['fusec_ms'])} | {check} | {rel} | "
            f"{'ok' if sc['ok'] else 'FAILED'} ({sc['loop_event_ms']:.2f} events, "
            f"{sc['loop_wall_ms']:.2f} wall) |"
        )
    if env.get("skipped"):
        lines += ["", f"Not measured (over the --budget): {', '.join(env['skipped'])}."]
    return "\n".join(lines) + "\n"


def _ratio(baseline: float | None, ms: float) -> str:
    return "n/a" if baseline is None else f"{baseline / ms:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, help="write models-small-<target>.md/.json here")
    parser.add_argument("--quick", action="store_true", help="batch 1 only")
    parser.add_argument("--threads", type=int, help="threads of every cpu pool (default: all)")
    parser.add_argument("--models", help="comma-separated models (default: all)")
    parser.add_argument("--budget", type=float, help="cuda: start no case after S seconds")
    parser.add_argument(
        "--no-torch-compile", action="store_true", help="cuda: no torch.compile baseline"
    )
    args = parser.parse_args()
    threads = args.threads or os.cpu_count() or 1
    if args.threads:  # read when the pools start: before numpy, Numba, onnxruntime load
        for key in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
            os.environ[key] = str(args.threads)
    from fusec.targets.cpu.threads import configure

    configure()  # passive OpenMP/OpenBLAS waits (fusec.targets.cpu.threads)
    now = datetime.datetime.now(datetime.UTC)
    stamp = now.strftime("%Y-%m-%d %H:%M UTC")
    revision = commit(dirty="+dirty", missing="unknown")
    if args.target == "cpu":
        rows, env = run_cpu(args.quick, threads)
        text = cpu_markdown(rows, env, stamp, revision)
        failed = not all(r["passed"] for r in rows)
    else:
        models = [m for m in CUDA_ORDER if not args.models or m in args.models.split(",")]
        rows, env = run_cuda(args.quick, models, args.budget, not args.no_torch_compile)
        text = cuda_markdown(rows, env, stamp, revision)
        failed = not all(r.get("passed", True) and r["stream_check"]["ok"] for r in rows)
    print(text)
    if args.out is not None:
        payload = {"date": stamp, "commit": revision, "environment": env, "rows": rows}
        write_results(args.out / f"models-small-{args.target}", payload, text)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
