"""Per-kernel GPU times of fusec vs PyTorch eager vs torch.compile, for profiling misses.

    python benchmarks/profile_cases.py --case lms-small            # torch.profiler table
    python benchmarks/profile_cases.py --case convnext-s3-up --flush-l2   # L2 cold each call
    ncu --clock-control none --set basic python benchmarks/profile_cases.py \
        --case lms-small --impl fusec --reps 2 --no-profiler        # hardware counters
    FUSEC_CONV_INPUT=nchw python benchmarks/profile_cases.py --case conv-1x1 --impl fusec
    FUSEC_CONV_INPUT=nchw-ld python benchmarks/profile_cases.py --case conv --impl fusec
        # the conv template's environment switches (FUSEC_CONV_TILE, FUSEC_CONV_INPUT,
        # FUSEC_CONV_EPILOGUE=early: the epilogue's inputs loaded ahead of use)
        # pass through: the convs without the fusec_convx_* launch (TMA: 1x1 only)

Cases: the issue rows that miss or disagree between benchmarks (``lms-small``: LN(8192x256)
-> matmul 256x256 -> softmax; ``lms-192``: the same into 192 columns, a 64x192 row tile;
``mlp-down``: 8192x4096x1024 + bias + residual; ``mlp-up``;
``mlp``: the whole MLP block; ``conv``: conv N32 C64 56x56 3x3 + bias + relu;
``conv-1x1``: its 1x1 twin; ``vit-attn``, ``vit-mlp-up``, ``vit-mlp-down``, ``vit-proj``:
ViT-B/16 at batch 32's attention and GEMMs with their epilogues; ``convnext-s3-up[-nhwc]``:
ConvNeXt-T b32's stage-3 MLP up, 2-D and with the model's NHWC activation; ``convnext-s1-up``:
its stage-1 MLP up, K = 96; ``convnext-s3-down``: stage 3's MLP down with the layer scale
and the residual; ``convnext-s3-up-init``: stage 3's MLP up with the model's init values).
For each implementation the script warms up, then records ``--reps`` calls under
``torch.profiler`` (CUPTI kernel activity: no hardware counters needed) and prints every GPU
kernel with its mean duration, so a row's time splits into launches, copies and the kernels
that matter. Every implementation is checked against eager in float32 first (fresh randn
inputs).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


def conv_case(torch):
    import torch.nn.functional as F
    from conv_attn_bench import CONV

    h = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(32, 64, 56, 56, **h)
    w = torch.randn(64, 64, 3, 3, **h) * 0.05
    b = torch.randn(64, **h)

    def conv(x, w, b):
        return torch.relu(F.conv2d(x, w, padding=1) + b.view(1, -1, 1, 1))

    return CONV, (x, w, b), conv


def conv_1x1_case(torch):
    import torch.nn.functional as F
    from conv_attn_bench import POINTWISE

    h = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(32, 64, 56, 56, **h)
    w = torch.randn(64, 64, 1, 1, **h) * 0.1
    b = torch.randn(64, **h)

    def conv(x, w, b):
        return torch.relu(F.conv2d(x, w) + b.view(1, -1, 1, 1))

    return POINTWISE, (x, w, b), conv


def lms_small_case(torch):
    from gpu_bench import fallback_cases

    label, ir, fn, inputs, _ = fallback_cases(torch, "cuda", quick=False)[2]
    assert label.startswith("layernorm(8192x256)"), label
    return ir, inputs, fn


def lms_192_case(torch):
    """LN(8192x256) -> matmul 256x192 -> softmax: a whole-row tile of 64x192, whose LayerNorm
    runs in the kernel (``ln=tile``, 6 stages) or as a pre-pass (``--tile ln=fold``)."""
    import torch.nn.functional as F

    m, k, n = 8192, 256, 192
    r, kv, kn = f"tensor<{m}x{k}xf16>", f"tensor<{k}xf16>", f"tensor<{k}x{n}xf16>"
    o = f"tensor<{m}x{n}xf16>"
    text = f"""func.func @lms(%x: {r}, %g: {kv}, %b: {kv}, %w: {kn}) -> {o} {{
  %n = ai.layernorm %x, %g, %b : {r} * {kv} * {kv}
  %y = ai.matmul %n, %w : {r} * {kn}
  %s = ai.softmax %y : {o}
  return %s : {o}
}}"""
    h = dict(device="cuda", dtype=torch.float16)
    inputs = (torch.randn(m, k, **h), torch.randn(k, **h), torch.randn(k, **h))
    inputs += (torch.randn(k, n, **h) * k**-0.5,)

    def lms(x, g, b, w):
        return torch.softmax(F.layer_norm(x, (k,), g, b, 1e-5) @ w, dim=-1)

    return text, inputs, lms


def gemm_case(torch, prefix: str):
    from gemm_variants_bench import cases

    for name, text, inputs, reference, *_ in cases(torch):
        if name.startswith(prefix):
            return text, inputs, reference
    raise KeyError(prefix)


def mlp_case(torch, with_ln: bool = False):
    import torch.nn.functional as F
    from gemm_bench import LN, MLP

    m, d, h = 8192, 1024, 4096
    ln = LN.format(m=m, d=d) if with_ln else ""
    text = MLP.format(m=m, d=d, h=h, ln=ln, src="%n" if with_ln else "%x")

    def r(*shape, scale=1.0):
        return torch.randn(*shape, device="cuda", dtype=torch.float16) * scale

    inputs = (r(m, d), r(d), r(d), r(d, h, scale=0.03), r(h), r(h, d, scale=0.015), r(d))

    def mlp(x, g, be, w1, b1, w2, b2):
        n = F.layer_norm(x, (d,), g, be) if with_ln else x
        return F.gelu(n @ w1 + b1, approximate="tanh") @ w2 + b2 + x

    return text, inputs, mlp


def zoo_gemm_case(torch, epilogue: str, m: int, k: int, n: int, lead: tuple[int, ...] = ()):
    """A zoo GEMM at batch 32 (ViT-B/16's 6304 tokens, ConvNeXt-T's NHWC pixels) with its
    epilogue (``gemm_epilogue_ab``); ``lead``: x's leading dims as the model has them."""
    from gemm_split_k_ab import inputs_for, ir, torch_fn

    def reference(*args):
        return torch_fn(list(args), epilogue)()

    inputs = tuple(inputs_for(m, k, n, epilogue, lead))
    return ir(m, k, n, epilogue, lead), inputs, reference


