"""A/B of split-K on the GEMMs of batch-1 transformers on the cuda target (issue #28).

Each shape is a transformer projection at batch 1 (M = tokens), f16, weights constant, with
the epilogue it has in the zoo's models, compiled three ways in one run: ``unsplit`` (the
heuristic's tile with ``sk=1``, as before split-K), ``split`` (the heuristic's own choice,
``choose_config`` with ``$FUSEC_SPLIT_K`` on), and PyTorch eager (cuBLAS ``addmm`` /
``matmul`` and the epilogue's ops).
Times: CUDA-graph replay (fusec's whole-program graph; the torch ops captured in a torch CUDA
graph), CUDA events on the current stream checked against wall clock, median of 7 x 20
replays (``gemm_bench.time_gpu``). Numerics against the same maths in f32 on fresh random
inputs, outputs checked for NaN.

    python3 benchmarks/gemm_split_k_ab.py --out $OUT     # H200
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import write_results  # noqa: E402

#: (name, M, K, N, epilogue): "bias", "bias+gelu", "bias+residual" or "" (none)
SHAPES = [
    ("BERT/GPT-2 attention out", 128, 768, 768, "bias+residual"),
    ("BERT/GPT-2 MLP down", 128, 3072, 768, "bias+residual"),
    ("GPT-2 QKV", 128, 768, 2304, "bias"),
    ("BERT/GPT-2 MLP up", 128, 768, 3072, "bias+gelu"),
    ("ViT-B/16 MLP down", 197, 3072, 768, "bias+residual"),
    ("Llama down", 128, 5632, 2048, ""),
    ("Llama K/V", 128, 2048, 256, ""),
    ("BERT pooler", 1, 768, 768, "bias"),
]
VARIANTS = ("unsplit", "split")


def ir(m: int, k: int, n: int, epilogue: str, lead: tuple[int, ...] = ()) -> str:
    """The GEMM and its epilogue as ``ai`` IR, the weight and bias as function arguments:
    ``epilogue`` names its parts in order, of bias, gelu, scale (a per-column layer scale,
    ConvNeXt's) and residual. ``lead``: x's leading dims (their product ``m``) as a model's
    NHWC or (batch, tokens) activation has them, folded into M by the GEMM."""
    lead = lead or (m,)
    assert math.prod(lead) == m, (lead, m)
    t = lambda *s: f"tensor<{'x'.join(map(str, s))}xf16>"  # noqa: E731
    x, y = t(*lead, k), t(*lead, n)
    args = [f"%x: {x}", f"%w: {t(k, n)}"]
    lines = [f"  %v0 = ai.matmul %x, %w : {x} * {t(k, n)}"]
    last = "%v0"
    if "bias" in epilogue:
        args.append(f"%c: {t(n)}")
        axis = len(lead)
        lines.append(f"  %v1 = ai.bias_add {last}, %c {{axis = {axis} : i64}} : {y} * {t(n)}")
        last = "%v1"
    if "gelu" in epilogue:
        lines.append(f"  %v2 = ai.gelu {last} : {y}")
        last = "%v2"
    if "scale" in epilogue:
        scale = t(*(1 for _ in lead), n)
        args.append(f"%s: {scale}")
        lines.append(f"  %v3 = ai.mul {last}, %s : {y} * {scale}")
        last = "%v3"
    if "residual" in epilogue:
        args.append(f"%r: {y}")
        lines.append(f"  %v4 = ai.add {last}, %r : {y} * {y}")
        last = "%v4"
    head = f"func.func @g({', '.join(args)}) -> {y} {{"
    return "\n".join([head, *lines, f"  return {last} : {y}", "}", ""])


def torch_fn(args, epilogue: str):
    """The same maths with PyTorch ops (cuBLAS), in the arguments' dtype."""
    import torch.nn.functional as F

    x, w, *rest = args

    def fn():
        extra = iter(rest)
        y = x @ w
        if "bias" in epilogue:
            y = y + next(extra)
        if "gelu" in epilogue:
            y = F.gelu(y)
        if "scale" in epilogue:
            y = y * next(extra)
        if "residual" in epilogue:
            y = y + next(extra)
        return y

    return fn


def inputs_for(m: int, k: int, n: int, epilogue: str, lead: tuple[int, ...] = ()) -> list:
    import torch

    lead = lead or (m,)
    inputs = [torch.randn(*lead, k, device="cuda", dtype=torch.float16)]
    inputs.append(torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5)
    if "bias" in epilogue:
        inputs.append(0.1 * torch.randn(n, device="cuda", dtype=torch.float16))
    if "scale" in epilogue:
        ones = (1,) * len(lead)
        inputs.append(0.5 + 0.1 * torch.randn(*ones, n, device="cuda", dtype=torch.float16))
    if "residual" in epilogue:
        inputs.append(torch.randn(*lead, n, device="cuda", dtype=torch.float16))
    return inputs


def measure(text: str, pipeline: str | None, inputs: list, ref) -> dict:
    import torch
    from gemm_bench import fusec_graph, time_gpu

    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    row: dict = {}
    try:
        t0 = time.perf_counter()
        compiled = fusec.compile(text, target="cuda", pipeline=pipeline)
        specs = [s for kern in compiled.kernels for s in linked_specs(kern)]
        row["tile"] = ", ".join(s.config.text for s in specs if hasattr(s, "config"))
        out = compiled(*inputs)
        torch.cuda.synchronize()
        row["compile_s"] = round(time.perf_counter() - t0, 1)
        row["nan"] = int(torch.isnan(out).sum())
        row["rel_l2"] = float((out.float() - ref).norm() / ref.norm())
        replay = fusec_graph(compiled, tuple(inputs))
        row["gpu_ms"] = time_gpu(replay) if replay is not None else None
    except Exception as err:  # one variant's failure must not lose the others
        row["error"] = f"{type(err).__name__}: {err}"[:300]
    return row


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| GEMM | M x K -> N | epilogue | split (heuristic) | unsplit us | split us | "
        "cuBLAS us | unsplit / split | cuBLAS / split | rel L2 (unsplit, split) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, m, k, n, epilogue in SHAPES:
        r = {x["variant"]: x for x in rows if x["name"] == name}
        us = {v: r.get(v, {}).get("gpu_ms") for v in (*VARIANTS, "torch")}

        def cell(v: str, us: dict = us, r: dict = r) -> str:
            return f"{us[v] * 1e3:.1f}" if us.get(v) else r.get(v, {}).get("error", "-")[:40]

        def ratio(a: str, b: str, us: dict = us) -> str:
            return f"{us[a] / us[b]:.2f}x" if us.get(a) and us.get(b) else "-"

        errs = ", ".join(f"{r.get(v, {}).get('rel_l2', float('nan')):.1e}" for v in VARIANTS)
        tile = r.get("split", {}).get("tile", "-")
        lines.append(
            f"| {name} | {m} x {k} -> {n} | {epilogue or '-'} | {tile} | {cell('unsplit')} | "
            f"{cell('split')} | {cell('torch')} | {ratio('unsplit', 'split')} | "
            f"{ratio('torch', 'split')} | {errs} |"
        )
    return lines


def main() -> int:
    import os

    import torch
    from gemm_bench import time_gpu, torch_graph

    from fusec.targets.cuda.gemm.config import choose_config

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    torch.manual_seed(0)
    os.environ["FUSEC_SPLIT_K"] = "on"  # the GEMM's heuristic split (opt-in)
    rows = []
    for name, m, k, n, epilogue in SHAPES:
        text = ir(m, k, n, epilogue)
        inputs = inputs_for(m, k, n, epilogue)
        ref = torch_fn([a.float() for a in inputs], epilogue)()
        chosen = choose_config(m, n, k)
        unsplit = chosen.text.split(" sk=")[0]
        pipelines = {
            "unsplit": f'fusec-default,tile-gemm{{tile="{unsplit}"}}',
            "split": None,
        }
        for variant, pipeline in pipelines.items():
            row = {"name": name, "m": m, "k": k, "n": n, "epilogue": epilogue}
            row |= {"variant": variant, "tile": chosen.text if variant == "split" else unsplit}
            row |= measure(text, pipeline, inputs, ref)
            rows.append(row)
            print(json.dumps(row), flush=True)
        row = {"name": name, "m": m, "k": k, "n": n, "epilogue": epilogue, "variant": "torch"}
        replay = torch_graph(torch_fn(inputs, epilogue))
        row["gpu_ms"] = time_gpu(replay) if replay is not None else None
        rows.append(row)
        print(json.dumps(row), flush=True)
    device = torch.cuda.get_device_name()
    head = [
        f"# split-K A/B on {device} (benchmarks/gemm_split_k_ab.py)",
        "",
        "us: CUDA-graph replay of one call, median of 7 x 20 replays (CUDA events on the "
        "current stream, checked against wall clock). unsplit: the heuristic's tile with "
        "sk=1; split: the heuristic's choice; cuBLAS: the same ops in PyTorch eager, "
        "captured in a torch CUDA graph. rel L2 against the f32 maths.",
        "",
    ]
    lines = head + table(rows)
    write_results(args.out / "gemm-split-k-ab", rows, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
