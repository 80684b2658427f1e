"""Tile configurations of the Hopper GEMM and the heuristic that picks one.

A ``TileConfig`` fixes everything the generated C++ main loop specialises on:
the block tile (``bm`` x ``bn`` x ``bk``), the pipeline depth (``stages``),
how many consumer warpgroups share the block tile along M (``consumers``; one
more warpgroup is the TMA producer), and the grouped tile order (``group_m``
tile rows per group, so that concurrently running blocks share A and B tiles
in L2). The persistent grid is a launch choice (``min(tiles, SMs)`` blocks).

Three opt-in variants change how the block program runs, not the tile
arithmetic (``cpp`` has the details):

* ``schedule``: ``"cooperative"`` (both consumer warpgroups share one block tile,
  ``bm / consumers`` rows each) or ``"pingpong"`` (each consumer warpgroup owns
  a whole ``bm x bn`` tile; the two alternate on the tensor cores, so one's
  epilogue overlaps the other's main loop);
* ``epilogue``: ``"direct"`` (registers -> global stores) or ``"smem"`` (the
  results staged per warp through shared memory, then TMA bulk tensor stores);
* ``math``: ``"ieee"`` or ``"fast"`` (hardware approximations of exp, tanh and
  the logistic function's division in the epilogue, where the output is 16-bit);
* ``vectors``: ``"global"`` (the epilogue loads the LayerNorm rewrite's per-column
  and per-row vectors element by element) or ``"smem"`` (each consumer warpgroup
  copies its tile's share into shared memory with 16-byte ``cp.async`` while the
  main loop runs; the epilogue reads them from there);
* ``prefetch``: ``"none"`` or ``"tile"`` (a few K steps before a tile's main loop ends,
  its consumers prefetch into L2 the tile's rows of the epilogue inputs that have the
  output's shape, e.g. a residual, so the epilogue's loads of them hit L2, not DRAM);
* ``loop`` (with the ``"smem"`` epilogue): ``"unrolled"`` (the epilogue maps each
  accumulator register, unrolled over the tile, before staging) or ``"rolled"`` (the
  accumulators are staged rounded to the output type, then the epilogue runs on the staged
  chunk in a rolled loop, 16 bytes per lane and step: its code does not grow with the tile;
  no LayerNorm rewrite or softmax in the epilogue, ``rolled_problem``);
* ``ln`` (with a LayerNorm prologue): ``"fold"`` (a pre-pass computes the row statistics
  and folds gamma and beta into W'; the epilogue applies the exact rewrite) or ``"tile"``
  (the whole K of the block's rows is resident in the pipeline, K <= stages x BK: the
  consumers normalise the A tiles in shared memory in place before the main loop; one
  launch, no pre-pass; ``ln_tile_problem`` says when K does not fit).

``split_k`` (an integer, 1: none) splits each tile's K among that many blocks: under-filled
problems (a transformer's projections at batch 1: 12 tiles of 64x128 for 132 SMs, each
48 K steps deep) run on more SMs. Each split stores its partial sums in a workspace; the
split that arrives last at the tile's counter adds them in split order (the same bits on
every run) and runs the epilogue (``gemm.cuh``: ``gemm_split_reduce``). Cooperative
schedule only, not with ``ln="tile"``.

The attribute form (``TileConfig.text`` / ``TileConfig.parse``) is what the
tiling pass writes on an ``ai.fused`` op: ``"128x256x64 s4 c2 g8"``, followed
by the variants that are not the default (``"64x256x64 s4 c2 g8 sched=pingpong
epi=smem math=fast vec=smem"``) and the split (``"64x128x64 s8 c1 g8 sk=8"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute

from fusec.targets.cuda import tile_rules
from fusec.targets.cuda.caps import H200, SMEM_PER_BLOCK_SM90
from fusec.targets.cuda.split_k import heuristic_split_k

#: Shared memory one block may use on an H100/H200 (227 KB), less the 1 KB
#: the kernel spends aligning its base to the 128-byte swizzle atom.
SMEM_LIMIT = SMEM_PER_BLOCK_SM90
SMEM_ALIGN = 1024
MMA_M = 64  # wgmma.m64nNk16: one warpgroup computes 64 rows per instruction
MMA_K = 16
SWIZZLE_BYTES = 128  # TMA 128-byte swizzle: a K-major row of a tile is 64 16-bit values
#: BK of the tf32 tiles (f32 operands, ``precision="tf32"``): a 128-byte row of a tile is 32
#: f32 values, and one wgmma (k8) takes 32 bytes of it, as k16 does of 16-bit values; the
#: stages hold the same bytes as the 16-bit tiles', so the pipeline depths are the same
TF32_BK = 32
TF32_MMA_K = 8
#: BK of the float8 tiles (issue 31): a 128-byte row of a tile is 128 codes, and one wgmma
#: (k32) takes 32 bytes of it; the stages hold the same bytes as the 16-bit tiles' too
FP8_BK = 128
FP8_MMA_K = 32

#: Per-warp staging of the "smem" epilogue: two 2 KB buffers (16 rows x 128 bytes, one TMA
#: store box each) per consumer warp, so a warp fills one while the other is being stored.
EPI_BUFFER_BYTES = 2048
EPI_BUFFERS = 2

SCHEDULES = ("cooperative", "pingpong")
EPILOGUES = ("direct", "smem")
MATHS = ("ieee", "fast")
VECTORS = ("global", "smem")
PREFETCHES = ("none", "tile")
LAYERNORMS = ("fold", "tile")
LOOPS = ("unrolled", "rolled")
#: what each ``Variant`` field may be (the first: the default)
VARIANT_CHOICES = {
    "schedule": SCHEDULES,
    "epilogue": EPILOGUES,
    "math": MATHS,
    "vectors": VECTORS,
    "prefetch": PREFETCHES,
    "ln": LAYERNORMS,
    "loop": LOOPS,
}
_VARIANT_KEYS = {
    "sched": "schedule",
    "epi": "epilogue",
    "math": "math",
    "vec": "vectors",
    "pre": "prefetch",
    "ln": "ln",
    "loop": "loop",
}

_TEXT = re.compile(r"^(\d+)x(\d+)x(\d+) s(\d+) c(\d+) g(\d+)((?: [a-z]+=[a-z0-9]+)*)$")


@dataclass(frozen=True)
class Variant:
    """How the block program runs (the module docstring): schedule, epilogue, maths."""

    schedule: str = "cooperative"
    epilogue: str = "direct"
    math: str = "ieee"
    vectors: str = "global"
    prefetch: str = "none"
    ln: str = "fold"
    loop: str = "unrolled"


def variant_fields(variant: Variant) -> dict[str, Any]:
    """The ``Variant`` fields of ``variant`` (or of a ``TileConfig``) by name: keyword
    arguments of ``Variant`` and ``TileConfig``."""
    return {field.name: getattr(variant, field.name) for field in fields(Variant)}


#: The variant the heuristic gives the large tiles (128x256 and 128x128, two consumers).
#: Measured on the H200 (benchmarks/results/gemm-variants-2026-11-30.md, git history,
#: 43eadf8): the staged TMA-store epilogue with fast 16-bit maths was the fastest variant
#: of the 128x256 tile on every case (4096^3 0.200 -> 0.184 ms, + bias + relu 0.212 ->
#: 0.195, 8192^3 1.75 -> 1.68, MLP up + gelu 0.296 -> 0.211); pingpong lost at 8192^3.
#: ``with_variant`` adapts the tile and stages to it.
HEURISTIC_VARIANT = Variant(epilogue="smem", math="fast")
#: The small-M tiles (64x128 and 64x64, one consumer) take the fast 16-bit maths, not the
#: staged epilogue (unmeasured there). H200, batch-1 transformer GEMMs
#: (benchmarks/results/gemm-epilogue-ab-b1.md): BERT-base's MLP up + GELU 16.0 -> 14.0 us
#: on 64x128 (the exact GELU's ``erfcf`` becomes ``fs_erfc_approx``).
SMALL_TILE_VARIANT = Variant(math="fast")
#: Whole-row tiles (a row softmax in the epilogue) take the fast 16-bit maths: the
#: softmax's exponentials become one FFMA + ex2.approx each. LN(8192x256) -> matmul
#: 256x256 -> softmax, same H200 call (benchmarks/results/profile.md, third
#: session): kernel 10.6 -> 9.4 us, graph replay 0.0114-0.0117 -> 0.0102-0.0103 ms.
ROW_TILE_VARIANT = Variant(math="fast")


@dataclass(frozen=True)
class TileShape:
    """The block tile and its pipeline: ``bm`` x ``bn`` x ``bk``, ``stages``, ``consumers``,
    ``group_m`` (the module docstring)."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    group_m: int = 8


