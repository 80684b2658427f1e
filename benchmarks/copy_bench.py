"""GPU benchmark of the cuda copy kernels (issue 28) against PyTorch's permute + contiguous.

Cases (f16): the attention head split ``[B,S,E] -> [B,H,S,D]``, the head merge
``[B,H,S,D] -> [B,S,E]``, the K transpose ``[B,H,S,D] -> [B,H,D,S]`` and the packed QKV
unpacking ``[B,S,3E] -> [3,B,S,E]`` (nn.MultiheadAttention's) at ViT-B/16 batch 32
(S = 197, a multiple of nothing) and BERT-base batch 8 (S = 128) shapes (H = 12, D = 64),
ViT's class-token concat, and a batch of 224 x 224 RGB images NCHW -> NHWC. Each case is one
``ai.fused "copy"`` group; the table names the path its kernel took (vectorised,
tiled transpose, gather).

Each fusec result is first compared bit for bit with PyTorch's. Timing: CUDA events on
the caller's stream (torch's current stream) around one call, L2 flushed before each
(``gpu_bench.event_ms``: median of 50 runs); the same for ``x.permute(...).contiguous()``
and for the same group forced onto the generic gather kernel (one element per thread:
the path every copy group took before issue 28, though now with 32-bit index arithmetic),
in the same run. GB/s counts the bytes read and written once; % is of the H200's 4.8 TB/s.
A stream check (events vs the wall clock over 20 back-to-back calls) fails the run when
fusec's work is not ordered on the caller's stream.

    python benchmarks/copy_bench.py --out benchmarks/results     # on the GPU
    python benchmarks/copy_bench.py --smoke                      # CPU: CUDA simulator

``--smoke`` runs the same cases at tiny sizes under Numba's CUDA simulator (no GPU, no
torch): each result is checked bit for bit against numpy and its path printed; no times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PEAK_GBS = 4800.0  # the H200's HBM3e bandwidth


@dataclass(frozen=True)
class Case:
    """One copy group: ``ir`` (an ai.fused "copy" of the inputs ``shapes``), ``numpy`` and
    ``torch`` (called with the torch module first) computing the same result, the torch
    one as PyTorch code would."""

    label: str
    ir: str
    shapes: tuple[tuple[int, ...], ...]
    numpy: Callable
    torch: Callable


def _t(shape, dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def group(ins: list[tuple[int, ...]], out: tuple[int, ...], body: list[str], dtype: str) -> str:
    """A function of one copy group over inputs ``%x0..`` (``%a0..`` inside)."""
    args = ", ".join(f"%x{k}: {_t(s, dtype)}" for k, s in enumerate(ins))
    operands = ", ".join(f"%x{k}" for k in range(len(ins)))
    types = ", ".join(_t(s, dtype) for s in ins)
    inner = ", ".join(f"%a{k}: {_t(s, dtype)}" for k, s in enumerate(ins))
    rt = _t(out, dtype)
    return "\n".join(
        [
            f"func.func @copy({args}) -> {rt} {{",
            f'  %r = ai.fused "copy" ({operands}) : ({types}) -> {rt} {{',
            f"  ^bb0({inner}):",
            *(f"    {line}" for line in body),
            f"    ai.yield %y : {rt}",
            "  }",
            f"  return %r : {rt}",
            "}",
        ]
    )


def transformer_cases(model: str, b: int, s: int, h: int, d: int, dtype: str = "f16") -> list:
    """The head split, head merge, K transpose and QKV unpacking of one attention shape."""
    e = h * d
    t = lambda shape: _t(shape, dtype)  # noqa: E731
    arr = lambda shape: ", ".join(map(str, shape))  # noqa: E731
    split = group(
        [(b, s, e)],
        (b, h, s, d),
        [
            f"%v = ai.reshape %a0 {{shape = array<i64: {arr((b, s, h, d))}>}} : {t((b, s, e))}",
            f"%y = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {t((b, s, h, d))}",
        ],
        dtype,
    )
    merge = group(
        [(b, h, s, d)],
        (b, s, e),
        [
            f"%v = ai.transpose %a0 {{perm = array<i64: 0, 2, 1, 3>}} : {t((b, h, s, d))}",
            f"%y = ai.reshape %v {{shape = array<i64: {arr((b, s, e))}>}} : {t((b, s, h, d))}",
        ],
        dtype,
    )
    k_t = group(
        [(b, h, s, d)],
        (b, h, d, s),
        [f"%y = ai.transpose %a0 {{perm = array<i64: 0, 1, 3, 2>}} : {t((b, h, s, d))}"],
        dtype,
    )
    qkv = group(
        [(b, s, 3 * e)],
        (3, b, s, e),
        [
            f"%v = ai.reshape %a0 {{shape = array<i64: {arr((b, s, 3, e))}>}} : {t((b, s, 3 * e))}",
            f"%y = ai.transpose %v {{perm = array<i64: 2, 0, 1, 3>}} : {t((b, s, 3, e))}",
        ],
        dtype,
    )
    name = f"{model} b{b} s{s}"
    return [
        Case(
            f"{name} head split",
            split,
            ((b, s, e),),
            lambda x: x.reshape(b, s, h, d).transpose(0, 2, 1, 3),
            lambda torch, x: x.view(b, s, h, d).permute(0, 2, 1, 3).contiguous(),
        ),
        Case(
            f"{name} head merge",
            merge,
            ((b, h, s, d),),
            lambda x: x.transpose(0, 2, 1, 3).reshape(b, s, e),
            lambda torch, x: x.permute(0, 2, 1, 3).contiguous().view(b, s, e),
        ),
        Case(
            f"{name} K transpose",
            k_t,
            ((b, h, s, d),),
            lambda x: x.transpose(0, 1, 3, 2),
            lambda torch, x: x.transpose(-1, -2).contiguous(),
        ),
        Case(
            f"{name} QKV unpack",
            qkv,
            ((b, s, 3 * e),),
            lambda x: x.reshape(b, s, 3, e).transpose(2, 0, 1, 3),
            lambda torch, x: x.view(b, s, 3, e).permute(2, 0, 1, 3).contiguous(),
        ),
    ]


def concat_case(model: str, b: int, s: int, e: int, dtype: str = "f16") -> Case:
    """ViT's class token before the patch embeddings (a concat of two group inputs)."""
    out = (b, s, e)
    ir = group(
        [(b, 1, e), (b, s - 1, e)],
        out,
        [
            f"%y = ai.concat %a0, %a1 {{axis = 1 : i64}} : {_t((b, 1, e), dtype)} * "
            f"{_t((b, s - 1, e), dtype)}"
        ],
        dtype,
    )
    return Case(
        f"{model} b{b} s{s} class-token concat",
        ir,
        ((b, 1, e), (b, s - 1, e)),
        lambda c, x: np.concatenate([c, x], axis=1),
        lambda torch, c, x: torch.cat([c, x], dim=1),
    )


