"""fusec's cuda matmul template (Hopper wgmma GEMM) vs cuBLAS, PyTorch eager, torch.compile.

    python benchmarks/gemm_bench.py --out benchmarks/results

Cases (fp16 unless noted): matmul 4096^3 and 8192^3 (fp16, bf16), matmul
4096^3 + bias + relu, the MLP block (LN -> matmul -> bias -> gelu -> matmul ->
bias -> residual, 8192x1024x4096) and the same without LN, LN(8192x4096) ->
matmul(4096x4096) -> softmax (fusec: a GEMM group with the LayerNorm prologue and a
softmax kernel; also fusec-cuda-long-softmax: one group, long-row softmax
partials + finalise) and
LN(8192x256) -> matmul(256x256) -> softmax (one group, row softmax in the
epilogue). Every result is checked against torch in float32 first (fresh
randn inputs; elementwise, rtol 1e-2, atol 1e-2 x max|ref|; NaN fails).

Three times per implementation, CUDA events on torch's current stream (the
caller's stream, which fusec launches on), each checked against the wall clock:

* ``gpu``: the GPU time alone: one call captured as a CUDA graph, replayed
  back to back (events around 20 replays, median of 7);
* ``call``: one call on an idle GPU (synchronised before; events around the
  call, so the host's work before the first launch counts), median of 20;
* ``stream``: 20 calls back to back (events around them, per call): the host's
  per-call cost overlaps the GPU's work when it is the shorter.

``host_us`` is the CPU time of one call (back to back, no synchronisation).
"% of cuBLAS" (plain matmuls) and "vs eager" compare ``gpu`` times. Inputs are
reused between repetitions (no L2 flush): the same for every implementation.
Writes gemm.md and .json (date, device, commit).

    python benchmarks/gemm_bench.py --tf32 --out benchmarks/results

runs the f32 cases instead (issue 28): fusec compiled with ``precision="tf32"`` (wgmma
with tf32 operands) against cuBLAS / PyTorch in tf32
(``torch.set_float32_matmul_precision("high")``): matmul 4096^3 and 8192^3 with B stored
N x K (``transpose_b``: the kernel reads it directly) and K x N (the plain ``a @ b``: the
kernel first copies B K-major), and 4096^3 + bias + relu; checked like the others (rel L2
< 1e-2 against torch in float64 here: tf32 is ~1e-3 off). Writes gemm-tf32.md/.json.

    python benchmarks/gemm_bench.py --fp8 --out benchmarks/results

runs the float8 cases (issue 31): fusec's GEMM on e4m3 codes (``dequantize`` of both
operands with per-tensor scales, matmul, bf16 out; A M x K, B N x K) against
``torch._scaled_mm`` (cuBLASLt fp8, the "eager" columns) and, in the same run, fusec's and
cuBLAS's fp16 GEMM of the same shape (B N x K), at 4096^3 and 8192^3; checked against the
f32 product of the codes (rel L2 < 1e-2); then the FP8 MLP block (4096 x 4096 x 14336:
quantize, e4m3 GEMM + bias + GELU + quantize (e4m3 codes out), e4m3 GEMM + bias) against
the same block in bf16 under eager PyTorch and torch.compile. Writes gemm-fp8.md/.json.

    python benchmarks/gemm_bench.py --w4 --out benchmarks/results

runs the weight-only int4 cases (W4A16, issue 31): x (M x 4096, bf16) @ dequantize(int4
codes 4096 x 4096, a constant; bf16 scales and int4 zero points per block of 128 rows) at
M = 1, 16 (the W4A16 route: packed codes into the Tensor Cores) and 4096 (a dequantize kernel,
then the Tensor Core GEMM), and at M = 1 on larger weights (``W4_DECODE_LAYERS``: up to
8192 x 28672), against cuBLAS's bf16 GEMM of the dequantized weight (the
"eager" columns) and fusec's own bf16 GEMM of it, in the same run; the achieved bandwidth
of the weight's bytes (packed 4-bit codes, scales, zero points) against the GPU's HBM
peak. Checked against the
f32 product with the dequantized weight (rel L2 < 1e-2). Writes gemm-w4.md/.json.

    ncu --profile-from-start off --set full -o w4 python3 benchmarks/gemm_bench.py --w4-profile 0

profiles one call of ``--w4-ring-sweep``'s variant 0 (the default ring; ``W4_RING_VARIANTS``
gives the others' indices) at M = 1 on the 8192 x 28672 layer: the generated kernel alone.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import sys
import time
from collections.abc import Iterator, Sequence
from typing import NamedTuple

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
MATMUL_BT = """func.func @f(%a: tensor<{m}x{k}x{t}>, %b: tensor<{n}x{k}x{t}>) -> tensor<{m}x{n}x{t}> {{
  %c = ai.matmul %a, %b {{transpose_b = true}} : tensor<{m}x{k}x{t}> * tensor<{n}x{k}x{t}>
  return %c : tensor<{m}x{n}x{t}>
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
LN_SOFTMAX = """func.func @f(%x: tensor<{m}x{k}xf16>, %g: tensor<{k}xf16>, %be: tensor<{k}xf16>, %w: tensor<{k}x{n}xf16>) -> tensor<{m}x{n}xf16> {{
  %y = ai.layernorm %x, %g, %be : tensor<{m}x{k}xf16> * tensor<{k}xf16> * tensor<{k}xf16>
  %h = ai.matmul %y, %w : tensor<{m}x{k}xf16> * tensor<{k}x{n}xf16>
  %p = ai.softmax %h : tensor<{m}x{n}xf16>
  return %p : tensor<{m}x{n}xf16>
}}"""  # noqa: E501

REPS = 20
#: (m, k, n) of transformer projections at batch 1, and a square problem the large tiles
#: leave half-idle
SMALL_M = (
    (128, 768, 3072),
    (128, 3072, 768),
    (128, 768, 2304),
    (197, 768, 3072),
    (1024, 1024, 1024),
)


def _wall_checked(events_ms: float, wall_ms: float, what: str) -> None:
    if events_ms > wall_ms * 1.05:
        raise RuntimeError(f"{what}: event time {events_ms:.4f} ms > wall clock {wall_ms:.4f} ms")


def time_call(fn) -> float:
    """Median ms of one call on an idle GPU (host work before the launch included)."""
    import torch

    stream = torch.cuda.current_stream()
    times = []
    for _ in range(REPS):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        wall0 = time.perf_counter()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        wall = (time.perf_counter() - wall0) * 1e3
        times.append(start.elapsed_time(end))
        _wall_checked(times[-1], wall, "call")
    times.sort()
    return times[len(times) // 2]


def time_stream(fn) -> tuple[float, float]:
    """(ms per call of REPS back-to-back calls, host us per call), medians of 5."""
    import torch

    stream = torch.cuda.current_stream()
    per_call, host = [], []
    for _ in range(5):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        wall0 = time.perf_counter()
        start.record(stream)
        for _ in range(REPS):
            fn()
        host.append((time.perf_counter() - wall0) * 1e6 / REPS)
        end.record(stream)
        end.synchronize()
        wall = (time.perf_counter() - wall0) * 1e3
        _wall_checked(start.elapsed_time(end), wall, "stream")
        per_call.append(start.elapsed_time(end) / REPS)
    per_call.sort()
    host.sort()
    return per_call[2], host[2]


def time_gpu(replay) -> float:
    """Median ms of one graph replay (REPS replays between events, 7 times)."""
    import torch

    stream = torch.cuda.current_stream()
    for _ in range(3):
        replay()
    times = []
    for _ in range(7):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        wall0 = time.perf_counter()
        start.record(stream)
        for _ in range(REPS):
            replay()
        end.record(stream)
        end.synchronize()
        wall = (time.perf_counter() - wall0) * 1e3
        _wall_checked(start.elapsed_time(end), wall, "gpu")
        times.append(start.elapsed_time(end) / REPS)
    times.sort()
    return times[len(times) // 2]


def time_gpu_cold(replay) -> float:
    """Median ms of one graph replay with a cold L2 (weights from HBM, as in a model whose
    layers' weights exceed the L2): ``gpu_bench.event_ms``, a 256 MB buffer written before
    each replay, the events around the replay alone."""
    import torch
    from gpu_bench import event_ms

    return event_ms(torch, replay)


def torch_graph(fn):
    """A replay function of ``fn`` captured as a torch CUDA graph (None if capture fails)."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay
    except Exception as err:  # e.g. a torch.compile'd function that cannot be captured
        print(f"  (graph capture failed: {type(err).__name__}: {str(err)[:120]})", flush=True)
        return None


def fusec_graph(compiled, args):
    import torch

    try:
        graph = compiled.capture(*args)
    except Exception as err:
        print(f"  (fusec capture failed: {type(err).__name__}: {str(err)[:160]})", flush=True)
        return None
    stream = torch.cuda.current_stream()
    return lambda: graph.replay(stream)


def measure(fn, replay, cold: bool = False) -> dict:
    call = time_call(fn)
    stream_ms, host_us = time_stream(fn)
    gpu = time_gpu(replay) if replay is not None else None
    row = {"gpu_ms": gpu, "call_ms": call, "stream_ms": stream_ms, "host_us": host_us}
    if cold and replay is not None:
        row["cold_ms"] = time_gpu_cold(replay)
    return row


def check(got, ref, bound: float = 1e-2) -> float:
    import torch

    got, ref = got.float(), ref.float()
    tol = bound * max(float(ref.abs().max()), 1e-6)
    bad = int((~torch.isclose(got, ref, rtol=bound, atol=tol) | torch.isnan(got)).sum())
    rel = float((got - ref).norm() / ref.norm())
    if bad or rel > bound:
        raise AssertionError(f"{bad} elements off, rel L2 {rel:.2e}")
    return rel


def main() -> int:
    import torch
    import torch.nn.functional as F

    import fusec

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", default="", help="run cases whose name contains this")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="the f32 cases in tf32 instead (fusec precision='tf32' vs torch 'high')",
    )
    parser.add_argument(
        "--w4",
        action="store_true",
        help="the weight-only int4 cases instead (W4A16 vs the bf16 GEMMs, HBM bandwidth)",
    )
    parser.add_argument(
        "--fp8",
        action="store_true",
        help="the float8 cases instead (fusec's e4m3 GEMM vs torch._scaled_mm and fp16 GEMMs)",
    )
    parser.add_argument(
        "--w4-sweep",
        action="store_true",
        help="the W4A16 route's warp shapes (columns x words in flight) at M = 1, 4, 16 "
        "against the dequantize + GEMM road (printed)",
    )
    parser.add_argument(
        "--w4-decode",
        action="store_true",
        help="the W4A16 kernel ($FUSEC_W4_KERNEL's) at M = 1 on the decode layers, warm and "
        "cold, one line a layer (printed: the same-call A/B of its loops)",
    )
    parser.add_argument(
        "--w4-ring-sweep",
        nargs="?",
        type=int,
        const=len(W4_RING_VARIANTS),
        metavar="FIRST",
        help="the W4A16 Tensor Core kernel's knobs (W4_RING_VARIANTS, or its FIRST variants) at "
        "M = 1 on the 8192 x 28672 layer, warm and cold (printed)",
    )
    parser.add_argument(
        "--w4-profile",
        type=int,
        metavar="I",
        help="one call of --w4-ring-sweep's variant I (0: the default) on the 8192 x 28672 "
        "layer between cudaProfilerStart/Stop, after warm-up calls, for "
        "`ncu --profile-from-start off --set full python3 benchmarks/gemm_bench.py "
        "--w4-profile I`",
    )
    parser.add_argument(
        "--w4-routes",
        action="store_true",
        help="the W4A16 layer past 16 rows by both routes ($FUSEC_W4_GEMM: dequantize kernel "
        "+ GEMM, or the GEMM's producer dequantizing), M from 32 to 4096 "
        "(gemm-w4-routes.md/.json)",
    )
    parser.add_argument(
        "--moe",
        action="store_true",
        help="the MoE experts layer instead (vs a PyTorch loop over experts, dense GEMMs)",
    )
    args = parser.parse_args()
    rows: list[dict] = []
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}
    precision = "tf32" if args.tf32 else "ieee"
    prefix = "gemm-tf32" if args.tf32 else "gemm-fp8" if args.fp8 else "gemm"
    prefix = "gemm-w4" if args.w4 else "gemm-moe" if args.moe else prefix

    def bench(
        case,
        text,
        inputs,
        reference,
        flops,
        pipeline=None,
        compile_fn=True,
        exact=None,
        bound=1e-2,
        cold=False,
    ):
        """``exact``: the reference of the check when ``reference`` (timed as "eager") cannot
        take float copies of the inputs (``torch._scaled_mm``); ``bound``: the check's;
        ``cold``: also time fusec and eager with a cold L2 (``time_gpu_cold``)."""
        if args.only and args.only not in case:
            return
        print(f"== {case}", flush=True)
        row: dict = {"case": case, "flops": flops}
        try:
            t0 = time.perf_counter()
            compiled = fusec.compile(text, target="cuda", pipeline=pipeline, precision=precision)
            out = compiled(*inputs)  # builds and loads the kernels
            torch.cuda.synchronize()
            row["fusec_first_call_s"] = time.perf_counter() - t0
            row["kernels"] = [k.kind for k in compiled.kernels]
            ref = (exact or reference)(*(t.double() if args.tf32 else t.float() for t in inputs))
            row["rel_l2"] = check(out, ref, bound)
            call = functools.partial(compiled, *inputs)
            row["fusec"] = measure(call, fusec_graph(compiled, inputs), cold)
        except Exception as err:
            row["fusec_error"] = f"{type(err).__name__}: {err}"[:400]
            print("  fusec FAILED:", row["fusec_error"], flush=True)
        eager = functools.partial(reference, *inputs)
        row["eager"] = measure(eager, torch_graph(eager), cold)
        if compile_fn and not args.no_compile:
            try:
                t0 = time.perf_counter()
                comp = torch.compile(reference)
                comp(*inputs)
                torch.cuda.synchronize()
                row["compile_s"] = time.perf_counter() - t0
                fn = functools.partial(comp, *inputs)
                row["compile"] = measure(fn, torch_graph(fn))
            except Exception as err:
                row["compile_error"] = f"{type(err).__name__}: {err}"[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(rows, args.out, quiet=True, prefix=prefix)  # a run cut short keeps the cases done

    def matmul(a, b):
        return a @ b

    if args.tf32:
        tf32_cases(bench, rows, args.out)
        return 0
    if args.fp8:
        fp8_cases(bench, rows, args.out)
        return 0
    if args.w4_sweep:
        w4_sweep()
        return 0
    if args.w4_ring_sweep is not None:
        w4_ring_sweep(W4_RING_VARIANTS[: args.w4_ring_sweep])
        return 0
    if args.w4_decode:
        w4_decode()
        return 0
    if args.w4_profile is not None:
        w4_profile(W4_RING_VARIANTS[args.w4_profile])
        return 0
    if args.w4_routes:
        w4_routes(args.out)
        return 0
    if args.w4:
        w4_cases(bench, rows, args.out)
        return 0
    if args.moe:
        moe_cases(bench, rows, args.out)
        return 0
    for size in (4096, 8192):
        for t in ("f16", "bf16"):
            a = torch.randn(size, size, device="cuda", dtype=tdt[t])
            b = torch.randn(size, size, device="cuda", dtype=tdt[t])
            text = MATMUL.format(m=size, n=size, k=size, t=t)
            bench(f"matmul {size}^3 {t}", text, (a, b), matmul, 2.0 * size**3, compile_fn=False)
    later: list = []
    for m, k, n in ((8192, 256, 256), (8192, 4096, 4096)):
        x = torch.randn(m, k, device="cuda", dtype=torch.float16) + 1.0
        g = 1 + 0.1 * torch.randn(k, device="cuda", dtype=torch.float16)
        be = 0.1 * torch.randn(k, device="cuda", dtype=torch.float16)
        w = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5

        def ln_softmax(x, g, be, w, k=k):
            return torch.softmax(F.layer_norm(x, (k,), g, be) @ w, dim=-1)

        text = LN_SOFTMAX.format(m=m, k=k, n=n)
        name = f"LN {m}x{k} -> matmul {k}x{n} -> softmax"
        bench(name, text, (x, g, be, w), ln_softmax, 2.0 * m * k * n)
        if n > 256:  # the softmax in the GEMM group (partials + finalise pass): at the end
            later.append(
                (f"{name} (softmax fused)", text, (x, g, be, w), ln_softmax, 2 * m * k * n)
            )
    size = 4096
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    bias = torch.randn(size, device="cuda", dtype=torch.float16)

    def bias_relu(x, y, z):
        return torch.relu(x @ y + z)

    text = BIAS_RELU.format(m=size, n=size, k=size, t="f16")
    bench("matmul 4096^3 + bias + relu", text, (a, b, bias), bias_relu, 2.0 * size**3)
    m, d, h = 8192, 1024, 4096
    for with_ln in (True, False):
        x = torch.randn(m, d, device="cuda", dtype=torch.float16)
        g = 1 + 0.1 * torch.randn(d, device="cuda", dtype=torch.float16)
        be = 0.1 * torch.randn(d, device="cuda", dtype=torch.float16)
        w1 = torch.randn(d, h, device="cuda", dtype=torch.float16) * 0.03
        b1 = torch.randn(h, device="cuda", dtype=torch.float16)
        w2 = torch.randn(h, d, device="cuda", dtype=torch.float16) * 0.03
        b2 = torch.randn(d, device="cuda", dtype=torch.float16)
        text = MLP.format(
            m=m, d=d, h=h, ln=LN.format(m=m, d=d) if with_ln else "", src="%n" if with_ln else "%x"
        )

        def mlp(x, g, be, w1, b1, w2, b2, with_ln=with_ln):
            n = F.layer_norm(x, (d,), g, be) if with_ln else x
            hh = F.gelu(n @ w1 + b1, approximate="tanh")
            return hh @ w2 + b2 + x

        name = f"MLP {'LN ' if with_ln else ''}8192x1024x4096"
        bench(name, text, (x, g, be, w1, b1, w2, b2), mlp, 4.0 * m * d * h)
    for case, text, inputs, reference, flops in later:
        bench(case, text, inputs, reference, flops, "fusec-cuda-long-softmax", compile_fn=False)
    # a transformer's projections at batch 1 (BERT-base: 128 tokens, ViT-B/16: 197): the
    # heuristic's tile, and the 128x256 tile it chose before it sent problems that leave
    # more than half the SMs idle to the 64x128 tile
    large = 'fusec-default,tile-gemm{tile="128x256x64 s4 c2 g8 epi=smem math=fast"}'
    for m, k, n in SMALL_M:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
        text = MATMUL.format(m=m, n=n, k=k, t="f16")
        for label, pipeline in (("", None), (" (128x256 tile)", large)):
            name = f"small-M matmul {m}x{k}x{n}{label}"
            bench(name, text, (a, b), matmul, 2.0 * m * k * n, pipeline, compile_fn=False)
    write(rows, args.out)
    return 0


def tf32_cases(bench, rows: list[dict], out: str) -> None:
    """The f32 cases in tf32 (``--tf32``): fusec ``precision="tf32"`` against cuBLAS and
    torch.compile under ``torch.set_float32_matmul_precision("high")``."""
    import torch

    torch.set_float32_matmul_precision("high")  # eager and torch.compile: cuBLAS in tf32

    def matmul(a, b):
        return a @ b

    def matmul_bt(a, b):
        return a @ b.transpose(-1, -2)

    def bias_relu(x, y, z):
        return torch.relu(x @ y + z)

    for size in (4096, 8192):
        a = torch.randn(size, size, device="cuda", dtype=torch.float32)
        b = torch.randn(size, size, device="cuda", dtype=torch.float32) / size**0.5
        flops = 2.0 * size**3
        text = MATMUL_BT.format(m=size, n=size, k=size, t="f32")
        bench(f"tf32 matmul {size}^3, B N x K", text, (a, b), matmul_bt, flops, compile_fn=False)
        text = MATMUL.format(m=size, n=size, k=size, t="f32")
        bench(f"tf32 matmul {size}^3, B K x N", text, (a, b), matmul, flops, compile_fn=False)
    size = 4096
    a = torch.randn(size, size, device="cuda", dtype=torch.float32)
    b = torch.randn(size, size, device="cuda", dtype=torch.float32) / size**0.5
    bias = torch.randn(size, device="cuda", dtype=torch.float32)
    text = BIAS_RELU.format(m=size, n=size, k=size, t="f32")
    bench("tf32 matmul 4096^3 + bias + relu", text, (a, b, bias), bias_relu, 2.0 * size**3)
    write(rows, out, prefix="gemm-tf32")


FP8_MATMUL = """func.func @f(%a: tensor<{m}x{k}xf8E4M3FN>, %b: tensor<{n}x{k}xf8E4M3FN>) -> tensor<{m}x{n}xbf16> {{
  %sa = arith.constant dense<{sa}> : tensor<f32>
  %sb = arith.constant dense<{sb}> : tensor<f32>
  %z = arith.constant dense<0.0> : tensor<f8E4M3FN>
  %x = ai.dequantize %a, %sa, %z : tensor<{m}x{k}xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %w = ai.dequantize %b, %sb, %z : tensor<{n}x{k}xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %y = ai.matmul %x, %w {{transpose_b = true}} : tensor<{m}x{k}xf32> * tensor<{n}x{k}xf32>
  %c = ai.cast %y : tensor<{m}x{n}xf32> to tensor<{m}x{n}xbf16>
  return %c : tensor<{m}x{n}xbf16>
}}"""  # noqa: E501


FP8_MLP = """func.func @mlp(%x: tensor<{m}x{d}xbf16>, %w1: tensor<{h}x{d}xf8E4M3FN>, %b1: tensor<{h}xf32>, %w2: tensor<{d}x{h}xf8E4M3FN>, %b2: tensor<{d}xf32>) -> tensor<{m}x{d}xbf16> {{
  %sx = arith.constant dense<{sx}> : tensor<bf16>
  %sh = arith.constant dense<{sh}> : tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %c1 = arith.constant dense<{c1}> : tensor<f32>
  %c2 = arith.constant dense<{c2}> : tensor<f32>
  %z = arith.constant dense<0.0> : tensor<f8E4M3FN>
  %xq = ai.quantize %x, %sx, %z : tensor<{m}x{d}xbf16> * tensor<bf16> * tensor<f8E4M3FN>
  %a = ai.dequantize %xq, %one, %z : tensor<{m}x{d}xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %wa = ai.dequantize %w1, %one, %z : tensor<{h}x{d}xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %p1 = ai.matmul %a, %wa {{transpose_b = true}} : tensor<{m}x{d}xf32> * tensor<{h}x{d}xf32>
  %s1 = ai.mul %p1, %c1 : tensor<{m}x{h}xf32> * tensor<f32>
  %y1 = ai.bias_add %s1, %b1 {{axis = 1 : i64}} : tensor<{m}x{h}xf32> * tensor<{h}xf32>
  %g = ai.gelu %y1 {{approximate = "tanh"}} : tensor<{m}x{h}xf32>
  %hq = ai.quantize %g, %sh, %z : tensor<{m}x{h}xf32> * tensor<f32> * tensor<f8E4M3FN>
  %hd = ai.dequantize %hq, %one, %z : tensor<{m}x{h}xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %wb = ai.dequantize %w2, %one, %z : tensor<{d}x{h}xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %p2 = ai.matmul %hd, %wb {{transpose_b = true}} : tensor<{m}x{h}xf32> * tensor<{d}x{h}xf32>
  %s2 = ai.mul %p2, %c2 : tensor<{m}x{d}xf32> * tensor<f32>
  %y2 = ai.bias_add %s2, %b2 {{axis = 1 : i64}} : tensor<{m}x{d}xf32> * tensor<{d}xf32>
  %o = ai.cast %y2 : tensor<{m}x{d}xf32> to tensor<{m}x{d}xbf16>
  return %o : tensor<{m}x{d}xbf16>
}}"""  # noqa: E501


def fp8_mlp_case(bench) -> None:
    """The FP8 MLP block (issue 31): x (bf16) quantized to e4m3 (per-tensor scale), the
    e4m3 GEMM with its weight scale, bias, GELU and h's quantize in the epilogue (e4m3
    codes out), the second e4m3 GEMM with its scale and bias, bf16 out; 3 launches (x's
    quantize kernel, 2 GEMMs). Timed against the same block in bf16 (weights dequantized ahead)
    under eager PyTorch and torch.compile; checked against the block's fp8 maths in f32
    (x and h rounded to e4m3 as the kernels round them)."""
    import torch
    import torch.nn.functional as F

    m, d, h = 4096, 4096, 14336
    sx, sh, sw1, sw2 = 0.05, 0.02, 2.0**-9, 2.0**-10
    e4m3 = torch.float8_e4m3fn
    w1 = (torch.randn(h, d, device="cuda") * 8).to(e4m3)
    w2 = (torch.randn(d, h, device="cuda") * 8).to(e4m3)
    w1d, w2d = (w1.float() * sw1).to(torch.bfloat16), (w2.float() * sw2).to(torch.bfloat16)
    b1 = torch.randn(h, device="cuda") * 0.1
    b2 = torch.randn(d, device="cuda") * 0.1
    x = torch.randn(m, d, device="cuda", dtype=torch.bfloat16)

    def mlp_bf16(x, w1, b1, w2, b2):  # the block in bf16 (the codes' values, scaled)
        hh = F.gelu(x @ w1d.t() + b1.to(torch.bfloat16), approximate="tanh")
        return hh @ w2d.t() + b2.to(torch.bfloat16)

    def fp8_maths(x, w1, b1, w2, b2):  # called on float copies
        xq = (x / sx).to(e4m3).float() * sx
        hh = F.gelu(xq @ (w1.t() * sw1) + b1, approximate="tanh")
        hq = (hh / sh).clamp(-448, 448).to(e4m3).float() * sh
        return hq @ (w2.t() * sw2) + b2

    text = FP8_MLP.format(m=m, d=d, h=h, sx=sx, sh=sh, c1=sx * sw1, c2=sh * sw2)
    flops = 4.0 * m * d * h
    # two e4m3 roundings (3 significant bits): where the fp8 wgmma's sum and the fast GELU
    # land by a rounding boundary of h a code flips, a step of ~1/8 of the value (H100,
    # 2026-12-05: rel L2 1.05e-2 against this f32 maths); 3e-2 is that bound, not 16-bit's
    bench(f"FP8 MLP {m}x{d}x{h} (e4m3, GELU) vs bf16", text, (x, w1, b1, w2, b2), mlp_bf16,
          flops, exact=fp8_maths, bound=3e-2)  # fmt: skip


def fp8_cases(bench, rows: list[dict], out: str) -> None:
    """The float8 cases (``--fp8``): fusec's e4m3 GEMM (per-tensor scales, bf16 out) against
    ``torch._scaled_mm`` (cuBLASLt), then the fp16 GEMM of the same shape (B N x K), fusec's
    against cuBLAS's, in the same run."""
    import torch

    sa, sb = 0.0625, 0.03125
    scale_a = torch.tensor(sa, device="cuda")
    scale_b = torch.tensor(sb, device="cuda")

    def scaled_mm(a, b):
        bf16 = torch.bfloat16
        return torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=bf16)

    def exact(a, b):  # the f32 product of the codes (float copies), scaled
        return (a @ b.t()) * (sa * sb)

    def matmul_bt(a, b):
        return a @ b.t()

    for size in (4096, 8192):
        a = (torch.randn(size, size, device="cuda") * 4).to(torch.float8_e4m3fn)
        b = (torch.randn(size, size, device="cuda") * 4).to(torch.float8_e4m3fn)
        text = FP8_MATMUL.format(m=size, n=size, k=size, sa=sa, sb=sb)
        flops = 2.0 * size**3
        bench(f"fp8 e4m3 matmul {size}^3 -> bf16", text, (a, b), scaled_mm, flops,
              compile_fn=False, exact=exact)  # fmt: skip
        a16, b16 = a.to(torch.float16), b.to(torch.float16) * 0.125
        text = MATMUL_BT.format(m=size, n=size, k=size, t="f16")
        bench(f"f16 matmul {size}^3, B N x K", text, (a16, b16), matmul_bt, flops, compile_fn=False)
    fp8_mlp_case(bench)
    write(rows, out, prefix="gemm-fp8")


W4_MATMUL = """func.func @f(%x: tensor<{m}x{k}xbf16>, %s: tensor<{b}x{n}xbf16>, %z: tensor<{b}x{n}xi4>) -> tensor<{m}x{n}xbf16> {{
  %q = arith.constant dense<"0x{codes}"> : tensor<{k}x{n}xi4>
  %w = ai.dequantize %q, %s, %z {{axis = 0 : i64, block_size = {g} : i64}} : tensor<{k}x{n}xi4> * tensor<{b}x{n}xbf16> * tensor<{b}x{n}xi4>
  %y = ai.matmul %x, %w : tensor<{m}x{k}xbf16> * tensor<{k}x{n}xbf16>
  return %y : tensor<{m}x{n}xbf16>
}}"""  # noqa: E501

#: HBM bandwidth (bytes/s) by device name, for the W4A16 bandwidth column.
HBM_PEAK = {"H200": 4.8e12, "H100": 3.35e12}


W4_K = W4_N = 4096
W4_BLOCK = 128
#: (K, N) of the decode-shaped (M = 1) cases on larger weights than 4096 x 4096, whose
#: 8.4 MB the GPU reads in ~2.5 us, about its launch and ramp: a Llama-3-8B MLP's up and
#: down projections and a 70B model's up projection (117 MB of codes).
W4_DECODE_LAYERS = ((4096, 14336), (14336, 4096), (8192, 28672))


def w4_layer(k: int = W4_K, n: int = W4_N) -> tuple:
    """The W4A16 cases' weight (``--w4``, ``--w4-sweep``): k x n int4 codes (int8 values
    on the GPU: a constant of the IR, which the W4A16 route packs at load), bf16 scales
    and int4 zero points per block of 128 rows of K on the GPU, the dequantized weight in
    f32, and the bytes the W4A16 kernel reads of it (packed codes, scales, zero points a
    byte each)."""
    import torch

    g = W4_BLOCK
    q = torch.randint(-8, 8, (k, n), dtype=torch.int8, device="cuda")
    s = (torch.rand(k // g, n, device="cuda") * 0.02 + 0.005).to(torch.bfloat16)
    z = torch.randint(-2, 3, (k // g, n), dtype=torch.int8, device="cuda")
    rows_of = torch.arange(k, device="cuda") // g
    wd = (q.float() - z.float()[rows_of]) * s.float()[rows_of]
    weight_bytes = k * n // 2 + (k // g) * n * 3
    return q, s, z, wd, weight_bytes


def w4_program(m: int, q, k: int = W4_K, n: int = W4_N):
    """``W4_MATMUL`` of ``m`` rows of x as a module whose constant holds the codes ``q``
    (``w4_layer``'s), made from the array: the codes parsed as text (hex, or a splat to
    replace) take minutes at 8192 x 28672. The text is parsed with the codes as a last
    argument, which the constant then replaces."""
    import ml_dtypes
    from xdsl.dialects import func

    import fusec
    from fusec.ir.constants import dense_constant

    text = W4_MATMUL.format(m=m, k=k, n=n, b=k // W4_BLOCK, g=W4_BLOCK, codes="")
    line = next(line for line in text.splitlines() if "arith.constant" in line)
    codes_type = line.split(" : ")[-1]
    text = text.replace(line + "\n", "").replace(
        ") -> ", f", %q: {codes_type}) -> ", 1
    )  # fmt: skip
    module = fusec.parse(text)
    (function,) = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    block = function.body.block
    constant = dense_constant(q.cpu().numpy().astype(ml_dtypes.int4), "i4")
    block.insert_op_before(constant, block.first_op)
    block.args[-1].replace_all_uses_with(constant.result)
    block.erase_arg(block.args[-1])
    function.update_function_type()
    return module


def w4_cases(bench, rows: list[dict], out: str) -> None:
    """The weight-only int4 cases (``--w4``): fusec's W4A16 layer against cuBLAS's and
    fusec's bf16 GEMMs of the dequantized weight, in the same run (the W4A16 rows name
    ``$FUSEC_W4_KERNEL``'s kernel where it is set)."""
    import os
    from unittest import mock

    import torch

    from fusec.targets.cuda.gemm.w4 import GEMM_ROUTE_ENV, gemm_route
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    def matmul(a, b):
        return a @ b

    cases = [(m, W4_K, W4_N) for m in (1, 16, 256, 4096)] + [(1, k, n) for k, n in W4_DECODE_LAYERS]
    chosen = os.environ.get(KERNEL_CHOICE)  # a variant's rows say so
    kernel = f" ({chosen})" if chosen else ""
    layer: tuple = ()
    for m, k, n in cases:
        if layer[:2] != (k, n):
            layer = (k, n, *w4_layer(k, n))
        q, s, z, wd, weight_bytes = layer[2:]
        wd16 = wd.to(torch.bfloat16)

        def dense(x, s, z, wd16=wd16):  # cuBLAS bf16 of the weight dequantized ahead
            return x @ wd16

        def exact(x, s, z, wd=wd):  # called on float copies: the f32 product
            return x @ wd

        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        flops = 2.0 * m * k * n
        name = f"W4A16 {m}x{k}x{n} bf16, blocks of {W4_BLOCK}{kernel}"
        bench(name, w4_program(m, q, k, n), (x, s, z), dense, flops, compile_fn=False,
              exact=exact, cold=True)  # fmt: skip
        if rows and rows[-1]["case"] == name:  # (eager: cuBLAS of the bf16 weight)
            rows[-1].update(weight_bytes=weight_bytes, eager_weight_bytes=k * n * 2)
        if m > 16:  # the A/B of the routes past 16 rows: the one the default does not take
            other = "separate" if gemm_route(m) == "producer" else "producer"
            with mock.patch.dict(os.environ, {GEMM_ROUTE_ENV: other}):
                bench(f"{name} ({GEMM_ROUTE_ENV}={other})", w4_program(m, q, k, n), (x, s, z),
                      dense, flops, compile_fn=False, exact=exact, cold=True)  # fmt: skip
        text = MATMUL.format(m=m, n=n, k=k, t="bf16")
        bench(f"bf16 matmul {m}x{k}x{n}", text, (x, wd16), matmul, flops, compile_fn=False,
              cold=m < 4096)  # fmt: skip
        if rows and rows[-1]["case"] == f"bf16 matmul {m}x{k}x{n}" and m == 1:
            rows[-1].update(weight_bytes=k * n * 2, eager_weight_bytes=k * n * 2)
        del wd16
    write(rows, out, prefix="gemm-w4")


MOE = """func.func @moe(%x: tensor<{t}x{d}xbf16>, %w: tensor<{t}x{k}xf32>, %e: tensor<{t}x{k}xi64>, %gu: tensor<{n}x{f2}x{d}xbf16>, %dn: tensor<{n}x{d}x{f}xbf16>) -> tensor<{t}x{d}xbf16> {{
  %y = ai.moe_experts %x, %w, %e, %gu, %dn : tensor<{t}x{d}xbf16> * tensor<{t}x{k}xf32> * tensor<{t}x{k}xi64> * tensor<{n}x{f2}x{d}xbf16> * tensor<{n}x{d}x{f}xbf16>
  return %y : tensor<{t}x{d}xbf16>
}}"""  # noqa: E501


def mixtral_loop(n: int, f: int):
    """transformers' eager ``MixtralExperts`` (n experts of hidden width f): index each
    expert's routed rows, two GEMMs, SwiGLU, ``index_add_`` (its ``torch.where`` syncs with
    the host); the baseline of the MoE cases here and in ``profile_cases.py``."""
    import torch
    import torch.nn.functional as F

    def loop(x, weights, experts, gate_up, down):
        out = torch.zeros_like(x)
        mask = F.one_hot(experts.long(), num_classes=n).permute(2, 1, 0)
        for e in range(n):
            slot, token = torch.where(mask[e])
            h = F.linear(x[token], gate_up[e])
            y = F.linear(F.silu(h[:, :f]) * h[:, f:], down[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out

    return loop


def moe_cases(bench, rows: list[dict], out: str) -> None:
    """The MoE experts layer (``--moe``, issue 31): Mixtral's sizes (8 experts, top-2,
    d_model 4096, d_ff 14336, 4096 tokens, bf16), the routing given (weights and expert
    indices drawn as a router's top-2 would be), ``ai.moe_experts`` against the PyTorch
    loop over experts transformers' eager ``MixtralExperts`` runs (index the routed rows,
    two GEMMs, SwiGLU, ``index_add_``) and torch.compile of it; then cuBLAS's and fusec's
    dense bf16 GEMMs of the same FLOPs (the two projections of all T * k rows), the
    throughput the layer is measured against."""
    import torch

    t, d, f, n, k = 4096, 4096, 14336, 8, 2
    gate_up = (torch.randn(n, 2 * f, d, device="cuda") / d**0.5).to(torch.bfloat16)
    down = (torch.randn(n, d, f, device="cuda") / f**0.5).to(torch.bfloat16)

    def routed(tokens: int) -> tuple:
        x = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
        picks = torch.rand(tokens, n, device="cuda").topk(k, dim=1)
        return x, torch.softmax(picks.values, dim=1), picks.indices.to(torch.int64)

    x, weights, experts = routed(t)
    dx, dw, de = routed(8)  # decode's, made before any capture (see `dense`)

    loop = mixtral_loop(n, f)

    pairs = t * k  # the dense GEMMs of the same FLOPs: both projections of every pair
    dense = [  # made first: a failed graph capture of the loop (its syncs) leaves torch's
        # CUDA generator unusable for the rest of the process
        (m, kk, nn, torch.randn(m, kk, device="cuda", dtype=torch.bfloat16),
         torch.randn(kk, nn, device="cuda", dtype=torch.bfloat16) / kk**0.5)
        for m, kk, nn in ((pairs, d, 2 * f), (pairs, f, d))
    ]  # fmt: skip

    flops = 2.0 * t * k * 3 * f * d
    text = MOE.format(t=t, d=d, f=f, f2=2 * f, n=n, k=k)
    bench(f"MoE experts {t} tokens, top-{k} of {n}, {d}x{f} bf16", text,
          (x, weights, experts, gate_up, down), loop, flops)  # fmt: skip
    # the A/B of the SwiGLU's place: its own kernel after a gate/up GEMM that stores both
    import os
    from unittest import mock

    with mock.patch.dict(os.environ, {"FUSEC_MOE_SWIGLU": "kernel"}):
        bench(f"MoE experts {t} tokens, SwiGLU kernel (FUSEC_MOE_SWIGLU=kernel)", text,
              (x, weights, experts, gate_up, down), loop, flops, compile_fn=False)  # fmt: skip
    # decode: 8 tokens, so that each expert's weights are read for a few rows (HBM-bound)
    text = MOE.format(t=8, d=d, f=f, f2=2 * f, n=n, k=k)
    bench(f"MoE experts 8 tokens (decode), top-{k} of {n}, {d}x{f} bf16", text,
          (dx, dw, de, gate_up, down), loop, 2.0 * 8 * k * 3 * f * d)  # fmt: skip
    for m, kk, nn, a, b in dense:
        text = MATMUL.format(m=m, n=nn, k=kk, t="bf16")
        bench(f"dense bf16 matmul {m}x{kk}x{nn}", text, (a, b), lambda a, b: a @ b,
              2.0 * m * kk * nn, compile_fn=False)  # fmt: skip
    write(rows, out, prefix="gemm-moe")


def w4_timed(m: int, q, s, z, wd, k: int = W4_K, n: int = W4_N) -> tuple:
    """(warm ms, cold ms, rel L2, the compiled module) of the W4A16 layer of ``w4_layer``'s
    codes ``q``, scales ``s``, zero points ``z`` at ``m`` rows of x: GPU time of a CUDA-graph
    replay, back to back (``time_gpu``) and with the L2 flushed (``time_gpu_cold``), the
    result checked against the f32 product with the dequantized weight ``wd``."""
    import torch

    import fusec

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    compiled = fusec.compile(w4_program(m, q, k, n), target="cuda")
    rel = check(compiled(x, s, z), x.float() @ wd)
    replay = fusec_graph(compiled, (x, s, z))
    return time_gpu(replay), time_gpu_cold(replay), rel, compiled


def hbm_shares(weight_bytes: int, hbm: float | None, *ms: float) -> list[str]:
    """`` (x%)``: the share of HBM peak ``hbm`` (none where the GPU is not in ``HBM_PEAK``)
    that reading ``weight_bytes`` in each of the times ``ms`` (milliseconds) is."""
    return [f" ({weight_bytes / t / 1e-3 / hbm:.1%})" if hbm else "" for t in ms]


def w4_decode() -> None:
    """``--w4-decode``: the W4A16 kernel that ``$FUSEC_W4_KERNEL`` picks (the Tensor Core
    one by default; ``ring``, ``cuda-cores``) at M = 1 on 4096 x 4096 and
    ``W4_DECODE_LAYERS``: GPU time of a CUDA-graph replay warm (replays back to back: a
    weight over the L2's size streams from HBM) and cold (``time_gpu_cold``), as a share of
    the H100/H200's HBM bandwidth, each result checked against the f32 product. One line a
    layer; run it once a kernel in one device call for an A/B."""
    import os

    import torch

    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    kernel = os.environ.get(KERNEL_CHOICE) or "auto"
    name = torch.cuda.get_device_name()
    hbm = next((v for k, v in HBM_PEAK.items() if k in name), None)
    for k, n in ((W4_K, W4_N), *W4_DECODE_LAYERS):
        q, s, z, wd, weight_bytes = w4_layer(k, n)
        warm, cold, rel, _ = w4_timed(1, q, s, z, wd, k, n)
        shares = hbm_shares(weight_bytes, hbm, warm, cold)
        print(f"W4A16 {kernel} 1x{k}x{n}: warm {warm * 1e3:.1f} us{shares[0]}, cold "
              f"{cold * 1e3:.1f} us{shares[1]}, rel L2 {rel:.1e}", flush=True)  # fmt: skip
        del q, s, z, wd
        torch.cuda.empty_cache()


class W4Variant(NamedTuple):
    """One kernel of ``--w4-ring-sweep``: the loop (``FUSEC_W4_KERNEL``) and ``w4_mma``'s
    knobs for its compile, each defaulting to the default's value."""

    loop: str
    stages: int = 3  # STAGES: the ring's stages of codes
    blocks: int = 8  # BLOCKS_PER_SM: the grid's blocks a multiprocessor at most
    chunks: int = 1  # CHUNKS_PER_STEP: chunks a warp a ring step
    fit: int | None = None  # MIN_BLOCKS_PER_SM: blocks asked of ptxas (None: its choice)
    carveout: int | None = None  # SHARED_CARVEOUT: % of L1 / shared memory as shared
    staggered: bool = False  # STAGGERED_HALVES: the ring's lanes read their halves in turn
    x_sums: bool = False  # SHARED_X_SUMS: x's chunk sums from a table, not a second mma
    producer: bool = False  # PRODUCER_WARP: a ninth warp copies, no block barrier a step
    scales: bool = False  # RING_SCALES: with it, the step's scales through the stage

    def knobs(self) -> dict:
        """``w4_mma``'s module constants for the variant."""
        return {
            "STAGES": self.stages,
            "BLOCKS_PER_SM": self.blocks,
            "CHUNKS_PER_STEP": self.chunks,
            "MIN_BLOCKS_PER_SM": self.fit,
            "SHARED_CARVEOUT": self.carveout,
            "STAGGERED_HALVES": self.staggered,
            "SHARED_X_SUMS": self.x_sums,
            "PRODUCER_WARP": self.producer,
            "RING_SCALES": self.scales,
        }

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The variant's loop (``$FUSEC_W4_KERNEL``) and knobs in force for the compiles
        inside."""
        import os
        from unittest import mock

        from fusec.targets.cuda.gemm import w4_mma

        with (
            mock.patch.dict(os.environ, {w4_mma.KERNEL_CHOICE: self.loop}),
            mock.patch.multiple(w4_mma, **self.knobs()),
        ):
            yield


#: ``--w4-ring-sweep``'s kernels; the first two are the defaults of the layer's loop
#: (the ring) and the other loop. ptxas's own registers fit 3 blocks of 8 warps a
#: multiprocessor (launch bounds ask for more: ``fit``); the driver gives shared memory the
#: least of the unified L1 that fits them (``carveout`` asks for a share). Deeper rings and
#: persistent grids (H100, 28a8243) and two chunks a step (H200, 3782bcd) were measured
#: slower (results/gemm-w4.md)
W4_RING_VARIANTS = (
    W4Variant("ring"),
    W4Variant("registers"),
    # a producer warp (69 registers under launch bounds for 3 blocks of 9 warps; 76 by
    # ptxas's choice: 2 blocks): loop 194 SASS a step against 250
    W4Variant("ring", producer=True, fit=3),
    W4Variant("ring", producer=True, fit=3, scales=True),  # (70 registers)
    W4Variant("ring", producer=True, fit=3, x_sums=True),
    W4Variant("ring", producer=True, fit=3, stages=4),
    W4Variant("ring", producer=True, fit=3, stages=4, scales=True),
    W4Variant("ring", producer=True),
    W4Variant("ring", staggered=True),  # no bank conflicts on the ring's shared loads
    W4Variant("ring", x_sums=True),  # 8 HMMA a chunk fewer (72 registers: 3 blocks)
    W4Variant("ring", staggered=True, x_sums=True),
    W4Variant("registers", x_sums=True),  # (94 registers: 2 blocks)
    W4Variant("ring", fit=4),
    W4Variant("ring", fit=5),
    W4Variant("ring", fit=6),
    W4Variant("ring", stages=2, fit=6),
    W4Variant("registers", fit=4),
    W4Variant("registers", fit=5),
    W4Variant("ring", carveout=100),  # the least L1 (the most shared memory)
    W4Variant("ring", fit=4, carveout=50),
)


def w4_ring_sweep(variants: Sequence[W4Variant], k: int = 8192, n: int = 28672) -> None:
    """``--w4-ring-sweep``: the W4A16 Tensor Core kernel at M = 1 on the k x n layer with each
    of ``variants`` (its knobs set on ``w4_mma`` for the compile), GPU time of a
    CUDA-graph replay warm and cold as a share of HBM peak, each result checked against the
    f32 product; one line a variant, its index first (a variant that fails to build or run
    says why, and the sweep goes on)."""
    import torch

    name = torch.cuda.get_device_name()
    hbm = next((v for key, v in HBM_PEAK.items() if key in name), None)
    q, s, z, wd, weight_bytes = w4_layer(k, n)
    for i, variant in enumerate(variants):
        label = f"[{i}] {name} W4A16 1x{k}x{n} {variant}"  # (i: for --w4-profile)
        try:
            with variant.applied():
                warm, cold, rel, _ = w4_timed(1, q, s, z, wd, k, n)
        except Exception as error:  # (a knob this numba-cuda lacks: the others still run)
            print(f"{label}: failed: {type(error).__name__}: {error}", flush=True)
            continue
        shares = hbm_shares(weight_bytes, hbm, warm, cold)
        print(f"{label}: warm {warm * 1e3:.1f} us{shares[0]}, cold {cold * 1e3:.1f} us"
              f"{shares[1]}, rel L2 {rel:.1e}", flush=True)  # fmt: skip


def w4_profile(variant: W4Variant, k: int = 8192, n: int = 28672) -> None:
    """``--w4-profile``: the W4A16 kernel of ``variant`` at M = 1 on the k x n layer, three
    calls to warm it up, then one between ``cudaProfilerStart`` and ``cudaProfilerStop`` (what
    ``ncu --profile-from-start off`` profiles: the generated kernel alone), its result
    checked against the f32 product."""
    import torch

    import fusec

    q, s, z, wd, _ = w4_layer(k, n)
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    with variant.applied():
        compiled = fusec.compile(w4_program(1, q, k, n), target="cuda")
        for _ in range(3):
            out = compiled(x, s, z)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        out = compiled(x, s, z)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(f"W4A16 1x{k}x{n} {variant}: rel L2 {check(out, x.float() @ wd):.1e}", flush=True)


#: (K, N, rows) of ``--w4-routes``: the square layer of ``--w4`` and a Llama-3-8B MLP's down
#: projection
W4_ROUTE_CASES = (
    (W4_K, W4_N, (32, 64, 128, 256, 512, 1024, 2048, 4096)),
    (14336, 4096, (64, 256, 1024)),
)


#: ``$FUSEC_W4_GEMM``'s routes ``--w4-routes`` times
W4_ROUTES = ("separate", "producer", "consumer")


def w4_routes(out: str) -> None:
    """``--w4-routes``: the weight-only int4 layer (bf16, blocks of 128) past the W4A16
    route's 16 rows by each of ``$FUSEC_W4_GEMM``'s routes, "separate" (a pointwise kernel
    dequantizes the codes, then the GEMM), "producer" (the GEMM's producer warpgroup
    dequantizes them into each B stage) and "consumer" (its consumers dequantize them into
    wgmma's A registers), and fusec's bf16 GEMM of the dequantized weight:
    GPU time of a CUDA-graph replay, warm (``time_gpu``), each result checked against the
    f32 product; one process, every row's baselines in it. Where the producer route wins
    is where it could be the default."""
    import os
    from unittest import mock

    import torch

    import fusec
    from fusec.targets.cuda.gemm.w4 import GEMM_ROUTE_ENV

    rows: list[dict] = []
    for k, n, ms in W4_ROUTE_CASES:
        q, s, z, wd, _ = w4_layer(k, n)
        wd16 = wd.to(torch.bfloat16)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            row: dict = {"m": m, "k": k, "n": n}
            for route in W4_ROUTES:
                with mock.patch.dict(os.environ, {GEMM_ROUTE_ENV: route}):
                    compiled = fusec.compile(w4_program(m, q, k, n), target="cuda")
                row[f"{route}_rel"] = check(compiled(x, s, z), x.float() @ wd)
                row[f"{route}_ms"] = time_gpu(fusec_graph(compiled, (x, s, z)))
                row[f"{route}_kernels"] = [kernel.kind for kernel in compiled.kernels]
            dense = fusec.compile(MATMUL.format(m=m, n=n, k=k, t="bf16"), target="cuda")
            row["bf16_ms"] = time_gpu(fusec_graph(dense, (x, wd16)))
            times = " / ".join(f"{row[f'{r}_ms']:.4f}" for r in (*W4_ROUTES, "bf16"))
            print(f"W4A16 {m}x{k}x{n}: {' / '.join(W4_ROUTES)} / bf16 GEMM {times} ms", flush=True)
            rows.append(row)
            _write_w4_routes(rows, out)  # (after each row: a cut-short run keeps its rows)
        del q, s, z, wd, wd16
        torch.cuda.empty_cache()


def _write_w4_routes(rows: list[dict], out: str) -> None:
    import datetime

    import torch
    from bench_common import commit as tree_commit
    from bench_common import write_results

    from fusec.targets.cuda.gemm.w4 import GEMM_ROUTE_ENV

    device = torch.cuda.get_device_name()
    lines = [
        f"# W4A16 past 16 rows: the routes ({device}, {datetime.date.today()}, "
        f"commit {tree_commit()})",
        "",
        "`gemm_bench.py --w4-routes`: ms of a CUDA-graph replay (GPU time alone), bf16, scales "
        "and zero points per block of 128 along K; separate = a pointwise kernel dequantizes "
        f"the codes, then the GEMM; producer = `{GEMM_ROUTE_ENV}=producer`, the GEMM's "
        "producer warpgroup dequantizes them into each B stage; consumer = "
        f"`{GEMM_ROUTE_ENV}=consumer`, its consumers dequantize them into wgmma's A "
        "registers; bf16 = fusec's GEMM of the dequantized weight; the last column the "
        "fastest route's time over the bf16 GEMM's.",
        "",
        "| M x K x N | "
        + " | ".join(f"{r} ms" for r in W4_ROUTES)
        + " | bf16 GEMM ms | best / bf16 |",
        "| --- " * (len(W4_ROUTES) + 3) + "|",
    ]
    for r in rows:
        best = min(r[f"{route}_ms"] for route in W4_ROUTES)
        times = " | ".join(f"{r[f'{route}_ms']:.4f}" for route in W4_ROUTES)
        shape = f"{r['m']}x{r['k']}x{r['n']}"
        lines.append(f"| {shape} | {times} | {r['bf16_ms']:.4f} | {best / r['bf16_ms']:.2f} |")
    meta = {"device": device, "commit": tree_commit(), "torch": torch.__version__, "rows": rows}
    write_results(f"{out}/gemm-w4-routes", meta, "\n".join(lines) + "\n")


def w4_sweep() -> None:
    """``--w4-sweep``: the W4A16 route (x M x 4096 bf16 times 4096 x 4096 int4 codes in
    blocks of 128) at each warp shape (columns a warp, warps splitting K, words a load),
    M = 1, 4, 16, and the dequantize + GEMM road at the same M, in one run: fusec's GPU
    time of a CUDA-graph replay, warm (replays back to back: the weight in L2) and cold
    (``time_gpu_cold``: from HBM), each result checked against the f32 product. What
    ``w4.SHAPES`` is chosen from (printed, one line a case). The CUDA-core kernel's
    (``FUSEC_W4_KERNEL=cuda-cores``: the Tensor Core kernel, the default where K and the
    scale blocks are whole chunks of 64, has one shape)."""
    import os

    from fusec.targets.cuda.gemm import w4
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    chosen = os.environ.get(KERNEL_CHOICE)
    os.environ[KERNEL_CHOICE] = "cuda-cores"

    q, s, z, wd, weight_bytes = w4_layer()

    def run(label: str, m: int) -> None:
        warm, cold, rel, compiled = w4_timed(m, q, s, z, wd)
        kinds = [kernel.kind for kernel in compiled.kernels]
        print(f"{label} M={m}: warm {warm:.4f} ms {weight_bytes / warm / 1e6:.0f} GB/s, "
              f"cold {cold:.4f} ms {weight_bytes / cold / 1e6:.0f} GB/s, {kinds}, "
              f"rel L2 {rel:.1e}", flush=True)  # fmt: skip

    shapes, rows = w4.SHAPES, w4.MAX_ROWS
    candidates = {
        1: ((4, 4, 4), (4, 2, 4), (4, 1, 4), (2, 2, 4), (2, 4, 4), (4, 2, 2), (2, 4, 2)),
        4: ((4, 2, 4), (4, 1, 4), (2, 2, 4), (2, 4, 4), (4, 2, 2)),
        16: ((2, 2, 4), (2, 1, 4), (4, 1, 4), (2, 4, 2), (2, 2, 2)),
    }
    try:
        for m, shapes_of_m in candidates.items():
            for cols, ksplit, vw in shapes_of_m:
                w4.SHAPES = ((w4.MAX_ROWS, cols, ksplit, vw),)
                run(f"route {cols} columns x {ksplit} K-split x {vw} words", m)
        w4.MAX_ROWS = 0  # every M to the dequantize + GEMM road
        for m in (1, 4, 16):
            run("dequantize + GEMM", m)
    finally:
        w4.SHAPES = shapes
        w4.MAX_ROWS = rows
        if chosen is None:
            del os.environ[KERNEL_CHOICE]
        else:
            os.environ[KERNEL_CHOICE] = chosen


def _bandwidth_lines(rows: list[dict], device: str) -> list[str]:
    """The W4A16 rows' weight bandwidth (``weight_bytes`` / fusec's GPU time) against the
    device's HBM peak."""
    peak = next((v for key, v in HBM_PEAK.items() if key in device), None)
    lines = []
    for r in rows:
        fusec_row = r.get("fusec") or {}
        if "weight_bytes" not in r or not fusec_row.get("gpu_ms"):
            continue
        cells = [r["case"], f"{r['weight_bytes'] / 1e6:.2f}"]
        for key in ("gpu_ms", "cold_ms"):
            ms = fusec_row.get(key)
            if not ms:
                cells += ["-", "-", "-"]
                continue
            rate = r["weight_bytes"] / (ms * 1e-3)
            share = f"{100 * rate / peak:.1f}%" if peak else "-"
            cells += [f"{ms:.4f}", f"{rate / 1e9:.0f}", share]
        eager_cold = (r.get("eager") or {}).get("cold_ms")
        cells.append(_fmt(eager_cold))
        if eager_cold and r.get("eager_weight_bytes") and peak:
            rate = r["eager_weight_bytes"] / (eager_cold * 1e-3)
            cells.append(f"{rate / 1e9:.0f} ({100 * rate / peak:.1f}%)")
        else:
            cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return []
    head = [
        "",
        "Weight bytes read (4-bit codes, scales, zero points) per fusec call, over its GPU time,",
        "warm (graph replays back to back: the weight stays in L2) and cold (`time_gpu_cold`:",
        "the L2 flushed before each replay, the weight read from HBM); eager cold: cuBLAS's",
        "bf16 GEMM of the dequantized weight (4x the bytes) timed the same way, and the",
        "bandwidth it reads that bf16 weight at (at M = 1: what a GEMV reaches on this GPU).",
        "The bf16 rows: fusec's GEMM and cuBLAS's of the bf16 weight:",
        "",
        "| case | weight MB | warm ms | GB/s | % of HBM peak | cold ms | GB/s | % of HBM peak "
        "| eager cold ms | eager cold GB/s (% of peak) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    return head + lines


def _fmt(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write(rows: list[dict], out: str, quiet: bool = False, prefix: str = "gemm") -> None:
    import torch
    from bench_common import commit as tree_commit
    from bench_common import write_results

    commit = tree_commit()
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "commit": commit,
        "torch": torch.__version__,
        "rows": rows,
    }
    lines = [
        f"# fusec cuda GEMM vs PyTorch ({meta['device']}, {meta['date']}, commit {commit})",
        "",
        "ms; gpu = CUDA-graph replay (GPU time alone), call = one call on an idle GPU (host "
        "work included), stream = back-to-back calls; host = CPU us per call.",
        "",
        "| case | fusec gpu | fusec call | fusec stream | fusec host us | eager gpu | eager call "
        "| compile gpu | compile call | fusec TFLOP/s | fusec vs eager (gpu) | rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        f, e, c = r.get("fusec") or {}, r["eager"], r.get("compile") or {}
        gpu = f.get("gpu_ms") or f.get("stream_ms")
        tflops = r["flops"] / gpu / 1e9 if gpu else None
        ratio = 100 * e["gpu_ms"] / f["gpu_ms"] if f.get("gpu_ms") and e.get("gpu_ms") else None
        lines.append(
            f"| {r['case']} | {_fmt(f.get('gpu_ms'))} | {_fmt(f.get('call_ms'))} | "
            f"{_fmt(f.get('stream_ms'))} | {_fmt(f.get('host_us'), 1)} | {_fmt(e.get('gpu_ms'))} | "
            f"{_fmt(e.get('call_ms'))} | {_fmt(c.get('gpu_ms'))} | {_fmt(c.get('call_ms'))} | "
            f"{_fmt(tflops, 0)} | {_fmt(ratio, 1)}% | {_fmt(r.get('rel_l2'), 5)} |"
        )
        if "fusec_error" in r:
            lines.append(f"| ^ fusec failed: {r['fusec_error'][:150]} | | | | | | | | | | | |")
    lines += _bandwidth_lines(rows, meta["device"])
    write_results(f"{out}/{prefix}", meta, "\n".join(lines) + "\n", indent=1)
    if not quiet:
        print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
