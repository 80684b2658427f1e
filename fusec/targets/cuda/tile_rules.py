"""What the block tiles of the warp-specialised templates share: the GEMM's ``TileConfig``
(``gemm.config``) and the implicit-GEMM conv's ``ConvTile`` (``conv.config``).

Both run one TMA producer warpgroup beside ``consumers`` consumer warpgroups, may split
each tile's reduction among ``split_k`` blocks (``split_k.cuh``: the last split adds the
others' partial tiles) and refuse to exist when they cannot be generated.
"""

from __future__ import annotations

from typing import ClassVar

from fusec.targets.cuda.caps import SMEM_PER_BLOCK_SM90

#: splits of one tile's reduction at most (each split's partial is a tile of f32 in the
#: workspace, and the last split reads all of them)
MAX_SPLIT_K = 16
#: accumulators per consumer thread of a split tile at most: 64x128 (one consumer) and
#: 128x128 (two) build without spills; 128x256 and 64x256 spill around the reduction
SPLIT_MAX_ACCUMULATORS = 64


class WarpgroupTile:
    """Base of a frozen dataclass of a block tile: ``problems()`` says why the tile cannot
    be generated (empty when it can), and a tile with problems refuses to exist (a
    ValueError naming it by ``what`` and ``text``)."""

    #: what the tile is called in errors ("GEMM tile config", "conv tile")
    what: ClassVar[str]
    consumers: int

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"bad {self.what} {self.text}: {'; '.join(problems)}")

    def problems(self) -> list[str]:
        raise NotImplementedError

    @property
    def text(self) -> str:
        raise NotImplementedError

    @property
    def threads(self) -> int:
        """The consumer warpgroups' threads and the producer's."""
        return 128 * (self.consumers + 1)


def resource_problems(
    stages: int, smem_bytes: int, accumulators: int, max_accumulators: int
) -> list[str]:
    """Why a tile does not fit the SM or its pipeline does not flow: fewer than 2 ``stages``,
    more shared memory than a block may have (an H100/H200's), or more ``accumulators``
    (registers per consumer thread) than the template's ``max_accumulators``."""
    out = []
    if stages < 2:
        out.append("at least 2 stages")
    if smem_bytes > SMEM_PER_BLOCK_SM90:
        out.append(f"{smem_bytes} bytes of shared memory > {SMEM_PER_BLOCK_SM90}")
    if accumulators > max_accumulators:
        out.append(f"{accumulators} accumulator registers per thread > {max_accumulators}")
    return out


def split_problem(splits: int, accumulators: int, unsplittable: str = "") -> str | None:
    """Why a tile of ``accumulators`` per consumer thread cannot split its reduction
    ``splits`` ways, or None: out of range, ``unsplittable`` (the template's reason, when it
    has one), or too many accumulators (the reduction's loads beside them spill)."""
    if not 1 <= splits <= MAX_SPLIT_K:
        return f"split_k must be 1 to {MAX_SPLIT_K}"
    if splits > 1 and unsplittable:
        return unsplittable
    if splits > 1 and accumulators > SPLIT_MAX_ACCUMULATORS:
        return (
            f"split-K needs at most {SPLIT_MAX_ACCUMULATORS} accumulators per thread "
            "(its reduction's loads beside them; more spill)"
        )
    return None
