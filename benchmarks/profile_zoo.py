"""Per-kernel GPU time of a zoo model (benchmarks/models_gpu.py) under fusec and torch.compile.

    python benchmarks/profile_zoo.py --model resnet50 --batch 32 [--model convnext_tiny ...]
    python benchmarks/profile_zoo.py --model resnet50 --variant FUSEC_CONV_RESIDUAL=nhwc
    python benchmarks/profile_zoo.py --model efficientnet_b0 --batch 1 --reduce-overhead

For a model the zoo's table has behind torch.compile: the same module (random weights,
f16, the dynamo exporter, as ``models_gpu.py --quick``) is imported and compiled by fusec,
and compiled by ``torch.compile`` (default mode); after a warm-up ``--reps`` calls of each
are recorded under ``torch.profiler`` (CUPTI kernel activity), and every GPU kernel is listed
with its mean time per call and launches per call, beside a summary by kind (conv, GEMM,
copy/layout, pooling/reduction, pointwise). Both outputs are checked against the float32
module first. The tables say where a model's time goes; the zoo's table says how fast it is
(this script's per-kernel sums leave out launch gaps). Each ``--variant ENV=VALUE`` compiles
fusec a second time with that environment (an A/B switch of a pass or template) and adds its
table (the setting holds through its first calls too, which record its CUDA graph:
``--variant FUSEC_PDL=0`` is the programmatic-launch A/B; ``--burst N`` also times N calls
back to back a round); each ``--pipeline SPEC`` compiles fusec again with that pipeline (a
named one, e.g. ``fusec-cuda-separate-rope``, or a pass-pipeline spec): a pass's A/B;
``--tuned`` runs ``fusec tune`` on the model's GEMM groups (the tiles
it times, its winners recorded in the kernel cache) and compiles once more from those
records ("fusec tuned"): how much of a gap the heuristic's tiles explain. Every
implementation is also timed in the same run, alternating (CUDA events on the current
stream, median of ``--timed`` calls each, wall clock beside them).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, os.path.dirname(__file__))

# kind of a kernel, by its name, first match wins: fusec's generated kernels
# (fusec_<kind>_...) and PyTorch's (cuDNN/CUTLASS convs and GEMMs, inductor's triton_*)
KINDS = (
    ("conv", r"conv|fprop|dgrad|implicit_gemm|cudnn|xmma_fprop"),
    ("gemm", r"gemm|matmul|wgmma|sm90_xmma|cutlass|nvjet|mm_"),  # nvjet: cuBLAS's sm90
    ("copy/layout", r"copy|transpose|nchw|nhwc|layout|elementwise_kernel.*copy"),
    ("pool/reduce", r"pool|reduce|red_|per_fused_.*mean|mean"),
)


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "pointwise/other"


#: a linked kernel's name in a profile: ``fusec_<kind>_<key>`` (``LinkedSpec.function_name``)
_LINKED = re.compile(r"fusec_[a-z]+_([0-9a-f]{16})")


def layer_names(kernels: Any) -> dict[str, str]:
    """{spec key: what the kernel computes} for a compiled module's linked kernels: its
    kind, the shape line of its header (a conv's geometry, else its inputs) and its tile,
    so that a profile's ``fusec_conv_<key>`` rows name their layers (every layer, " | "
    between them, where several run one kernel)."""
    names = {}
    for kernel in kernels:
        head = [line[2:] for line in kernel.source.splitlines()[:40] if line.startswith("# ")]
        shape = next((h for h in head if h.startswith("N") and "->" in h), "")
        shape = shape or next((h for h in head if "inputs :" in h), "").strip()
        tile = re.search(r"tile [0-9x]+(?: [a-z0-9=]+)*?(?=[,;])", " ".join(head))
        text = f"{kernel.kind}: {shape.split(';')[0]}" + (f", {tile.group(0)}" if tile else "")
        for spec in kernel.specs:  # groups that share a kernel (same tile and epilogue
            # body, other sizes) share its profile rows: name them all
            known = names.get(spec.key)
            names[spec.key] = text if known in (None, text) else f"{known} | {text}"
    return names


def layer_of(name: str, names: dict[str, str]) -> str:
    """The layer ``names`` gives a profiled kernel ``name`` ("" when none does)."""
    match = _LINKED.search(name)
    return names.get(match.group(1), "") if match else ""


def summary(rows: list[tuple[str, float, int]]) -> dict[str, tuple[float, int]]:
    """{kind: (us per call, launches per call)}."""
    out: dict[str, tuple[float, int]] = {}
    for name, us, count in rows:
        kind = kind_of(name)
        t, n = out.get(kind, (0.0, 0))
        out[kind] = (t + us, n + count)
    return out


def timed(
    torch: Any, calls: dict[str, Callable[[], Any]], rounds: int, burst: int = 0
) -> dict[str, dict]:
    """Median ms of each call over ``rounds`` alternating rounds (CUDA events on the current
    stream around one call; the wall clock of the same call, synchronized, beside it); with
    ``burst``, also the ms a call of ``burst`` calls back to back (``burst_ms``: the GPU kept
    busy, as a serving loop keeps it)."""
    gpu: dict[str, list[float]] = {k: [] for k in calls}
    wall: dict[str, list[float]] = {k: [] for k in calls}
    bursts: dict[str, list[float]] = {k: [] for k in calls}
    stream = torch.cuda.current_stream()

    def events(call: Callable[[], Any], count: int) -> tuple[float, float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record(stream)
        for _ in range(count):
            call()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / count, (time.perf_counter() - t0) * 1e3 / count

    for _ in range(rounds):
        for impl, call in calls.items():
            ms, wall_ms = events(call, 1)
            gpu[impl].append(ms)
            wall[impl].append(wall_ms)
            if burst:
                bursts[impl].append(events(call, burst)[0])
    out = {
        k: {"ms": statistics.median(gpu[k]), "wall_ms": statistics.median(wall[k])} for k in calls
    }
    for k in calls if burst else ():
        out[k]["burst_ms"] = statistics.median(bursts[k])
    return out


def profile_model(
    name: str,
    batch: int,
    reps: int,
    top: int,
    variants: list[str],
    rounds: int,
    compare: bool,
    tuned: bool = False,
    reduce_overhead: bool = False,
    burst: int = 0,
    pipelines: tuple[str, ...] = (),
) -> dict:
    import torch
    from models_gpu import ZOO, as_list, errors, export, input_name, prepare, sample, torch_setup
    from profile_cases import kernel_table

    import fusec

    torch_setup("cuda")
    reference, model = prepare(name, "f16", False, "embeds", torch.device("cuda"))
    arg = input_name(ZOO[name], "embeds")
    x = sample(model, name, batch, False, "embeds", torch.float16).cuda()
    result: dict = {"model": name, "batch": batch, "impls": {}}
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        want = as_list(reference(x.float()))
        path = Path(tmp) / f"{name}.onnx"
        export(model, x, path, "dynamo", arg)
        calls: dict[str, Callable[[], Any]] = {}
        names: dict[str, str] = {}
        runs = [("", None), *((v, None) for v in variants), *((p, p) for p in pipelines)]
        if len({variant for variant, _ in runs}) != len(runs):
            raise SystemExit("profile_zoo: a --variant or --pipeline given twice")
        for variant, pipeline in runs:
            setting = dict([variant.split("=", 1)]) if variant and pipeline is None else {}
            with mock.patch.dict(os.environ, setting):
                module = fusec.from_onnx(path, input_shapes={arg: tuple(x.shape)})
                compiled = fusec.compile(module, target="cuda", pipeline=pipeline)
                for _ in range(3):  # warm-up and the graph's recording under the setting too
                    compiled(x)  # (FUSEC_PDL, FUSEC_CUDA_GRAPHS act there)
            calls[f"fusec {variant}".strip()] = functools.partial(compiled, x)
            names |= layer_names(compiled.kernels)
        if tuned:
            records = fusec.compile(module, target="cuda").tune(reps=reps)
            print(f"== {name} b{batch}: fusec tune timed {len(records)} GEMM groups", flush=True)
            for record in records:
                print(f"   {record}", flush=True)
            compiled = fusec.compile(module, target="cuda", tuned=True)
            calls["fusec tuned"] = functools.partial(compiled, x)
            names |= layer_names(compiled.kernels)
        if compare:
            calls["torch.compile"] = functools.partial(torch.compile(model), x)
        if reduce_overhead:  # CUDA graphs: batch 1's like-for-like baseline
            compiled_ro = torch.compile(model, mode="reduce-overhead")
            calls["reduce-overhead"] = functools.partial(compiled_ro, x)
        for impl, call in calls.items():
            err, bad = errors(as_list(call()), want)
            for _ in range(5):
                call()
            rows = kernel_table(torch, call, reps)
            total = sum(us for _, us, _ in rows)
            result["impls"][impl] = {
                "rel_err": err,
                "nonfinite": bad,
                "kernel_us": total,
                "kinds": summary(rows),
                "kernels": [(*row, layer_of(row[0], names)) for row in rows],
            }
            print(
                f"== {name} b{batch} {impl}: rel L2 {err:.1e}, {bad} non-finite, "
                f"GPU kernel time per call {total:.1f} us",
                flush=True,
            )
            for kind, (us, count) in sorted(summary(rows).items(), key=lambda r: -r[1][0]):
                print(f"   {kind:16s} {us:9.1f} us  x{count}")
            for kname, us, count in rows[:top]:
                layer = layer_of(kname, names)
                print(f"   {us:8.1f} us  x{count}  {layer or kname}")
        result["timed"] = timed(torch, calls, rounds, burst)
    for impl, t in result["timed"].items():
        bursts = f", {t['burst_ms']:.4f} ms a call in bursts" if "burst_ms" in t else ""
        print(f"== {name} b{batch} {impl}: {t['ms']:.3f} ms (wall {t['wall_ms']:.3f} ms){bursts}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--top", type=int, default=40, help="kernels listed per impl")
    parser.add_argument("--variant", action="append", default=[], help="ENV=VALUE, fusec again")
    parser.add_argument(
        "--pipeline", action="append", default=[], help="a pipeline (name or spec), fusec again"
    )
    parser.add_argument("--timed", type=int, default=30, help="timed rounds (all impls each)")
    parser.add_argument("--no-torch-compile", action="store_true", help="fusec variants only")
    parser.add_argument("--tuned", action="store_true", help="fusec again from `fusec tune`")
    parser.add_argument(
        "--reduce-overhead",
        action="store_true",
        help='and torch.compile(mode="reduce-overhead") (CUDA graphs), profiled and timed',
    )
    parser.add_argument(
        "--burst", type=int, default=0, help="also time N calls back to back each round"
    )
    parser.add_argument("--json", type=Path, help="write every table here")
    args = parser.parse_args()
    results = [
        profile_model(
            m,
            args.batch,
            args.reps,
            args.top,
            args.variant,
            args.timed,
            not args.no_torch_compile,
            args.tuned,
            args.reduce_overhead,
            args.burst,
            tuple(args.pipeline),
        )
        for m in args.model
    ]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