def channels_last_case(model: str, n: int, c: int, hw: int, dtype: str = "f16") -> Case:
    """An image batch NCHW -> NHWC (3 channels: the relayout kernel's C % 8 refuses it)."""
    ir = group(
        [(n, c, hw, hw)],
        (n, hw, hw, c),
        [f"%y = ai.transpose %a0 {{perm = array<i64: 0, 2, 3, 1>}} : {_t((n, c, hw, hw), dtype)}"],
        dtype,
    )
    return Case(
        f"{model} b{n} input NCHW -> NHWC",
        ir,
        ((n, c, hw, hw),),
        lambda x: x.transpose(0, 2, 3, 1),
        lambda torch, x: x.permute(0, 2, 3, 1).contiguous(),
    )


def all_cases(smoke: bool) -> list[Case]:
    if smoke:  # tiny, and S odd as ViT's
        return [
            *transformer_cases("ViT-like", 2, 5, 2, 8),
            concat_case("ViT-like", 2, 5, 16),
            channels_last_case("ResNet-like", 2, 3, 6),
        ]
    return [
        *transformer_cases("ViT-B/16", 32, 197, 12, 64),
        *transformer_cases("BERT-base", 8, 128, 12, 64),
        concat_case("ViT-B/16", 32, 197, 768),
        channels_last_case("ResNet-50", 32, 3, 224),
    ]