def moe_case(torch, tokens: int = 4096):
    """Issue 31's MoE experts layer (Mixtral's sizes, bf16, the routing given) as
    ``gemm_bench --moe`` builds it, against transformers' eager loop over experts."""
    from gemm_bench import MOE, mixtral_loop

    d, f, n, k = 4096, 14336, 8, 2
    x = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    picks = torch.rand(tokens, n, device="cuda").topk(k, dim=1)
    weights, experts = torch.softmax(picks.values, dim=1), picks.indices.to(torch.int64)
    gate_up = (torch.randn(n, 2 * f, d, device="cuda") / d**0.5).to(torch.bfloat16)
    down = (torch.randn(n, d, f, device="cuda") / f**0.5).to(torch.bfloat16)

    loop = mixtral_loop(n, f)

    text = MOE.format(t=tokens, d=d, f=f, f2=2 * f, n=n, k=k)
    return text, (x, weights, experts, gate_up, down), loop


def vit_attention_case(torch):
    """ViT-B/16 batch 32's attention: 384 (batch, head) pairs of 197 tokens, head size 64."""
    import torch.nn.functional as F
    from conv_attn_bench import attention_graph  # it puts tests/targets/cuda on the path

    bh, s, d = 32 * 12, 197, 64
    inputs = tuple(torch.randn(bh, s, d, device="cuda", dtype=torch.float16) for _ in range(3))

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q[None], k[None], v[None], scale=0.125)[0]

    return attention_graph((bh,), s, s, d, d, scale="mul"), inputs, attention


def resnet_block_case(torch):
    from conv_attn_bench import RESNET, resnet_case

    inputs, block = resnet_case()
    return RESNET, inputs, block


def convnext_init_case(torch, m: int, k: int, n: int, lead: tuple[int, ...]):
    """ConvNeXt-T's MLP up with the values the zoo's model feeds it (torchvision's init: the
    weight truncated-normal with std 0.02, the bias zero; x a LayerNorm's output) instead of
    ``zoo_gemm_case``'s unit-scale weight and random bias: whether the kernel's time depends
    on the data (in the model the bias + GELU GEMMs ran 6-49% slower than in isolation)."""
    text, inputs, reference = zoo_gemm_case(torch, "bias+gelu", m, k, n, lead)
    x, w, c = inputs
    x = torch.nn.functional.layer_norm(x.float(), (k,)).half()
    w = torch.nn.init.trunc_normal_(torch.empty_like(w, dtype=torch.float32), std=0.02).half()
    return text, (x, w, torch.zeros_like(c)), reference


