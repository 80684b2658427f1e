"""The cuda target's benchmark runner: its suites as data (``benchmarks/runner.py`` says how).

    python benchmarks/gpu.py list
    python benchmarks/gpu.py run gemm conv-attn ops --out $OUT     # on an NVIDIA GPU
    python benchmarks/gpu.py run gemm:tf32 --out $OUT              # a suite's named variant
    python benchmarks/gpu.py run conv-attn -- --only conv --fusec-only
    python benchmarks/gpu.py smoke                                 # no GPU needed

Each suite's smoke compiles the cases its script builds (the same IR texts, small where
the script's builders take sizes) for the cuda target, code generation only (an H200's 132
SMs, nothing launched), and runs the small ones on the reference executor (finite outputs).
The device machines run ``benchmarks/device.sh``, whose stages call these suites' scripts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner  # noqa: E402
from runner import CUDA_COLUMNS, Suite, cuda_row  # noqa: E402

# -- the suites' smokes ---------------------------------------------------------------------


def smoke_ops() -> runner.SmokeResult:
    import gpu_bench as b

    # the pointwise and row-reduction rows (their IR builders); its conv and GEMM rows
    # (fallback_cases) make their inputs with torch: the gemm and conv-attn smokes cover them
    cases = [
        ("relu(x*a+b)*c, scalar a b c", b.pointwise_ir(256, True)),
        ("relu(x*a+b)*c, tensor a b c", b.pointwise_ir(256, False)),
        ("layernorm 8x64", b.layernorm_ir(8, 64)),
        ("softmax 8x64", b.softmax_ir(8, 64)),
    ]
    return CUDA_COLUMNS, [cuda_row(n, t, pipeline="infer-shapes") for n, t in cases]


def _gemm_texts(m: int, k: int, n: int) -> list[tuple[str, str]]:
    import gemm_bench as b

    mlp = {
        with_ln: b.MLP.format(
            m=m,
            d=k,
            h=n,
            ln=b.LN.format(m=m, d=k) if with_ln else "",
            src="%n" if with_ln else "%x",
        )
        for with_ln in (True, False)
    }
    return [
        (f"matmul {m}x{k}x{n} f16", b.MATMUL.format(m=m, n=n, k=k, t="f16")),
        (f"matmul {m}x{k}x{n} bf16", b.MATMUL.format(m=m, n=n, k=k, t="bf16")),
        (f"matmul {m}x{k}x{n} + bias + relu", b.BIAS_RELU.format(m=m, n=n, k=k, t="f16")),
        (f"matmul {m}x{k}x{n} f32, B as N x K", b.MATMUL_BT.format(m=m, n=n, k=k, t="f32")),
        (f"LN {m}x{k} -> matmul -> softmax", b.LN_SOFTMAX.format(m=m, k=k, n=n)),
        (f"MLP LN {m}x{k}x{n}", mlp[True]),
        (f"MLP {m}x{k}x{n}", mlp[False]),
        (f"fp8 matmul {m}x{k}x{n}", b.FP8_MATMUL.format(m=m, n=n, k=k, sa=0.5, sb=0.25)),
        (
            f"FP8 MLP {m}x{k}x{n}",
            b.FP8_MLP.format(m=m, d=k, h=n, sx=0.05, sh=0.02, c1=0.05 / 512, c2=0.02 / 1024),
        ),
        (f"W4A16 1x{k}x{n}", _w4_text(b, 1, k, n)),
        (f"W4A16 {m}x{k}x{n}", _w4_text(b, m, k, n)),
        (f"MoE experts {m}x{k}x{n}, top-2 of 4", b.MOE.format(t=m, d=k, f=n, f2=2 * n, n=4, k=2)),
    ]


def _w4_text(b, m: int, k: int, n: int, g: int = 32) -> str:
    """gemm_bench's W4A16 case with random constant codes (the W4A16 route up to 16 rows)."""
    import numpy as np

    codes = np.random.default_rng(0).integers(-8, 8, (k, n)).astype(np.int8)
    return b.W4_MATMUL.format(m=m, k=k, n=n, b=k // g, g=g, codes=codes.tobytes().hex().upper())


def smoke_gemm() -> runner.SmokeResult:
    rows = [cuda_row(name, text) for name, text in _gemm_texts(128, 64, 128)]
    return CUDA_COLUMNS, rows


def smoke_gemm_variants() -> runner.SmokeResult:
    import gemm_variants_bench as b

    m, k, n = 256, 128, 256
    plain = b.MATMUL.format(m=m, k=k, n=n)
    up = b.EPILOGUE.format(m=m, k=k, n=n, extra="", tail=b.GELU.format(m=m, n=n))
    extra = f", %r: tensor<{m}x{n}xf16>"
    down = b.EPILOGUE.format(m=m, k=k, n=n, extra=extra, tail=b.RESIDUAL.format(m=m, n=n))
    import gemm_bench

    lms = gemm_bench.LN_SOFTMAX.format(m=m, k=k, n=n)
    # every variant's options once, on the first case that lists them (the full run times
    # each case with each of its variants)
    rows, seen = [], set()
    for case, text, variants in (
        ("matmul", plain, b.PLAIN_VARIANTS),
        ("MLP up + bias + gelu", up, b.VARIANTS),
        ("MLP down + bias + residual", down, b.DOWN_VARIANTS),
        ("LN -> matmul -> softmax", lms, b.LN_VARIANTS),
    ):
        for label, options in variants:
            if options in seen:
                continue
            seen.add(options)
            rows.append(cuda_row(f"{case} [{label}]", text, pipeline=b.pipeline(options)))
    return CUDA_COLUMNS, rows


def smoke_gemm_kernel_check() -> runner.SmokeResult:
    import gemm_kernel_check as b

    from fusec.targets.cuda.gemm import cpp
    from fusec.targets.cuda.gemm.config import TileConfig

    # each case's kernel generated (the CUDA C++ its run builds with NVRTC on the GPU)
    rows = []
    for name, text, dtype, out, a_major, b_major, epi, shapes in b.CASES:
        epilogue = cpp.bias_relu(dtype) if epi == "bias_relu" else cpp.Epilogue()
        batched = {(bool(s[4]), bool(s[5])) for s in shapes}
        lines = 0
        for batch_a, batch_b in sorted(batched):
            config = TileConfig.parse(text)
            spec = cpp.GemmSpec(config, dtype, out, a_major, b_major, batch_a, batch_b, epilogue)
            lines += len(cpp.generate(spec).splitlines())
        if not lines:
            raise AssertionError(f"{name}: no kernel source")
        rows.append({"case": name, "kernels": len(batched), "kinds": [text], "status": "ok"})
    return CUDA_COLUMNS, rows


def smoke_gemm_host_path() -> runner.SmokeResult:
    # a process of its own: the script puts a stand-in torch in sys.modules
    script = runner.HERE / "gemm_host_path.py"
    done = subprocess.run(
        [sys.executable, str(script), "--calls", "200", "--profile-calls", "0"],
        capture_output=True,
        text=True,
        check=False,
        cwd=runner.ROOT,
        timeout=120,
    )
    line = next((x for x in done.stdout.splitlines() if "per GEMM call" in x), "")
    if done.returncode or not line:
        raise AssertionError(f"gemm_host_path.py failed: {done.stderr[-500:]}")
    us = float(line.rsplit(":", 1)[1].split()[0])
    row = {"case": "GEMM call, stand-in torch and driver", "host_us": us, "status": "ok"}
    return list(row), [row]


def smoke_gemm_ln_ab() -> runner.SmokeResult:
    import gemm_ln_ab as b
    import numpy as np

    import fusec

    # each distinct (K, N, gelu) of the shapes: the LayerNorm -> GEMM model at 16 rows,
    # imported and compiled for the cuda target as the script's default variant builds it
    rng = np.random.default_rng(0)
    rows = []
    for k, n, gelu in dict.fromkeys((k, n, gelu) for _, k, n, gelu in b.SHAPES):
        onnx_model, _ = b.model(16, k, n, gelu, rng)
        name = f"LN 16x{k} -> matmul {k}x{n}" + (" -> gelu" if gelu else "")
        rows.append(cuda_row(name, fusec.from_onnx(onnx_model)))
    return CUDA_COLUMNS, rows


def smoke_gemm_split_k_ab() -> runner.SmokeResult:
    import gemm_split_k_ab as b

    # every shape's IR at 16 rows (the reference runs it), compiled for the cuda target
    rows = [
        cuda_row(f"{name}: {min(m, 16)}x{k} -> {n}", b.ir(min(m, 16), k, n, epilogue))
        for name, m, k, n, epilogue in b.SHAPES
    ]
    return CUDA_COLUMNS, rows


def smoke_gemm_epilogue_ab() -> runner.SmokeResult:
    import gemm_epilogue_ab as b

    # every shape's IR at 16 rows with its epilogue, compiled for the cuda target
    rows = [
        cuda_row(f"{name}: {min(m, 16)}x{k} -> {n}", b.ir(min(m, 16), k, n, epilogue))
        for name, m, k, n, epilogue in [*b.SHAPES, *b.SHAPES_B1]
    ]
    return CUDA_COLUMNS, rows


def smoke_conv_attn() -> runner.SmokeResult:
    import conv_attn_bench as b

    cases = [
        ("conv N32 C64 56x56 K64 3x3 + bias + relu", b.CONV),
        ("ResNet block N32 C64 56x56", b.RESNET),
        ("conv 1x1 (pointwise)", b.POINTWISE),
    ]
    for shape in b.STRIDED.values():  # the strided rows at batch 1, a quarter of the plane
        _, c, h, w, k, r, stride, pad = shape
        name = f"strided N1 C{c} {h // 4}x{w // 4} K{k} {r}x{r}/{stride} + bias + relu"
        cases.append((name, b.strided_text(1, c, h // 4, w // 4, k, r, stride, pad)))
    cases.append(("attention 2x64x64", b.attention_graph((2,), 64, 64, 64, 64, scale="mul")))
    cases.append(("attention 1x128x128", b.attention_graph((1,), 128, 128, 128, 128, scale="mul")))
    cases.append(("RoPE attention 1x128 32/8 heads d128 (rope)", b.rope_graph(128, True)))
    return CUDA_COLUMNS, [cuda_row(n, t) for n, t in cases]


def smoke_copy() -> runner.SmokeResult:
    import copy_bench as b

    rows = [cuda_row(c.label, c.ir, pipeline="infer-shapes") for c in b.all_cases(smoke=True)]
    return CUDA_COLUMNS, rows


def smoke_call_overhead() -> runner.SmokeResult:
    import gpu_bench as b

    # gpu_call_overhead.py's two calls (its 64 x 4096 rows, small here)
    cases = [
        ("layernorm 64x256", b.layernorm_ir(64, 256)),
        ("softmax 64x256", b.softmax_ir(64, 256)),
    ]
    return CUDA_COLUMNS, [cuda_row(n, t, pipeline="infer-shapes") for n, t in cases]


def smoke_models_small() -> runner.SmokeResult:
    import models_bench as b

    from fusec.api import import_onnx

    rows = []
    for name in ("resnet18", "gpt2"):
        input_name, one, _ = b.CASES[name]
        path = runner.ROOT / "tests" / "frontend" / "onnx" / "models" / f"{name}.{b.EXPORT}.onnx"
        module = import_onnx(path, input_shapes={input_name: one}).module
        rows.append(cuda_row(f"{name} {'x'.join(map(str, one))}", module))
    return CUDA_COLUMNS, rows


def _zoo_rows(cases: list[tuple[str, str, str, Any]]) -> runner.SmokeResult:
    rows = [
        {"case": m, "dtype": d, "exporter": e, "batches": list(bs), "status": "planned"}
        for m, d, e, bs in cases
    ]
    if not rows:
        raise AssertionError("the zoo plans no case")
    return ["case", "dtype", "exporter", "batches", "status"], rows


def smoke_zoo() -> runner.SmokeResult:
    import models_gpu as b

    # without torch the zoo cannot be built or exported: the smoke checks the plan the
    # full run (--quick) works through
    plan = b.plan(b.parse_args(["--quick"]))
    return _zoo_rows([(c.model, c.dtype, c.exporter, c.batches) for c in plan])


def smoke_torch_backend() -> runner.SmokeResult:
    import torch_backend_zoo as b

    plan = b.plan(b.parse_args([]))
    return _zoo_rows([(m, d, "torch.compile", (batch,)) for m, d, batch in plan])


def smoke_profile_zoo() -> runner.SmokeResult:
    import conv_attn_bench as conv
    import profile_zoo as b

    import fusec

    # without torch no model is built: the smoke sorts the kernel names a profile lists
    # into the summary's kinds, fusec's own (a conv group's) and PyTorch's
    compiled = fusec.compile(conv.RESNET, target="cuda", executable=False)
    layers = b.layer_names(compiled.kernels)
    names = [spec.function_name for k in compiled.kernels for spec in k.specs] + [
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
        "nvjet_sm90_hsh_128x192_64x5_2x1_v_bz_coopB_TNN",
        "triton_poi_fused__native_batch_norm_legit_no_training_add_relu_7",
        "triton_per_fused__native_batch_norm_legit_no_training_add_mean_relu_23",
    ]
    rows = [
        {"kernel": name[:60], "kind": b.kind_of(name), "layer": b.layer_of(name, layers)}
        for name in names
    ]
    if not all(row["layer"] for row in rows[: len(rows) - 4]):
        raise AssertionError(f"a fusec kernel without its layer: {rows}")
    return ["kernel", "kind", "layer"], rows


def smoke_profile() -> runner.SmokeResult:
    import conv_attn_bench as conv
    import gemm_bench as g
    import gemm_variants_bench as v
    from gemm_split_k_ab import ir

    # profile_cases.py's cases at their sizes (their IR texts; the inputs need torch)
    m, k, n = 8192, 1024, 4096
    extra = f", %r: tensor<{m}x{k}xf16>"
    cases = [
        ("lms-small", g.LN_SOFTMAX.format(m=8192, k=256, n=256)),
        ("lms-192", g.LN_SOFTMAX.format(m=8192, k=256, n=192)),
        ("mlp-up", v.EPILOGUE.format(m=m, k=k, n=n, extra="", tail=v.GELU.format(m=m, n=n))),
        (
            "mlp-down",
            v.EPILOGUE.format(m=m, k=n, n=k, extra=extra, tail=v.RESIDUAL.format(m=m, n=k)),
        ),
        ("mlp", g.MLP.format(m=m, d=k, h=n, ln="", src="%x")),
        ("conv", conv.CONV),
        ("conv-1x1", conv.POINTWISE),
        ("resnet", conv.RESNET),
        ("b1-up", ir(128, 768, 3072, "bias+gelu")),
        ("b1-up-plain", ir(128, 768, 3072, "")),
        ("b1-out", ir(128, 768, 768, "bias+residual")),
        ("moe", g.MOE.format(t=4096, d=4096, f=14336, f2=2 * 14336, n=8, k=2)),
        ("moe-decode", g.MOE.format(t=8, d=4096, f=14336, f2=2 * 14336, n=8, k=2)),
    ]
    return CUDA_COLUMNS, [cuda_row(name, text) for name, text in cases]


def smoke_code_cache() -> runner.SmokeResult:
    from gemm_split_k_ab import ir

    # gemm_code_cache.py's GEMMs (its inputs need torch), each loop of the epilogue
    cases = [
        (f"{name} loop={loop}", ir(m, k, n, epilogue, lead), loop)
        for name, m, k, n, epilogue, lead in (
            ("stage-3 up", 6272, 384, 1536, "bias+gelu", (32, 14, 14)),
            ("stage-1 up", 100352, 96, 384, "bias+gelu", (32, 56, 56)),
            ("MLP down", 6272, 1536, 384, "bias+scale+residual", (32, 14, 14)),
        )
        for loop in ("unrolled", "rolled")
    ]
    rows = [
        cuda_row(name, text, pipeline=f"fusec-default,tile-gemm{{loop={loop}}}")
        for name, text, loop in cases
    ]
    return CUDA_COLUMNS, rows


SUITES: list[Suite] = [
    Suite(
        "ops",
        "gpu_bench.py",
        "pointwise, row reductions, conv and GEMM groups vs eager and torch.compile, % of copy",
        smoke_ops,
        args=("--out", "{out}"),
        table="gpu",
        requires=("torch",),
        options={"quick": ("--quick", "--out", "{out}")},
    ),
    Suite(
        "gemm",
        "gemm_bench.py",
        "the Hopper GEMM template (plain, epilogues, LN prologue, MLP, softmax) vs cuBLAS",
        smoke_gemm,
        args=("--out", "{out}"),
        table="gemm",
        requires=("torch",),
        options={
            "tf32": ("--out", "{out}", "--tf32"),
            "fp8": ("--out", "{out}", "--fp8"),
            "w4": ("--out", "{out}", "--w4"),
            "moe": ("--out", "{out}", "--moe"),
            "w4-sweep": ("--w4-sweep",),
            "w4-decode": ("--w4-decode",),
            "w4-ring-sweep": ("--w4-ring-sweep",),
            "w4-routes": ("--out", "{out}", "--w4-routes"),
            "no-compile": ("--out", "{out}", "--no-compile"),
        },
    ),
    Suite(
        "gemm-variants",
        "gemm_variants_bench.py",
        "every opt-in variant of the GEMM (epilogue, maths, pingpong) vs eager, torch.compile",
        smoke_gemm_variants,
        args=("--out", "{out}", "--budget", "120"),
        table="gemm-variants",
        requires=("torch",),
    ),
    Suite(
        "gemm-ln-ab",
        "gemm_ln_ab.py",
        "a LayerNorm feeding a GEMM: split, folded, folded with the K loop unrolled or not inlined",
        smoke_gemm_ln_ab,
        args=("--out", "{out}"),
        table="gemm-ln-ab",
        requires=("torch", "onnx"),
    ),
    Suite(
        "gemm-split-k-ab",
        "gemm_split_k_ab.py",
        "split-K on batch-1 transformer GEMMs: unsplit, the heuristic's split, cuBLAS",
        smoke_gemm_split_k_ab,
        args=("--out", "{out}"),
        table="gemm-split-k-ab",
        requires=("torch",),
    ),
    Suite(
        "gemm-epilogue-ab",
        "gemm_epilogue_ab.py",
        "batch-32 GEMMs of ViT-B/16 and ConvNeXt-T: tiles, schedules, the epilogue's cost, cuBLAS",
        smoke_gemm_epilogue_ab,
        args=("--out", "{out}"),
        table="gemm-epilogue-ab",
        requires=("torch",),
    ),
    Suite(
        "gemm-kernel-check",
        "gemm_kernel_check.py",
        "the Hopper GEMM kernel alone: build, verify, time against cuBLAS",
        smoke_gemm_kernel_check,
        args=("--out", "{out}"),
        table="gemm-kernel-check",
        requires=("torch",),
    ),
    Suite(
        "gemm-host-path",
        "gemm_host_path.py",
        "fusec's own Python per GEMM call, no GPU (stand-in torch, the tests' fake driver)",
        smoke_gemm_host_path,
    ),
    Suite(
        "conv-attn",
        "conv_attn_bench.py",
        "cuda conv and attention vs eager, torch.compile, cuDNN channels_last, SDPA",
        smoke_conv_attn,
        args=("--out", "{out}"),
        table="conv-attn",
        requires=("torch",),
        options={
            "max-autotune": ("--out", "{out}", "--max-autotune"),
            "fusec-only": ("--out", "{out}", "--fusec-only"),
        },
    ),
    Suite(
        "copy",
        "copy_bench.py",
        "the cuda copy kernels (head split/merge, transposes, NCHW->NHWC) vs permute",
        smoke_copy,
        args=("--out", "{out}"),
        table="copy",
        requires=("torch",),
        options={"simulator": ("--smoke",)},
    ),
    Suite(
        "call-overhead",
        "gpu_call_overhead.py",
        "host-side cost of one cuda call with torch tensors, cProfile (printed)",
        smoke_call_overhead,
        requires=("torch",),
    ),
    Suite(
        "models-small",
        "models_bench.py",
        "the ONNX test models end to end vs PyTorch",
        smoke_models_small,
        args=("--target", "cuda", "--out", "{out}"),
        table="models-small-cuda",
        requires=("torch", "onnxruntime"),
    ),
    Suite(
        "zoo",
        "models_gpu.py",
        "the GPU model zoo through ONNX vs eager, torch.compile, reduce-overhead",
        smoke_zoo,
        args=("--quick", "--budget", "540", "--out", "{out}"),
        table="models-gpu",
        requires=("torch", "torchvision", "transformers"),
        options={"cpu-smoke": ("--target", "cpu", "--smoke", "--out", "{out}")},
    ),
    Suite(
        "torch-backend",
        "torch_backend_zoo.py",
        'the zoo through torch.compile(backend="fusec") vs eager and inductor',
        smoke_torch_backend,
        args=("--out", "{out}"),
        table="torch-backend",
        requires=("torch", "torchvision", "transformers"),
        options={"cpu-smoke": ("--target", "cpu", "--smoke", "--models", "tiny", "--out", "{out}")},
    ),
    Suite(
        "profile-zoo",
        "profile_zoo.py",
        "per-kernel GPU times of a zoo model under fusec (and A/B variants) and torch.compile",
        smoke_profile_zoo,
        args=("--model", "resnet50", "--batch", "32", "--json", "{out}/profile-zoo.json"),
        requires=("torch", "torchvision", "transformers"),
    ),
    Suite(
        "code-cache",
        "gemm_code_cache.py",
        "ConvNeXt-T's MLP-up GEMMs alone and beside other kernels, unrolled vs rolled epilogue",
        smoke_code_cache,
        args=("--json", "{out}/gemm-code-cache.json"),
        requires=("torch",),
    ),
    Suite(
        "profile",
        "profile_cases.py",
        "per-kernel GPU times of the rows that miss (torch.profiler; ncu with --no-profiler)",
        smoke_profile,
        args=("--case", "lms-small"),
        requires=("torch",),
    ),
]


if __name__ == "__main__":
    sys.exit(runner.main("cuda", SUITES))
