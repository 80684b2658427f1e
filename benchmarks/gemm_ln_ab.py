"""A/B of a LayerNorm feeding a GEMM on the cuda target (issue #28, the GPT-2/ViT regression).

LayerNormalization(x) @ W + b (+ Gelu), weights constant as in an imported model, f16, three
ways: ``split`` (the LayerNorm a row kernel of its own, then the plain GEMM), ``fold`` (the
pre-pass and the epilogue rewrite; gemm_ln_exact, the rare exact path, inlined with its K loop
kept rolled: the header as it is), ``fold-unrolled`` (the loop unrolled by the compiler, as at
8f42112), ``fold-noinline`` (gemm_ln_exact called). Times: CUDA-graph replay of the whole
program, CUDA events on the current stream (checked against wall clock), median of 7 x 50
replays; numerics against PyTorch in f32 on fresh random inputs.

    python3 benchmarks/gemm_ln_ab.py --out $OUT     # H200

``--set convnext``: ConvNeXt-T's LayerNorm -> MLP-up GEMMs (K = 96, 192, 384: rows short
enough for the folded form by ``LN_SPLIT_MIN_K``, and for ``ln=tile``, the LayerNorm
normalised in the resident A tiles), variants ``split``, ``fold`` and ``tile``, written to
``gemm-ln-ab-convnext.*``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import write_results  # noqa: E402

VARIANTS = ("split", "fold", "fold-unrolled", "fold-noinline")
CONVNEXT_VARIANTS = ("split", "fold", "tile")
SHAPES = [  # (M, K, N, gelu): GPT-2 b1 QKV and MLP-up, GPT-2 b8 MLP-up, ViT-B/16 b32 QKV, MLP-up
    (128, 768, 2304, False),
    (128, 768, 3072, True),
    (1024, 768, 3072, True),
    (6304, 768, 2304, False),
    (6304, 768, 3072, True),
]
#: ConvNeXt-T's MLP-up after its LayerNorm: stages 1-3 at batch 32, stage 1 at batch 1
CONVNEXT_SHAPES = [
    (100352, 96, 384, True),
    (25088, 192, 768, True),
    (6272, 384, 1536, True),
    (3136, 96, 384, True),
]


def model(m: int, k: int, n: int, gelu: bool, rng):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f16 = lambda a: numpy_helper.from_array(a.astype(np.float16))  # noqa: E731
    inits = [
        f16(1 + 0.1 * rng.standard_normal(k)),
        f16(0.1 * rng.standard_normal(k)),
        f16(rng.standard_normal((k, n)) / k**0.5),
        f16(0.1 * rng.standard_normal(n)),
    ]
    for t, name in zip(inits, ("g", "b", "w", "c"), strict=True):
        t.name = name
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["y", "w"], ["h"]),
        helper.make_node("Add", ["h", "c"], ["o" if not gelu else "p"]),
    ]
    if gelu:
        nodes.append(helper.make_node("Gelu", ["p"], ["o"], domain=""))
    graph = helper.make_graph(
        nodes,
        "ln_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT16, [m, n])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), inits


def table(
    rows: list[dict], variants: tuple[str, ...] = VARIANTS, shapes: list | None = None
) -> list[str]:
    """The markdown table of ``rows``: a line per shape, a column per variant."""
    lines = [
        f"| M x K -> N | epilogue | {' | '.join(variants)} | split / fold | rel L2 "
        f"({', '.join(variants)}) |",
        "| --- | --- | " + "--- | " * len(variants) + "--- | --- |",
    ]
    for m, k, n, gelu in shapes or SHAPES:
        r = {x["variant"]: x for x in rows if (x["m"], x["k"], x["n"]) == (m, k, n)}
        ms = {v: r[v].get("gpu_ms") for v in r}

        def cell(v: str, r: dict = r, ms: dict = ms) -> str:
            return f"{ms[v] * 1e3:.1f} us" if ms.get(v) else r.get(v, {}).get("error", "-")[:40]

        split_fold = (
            f"{ms['split'] / ms['fold']:.2f}" if ms.get("split") and ms.get("fold") else "-"
        )
        errs = ", ".join(f"{r.get(v, {}).get('rel_l2', float('nan')):.1e}" for v in variants)
        times = " | ".join(cell(v) for v in variants)
        epilogue = "bias + gelu" if gelu else "bias"
        lines.append(f"| {m} x {k} -> {n} | {epilogue} | {times} | {split_fold} | {errs} |")
    return lines


def main() -> int:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from gemm_bench import fusec_graph, time_gpu
    from onnx import numpy_helper

    import fusec
    from fusec.targets.cuda import headers
    from fusec.targets.cuda.gemm import template

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--set", choices=("gpt2-vit", "convnext"), default="gpt2-vit")
    args = parser.parse_args()
    convnext = args.set == "convnext"
    variants = CONVNEXT_VARIANTS if convnext else VARIANTS
    shapes = CONVNEXT_SHAPES if convnext else SHAPES
    text = headers._text
    pragma = "#pragma unroll 1\n  for (int k = 0; k < K; ++k) {"
    plain = "for (int k = 0; k < K; ++k) {"
    inline = "static __device__ __forceinline__ float gemm_ln_exact("
    edits = {  # the header's gemm_ln_exact as it is ("fold"), and as it was or could be
        "fold-unrolled": ((pragma, plain),),  # 8f42112: the compiler unrolls the K loop
        "fold-noinline": ((inline, inline.replace("__forceinline__", "__noinline__")),),
    }

    def patched(name: str, edits=()) -> str:
        body = text(name)
        for old, new in edits:
            assert old in body or name != "fusec/gemm.cuh", old
            body = body.replace(old, new)
        return body

    def variant(name: str) -> str | None:
        """Set the variant up; the pipeline that compiles it (None: the default)."""
        template.LN_SPLIT_MIN_K = 0 if name == "split" else 10**9
        template.LN_SPLIT_WIDE = 0 if name == "split" else 10**9
        text.cache_clear()
        headers._text = lambda n: patched(n, edits.get(name, ()))  # type: ignore[assignment]
        return "fusec-cuda,tile-gemm{ln=tile}" if name == "tile" else None

    rng = np.random.default_rng(0)
    rows = []
    for m, k, n, gelu in shapes:
        onnx_model, inits = model(m, k, n, gelu, rng)
        g, b, w, c = (torch.tensor(numpy_helper.to_array(t)).cuda().float() for t in inits)
        x = torch.randn(m, k, device="cuda", dtype=torch.float16) + 0.5
        ref = F.layer_norm(x.float(), (k,), g, b, 1e-5) @ w + c
        ref = F.gelu(ref) if gelu else ref
        for name in variants:
            pipeline = variant(name)
            row = {"m": m, "k": k, "n": n, "gelu": gelu, "variant": name}
            try:
                t0 = time.perf_counter()
                module = fusec.from_onnx(onnx_model)
                compiled = fusec.compile(module, target="cuda", pipeline=pipeline)
                out = compiled(x)
                torch.cuda.synchronize()
                row["compile_s"] = round(time.perf_counter() - t0, 1)
                row["kernels"] = [kk.kind for kk in compiled.kernels]
                row["ln_tile"] = 'ln = "tile"' in str(compiled.module)
                row["rel_l2"] = float((out.float() - ref).norm() / ref.norm())
                row["nan"] = int(torch.isnan(out).sum())
                row["gpu_ms"] = time_gpu(fusec_graph(compiled, (x,)))
            except Exception as err:  # one variant's failure must not lose the others
                row["error"] = f"{type(err).__name__}: {err}"[:300]
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = table(rows, variants, shapes)
    stem = "gemm-ln-ab-convnext" if convnext else "gemm-ln-ab"
    write_results(args.out / stem, rows, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