CASES = {
    "resnet": resnet_block_case,
    "lms-small": lms_small_case,
    "lms-192": lms_192_case,
    "mlp-down": lambda t: gemm_case(t, "MLP down"),
    "mlp-up": lambda t: gemm_case(t, "MLP up"),
    "mlp": mlp_case,
    "mlp-ln": lambda t: mlp_case(t, with_ln=True),
    "conv": conv_case,
    "vit-attn": vit_attention_case,
    "vit-mlp-up": lambda t: zoo_gemm_case(t, "bias+gelu", 6304, 768, 3072),
    "vit-mlp-down": lambda t: zoo_gemm_case(t, "bias+residual", 6304, 3072, 768),
    "vit-proj": lambda t: zoo_gemm_case(t, "bias+residual", 6304, 768, 768),
    "conv-1x1": conv_1x1_case,
    "moe": moe_case,
    "moe-decode": lambda t: moe_case(t, 8),
    # batch-1 transformer GEMMs (BERT-base / GPT-2 at 128 tokens): the epilogue's cost at
    # the small-M tile (gemm-epilogue-ab-b1.md: 5.7 us without it, 9.4 with bias + GELU)
    "b1-up": lambda t: zoo_gemm_case(t, "bias+gelu", 128, 768, 3072),
    "b1-up-plain": lambda t: zoo_gemm_case(t, "", 128, 768, 3072),
    "b1-out": lambda t: zoo_gemm_case(t, "bias+residual", 128, 768, 768),
    # ConvNeXt-T b32's stage-3 MLP up: 2-D as gemm_epilogue_ab times it, and NHWC as the model
    "convnext-s3-up": lambda t: zoo_gemm_case(t, "bias+gelu", 6272, 384, 1536),
    "convnext-s3-up-nhwc": lambda t: zoo_gemm_case(t, "bias+gelu", 6272, 384, 1536, (32, 14, 14)),
    "convnext-s1-up": lambda t: zoo_gemm_case(t, "bias+gelu", 100352, 96, 384),
    "convnext-s3-up-init": lambda t: convnext_init_case(t, 6272, 384, 1536, (32, 14, 14)),
    "convnext-s3-down": lambda t: zoo_gemm_case(
        t, "bias+scale+residual", 6272, 1536, 384, (32, 14, 14)
    ),
}


def kernel_table(torch, fn, reps: int, flush_l2: bool = False) -> list[tuple[str, float, int]]:
    """(kernel name, mean us per call, launches per call) of ``reps`` calls of ``fn``;
    ``flush_l2``: a 256 MB fill before each call evicts its operands and output from L2, as a
    model's other layers do (the fill's own kernel is a row of the table)."""
    from torch.profiler import ProfilerActivity, profile

    scratch = torch.empty(64 << 20, device="cuda") if flush_l2 else None
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            if scratch is not None:
                scratch.fill_(1.0)
            fn()
        torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        us = evt.device_time_total / reps
        if us > 0:
            rows.append((evt.key[:110], us, evt.count // reps))
    return sorted(rows, key=lambda r: -r[1])


def main() -> int:
    import torch

    import fusec

    parser = argparse.ArgumentParser()
    parser.add_argument("--case", action="append", choices=sorted(CASES), required=True)
    parser.add_argument("--impl", action="append", choices=["fusec", "eager", "compile"])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--no-profiler", action="store_true", help="only run (for ncu)")
    parser.add_argument("--tile", default="", help='tile-gemm options, e.g. "epilogue=smem"')
    parser.add_argument(
        "--flush-l2", action="store_true", help="evict L2 before each profiled call (cold)"
    )
    args = parser.parse_args()
    impls = args.impl or ["fusec", "eager", "compile"]
    torch.manual_seed(0)
    for case in args.case:
        text, inputs, reference = CASES[case](torch)
        ref = reference(*(t.float() for t in inputs))
        fns = {}
        if "fusec" in impls:
            pipeline = f"fusec-default,tile-gemm{{{args.tile}}}" if args.tile else None
            fns["fusec"] = fusec.compile(text, target="cuda", pipeline=pipeline)
            kernels = fns["fusec"].kernels
            print(f"== {case}: fusec kernels {[k.kind for k in kernels]}", flush=True)
        if "eager" in impls:
            fns["eager"] = reference
        if "compile" in impls:
            fns["compile"] = torch.compile(reference)
        for impl, fn in fns.items():
            got = fn(*inputs).float()
            rel = float((got - ref).norm() / ref.norm())
            bad = bool(torch.isnan(got).any())
            print(f"-- {case} {impl}: rel L2 {rel:.1e}{' NaN!' if bad else ''}", flush=True)
            for _ in range(3):
                fn(*inputs)
            torch.cuda.synchronize()
            if args.no_profiler:
                for _ in range(args.reps):
                    fn(*inputs)
                torch.cuda.synchronize()
                continue
            rows = kernel_table(
                torch, lambda fn=fn, inputs=inputs: fn(*inputs), args.reps, args.flush_l2
            )
            total = sum(us for _, us, _ in rows)
            print(f"   GPU kernel time per call: {total:.1f} us")
            for name, us, count in rows:
                print(f"   {us:8.1f} us  x{count}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
