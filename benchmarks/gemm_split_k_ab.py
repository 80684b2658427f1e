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

With ``--tiles`` each shape is also timed on every configuration of ``TILE_SWEEP`` (pinned
by ``tile-gemm{tile=...}``), warm and with a cold L2 (``gemm_bench.time_gpu_cold``: a
decoder's weights do not stay in L2 from one call to the next), into a second table: the
data a small-M tile rule is chosen from (issue 28: Llama's batch-1 projections).

    python3 benchmarks/gemm_split_k_ab.py --out $OUT     # H200
    python3 benchmarks/gemm_split_k_ab.py --tiles --only Llama --out $OUT
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
    ("Llama Q/O", 128, 2048, 2048, ""),
    ("Llama gate/up", 128, 2048, 5632, ""),
    ("BERT pooler", 1, 768, 768, "bias"),
]
VARIANTS = ("unsplit", "split")
#: ``--tiles``: the one-consumer 64-row tiles and the two-consumer 128-row one, at the K
#: splits a small-M rule could pick.
TILE_SWEEP = (
    "64x64x64 s8 c1 g8 math=fast",
    "64x64x64 s8 c1 g8 math=fast sk=2",
    "64x64x64 s8 c1 g8 math=fast sk=4",
    "64x64x64 s8 c1 g8 math=fast sk=8",
    "64x128x64 s8 c1 g8 math=fast",
    "64x128x64 s8 c1 g8 math=fast sk=2",
    "64x128x64 s8 c1 g8 math=fast sk=4",
    "128x64x64 s6 c2 g8 math=fast sk=4",
)


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


def measure(text: str, pipeline: str | None, inputs: list, ref, cold: bool = False) -> dict:
    """Compile ``text`` with ``pipeline``, check it against ``ref`` and time its graph replay
    (``gpu_ms``; with ``cold`` also ``cold_ms``, the L2 flushed before each replay)."""
    import torch
    from gemm_bench import fusec_graph, time_gpu, time_gpu_cold

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
        if cold and replay is not None:
            row["cold_ms"] = time_gpu_cold(replay)
    except Exception as err:  # one variant's failure must not lose the others
        row["error"] = f"{type(err).__name__}: {err}"[:300]
    return row


def table(rows: list[dict], shapes: list = SHAPES) -> list[str]:
    lines = [
        "| GEMM | M x K -> N | epilogue | split (heuristic) | unsplit us | split us | "
        "cuBLAS us | unsplit / split | cuBLAS / split | rel L2 (unsplit, split) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, m, k, n, epilogue in shapes:
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


def sweep_table(rows: list[dict], shapes: list) -> list[str]:
    """``--tiles``: each shape's configurations, warm and cold, against the heuristic's
    choice (``split``) and cuBLAS in the same run."""
    lines = [
        "| GEMM | M x K -> N | tile | warm us | cold us | heuristic / tile (warm, cold) | "
        "cuBLAS warm, cold us | rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    us = lambda r, key: r.get(key) * 1e3 if r.get(key) else None  # noqa: E731
    for name, m, k, n, _ in shapes:
        mine = [r for r in rows if r["name"] == name]
        heuristic = next((r for r in mine if r["variant"] == "split"), {})
        cublas = next((r for r in mine if r["variant"] == "torch"), {})
        for r in (r for r in mine if r["variant"] in ("split", "tile")):
            if "error" in r:
                lines.append(f"| {name} | {m} x {k} -> {n} | {r['tile']} | {r['error'][:60]} |")
                continue
            ratios = [
                f"{us(heuristic, key) / us(r, key):.2f}x" if us(heuristic, key) and us(r, key)
                else "-"
                for key in ("gpu_ms", "cold_ms")
            ]  # fmt: skip
            base = ", ".join(f"{us(cublas, key) or 0:.1f}" for key in ("gpu_ms", "cold_ms"))
            lines.append(
                f"| {name} | {m} x {k} -> {n} | {r['tile']}"
                f"{' (heuristic)' if r['variant'] == 'split' else ''} | "
                f"{us(r, 'gpu_ms') or 0:.1f} | {us(r, 'cold_ms') or 0:.1f} | "
                f"{', '.join(ratios)} | {base} | {r.get('rel_l2', float('nan')):.1e} |"
            )
    return lines


def main() -> int:
    import os

    import torch
    from gemm_bench import time_gpu, time_gpu_cold, torch_graph

    from fusec.targets.cuda.gemm.config import choose_config

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--tiles", action="store_true", help="also time TILE_SWEEP's tiles")
    parser.add_argument("--only", default="", help="shapes whose name contains this")
    args = parser.parse_args()
    torch.manual_seed(0)
    os.environ["FUSEC_SPLIT_K"] = "on"  # the GEMM's heuristic split (opt-in)
    shapes = [shape for shape in SHAPES if args.only in shape[0]]
    rows = []

    def add(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    for name, m, k, n, epilogue in shapes:
        text = ir(m, k, n, epilogue)
        inputs = inputs_for(m, k, n, epilogue)
        ref = torch_fn([a.float() for a in inputs], epilogue)()
        chosen = choose_config(m, n, k)
        unsplit = chosen.text.split(" sk=")[0]
        pipelines = {
            "unsplit": f'fusec-default,tile-gemm{{tile="{unsplit}"}}',
            "split": None,
        }
        shape = {"name": name, "m": m, "k": k, "n": n, "epilogue": epilogue}
        for variant, pipeline in pipelines.items():
            row = shape | {"variant": variant}
            row["tile"] = chosen.text if variant == "split" else unsplit
            add(row | measure(text, pipeline, inputs, ref, cold=args.tiles))
        row = shape | {"variant": "torch"}
        replay = torch_graph(torch_fn(inputs, epilogue))
        row["gpu_ms"] = time_gpu(replay) if replay is not None else None
        if args.tiles and replay is not None:
            row["cold_ms"] = time_gpu_cold(replay)
        add(row)
        for tile in TILE_SWEEP if args.tiles else ():
            if tile != chosen.text:
                pipeline = f'fusec-default,tile-gemm{{tile="{tile}"}}'
                add(
                    shape
                    | {"variant": "tile", "tile": tile}
                    | measure(text, pipeline, inputs, ref, True)
                )
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
    lines = head + table(rows, shapes)
    if args.tiles:  # its own file: a sweep of some shapes does not replace the A/B's table
        lines += ["", "## --tiles (cold: the L2 flushed before each replay)", ""]
        lines += sweep_table(rows, shapes)
    stem = "gemm-tile-sweep" if args.tiles else "gemm-split-k-ab"
    write_results(args.out / stem, rows, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
