"""``benchmarks/gemm_split_k_ab.py --tiles``: its table (no GPU: rows as a run writes them).
Each configuration of a shape against the heuristic's choice and cuBLAS, warm and cold; a
configuration that failed says why in its row; every sweep tile is a valid configuration."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gemm_split_k_ab as ab  # noqa: E402

from fusec.targets.cuda.gemm.config import TileConfig  # noqa: E402

HEURISTIC = "64x64x64 s8 c1 g8 math=fast sk=2"


def test_each_tile_is_compared_with_the_heuristic_and_cublas() -> None:
    shape = {"name": "Llama Q/O", "m": 128, "k": 2048, "n": 2048, "epilogue": ""}
    rows = [
        shape | {"variant": "split", "tile": HEURISTIC, "gpu_ms": 0.008, "cold_ms": 0.012},
        shape | {"variant": "torch", "gpu_ms": 0.006, "cold_ms": 0.009},
        shape | {"variant": "tile", "tile": ab.TILE_SWEEP[4], "gpu_ms": 0.004, "cold_ms": 0.010},
        shape | {"variant": "tile", "tile": ab.TILE_SWEEP[-1], "error": "FusecError: smem"},
    ]
    shapes = [s for s in ab.SHAPES if s[0] == "Llama Q/O"]
    lines = ab.sweep_table(rows, shapes)
    assert len(lines) == 2 + 3
    assert f"| {HEURISTIC} (heuristic) | 8.0 | 12.0 | 1.00x, 1.00x | 6.0, 9.0 |" in lines[2]
    assert f"| {ab.TILE_SWEEP[4]} | 4.0 | 10.0 | 2.00x, 1.20x | 6.0, 9.0 |" in lines[3]
    assert "FusecError: smem" in lines[4]


def test_the_sweep_tiles_are_valid_configurations() -> None:
    for text in ab.TILE_SWEEP:
        assert TileConfig.parse(text).problems() == [], text
