"""Tile configurations of the Hopper GEMM and the heuristic that picks one.

A ``TileConfig`` fixes everything the generated C++ main loop specialises on:
the block tile (``bm`` x ``bn`` x ``bk``), the pipeline depth (``stages``),
how many consumer warpgroups share the block tile along M (``consumers``; one
more warpgroup is the TMA producer), and the grouped tile order (``group_m``
tile rows per group, so that concurrently running blocks share A and B tiles
in L2). The persistent grid is a launch choice (``min(tiles, SMs)`` blocks).

The attribute form (``TileConfig.text`` / ``TileConfig.parse``) is what the
tiling pass writes on an ``ai.fused`` op: ``"128x256x64 s4 c2 g8"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Shared memory one block may use on an H100/H200 (227 KB), less the 1 KB
#: the kernel spends aligning its base to the 128-byte swizzle atom.
SMEM_LIMIT = 227 * 1024
SMEM_ALIGN = 1024
MMA_M = 64  # wgmma.m64nNk16: one warpgroup computes 64 rows per instruction
MMA_K = 16
SWIZZLE_BYTES = 128  # TMA 128-byte swizzle: a K-major row of a tile is 64 16-bit values

_TEXT = re.compile(r"^(\d+)x(\d+)x(\d+) s(\d+) c(\d+) g(\d+)$")


@dataclass(frozen=True)
class TileConfig:
    """One GEMM kernel specialisation (see the module docstring)."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    group_m: int = 8

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"bad GEMM tile config {self.text}: {'; '.join(problems)}")

    def problems(self) -> list[str]:
        """Why this configuration cannot be generated (empty when it can)."""
        out = []
        if self.bk != 64:
            out.append("bk must be 64 (one 128-byte swizzle row of 16-bit values)")
        if self.consumers < 1 or self.consumers > 3:
            out.append("1 to 3 consumer warpgroups")
        elif self.bm % (self.consumers * MMA_M):
            out.append("bm must be a multiple of 64 x consumers")
        if self.bn % 64 or not 64 <= self.bn <= 256:
            out.append("bn must be 64, 128, 192 or 256")
        if self.bm > 256:
            out.append("bm at most 256 (one TMA box)")
        if self.stages < 2:
            out.append("at least 2 stages")
        if self.group_m < 1:
            out.append("group_m at least 1")
        if self.smem_bytes > SMEM_LIMIT:
            out.append(f"{self.smem_bytes} bytes of shared memory > {SMEM_LIMIT}")
        if self.acc_registers > 160:
            out.append(f"{self.acc_registers} accumulator registers per thread > 160")
        return out

    # ------------------------------------------------------------ derived sizes
    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def rows_per_consumer(self) -> int:
        return self.bm // self.consumers

    @property
    def a_stage_bytes(self) -> int:
        return self.bm * self.bk * 2

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * self.bk * 2

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one block: tiles, 2 mbarriers per stage, alignment slack."""
        tiles = self.stages * (self.a_stage_bytes + self.b_stage_bytes)
        return tiles + 16 * self.stages + SMEM_ALIGN

    @property
    def acc_registers(self) -> int:
        """f32 accumulators per consumer thread: (rows/64) m64 blocks of bn/2 each."""
        return (self.rows_per_consumer // MMA_M) * self.bn // 2

    @property
    def text(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} s{self.stages} c{self.consumers} g{self.group_m}"

    @classmethod
    def parse(cls, text: str) -> TileConfig:
        """The config written as ``text`` (``"128x256x64 s4 c2 g8"``); ValueError if malformed."""
        match = _TEXT.match(text.strip())
        if not match:
            raise ValueError(f"bad GEMM tile config {text!r}: expected e.g. '128x256x64 s4 c2 g8'")
        bm, bn, bk, stages, consumers, group_m = (int(g) for g in match.groups())
        return cls(bm, bn, bk, stages, consumers, group_m)


def tile_count(config: TileConfig, m: int, n: int, batch: int = 1) -> int:
    return -(-m // config.bm) * -(-n // config.bn) * batch


def choose_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132) -> TileConfig:
    """The tile configuration for an (m x k) @ (k x n) problem on a GPU with ``sms`` SMs.

    Large problems take the 128x256 tile with two consumer warpgroups (the
    highest arithmetic intensity that fits the register file: 128 f32
    accumulators per thread) and 4 stages. When that tile leaves more than a
    third of the SMs idle in the last wave and a smaller tile fills the GPU
    better, 128x128 is used; problems of at most 64 rows use a 64x128 tile.
    """
    if m <= 64:
        return TileConfig(64, 128, 64, 8, 1, 8)
    candidates = [TileConfig(128, 256, 64, 4, 2, 8), TileConfig(128, 128, 64, 6, 2, 8)]

    def waste(config: TileConfig) -> float:
        tiles = tile_count(config, m, n, batch)
        waves = -(-tiles // sms)
        # wasted fraction: idle SM slots in the last wave, and padded rows/cols in edge tiles
        padded = (-(-m // config.bm) * config.bm) * (-(-n // config.bn) * config.bn)
        return 1.0 - (tiles / (waves * sms)) * (m * n / padded)

    best = candidates[0]
    for config in candidates[1:]:
        if waste(config) + 0.15 < waste(best):
            best = config
    return best