# The bases in this order give the fields in the order the shape's, the variant's, then
# ``split_k`` (a dataclass collects its bases' fields from the last base to the first):
# ``TileConfig(128, 256, 64, 4, 2, 8, "pingpong")`` and the repr that generated modules hold
# stay as they were.
@dataclass(frozen=True)
class TileConfig(Variant, TileShape, tile_rules.WarpgroupTile):
    """One GEMM kernel specialisation (see the module docstring): a tile shape run as a
    variant, its K split ``split_k`` ways."""

    what = "GEMM tile config"
    split_k: int = 1

    def problems(self) -> list[str]:
        """Why this configuration cannot be generated (empty when it can)."""
        out = []
        if self.bk not in (64, TF32_BK, FP8_BK):
            out.append(
                "bk must be 64 (one 128-byte swizzle row of 16-bit values), 32 (of f32 "
                "values, run as tf32) or 128 (of float8 codes)"
            )
        elif self.bk != 64 and self.ln == "tile":
            out.append("ln=tile normalises 16-bit A tiles (bk=64), not tf32 or float8 ones")
        for name, allowed in VARIANT_CHOICES.items():
            if getattr(self, name) not in allowed:
                out.append(f"{name} must be one of {', '.join(allowed)}")
        if self.loop == "rolled" and self.epilogue != "smem":
            out.append("loop=rolled runs the epilogue on staged chunks (epi=smem)")
        if self.ln == "tile" and self.pingpong:
            out.append("ln=tile runs the cooperative schedule")
        elif self.ln == "tile" and self.bm > 128 * self.consumers:
            out.append("ln=tile normalises at most 128 rows per consumer warpgroup")
        cooperative = not self.pingpong and self.ln != "tile"
        split = tile_rules.split_problem(
            self.split_k,
            self.acc_registers,
            "" if cooperative else "split-K runs the cooperative schedule, without ln=tile",
        )
        if split:
            out.append(split)
        if self.consumers < 1 or self.consumers > 3:
            out.append("1 to 3 consumer warpgroups")
        elif self.pingpong and self.consumers != 2:
            out.append("the pingpong schedule has 2 consumer warpgroups")
        elif self.bm % (self.consumers * MMA_M) and not self.pingpong:
            out.append("bm must be a multiple of 64 x consumers")
        elif self.bm % MMA_M:
            out.append("bm must be a multiple of 64")
        if self.bn % 64 or not 64 <= self.bn <= 256:
            out.append("bn must be 64, 128, 192 or 256")
        if self.bm > 256:
            out.append("bm at most 256 (one TMA box)")
        if self.group_m < 1:
            out.append("group_m at least 1")
        return out + tile_rules.resource_problems(
            self.stages, self.smem_bytes, self.acc_registers, max_accumulators(self.consumers)
        )

    # ------------------------------------------------------------ derived sizes
    @property
    def tf32(self) -> bool:
        """The tile of f32 operands run as tf32 (``bk`` = 32: 128-byte rows of f32)."""
        return self.bk == TF32_BK

    @property
    def fp8(self) -> bool:
        """The tile of float8 operands (``bk`` = 128: 128-byte rows of codes, issue 31)."""
        return self.bk == FP8_BK

    @property
    def mma_k(self) -> int:
        """K of one wgmma instruction: 16 (16-bit operands), 8 (tf32) or 32 (float8)."""
        return TF32_MMA_K if self.tf32 else FP8_MMA_K if self.fp8 else MMA_K

    @property
    def pingpong(self) -> bool:
        return self.schedule == "pingpong"

    @property
    def variant(self) -> Variant:
        return Variant(**variant_fields(self))

    @property
    def rows_per_consumer(self) -> int:
        """Rows of a tile one consumer warpgroup computes: its share of the block tile
        (cooperative) or the whole tile (pingpong: each warpgroup owns its own tiles)."""
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def epi_bytes(self) -> int:
        """Shared memory of the "smem" epilogue's staging buffers (0 for "direct")."""
        return epilogue_staging_bytes(self.epilogue, self.consumers)

    @property
    def vec_bytes(self) -> int:
        """Shared memory of the staged epilogue vectors ("smem" vectors: per consumer
        warpgroup, two f32 per column of the tile and two per row of its share)."""
        if self.vectors != "smem":
            return 0
        return self.consumers * 8 * (self.bn + self.rows_per_consumer)

    @property
    def ln_bytes(self) -> int:
        """Shared memory of ``ln="tile"``: gamma and beta as f32 for every K the pipeline
        holds (stages x BK columns), read by every tile of the block."""
        return 8 * self.stages * self.bk if self.ln == "tile" else 0

    @property
    def k_resident(self) -> int:
        """The largest K whose whole rows the pipeline holds at once (stages x BK)."""
        return self.stages * self.bk

    @property
    def a_stage_bytes(self) -> int:
        """bm rows of one 128-byte swizzle row each (64 16-bit values, or 32 f32: tf32)."""
        return self.bm * SWIZZLE_BYTES

    @property
    def b_stage_bytes(self) -> int:
        return self.bn * SWIZZLE_BYTES

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of one block: tiles, 2 mbarriers per stage (3 with
        ``ln="tile"``: its A tiles land on their own), alignment slack."""
        tiles = self.stages * (self.a_stage_bytes + self.b_stage_bytes)
        staging = self.epi_bytes + self.vec_bytes + self.ln_bytes
        barriers = (16 + 8 * (self.ln == "tile")) * self.stages
        return tiles + staging + barriers + SMEM_ALIGN

    @property
    def acc_registers(self) -> int:
        """f32 accumulators per consumer thread: (rows/64) m64 blocks of bn/2 each."""
        return (self.rows_per_consumer // MMA_M) * self.bn // 2

    @property
    def text(self) -> str:
        base = f"{self.bm}x{self.bn}x{self.bk} s{self.stages} c{self.consumers} g{self.group_m}"
        default = Variant()
        for key, name in _VARIANT_KEYS.items():
            if getattr(self, name) != getattr(default, name):
                base += f" {key}={getattr(self, name)}"
        if self.split_k > 1:
            base += f" sk={self.split_k}"
        return base

    @classmethod
    def parse(cls, text: str) -> TileConfig:
        """The config written as ``text`` (``"128x256x64 s4 c2 g8"``, then optional
        ``sched=``/``epi=``/``math=`` tokens); ValueError if malformed."""
        match = _TEXT.match(text.strip())
        if not match:
            raise ValueError(
                f"bad GEMM tile config {text!r}: expected e.g. '128x256x64 s4 c2 g8' "
                "[sched=pingpong] [epi=smem] [math=fast] [vec=smem] [pre=tile] [ln=tile] "
                "[loop=rolled] [sk=4]"
            )
        bm, bn, bk, stages, consumers, group_m = (int(g) for g in match.groups()[:6])
        variant: dict[str, str] = {}
        split_k = 1
        seen: set[str] = set()
        for token in match.group(7).split():
            key, value = token.split("=")
            if key in seen or (key not in _VARIANT_KEYS and key != "sk"):
                raise ValueError(f"bad GEMM tile config {text!r}: unknown or repeated {key!r}")
            seen.add(key)
            if key == "sk":
                if not value.isdigit():
                    raise ValueError(f"bad GEMM tile config {text!r}: sk must be an integer")
                split_k = int(value)
            else:
                variant[_VARIANT_KEYS[key]] = value
        return cls(bm, bn, bk, stages, consumers, group_m, **variant, split_k=split_k)


def max_accumulators(consumers: int) -> int:
    """f32 accumulators a consumer thread may hold: 160 of its 232 registers (one or two
    consumers: the 128x256 tile's 128 and the epilogue's working set), 96 of the 152 that
    three consumers get (``ptx.consumer_registers``: a 192x192 tile, 64 rows each)."""
    return 160 if consumers <= 2 else 96


def ln_tile_problem(config: TileConfig, k: int) -> str | None:
    """Why ``config`` (``ln="tile"``) cannot normalise a K = ``k`` LayerNorm prologue in its
    A tiles, or None when it can: the whole row must be resident, K <= stages x BK."""
    if k > config.k_resident:
        return (
            f"ln=tile needs the whole K of a row in the pipeline: K = {k} > stages x BK = "
            f"{config.stages} x {config.bk} = {config.k_resident} (use ln=fold, or more stages)"
        )
    return None


def to_attr(config: TileConfig, choice: str) -> DictionaryAttr:
    """The ``fusec.tile`` attribute of ``config``; ``choice`` says where it came from
    ("heuristic", "tuned", "row softmax"). Variants appear only when not the default."""
    fields: dict[str, Attribute] = {
        "block": DenseArrayBase.from_list(i64, [config.bm, config.bn, config.bk]),
        "mma": StringAttr(f"m{MMA_M}n{config.bn}k{config.mma_k}"),
        "stages": IntegerAttr(config.stages, i64),
        "consumers": IntegerAttr(config.consumers, i64),
        "group_m": IntegerAttr(config.group_m, i64),
    }
    default = Variant()
    for name in _VARIANT_KEYS.values():
        if getattr(config, name) != getattr(default, name):
            fields[name] = StringAttr(getattr(config, name))
    if config.split_k > 1:
        fields["split_k"] = IntegerAttr(config.split_k, i64)
    fields["choice"] = StringAttr(choice)
    return DictionaryAttr(fields)


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
    variant: dict[str, str] = {}
    for name in _VARIANT_KEYS.values():
        value = data.get(name)
        if value is not None:
            if not isinstance(value, StringAttr):
                raise ValueError(f"fusec.tile '{name}' must be a string")
            variant[name] = value.data
    split = data.get("split_k", IntegerAttr(1, i64))
    if not isinstance(split, IntegerAttr):
        raise ValueError("fusec.tile 'split_k' must be an integer")
    bm, bn, bk = (int(v) for v in block.get_values())
    config = TileConfig(
        bm,
        bn,
        bk,
        fields["stages"],
        fields["consumers"],
        fields["group_m"],
        **variant,
        split_k=split.value.data,
    )
    mma = data.get("mma")
    want = f"m64n{bn}k{config.mma_k}"
    if mma is not None and (not isinstance(mma, StringAttr) or mma.data != want):
        raise ValueError(f"fusec.tile 'mma' must be \"{want}\" for a {bn}x{bk} block")
    return config


def as_tf32(config: TileConfig) -> TileConfig:
    """``config`` for f32 operands run as tf32: the same rows, stages and variants, each
    128-byte row of a stage holding 32 f32 values (``bk`` = 32) instead of 64 16-bit ones."""
    return replace(config, bk=TF32_BK)


def as_fp8(config: TileConfig) -> TileConfig:
    """``config`` for float8 operands (issue 31): the same rows, stages and variants, each
    128-byte row of a stage holding 128 codes (``bk`` = 128) instead of 64 16-bit values."""
    return replace(config, bk=FP8_BK)


def max_stages(
    bm: int,
    bn: int,
    limit: int = SMEM_LIMIT,
    most: int = 8,
    reserved: int = 0,
    ln_tile: bool = False,
) -> int:
    """The deepest pipeline of a bm x bn x 64 tile that fits ``limit`` bytes of shared memory
    beside ``reserved`` bytes (the smem epilogue's staging); ``ln_tile``: each stage also
    holds 64 columns of gamma and beta (f32) and a third mbarrier."""
    per_stage = (bm + bn) * 64 * 2 + 16 + 520 * ln_tile
    return max(2, min(most, (limit - SMEM_ALIGN - reserved) // per_stage))


def epilogue_staging_bytes(epilogue: str, consumers: int) -> int:
    """Shared memory of the "smem" epilogue's staging buffers (2 x 2 KB per warp; 0 for
    "direct")."""
    return consumers * 4 * EPI_BUFFERS * EPI_BUFFER_BYTES if epilogue == "smem" else 0


def with_variant(config: TileConfig, variant: Variant) -> TileConfig:
    """``config`` running as ``variant``, with the tile and pipeline adapted to it.

    Pingpong gives each consumer warpgroup a whole tile of the rows it had in the
    cooperative block tile (128x256 c2 -> 64x256: the same accumulators per thread and
    wgmma shape, two tiles in flight per block), which needs two consumers: a
    one-consumer config keeps its schedule. The stages shrink until the tiles (and the
    smem epilogue's staging) fit the shared memory; they never grow, except when the tile
    changes (then as many as fit). ``ln="tile"`` has no LayerNorm rewrite vectors: it
    keeps ``vectors="global"`` (nothing staged). Pingpong and ``ln="tile"`` drop a split
    (split-K runs the cooperative schedule only).
    """
    schedule, bm = variant.schedule, config.bm
    if schedule == "pingpong" and not config.pingpong:
        if config.consumers == 2:
            bm = config.rows_per_consumer
        else:
            schedule = config.schedule
    elif schedule == "cooperative" and config.pingpong:
        bm = config.bm * config.consumers
    variant = replace(variant, schedule=schedule)
    if variant.ln == "tile":  # no LayerNorm rewrite: no vectors to stage
        variant = replace(variant, vectors="global")
    # computed, not read off an intermediate TileConfig: at the config's own stages the
    # staging may not fit yet, and a TileConfig that does not fit refuses to exist
    staging = epilogue_staging_bytes(variant.epilogue, config.consumers)
    if variant.vectors == "smem":
        rows = bm if schedule == "pingpong" else bm // config.consumers
        staging += config.consumers * 8 * (config.bn + rows)
    fit = max_stages(bm, config.bn, reserved=staging, ln_tile=variant.ln == "tile")
    stages = fit if bm != config.bm else min(config.stages, fit)
    split_k = 1 if schedule == "pingpong" or variant.ln == "tile" else config.split_k
    return replace(config, bm=bm, stages=stages, split_k=split_k, **variant_fields(variant))


def tile_count(config: TileConfig, m: int, n: int, batch: int = 1) -> int:
    return -(-m // config.bm) * -(-n // config.bn) * batch


def choose_config(
    m: int, n: int, k: int, batch: int = 1, sms: int = H200.sms, three_consumers: bool = True
) -> TileConfig:
    """The tile configuration for an (m x k) @ (k x n) problem on a GPU with ``sms`` SMs.

    Large problems take the 128x256 tile with two consumer warpgroups (the
    highest arithmetic intensity that fits the register file: 128 f32
    accumulators per thread) and 4 stages. When that tile leaves more than a
    third of the SMs idle in the last wave and a smaller tile (128x128, or with 16-bit
    operands ``NARROW_TILE``, 128x192) fills the GPU better, or when K is short
    (``SHORT_K``), 128x128 is used. Where the 192x192 tile of three consumer warpgroups
    (``WAVE_TILE``) wastes fewer SM slots than that choice (``WAVE_MARGIN``), or, with K
    short, no more than it does within the margin (a third consumer warpgroup for the
    epilogue, which a short main loop leaves the longer part of a tile), it is used instead
    (neither with ``three_consumers`` off: tf32 operands, unmeasured). Problems of at most 64
    rows use a 64-row tile (``small_tile``), and so do problems that even the chosen tile
    leaves more than half the SMs without a block (a transformer's projections at batch 1:
    M = 128..256 tokens), where four to eight times the blocks, each shorter, share the
    problem among more SMs. Where even those leave SMs idle, each tile's K is split among
    several blocks (``split_k_for``; not with ``$FUSEC_SPLIT_K`` conv or off,
    ``heuristic_split_k``).
    """

    def small() -> TileConfig:
        tile = with_variant(small_tile(m, n, batch, sms), SMALL_TILE_VARIANT)
        return heuristic_split(tile, m, n, k, batch, sms)

    if m <= 64:
        return small()
    candidates = [TileConfig(128, 256, 64, 4, 2, 8), TileConfig(128, 128, 64, 6, 2, 8)]
    if three_consumers:
        candidates.append(NARROW_TILE)

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
    if 2 * tile_count(best, m, n, batch) < sms:
        return small()
    if 0 < k <= SHORT_K and best == candidates[0]:
        best = candidates[1]
    if three_consumers and _wave_tile_wins(waste(WAVE_TILE), waste(best), k):
        best = WAVE_TILE
    return heuristic_split(with_variant(best, HEURISTIC_VARIANT), m, n, k, batch, sms)


#: The tile of three consumer warpgroups (64 rows each, 96 accumulators a thread in the 152
#: registers they get), taken where it fills the GPU's waves better than the two-consumer
#: tiles. H200 (benchmarks/results/gemm-epilogue-ab.md, both epi=smem math=fast): ViT-B/16
#: at batch 32 (6304 tokens: 33 row tiles x 4 = 132 tiles, one wave, where 128x128 makes
#: 300 in three) MLP up + GELU 88.5 -> 75.7 us, QKV 48.0 -> 43.0, MLP down + residual 66.6
#: -> 54.5, attention out 28.0 -> 23.9; ConvNeXt-T b32 stage-2 down (N = 192) 34.8 -> 30.5;
#: cuBLAS + PyTorch's epilogue 123.4, 73.1, 61.3, 32.8 and 37.7 us (its own 192x192 tile).
WAVE_TILE = TileConfig(192, 192, 64, 3, 3, 8)
#: how much less waste (idle SM slots of the last wave and padding, a fraction) the 192x192
#: tile must have: the ViT QKV's 0.035 gained 10%; nothing closer was measured
WAVE_MARGIN = 0.02
#: The 128x192 tile (two consumers, 96 accumulators a thread, 4 stages): an N of 384 in two
#: column tiles where 128x256 pads it to 512 and 128x128 makes three. H200
#: (benchmarks/results/gemm-epilogue-ab-convnext.md, epi=smem math=fast): ConvNeXt-T b32's
#: stage-3 MLP down (6272 x 1536 -> 384, 98 tiles) 27.3 us on 128x256 (the heuristic's
#: before), 26.4 on 128x128, 18.9 on it; cuBLAS + PyTorch's epilogue 30.6.
NARROW_TILE = TileConfig(128, 192, 64, 4, 2, 8)


def _wave_tile_wins(wave_waste: float, best_waste: float, k: int) -> bool:
    """Whether ``WAVE_TILE`` replaces the two-consumer choice: it wastes less by
    ``WAVE_MARGIN``, or K is short (``SHORT_K``) and it wastes no more than that choice plus
    the margin: there the epilogue is most of a tile's time and runs on three warpgroups
    instead of two. H200 (gemm-epilogue-ab-convnext.md, ConvNeXt-T b32's MLP up + bias +
    GELU, every tile wasting about 1%): 100352 x 96 -> 384 83.7 -> 71.3 us on 128x128,
    25088 x 192 -> 768 47.7 -> 43.2, 6272 x 384 -> 1536 28.5 (128x192) -> 28.0."""
    if wave_waste + WAVE_MARGIN < best_waste:
        return True
    return 0 < k <= SHORT_K and wave_waste <= best_waste + WAVE_MARGIN


#: K at most this deep (12 steps of 64) runs the 128x128 tile where 128x256 would fill the
#: GPU as well: the main loop is short, so each tile's epilogue weighs as much as its MMAs,
#: and half the tile halves it. H200, ViT-B/16 at batch 32 (6304 tokens, K = 768, the run of
#: 2026-12-03 in gemm-epilogue-ab.md's history, both epi=smem math=fast): MLP up + GELU 98.7
#: -> 90.5 us, QKV + bias 51.5 -> 49.3 (those shapes now take ``WAVE_TILE``); at K = 4096
#: (square 4096) 128x256 stays ahead, 188.1 against 205.8 us. Deeper K between the two is
#: unmeasured and keeps 128x256.
SHORT_K = 768


def small_tile(m: int, n: int, batch: int = 1, sms: int = H200.sms) -> TileConfig:
    """The one-consumer tile of a small-M problem: 64x128, or 64x64 where 64x128 leaves
    at least half the SMs without a block (twice the blocks, each half as long). H200
    (benchmarks/results/gemm-epilogue-ab-b1.md, both with fast maths): BERT-base b1 MLP up
    + GELU 14.0 -> 9.3 us (48 -> 96 tiles), its attention output + residual 12.0 -> 8.1,
    ConvNeXt-T b1 stage 3 MLP up 13.2 -> 8.4, stage 4 MLP down (6 -> 12 tiles, 48 K
    steps) 17.3 -> 13.9; cuBLAS + PyTorch's epilogue 10.1, 8.8, 9.1 and 12.5 us."""
    wide = TileConfig(64, 128, 64, 8, 1, 8)
    if 2 * tile_count(wide, m, n, batch) <= sms:
        return TileConfig(64, 64, 64, 8, 1, 8)
    return wide


#: K steps (of 64) a split takes at least: fewer and its fixed costs (the pipeline's fill,
#: the partial's store, the last split's loads) outweigh the main loop it shares out. On the
#: H200 (benchmarks/results/gemm-split-k-ab.md, batch-1 transformer GEMMs) splits of 3-6
#: steps lost 10-35% and 8 splits of 6 broke even; 4 splits of 22 (Llama's K = 5632 down)
#: gained 1.46x, and on the 64x64 tile 3 splits of 16 (BERT-base's and ConvNeXt-T's MLP down
#: at batch 1, 24 and 12 tiles, gemm-epilogue-ab-b1.md) 1.22x; on by default
#: (``split_k.SPLIT_K_DEFAULT``)
SPLIT_MIN_STEPS = 16
#: Where the tiles alone already give at least a quarter of the SMs a block, a split must
#: take twice ``SPLIT_MIN_STEPS``: it at most quadruples the busy SMs there (mostly
#: doubles: 64 tiles on 132 SMs), and the fixed costs weigh against half a short loop.
#: H100 (gemm-tile-sweep.md, Llama b1 on the 64x64 tile, 32 K steps): the Q/O
#: projections' 64 tiles 8.4 us unsplit against 9.3 split in two, the K/V projections' 8
#: tiles 8.4 against 7.9; the down projection's 64 tiles of 88 steps 17.1 against 13.7
#: split in two (44 steps each).
SPLIT_BUSY_SHARE = 4
#: splits the heuristic gives a tile at most (the last split reads the others' partials)
SPLIT_K_HEURISTIC_MAX = 8


def split_k_for(config: TileConfig, m: int, n: int, k: int, batch: int, sms: int) -> int:
    """How many ways the heuristic splits ``config``'s K for an (m x k) @ (k x n) problem: as
    many as give every SM at most one unit of work, each at least ``SPLIT_MIN_STEPS`` K steps
    deep (twice that where the tiles alone fill ``1 / SPLIT_BUSY_SHARE`` of the SMs), at
    most ``SPLIT_K_HEURISTIC_MAX``; 1 (no split) when that is under 2 (the tiles fill half
    the GPU already, or K is short), the schedule is not cooperative or the tile has too
    many accumulators (``tile_rules.SPLIT_MAX_ACCUMULATORS``)."""
    if config.pingpong or config.ln == "tile" or k <= 0:
        return 1
    if config.acc_registers > tile_rules.SPLIT_MAX_ACCUMULATORS:
        return 1
    tiles = tile_count(config, m, n, batch)
    steps = -(-k // config.bk)
    min_steps = SPLIT_MIN_STEPS * (2 if SPLIT_BUSY_SHARE * tiles >= sms else 1)
    splits = min(sms // tiles, steps // min_steps, SPLIT_K_HEURISTIC_MAX)
    return splits if splits >= 2 else 1


def heuristic_split(config: TileConfig, m: int, n: int, k: int, batch: int, sms: int) -> TileConfig:
    """``config`` with the K split ``split_k_for`` gives it (none where ``$FUSEC_SPLIT_K``
    turns the GEMM's off)."""
    if not heuristic_split_k("gemm"):
        return config
    return replace(config, split_k=split_k_for(config, m, n, k, batch, sms))


def choose_row_config(m: int, n: int, batch: int = 1, sms: int = H200.sms) -> TileConfig:
    """The config of a GEMM whose block tile holds whole output rows (``n`` <= 256: a row
    softmax in the epilogue): BN is ``n`` rounded up to 64; 128-row tiles when they fill
    the GPU, else 64-row tiles (one consumer) so that more blocks run."""
    if n > 256:
        raise ValueError(f"a {n}-wide row does not fit one block tile (at most 256)")
    bn = max(64, -(-n // 64) * 64)
    bm, consumers = (128, 2) if -(-m // 128) * batch >= sms else (64, 1)
    config = TileConfig(bm, bn, 64, max_stages(bm, bn), consumers, 8)
    return with_variant(config, ROW_TILE_VARIANT)


#: The opt-in variants ``fusec tune`` times on top of the heuristic's tile.
TUNE_VARIANTS = (
    Variant(math="fast"),
    Variant(epilogue="smem", math="fast"),
    Variant("pingpong", "direct", "fast"),
    Variant("pingpong", "smem", "fast"),
)


def candidates(
    m: int, n: int, batch: int = 1, sms: int = H200.sms, full_rows: bool = False, k: int = 0
):
    """A few configs worth timing for ``fusec tune`` (the heuristic's choice first, for depth
    ``k`` when given: its short-K tile and K split): tiles and pipeline depths of the default
    variant, then the opt-in variants (``TUNE_VARIANTS``) of the heuristic's tile and of the
    256x128 tile (pingpong: 64x256 and 128x128 per warpgroup)."""
    if full_rows:
        first = choose_row_config(m, n, batch, sms)
        bn = first.bn
        out = [first, TileConfig(64, bn, 64, max_stages(64, bn), 1, 8)]
        out.append(TileConfig(128, bn, 64, max_stages(128, bn), 2, 8))
    else:
        first = choose_config(m, n, k, batch, sms)
        out = [
            first,
            TileConfig(128, 256, 64, 4, 2, 8),
            TileConfig(128, 256, 64, 3, 2, 8),
            TileConfig(128, 128, 64, 6, 2, 8),
            NARROW_TILE,
            TileConfig(256, 128, 64, 4, 2, 8),
            TileConfig(128, 256, 64, 4, 2, 4),
            with_variant(WAVE_TILE, HEURISTIC_VARIANT),
        ]
    bases = [first] if full_rows else [first, TileConfig(256, 128, 64, 4, 2, 8)]
    out += [with_variant(base, variant) for base in bases for variant in TUNE_VARIANTS]
    unique: list[TileConfig] = []
    for config in out:
        if config not in unique:
            unique.append(config)
    return unique
