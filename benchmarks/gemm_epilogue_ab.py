"""A/B of the GEMM's tiles, schedules and epilogues at the zoo's throughput-batch shapes
(issue #28: ViT-B/16 at batch 32 is behind torch.compile, its MLP-up GEMM at 17% of the
f16 peak; ConvNeXt-T's plain GEMMs at batch 32).

Each shape is compiled with its zoo epilogue at the heuristic's tile, with no epilogue at
the same tile (what the epilogue costs), and at forced tiles (``tile-gemm{tile=...}``:
the 128x256 and 128x128 tiles, staged or direct epilogue, cooperative or pingpong), and
run by PyTorch eager (cuBLAS and the epilogue's ops) in the same process. Times:
CUDA-graph replay, CUDA events on the current stream checked against wall clock, median
of 7 x 20 replays (``gemm_bench.time_gpu``). Numerics against the same maths in f32 on
fresh random inputs.

    python3 benchmarks/gemm_epilogue_ab.py --out $OUT             # H200, batch-32 shapes
    python3 benchmarks/gemm_epilogue_ab.py --set b1 --out $OUT    # batch-1 shapes
    python3 benchmarks/gemm_epilogue_ab.py --set convnext --out $OUT   # ConvNeXt-T b32's
    python3 benchmarks/gemm_epilogue_ab.py --set b8 --out $OUT    # BERT / GPT-2 at batch 8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import write_results  # noqa: E402
from gemm_split_k_ab import inputs_for, ir, measure, torch_fn  # noqa: E402

#: (name, M, K, N, epilogue)
SHAPES = [
    ("ViT-B/16 b32 MLP up", 6304, 768, 3072, "bias+gelu"),
    ("ViT-B/16 b32 QKV", 6304, 768, 2304, "bias"),
    ("ViT-B/16 b32 MLP down", 6304, 3072, 768, "bias+residual"),
    ("ViT-B/16 b32 attention out", 6304, 768, 768, "bias+residual"),
    ("ConvNeXt-T b32 stage 1 up", 100352, 96, 384, "bias+gelu"),
    ("ConvNeXt-T b32 stage 1 down", 100352, 384, 96, "bias+residual"),
    ("ConvNeXt-T b32 stage 2 down", 25088, 768, 192, "bias+residual"),
    ("square 4096", 4096, 4096, 4096, ""),
]
#: batch-1 GEMMs on the small-M tiles (one consumer; ``--set b1``): the first run
#: (2026-12-03, 64x128 with IEEE maths as the heuristic's) made them 64x64 with fast maths
#: (``config.small_tile``); the splits of 64x64 are this set's open question
SHAPES_B1 = [
    ("BERT-base b1 MLP up", 128, 768, 3072, "bias+gelu"),
    ("ConvNeXt-T b1 stage 3 MLP up", 196, 384, 1536, "bias+gelu"),
    ("ConvNeXt-T b1 stage 4 MLP down", 49, 3072, 768, "bias+residual"),
    ("BERT-base b1 attention out", 128, 768, 768, "bias+residual"),
    ("BERT-base b1 MLP down", 128, 3072, 768, "bias+residual"),
    ("BERT-base b1 QKV (combine-projections)", 128, 768, 2304, "bias"),
]
#: (label, tile text or None for the heuristic's, epilogue: None = the shape's own)
VARIANTS: list[tuple[str, str | None, str | None]] = [
    ("heuristic", None, None),
    ("heuristic, no epilogue", None, ""),
    ("128x256 smem fast", "128x256x64 s4 c2 g8 epi=smem math=fast", None),
    ("128x256 direct", "128x256x64 s4 c2 g8", None),
    ("128x128 smem fast", "128x128x64 s6 c2 g8 epi=smem math=fast", None),
    ("128x128 pingpong smem fast", "128x128x64 s6 c2 g8 sched=pingpong epi=smem math=fast", None),
    ("128x128 pingpong direct fast", "128x128x64 s6 c2 g8 sched=pingpong math=fast", None),
    ("256x128 smem fast", "256x128x64 s4 c2 g8 epi=smem math=fast", None),
    ("192x192 3 consumers smem fast", "192x192x64 s3 c3 g8 epi=smem math=fast", None),
    ("192x192 3 consumers direct fast", "192x192x64 s4 c3 g8 math=fast", None),
    # the epilogue on the staged chunks in a rolled loop (its code does not grow with the
    # tile): what it costs a GEMM timed alone, warm
    (
        "192x192 3 consumers smem fast rolled",
        "192x192x64 s3 c3 g8 epi=smem math=fast loop=rolled",
        None,
    ),
]
VARIANTS_B1: list[tuple[str, str | None, str | None]] = [
    ("heuristic", None, None),
    ("heuristic, no epilogue", None, ""),
    ("64x128 fast", "64x128x64 s8 c1 g8 math=fast", None),
    ("64x128 fast sk=2", "64x128x64 s8 c1 g8 math=fast sk=2", None),
    ("64x128 fast sk=4", "64x128x64 s8 c1 g8 math=fast sk=4", None),
    ("64x64 fast", "64x64x64 s8 c1 g8 math=fast", None),
    ("64x64 fast sk=2", "64x64x64 s8 c1 g8 math=fast sk=2", None),
    ("64x64 fast sk=3", "64x64x64 s8 c1 g8 math=fast sk=3", None),
    # where the epilogue's time goes at one tile a block: its vectors staged in shared
    # memory first, the staged (TMA-stored) epilogue, and that epilogue's rolled loop
    ("64x64 fast vec=smem", "64x64x64 s8 c1 g8 math=fast vec=smem", None),
    ("64x64 smem fast", "64x64x64 s8 c1 g8 epi=smem math=fast", None),
    ("64x64 smem fast rolled", "64x64x64 s8 c1 g8 epi=smem math=fast loop=rolled", None),
    ("64x64 ieee", "64x64x64 s8 c1 g8", None),
]
#: ConvNeXt-T at batch 32 (``--set convnext``): every stage's MLP, its down projection with
#: the layer scale and the residual as the zoo's NHWC blocks fuse them (the folded GEMM's
#: epilogue indexes them as these 2-D ones since e3c371c); kernel sums at e3c371c put
#: fusec's GEMMs at 1.52 ms against cuBLAS's 0.71 + PyTorch's epilogue kernels (profile.md)
SHAPES_CONVNEXT = [
    (f"ConvNeXt-T b32 stage {i + 1} {part}", m, k, n, epilogue)
    for i, (m, c) in enumerate([(100352, 96), (25088, 192), (6272, 384), (1568, 768)])
    for part, k, n, epilogue in (
        ("up", c, 4 * c, "bias+gelu"),
        ("down", 4 * c, c, "bias+scale+residual"),
    )
]
_VARIANT_BY_LABEL = {variant[0]: variant for variant in (*VARIANTS, *VARIANTS_B1)}
VARIANTS_CONVNEXT: list[tuple[str, str | None, str | None]] = [
    *(
        _VARIANT_BY_LABEL[label]
        for label in (
            "heuristic",
            "128x128 smem fast",
            "128x256 smem fast",
            "256x128 smem fast",
            "192x192 3 consumers smem fast",
            "128x128 pingpong smem fast",
            "64x128 fast",
        )
    ),
    ("128x192 smem fast", "128x192x64 s4 c2 g8 epi=smem math=fast", None),
    _VARIANT_BY_LABEL["192x192 3 consumers smem fast rolled"],
    ("128x192 smem fast rolled", "128x192x64 s4 c2 g8 epi=smem math=fast loop=rolled", None),
]
#: BERT-base and GPT-2 at batch 8 (``--set b8``: 1024 tokens, K = 768 or 3072), whose
#: GEMMs the 128x192 tile (``config.NARROW_TILE``) took from 128x128 by the waste rule
#: alone: one wave of 96 or 128 tiles where 128x128 made two of 144 or 192
SHAPES_B8 = [
    ("BERT/GPT-2 b8 QKV", 1024, 768, 2304, "bias"),
    ("BERT/GPT-2 b8 MLP up", 1024, 768, 3072, "bias+gelu"),
    ("BERT/GPT-2 b8 MLP down", 1024, 3072, 768, "bias+residual"),
    ("BERT/GPT-2 b8 attention out", 1024, 768, 768, "bias+residual"),
]
VARIANTS_B8: list[tuple[str, str | None, str | None]] = [
    _VARIANT_BY_LABEL["heuristic"],
    _VARIANT_BY_LABEL["128x128 smem fast"],
    ("128x192 smem fast", "128x192x64 s4 c2 g8 epi=smem math=fast", None),
    _VARIANT_BY_LABEL["192x192 3 consumers smem fast"],
    _VARIANT_BY_LABEL["64x128 fast"],
]
SETS = {
    "b32": (SHAPES, VARIANTS),
    "b1": (SHAPES_B1, VARIANTS_B1),
    "b8": (SHAPES_B8, VARIANTS_B8),
    "convnext": (SHAPES_CONVNEXT, VARIANTS_CONVNEXT),
}


def table(rows: list[dict], shapes: list) -> list[str]:
    lines = [
        "| GEMM | M x K -> N | epilogue | variant | tile | us | TFLOP/s | cuBLAS / fusec | "
        "rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, m, k, n, _ in shapes:
        torch_row = next((r for r in rows if r["name"] == name and r["variant"] == "torch"), {})
        base = torch_row.get("gpu_ms")
        for r in (r for r in rows if r["name"] == name):
            ms = r.get("gpu_ms")
            us = f"{ms * 1e3:.1f}" if ms else r.get("error", "-")[:60]
            tflops = f"{2 * m * n * k / ms / 1e9:.0f}" if ms else "-"
            ratio = f"{base / ms:.2f}x" if ms and base and r["variant"] != "torch" else "-"
            err = f"{r['rel_l2']:.1e}" if "rel_l2" in r else "-"
            lines.append(
                f"| {name} | {m} x {k} -> {n} | {r['epilogue'] or '-'} | {r['variant']} | "
                f"{r.get('tile', '-')} | {us} | {tflops} | {ratio} | {err} |"
            )
    return lines


def main() -> int:
    import torch
    from gemm_bench import time_gpu, torch_graph

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--shapes", default="", help="comma-separated name prefixes")
    parser.add_argument("--set", choices=sorted(SETS), default="b32")
    parser.add_argument("--variants", default="", help="comma-separated variant labels only")
    parser.add_argument("--name", default="", help="the results' file name (default by set)")
    args = parser.parse_args()
    torch.manual_seed(0)
    wanted = [s for s in args.shapes.split(",") if s]
    shapes, variants = SETS[args.set]
    if args.variants:
        labels = args.variants.split(",")
        variants = [v for v in variants if v[0] in labels]
    rows = []
    for name, m, k, n, shape_epilogue in shapes:
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        for label, tile, epilogue in [*variants, ("torch", None, None)]:
            epi = shape_epilogue if epilogue is None else epilogue
            inputs = inputs_for(m, k, n, epi)
            row = {"name": name, "m": m, "k": k, "n": n, "epilogue": epi, "variant": label}
            if label == "torch":
                replay = torch_graph(torch_fn(inputs, epi))
                row["gpu_ms"] = time_gpu(replay) if replay is not None else None
            else:
                ref = torch_fn([a.float() for a in inputs], epi)()
                pipeline = f'fusec-default,tile-gemm{{tile="{tile}"}}' if tile else None
                row |= measure(ir(m, k, n, epi), pipeline, inputs, ref)
            rows.append(row)
            print(json.dumps(row), flush=True)
            del inputs
    head = [
        f"# GEMM tile / epilogue A/B on {torch.cuda.get_device_name()} "
        "(benchmarks/gemm_epilogue_ab.py)",
        "",
        "us: CUDA-graph replay of one call, median of 7 x 20 replays (CUDA events on the "
        "current stream, checked against wall clock). torch: the same ops in PyTorch eager "
        "(cuBLAS), captured in a torch CUDA graph. rel L2 against the f32 maths.",
        "",
    ]
    lines = head + table(rows, shapes)
    name = "gemm-epilogue-ab" if args.set == "b32" else f"gemm-epilogue-ab-{args.set}"
    name = args.name or name
    write_results(args.out / name, rows, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
