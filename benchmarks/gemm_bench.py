"""fusec's cuda matmul template (Hopper wgmma GEMM) vs PyTorch eager and torch.compile.

    python benchmarks/gemm_bench.py --out benchmarks/results

Cases (fp16 unless noted): matmul 4096^3 and 8192^3 (fp16, bf16; % of cuBLAS =
torch.matmul in the same run), matmul 4096^3 + bias + relu, the MLP block
(LN -> matmul -> bias -> gelu -> matmul -> bias -> residual, 8192x1024x4096)
and the 2-layer MLP without LN. Every fusec result is checked against torch
in float32 first (fresh randn inputs). Timing: CUDA events on torch's current
stream, median of 20 after 5 warm-ups, checked against the wall clock.
Writes gemm-<date>.md and .json (date, device, commit).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import subprocess
import time

MATMUL = """func.func @f(%a: tensor<{m}x{k}x{t}>, %b: tensor<{k}x{n}x{t}>) -> tensor<{m}x{n}x{t}> {{
  %c = ai.matmul %a, %b : tensor<{m}x{k}x{t}> * tensor<{k}x{n}x{t}>
  return %c : tensor<{m}x{n}x{t}>
}}"""
BIAS_RELU = """func.func @f(%a: tensor<{m}x{k}x{t}>, %b: tensor<{k}x{n}x{t}>, %bias: tensor<{n}x{t}>) -> tensor<{m}x{n}x{t}> {{
  %c = ai.matmul %a, %b : tensor<{m}x{k}x{t}> * tensor<{k}x{n}x{t}>
  %d = ai.bias_add %c, %bias {{axis = 1 : i64}} : tensor<{m}x{n}x{t}> * tensor<{n}x{t}>
  %e = ai.relu %d : tensor<{m}x{n}x{t}>
  return %e : tensor<{m}x{n}x{t}>
}}"""  # noqa: E501
MLP = """func.func @f(%x: tensor<{m}x{d}xf16>, %g: tensor<{d}xf16>, %be: tensor<{d}xf16>, %w1: tensor<{d}x{h}xf16>, %b1: tensor<{h}xf16>, %w2: tensor<{h}x{d}xf16>, %b2: tensor<{d}xf16>) -> tensor<{m}x{d}xf16> {{
  {ln}
  %h = ai.matmul {src}, %w1 : tensor<{m}x{d}xf16> * tensor<{d}x{h}xf16>
  %hb = ai.bias_add %h, %b1 {{axis = 1 : i64}} : tensor<{m}x{h}xf16> * tensor<{h}xf16>
  %a = ai.gelu %hb {{approximate = "tanh"}} : tensor<{m}x{h}xf16>
  %o = ai.matmul %a, %w2 : tensor<{m}x{h}xf16> * tensor<{h}x{d}xf16>
  %ob = ai.bias_add %o, %b2 {{axis = 1 : i64}} : tensor<{m}x{d}xf16> * tensor<{d}xf16>
  %y = ai.add %ob, %x : tensor<{m}x{d}xf16> * tensor<{m}x{d}xf16>
  return %y : tensor<{m}x{d}xf16>
}}"""  # noqa: E501
LN = "%n = ai.layernorm %x, %g, %be : tensor<{m}x{d}xf16> * tensor<{d}xf16> * tensor<{d}xf16>"


def time_it(fn, warmup: int = 5, reps: int = 20) -> float:
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
        raise RuntimeError(f"event time {median:.3f} ms exceeds wall clock {wall:.3f} ms")
    return median


def check(got, ref) -> float:
    import torch

    got, ref = got.float(), ref.float()
    tol = 1e-2 * max(float(ref.abs().max()), 1.0)
    bad = int((~torch.isclose(got, ref, rtol=1e-2, atol=tol) | torch.isnan(got)).sum())
    rel = float((got - ref).norm() / ref.norm())
    if bad or rel > 1e-2:
        raise AssertionError(f"{bad} elements off, rel L2 {rel:.2e}")
    return rel


def main() -> None:
    import torch
    import torch.nn.functional as F

    import fusec

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    rows = []
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}

    def record(case, fusec_ms, eager_ms, compile_ms, flops, rel, **extra):
        row = {
            "case": case,
            "fusec_ms": fusec_ms,
            "eager_ms": eager_ms,
            "compile_ms": compile_ms,
            "rel_l2": rel,
            **extra,
        }
        if flops:
            row["fusec_tflops"] = flops / fusec_ms / 1e9
            row["pct_of_eager"] = 100 * eager_ms / fusec_ms
        rows.append(row)
        print(json.dumps(row), flush=True)

    for size in (4096, 8192):
        for t in ("f16", "bf16"):
            a = torch.randn(size, size, device="cuda", dtype=tdt[t])
            b = torch.randn(size, size, device="cuda", dtype=tdt[t])
            f = fusec.compile(MATMUL.format(m=size, n=size, k=size, t=t), target="cuda")
            rel = check(f(a, b), a.float() @ b.float())
            ms = time_it(functools.partial(f, a, b))
            eager = time_it(functools.partial(torch.matmul, a, b))
            record(f"matmul {size}^3 {t}", ms, eager, None, 2.0 * size**3, rel)
    size = 4096
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    bias = torch.randn(size, device="cuda", dtype=torch.float16)
    f = fusec.compile(BIAS_RELU.format(m=size, n=size, k=size, t="f16"), target="cuda")

    def bias_relu(x, y, z):
        return torch.relu(x @ y + z)

    rel = check(f(a, b, bias), torch.relu(a.float() @ b.float() + bias.float()))
    comp = torch.compile(bias_relu)
    comp(a, b, bias)
    record(
        "matmul 4096^3 + bias + relu",
        time_it(functools.partial(f, a, b, bias)),
        time_it(functools.partial(bias_relu, a, b, bias)),
        time_it(functools.partial(comp, a, b, bias)),
        2.0 * size**3,
        rel,
    )
    m, d, h = 8192, 1024, 4096
    for with_ln in (True, False):
        x = torch.randn(m, d, device="cuda", dtype=torch.float16)
        g = torch.randn(d, device="cuda", dtype=torch.float16)
        be = torch.randn(d, device="cuda", dtype=torch.float16)
        w1 = torch.randn(d, h, device="cuda", dtype=torch.float16) * 0.03
        b1 = torch.randn(h, device="cuda", dtype=torch.float16)
        w2 = torch.randn(h, d, device="cuda", dtype=torch.float16) * 0.03
        b2 = torch.randn(d, device="cuda", dtype=torch.float16)
        text = MLP.format(
            m=m, d=d, h=h, ln=LN.format(m=m, d=d) if with_ln else "", src="%n" if with_ln else "%x"
        )
        f = fusec.compile(text, target="cuda")

        def mlp(x, g, be, w1, b1, w2, b2, with_ln=with_ln):
            n = F.layer_norm(x, (d,), g, be) if with_ln else x
            hh = F.gelu(n @ w1 + b1, approximate="tanh")
            return hh @ w2 + b2 + x

        inputs = (x, g, be, w1, b1, w2, b2)
        ref = mlp(*(t.float() for t in inputs))
        rel = check(f(*inputs), ref)
        comp = torch.compile(mlp)
        comp(*inputs)
        record(
            f"MLP {'LN ' if with_ln else ''}8192x1024x4096",
            time_it(functools.partial(f, *inputs)),
            time_it(functools.partial(mlp, *inputs)),
            time_it(functools.partial(comp, *inputs)),
            4.0 * m * d * h,
            rel,
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip() or os.environ.get("FUSEC_COMMIT", "?")
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "commit": commit,
        "torch": torch.__version__,
        "rows": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"gemm-{meta['date']}")
    with open(stem + ".json", "w") as handle:
        json.dump(meta, handle, indent=1)
    lines = [
        f"# fusec cuda GEMM vs PyTorch ({meta['device']}, {meta['date']}, commit {commit})",
        "",
        "| case | fusec ms | eager ms | torch.compile ms | fusec TFLOP/s | % of eager "
        "(cuBLAS for plain matmul) | rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        comp = f"{r['compile_ms']:.4f}" if r["compile_ms"] else "-"
        lines.append(
            f"| {r['case']} | {r['fusec_ms']:.4f} | {r['eager_ms']:.4f} | {comp} | "
            f"{r.get('fusec_tflops', 0):.0f} | {r.get('pct_of_eager', 0):.1f} | "
            f"{r['rel_l2']:.1e} |"
        )
    with open(stem + ".md", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