def path_of(source: str) -> str:
    """The path a copy kernel's header names."""
    for line in source.splitlines():
        if "path: " in line:
            return line.split("path: ", 1)[1].split(" (", 1)[0]
    return "?"


def smoke() -> int:
    """Every case under the CUDA simulator at tiny sizes, bit-exact against numpy."""
    import fusec

    rng = np.random.default_rng(0)
    bad = 0
    for case in all_cases(smoke=True):
        compiled = fusec.compile(case.ir, target="cuda", pipeline="infer-shapes")
        args = [rng.standard_normal(s).astype(np.float16) for s in case.shapes]
        baseline = compile_as_gather(fusec, case.ir)
        want = np.ascontiguousarray(case.numpy(*args)).view(np.uint16)
        same = True
        for program in (compiled, baseline):
            (out,) = program._runner(args, poison=True)
            same = same and np.array_equal(np.asarray(out).view(np.uint16), want)
        bad += not same
        paths = ", ".join(path_of(k.source) for k in compiled.kernels)
        paths += " (baseline: " + ", ".join(path_of(k.source) for k in baseline.kernels) + ")"
        print(f"{case.label}: {paths}: {'bit-exact' if same else 'DIFFERS from numpy'}")
    return 1 if bad else 0


def compile_as_gather(fusec, ir: str):
    """``ir`` compiled with every copy group on the generic gather kernel (the benchmark's
    baseline: ``gather.copy_plan`` answers "gather" while it compiles)."""
    from fusec.targets.cuda import gather, strided

    planned = gather.copy_plan
    gather.copy_plan = lambda op: strided.CopyPlan("gather", "forced by copy_bench.py")
    try:
        return fusec.compile(ir, target="cuda", pipeline="infer-shapes")
    finally:
        gather.copy_plan = planned


