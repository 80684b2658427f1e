"""fusec's cuda conv and attention kernels vs PyTorch (eager, torch.compile, cuDNN NHWC, SDPA).

    python benchmarks/conv_attn_bench.py --out benchmarks/results

Cases (fp16): conv N32 C64 56x56 K64 3x3 pad 1 + bias + relu; a ResNet basic
block (conv-bn-relu-conv-bn-add-relu, BatchNorm folded to a per-channel scale
and shift, N32 C64 56x56); attention softmax(Q K^T / 8) V at 32 x 1024 x 64
and 16 x 4096 x 128 (batch x heads flattened). Baselines in the same run:
PyTorch eager (NCHW), torch.compile (default mode), eager channels_last
(cuDNN NHWC) for the convs, ``scaled_dot_product_attention`` for attention.

Every fusec result is first checked against torch in float32 (fresh randn
inputs). fusec is timed twice: plain calls through ``fusec.compile(...)(...)``
(host work per call included) and the replay of a captured CUDA graph (the
kernels alone). Timing: CUDA events on the current stream, median of 30 after
5 warm-ups, each median checked against the wall clock. Writes
conv-attn-<date>.md and .json (date, device, commit).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cuda"))

from attention_cases import attention_graph  # noqa: E402

CONV = """func.func @f(%x: tensor<32x64x56x56xf16>, %w: tensor<64x64x3x3xf16>, %b: tensor<64xf16>) -> tensor<32x64x56x56xf16> {
  %c = ai.conv2d %x, %w {padding = array<i64: 1, 1>} : tensor<32x64x56x56xf16> * tensor<64x64x3x3xf16>
  %y = ai.bias_add %c, %b : tensor<32x64x56x56xf16> * tensor<64xf16>
  %r = ai.relu %y : tensor<32x64x56x56xf16>
  return %r : tensor<32x64x56x56xf16>
}"""  # noqa: E501
T = "tensor<32x64x56x56xf16>"
W = "tensor<64x64x3x3xf16>"
C = "tensor<64x1x1xf16>"
SCALE = 0.125  # attention_graph's constant
RESNET = f"""func.func @block(%x: {T}, %w1: {W}, %s1: {C}, %t1: {C}, %w2: {W}, %s2: {C}, %t2: {C}) -> {T} {{
  %c1 = ai.conv2d %x, %w1 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %m1 = ai.mul %c1, %s1 : {T} * {C}
  %a1 = ai.add %m1, %t1 : {T} * {C}
  %r1 = ai.relu %a1 : {T}
  %c2 = ai.conv2d %r1, %w2 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %m2 = ai.mul %c2, %s2 : {T} * {C}
  %a2 = ai.add %m2, %t2 : {T} * {C}
  %res = ai.add %a2, %x : {T} * {T}
  %out = ai.relu %res : {T}
  return %out : {T}
}}"""  # noqa: E501


def time_it(fn, warmup: int = 5, reps: int = 30) -> float:
    """Median ms of ``fn`` by CUDA events on the current stream, checked against wall clock."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    times = []
    wall0 = time.perf_counter()
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    wall = (time.perf_counter() - wall0) * 1e3 / reps
    times.sort()
    median = times[len(times) // 2]
    if median > wall * 1.05:
        raise RuntimeError(f"event time {median:.4f} ms exceeds wall clock {wall:.4f} ms")
    return median


def check(got, ref) -> float:
    """Elementwise (rtol 1e-2, atol 1e-2 x max|ref|) and relative L2 < 1e-2; NaN fails."""
    import torch

    got, ref = got.float(), ref.float()
    tol = 1e-2 * max(float(ref.abs().max()), 1.0)
    bad = int((~torch.isclose(got, ref, rtol=1e-2, atol=tol) | torch.isnan(got)).sum())
    rel = float((got - ref).norm() / ref.norm())
    if bad or rel > 1e-2:
        raise AssertionError(f"{bad} elements off, rel L2 {rel:.2e}")
    return rel


def graph_ms(compiled, inputs) -> float | None:
    """Median ms of replaying ``compiled`` on ``inputs`` as a CUDA graph on the current
    stream (None, with the reason printed, when the capture fails)."""
    import torch

    try:
        graph = compiled.capture(*inputs)
        return time_it(lambda: graph.replay(torch.cuda.current_stream()))
    except Exception as err:  # keep the plain-call numbers of this case
        print(f"graph capture/replay failed: {type(err).__name__}: {err}", flush=True)
        return None


def main() -> None:
    import torch
    import torch.nn.functional as F

    import fusec

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", default="", help="comma-separated case prefixes")
    args = parser.parse_args()
    only = [s for s in args.only.split(",") if s]
    rows = []

    def wanted(case: str) -> bool:
        return not only or any(case.startswith(p) for p in only)

    def record(case: str, flops: float, min_bytes: float, rel: float, compiled, **ms) -> None:
        # a kernel on the PyTorch fallback is named: the row then does not time fusec's own
        fallback = [k.kind for k in compiled.kernels if k.runs_op_by_op]
        kernels = str(len(compiled.kernels))
        if fallback:
            kernels += f" ({', '.join(fallback)} on PyTorch)"
        row = {"case": case, "rel_l2": rel, "fusec_kernels": kernels, **ms}
        best = ms["fusec_graph_ms"] or ms["fusec_ms"]  # the kernels alone when captured
        row["fusec_tflops"] = flops / best / 1e9
        row["fusec_gbps"] = min_bytes / best / 1e6
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(args.out, rows)  # a later case that fails or hangs keeps this one

    torch.manual_seed(0)
    h = dict(device="cuda", dtype=torch.float16)
    if wanted("conv"):
        x = torch.randn(32, 64, 56, 56, **h)
        w = torch.randn(64, 64, 3, 3, **h) * 0.05
        b = torch.randn(64, **h)
        f = fusec.compile(CONV, target="cuda")

        def conv(x, w, b):
            return torch.relu(F.conv2d(x, w, padding=1) + b.view(1, -1, 1, 1))

        rel = check(f(x, w, b), conv(x.float(), w.float(), b.float()))
        comp = torch.compile(conv)
        comp(x, w, b)
        xl, wl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        record(
            "conv N32 C64 56x56 K64 3x3 + bias + relu",
            2.0 * 32 * 64 * 56 * 56 * 64 * 9,
            2.0 * (2 * x.numel() + w.numel() + b.numel()),
            rel,
            f,
            fusec_ms=time_it(functools.partial(f, x, w, b)),
            fusec_graph_ms=graph_ms(f, (x, w, b)),
            eager_ms=time_it(functools.partial(conv, x, w, b)),
            compile_ms=time_it(functools.partial(comp, x, w, b)),
            channels_last_ms=time_it(functools.partial(conv, xl, wl, b)),
        )
    if wanted("resnet"):
        x = torch.randn(32, 64, 56, 56, **h)
        w1, w2 = (torch.randn(64, 64, 3, 3, **h) * 0.05 for _ in range(2))
        s1, t1, s2, t2 = (torch.rand(64, 1, 1, **h) + 0.5 for _ in range(4))
        inputs = (x, w1, s1, t1, w2, s2, t2)
        f = fusec.compile(RESNET, target="cuda")

        def block(x, w1, s1, t1, w2, s2, t2):
            r1 = torch.relu(F.conv2d(x, w1, padding=1) * s1 + t1)
            return torch.relu(F.conv2d(r1, w2, padding=1) * s2 + t2 + x)

        rel = check(f(*inputs), block(*(t.float() for t in inputs)))
        comp = torch.compile(block)
        comp(*inputs)
        last = [t.to(memory_format=torch.channels_last) if t.dim() == 4 else t for t in inputs]
        record(
            "ResNet basic block N32 C64 56x56 (BN folded)",
            2 * 2.0 * 32 * 64 * 56 * 56 * 64 * 9,
            2.0 * (2 * x.numel() + 2 * w1.numel()),
            rel,
            f,
            fusec_ms=time_it(functools.partial(f, *inputs)),
            fusec_graph_ms=graph_ms(f, inputs),
            eager_ms=time_it(functools.partial(block, *inputs)),
            compile_ms=time_it(functools.partial(comp, *inputs)),
            channels_last_ms=time_it(functools.partial(block, *last)),
        )
    for bh, s, d in ((32, 1024, 64), (16, 4096, 128)):
        case = f"attention {bh}x{s}x{d}"
        if not wanted("attention"):
            continue
        q, k, v = (torch.randn(bh, s, d, **h) for _ in range(3))
        f = fusec.compile(attention_graph((bh,), s, s, d, d, scale="mul"), target="cuda")

        def attention(q, k, v):
            return torch.softmax((q @ k.transpose(-1, -2)) * SCALE, dim=-1) @ v

        def sdpa(q, k, v):  # (1, heads, S, D): the layout its flash kernel takes
            out = F.scaled_dot_product_attention(q[None], k[None], v[None], scale=SCALE)
            return out[0]

        rel = check(f(q, k, v), sdpa(q.float(), k.float(), v.float()))
        comp = torch.compile(attention)
        comp(q, k, v)
        record(
            case,
            4.0 * bh * s * s * d,
            2.0 * 4 * bh * s * d,
            rel,
            f,
            fusec_ms=time_it(functools.partial(f, q, k, v)),
            fusec_graph_ms=graph_ms(f, (q, k, v)),
            eager_ms=time_it(functools.partial(attention, q, k, v)),
            compile_ms=time_it(functools.partial(comp, q, k, v)),
            sdpa_ms=time_it(functools.partial(sdpa, q, k, v)),
        )
        del q, k, v
    write(args.out, rows, final=True)


def write(out: str, rows: list[dict], final: bool = False) -> None:
    """conv-attn-<date>.md and .json with what has been measured so far."""
    import torch

    commit = (
        os.environ.get("FUSEC_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "commit": commit or "?",
        "torch": torch.__version__,
        "timing": "CUDA events on the current stream, median of 30 after 5 warm-ups; "
        "fusec TFLOP/s and GB/s from the CUDA-graph replay (the kernels alone) when captured",
        "rows": rows,
    }
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"conv-attn-{meta['date']}")
    with open(stem + ".json", "w") as handle:
        json.dump(meta, handle, indent=1)
    cols = ["fusec_ms", "fusec_graph_ms", "eager_ms", "compile_ms", "channels_last_ms", "sdpa_ms"]
    lines = [
        f"# fusec cuda conv / attention vs PyTorch ({meta['device']}, {meta['date']}, "
        f"commit {meta['commit']})",
        "",
        "| case | fusec kernels | fusec ms (call) | fusec ms (graph) | eager ms | torch.compile ms "
        "| channels_last ms | SDPA ms | fusec TFLOP/s | fusec GB/s (min bytes) | rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = [f"{r[c]:.4f}" if r.get(c) is not None else "-" for c in cols]
        lines.append(
            f"| {r['case']} | {r['fusec_kernels']} | {' | '.join(cells)} | "
            f"{r['fusec_tflops']:.0f} | {r['fusec_gbps']:.0f} | {r['rel_l2']:.1e} |"
        )
    with open(stem + ".md", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    if final:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
