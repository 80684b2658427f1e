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

from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute

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


@dataclass(frozen=True)
class Device:
    """What the tiling heuristic needs of a GPU. ``H200`` when no GPU is present."""

    name: str
    sms: int
    smem_per_block: int = SMEM_LIMIT
    arch: str = "sm_90a"


H200 = Device("H200 (default)", 132)


def to_attr(config: TileConfig, choice: str) -> DictionaryAttr:
    """The ``fusec.tile`` attribute of ``config``; ``choice`` says where it came from
    ("heuristic", "tuned", "row softmax")."""
    return DictionaryAttr(
        {
            "block": DenseArrayBase.from_list(i64, [config.bm, config.bn, config.bk]),
            "mma": StringAttr(f"m{MMA_M}n{config.bn}k{MMA_K}"),
            "stages": IntegerAttr(config.stages, i64),
            "consumers": IntegerAttr(config.consumers, i64),
            "group_m": IntegerAttr(config.group_m, i64),
            "choice": StringAttr(choice),
        }
    )


def from_attr(attr: Attribute) -> TileConfig:
    """The config a ``fusec.tile`` attribute names; ValueError saying what is wrong."""
    if not isinstance(attr, DictionaryAttr):
        raise ValueError("fusec.tile must be a dictionary {block = array<i64: BM, BN, BK>, ...}")
    data = attr.data
    block = data.get("block")
    if not isinstance(block, DenseArrayBase) or len(block.get_values()) != 3:
        raise ValueError("fusec.tile 'block' must be array<i64: BM, BN, BK>")
    fields = {}
    for name in ("stages", "consumers", "group_m"):
        value = data.get(name)
        if not isinstance(value, IntegerAttr):
            raise ValueError(f"fusec.tile '{name}' must be an integer")
        fields[name] = value.value.data
    bm, bn, bk = (int(v) for v in block.get_values())
    config = TileConfig(bm, bn, bk, fields["stages"], fields["consumers"], fields["group_m"])
    mma = data.get("mma")
    if mma is not None and (not isinstance(mma, StringAttr) or mma.data != f"m64n{bn}k16"):
        raise ValueError(f"fusec.tile 'mma' must be \"m64n{bn}k16\" for a {bn}-wide block")
    return config


def max_stages(bm: int, bn: int, limit: int = SMEM_LIMIT, most: int = 8) -> int:
    """The deepest pipeline of a bm x bn x 64 tile that fits ``limit`` bytes of shared memory."""
    per_stage = (bm + bn) * 64 * 2 + 16
    return max(2, min(most, (limit - SMEM_ALIGN) // per_stage))


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


def choose_row_config(m: int, n: int, batch: int = 1, sms: int = 132) -> TileConfig:
    """The config of a GEMM whose block tile holds whole output rows (``n`` <= 256: a row
    softmax in the epilogue): BN is ``n`` rounded up to 64; 128-row tiles when they fill
    the GPU, else 64-row tiles (one consumer) so that more blocks run."""
    if n > 256:
        raise ValueError(f"a {n}-wide row does not fit one block tile (at most 256)")
    bn = max(64, -(-n // 64) * 64)
    bm, consumers = (128, 2) if -(-m // 128) * batch >= sms else (64, 1)
    return TileConfig(bm, bn, 64, max_stages(bm, bn), consumers, 8)


def candidates(m: int, n: int, batch: int = 1, sms: int = 132, full_rows: bool = False):
    """A few configs worth timing for ``fusec tune`` (the heuristic's choice first)."""
    if full_rows:
        first = choose_row_config(m, n, batch, sms)
        bn = first.bn
        out = [first, TileConfig(64, bn, 64, max_stages(64, bn), 1, 8)]
        out.append(TileConfig(128, bn, 64, max_stages(128, bn), 2, 8))
    else:
        first = choose_config(m, n, 0, batch, sms)
        out = [
            first,
            TileConfig(128, 256, 64, 4, 2, 8),
            TileConfig(128, 256, 64, 3, 2, 8),
            TileConfig(128, 128, 64, 6, 2, 8),
            TileConfig(256, 128, 64, 4, 2, 8),
            TileConfig(128, 256, 64, 4, 2, 4),
        ]
    unique: list[TileConfig] = []
    for config in out:
        if config not in unique:
            unique.append(config)
    return unique