def measure(torch, fusec, case: Case, event_ms, stream_check) -> dict:
    """Check fusec (and its gather baseline) against torch bit for bit, then time all."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.randn(s, device="cuda", generator=gen).half() for s in case.shapes]
    compiled = fusec.compile(case.ir, target="cuda", pipeline="infer-shapes")
    baseline = compile_as_gather(fusec, case.ir)
    ours, theirs = compiled(*inputs), baseline(*inputs)
    ref = case.torch(torch, *inputs)
    torch.cuda.synchronize()
    exact = all(torch.equal(t.view(torch.int16), ref.view(torch.int16)) for t in (ours, theirs))
    fusec_ms = event_ms(torch, lambda: compiled(*inputs))
    replay_ms = replay_event_ms(torch, compiled, inputs, event_ms)
    gather_ms = event_ms(torch, lambda: baseline(*inputs))
    torch_ms = event_ms(torch, lambda: case.torch(torch, *inputs))
    check = stream_check(torch, lambda: compiled(*inputs), calls=STREAM_CALLS)
    nbytes = 2 * ref.numel() * ref.element_size()
    return {
        "case": case.label,
        "path": ", ".join(path_of(k.source) for k in compiled.kernels),
        "bytes": nbytes,
        "bit_exact": exact,
        "fusec_ms": fusec_ms,
        "replay_ms": replay_ms,
        "torch_ms": torch_ms,
        "gather_ms": gather_ms,
        "gather_over_fusec": gather_ms / fusec_ms,
        "fusec_gbs": nbytes / fusec_ms / 1e6,
        "torch_gbs": nbytes / torch_ms / 1e6,
        "fusec_pct_peak": 100 * nbytes / fusec_ms / 1e6 / PEAK_GBS,
        "torch_pct_peak": 100 * nbytes / torch_ms / 1e6 / PEAK_GBS,
        "torch_over_fusec": torch_ms / fusec_ms,
        **check,
    }


#: Back-to-back calls of the stream check (its wall clock over them: the host cost per call).
STREAM_CALLS = 20


def replay_event_ms(torch, compiled, inputs, event_ms) -> float:
    """The same call captured once as a CUDA graph and replayed (one graph launch: the
    kernel's time without the Python call's host cost, which the single-call events can
    include when the call takes longer to enqueue than the L2 flush before it runs);
    NaN when the call cannot be captured (said on stdout)."""
    try:
        return event_ms(torch, compiled.capture(*inputs).replay)
    except Exception as err:  # timing the rest still says something
        print(f"no CUDA graph replay: {type(err).__name__}: {err}", flush=True)
        return float("nan")


def render(meta: dict, rows: list[dict]) -> str:
    lines = [
        f"# fusec copy kernels vs PyTorch, {meta['date']}, {meta['device']}",
        "",
        f"Commit {meta['commit']}; torch {meta['torch']}; {meta['timing']}. % is of "
        f"{PEAK_GBS:.0f} GB/s; the measured device-to-device copy: "
        f"{meta['copy_bandwidth_gbs']:.0f} GB/s. Command: `{meta['command']}`.",
        "",
        "`fusec replay us`: the call captured as a CUDA graph and replayed (no host cost); "
        f"`host us / call`: the wall clock of {STREAM_CALLS} back-to-back calls over "
        f"{STREAM_CALLS} (the Python "
        "call's cost when it exceeds the kernel's).",
        "",
        "| case | path | MB moved | fusec us | fusec replay us | host us / call "
        "| fusec GB/s (% peak) | torch us "
        "| torch GB/s (% peak) | torch / fusec | gather us | gather / fusec | bit-exact "
        "| stream check |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['path']} | {r['bytes'] / 1e6:.1f} | {1e3 * r['fusec_ms']:.1f} | "
            f"{1e3 * r.get('replay_ms', math.nan):.1f} | "
            f"{1e3 * r['loop_wall_ms'] / STREAM_CALLS:.1f} | "
            f"{r['fusec_gbs']:.0f} ({r['fusec_pct_peak']:.0f}%) | {1e3 * r['torch_ms']:.1f} | "
            f"{r['torch_gbs']:.0f} ({r['torch_pct_peak']:.0f}%) | {r['torch_over_fusec']:.2f}x | "
            f"{1e3 * r['gather_ms']:.1f} | {r['gather_over_fusec']:.2f}x | "
            f"{'yes' if r['bit_exact'] else 'NO'} | "
            f"{'ok' if r['stream_check_ok'] else 'FAILED'} ({r['loop_event_ms']:.2f} events, "
            f"{r['loop_wall_ms']:.2f} wall) |"
        )
    lines.append("")
    return "\n".join(lines)


def gpu(out_dir: str) -> int:
    import subprocess

    import torch

    import fusec

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_bench import REPS, WARMUP, event_ms, measure_copy, stream_check

    rows = []
    for case in all_cases(smoke=False):
        row = measure(torch, fusec, case, event_ms, stream_check)
        rows.append(row)
        print(json.dumps(row), flush=True)
    _, copy_gbs = measure_copy(torch, lambda fn: event_ms(torch, fn), torch.device("cuda"))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_properties(0).name,
        "commit": commit or "?",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "copy_bandwidth_gbs": copy_gbs,
        "timing": f"median of CUDA events on the caller's stream around one call, L2 flushed "
        f"before each ({REPS} runs after {WARMUP} warm-up calls)",
        "command": "python benchmarks/copy_bench.py",
    }
    md = render(meta, rows)
    print(md)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "copy"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    (out / f"{stem}.md").write_text(md)
    bad = [r for r in rows if not r["bit_exact"] or not r["stream_check_ok"]]
    return 1 if bad or not all(math.isfinite(r["fusec_ms"]) for r in rows) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results", help="folder for .md and .json")
    parser.add_argument("--smoke", action="store_true", help="CPU: tiny cases, CUDA simulator")
    args = parser.parse_args()
    if args.smoke:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba.cuda is imported
        return smoke()
    return gpu(args.out)


if __name__ == "__main__":
    sys.exit(main())
