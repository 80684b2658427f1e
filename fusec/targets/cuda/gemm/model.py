"""A numpy model of the GEMM kernel's tile arithmetic, for CPU tests on tiny shapes.

The CUDA simulator cannot run linked C++, so this model replays what the
generated block program does, with the same formulas as ``cpp.generate``:
the persistent walk over tiles in grouped order (``tile_coords``), TMA box
loads with zero fill outside the tensor (``tma_box``), the per-stage K loop of
64-deep steps, the wgmma accumulator fragment layout of each consumer thread
(``fragment_coords``) and the bounds-checked epilogue stores. ``run`` returns
the output and how many times each element was written, so tests check that
every element is written exactly once and equals ``a @ b``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fusec.targets.cuda.gemm.config import TileConfig


def tile_coords(t: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int, int]:
    """(pm, pn, pz) of tile ``t``: ``fs_tile`` in the generated C++."""
    per_batch = tiles_m * tiles_n
    pz = t // per_batch
    r = t - pz * per_batch
    group = group_m * tiles_n
    first = (r // group) * group_m
    rows = min(tiles_m - first, group_m)
    w = r % group
    return first + w % rows, w // rows, pz


def tma_box(tensor: np.ndarray, c0: int, c1: int, box0: int, box1: int) -> np.ndarray:
    """A (box1 x box0) box of a 2-D tensor at column c0, row c1; zeros outside (TMA OOB fill)."""
    out = np.zeros((box1, box0), dtype=np.float32)
    rows, cols = tensor.shape
    r1, c1_ = min(c1 + box1, rows), min(c0 + box0, cols)
    if c1 < rows and c0 < cols:
        out[: r1 - c1, : c1_ - c0] = tensor[c1:r1, c0:c1_]
    return out


def fragment_coords(lane_thread: int, j: int) -> tuple[int, int]:
    """(row, col) in an m64nN accumulator of register ``j`` of warpgroup thread ``lane_thread``."""
    warp, lane = divmod(lane_thread, 32)
    return warp * 16 + lane // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (lane % 4) + j % 2


def run(
    config: TileConfig,
    a: np.ndarray,
    b: np.ndarray,
    *,
    grid: int,
    epilogue: Callable[[float, int, int, int], float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Model of the kernel on ``a`` (batch x M x K) and ``b`` (batch x K x N), ``grid`` blocks.

    Returns (output, write counts). A and B are given in their logical
    orientation; the operand layouts only change which TMA box is loaded,
    which the kernel's GPU tests cover.
    """
    batches, m, k = a.shape
    n = b.shape[2]
    tiles_m, tiles_n = -(-m // config.bm), -(-n // config.bn)
    tiles = tiles_m * tiles_n * batches
    kblocks = -(-k // config.bk)
    out = np.full((batches, m, n), np.nan, dtype=np.float32)
    writes = np.zeros((batches, m, n), dtype=np.int64)
    for block in range(grid):
        for t in range(block, tiles, grid):
            pm, pn, pz = tile_coords(t, tiles_m, tiles_n, config.group_m)
            acc = np.zeros((config.bm, config.bn), dtype=np.float32)
            for kb in range(kblocks):
                a_tile = tma_box(a[pz], kb * config.bk, pm * config.bm, config.bk, config.bm)
                b_tile = tma_box(b[pz].T, kb * config.bk, pn * config.bn, config.bk, config.bn)
                acc += a_tile @ b_tile.T
            _store(config, acc, out, writes, pm, pn, pz, epilogue)
    return out, writes


def _store(config, acc, out, writes, pm, pn, pz, epilogue) -> None:
    """The epilogue of every consumer thread: fragment registers -> bounds-checked stores."""
    _, m, n = out.shape
    per = config.rows_per_consumer
    for cw in range(config.consumers):
        for thread in range(128):
            for block in range(per // 64):
                for j in range(config.bn // 2):
                    r, c = fragment_coords(thread, j)
                    row = pm * config.bm + cw * per + block * 64 + r
                    col = pn * config.bn + c
                    if row < m and col < n:
                        value = acc[row - pm * config.bm, col - pn * config.bn]
                        if epilogue is not None:
                            value = epilogue(value, row, col, pz)
                        out[pz, row, col] = value
                        writes[pz, row, col] += 1


# ----------------------------------------------------------- fused prologue/epilogues


def row_owners(bn: int) -> dict[int, set[tuple[int, int]]]:
    """For each row of an m64nBN accumulator block: the (thread, register) pairs holding
    it. The row softmax epilogue relies on each row living in one quad (4 lanes of a warp
    that differ in ``lane % 4``), so that ``shfl.xor`` 1 and 2 reduce it."""
    owners: dict[int, set[tuple[int, int]]] = {}
    for thread in range(128):
        for j in range(bn // 2):
            r, _ = fragment_coords(thread, j)
            owners.setdefault(r, set()).add((thread, j))
    return owners


def softmax_partials(logits: np.ndarray, bn: int) -> np.ndarray:
    """The (max, sum of exp(v - max)) pair of each row and BN-wide tile, as the partials
    epilogue writes them (columns past the row's end are -inf, excluded)."""
    rows, n = logits.shape
    tiles = -(-n // bn)
    padded = np.full((rows, tiles * bn), -np.inf, dtype=np.float32)
    padded[:, :n] = logits
    blocks = padded.reshape(rows, tiles, bn)
    mx = blocks.max(axis=2)
    shift = np.where(np.isneginf(mx), 0.0, mx)
    sums = np.exp(blocks - shift[:, :, None]).sum(axis=2)
    return np.stack([mx, sums], axis=2).astype(np.float32)


def softmax_finalise(logits: np.ndarray, partials: np.ndarray) -> np.ndarray:
    """What the finalise pass writes: exp(v - M) / S with (M, S) combined from the pairs."""
    mx = partials[:, :, 0].max(axis=1)
    shift = np.where(np.isneginf(mx), 0.0, mx)
    total = (partials[:, :, 1] * np.exp(partials[:, :, 0] - shift[:, None])).sum(axis=1)
    return np.exp(logits - shift[:, None]) / total[:, None]


def layernorm_prep(x: np.ndarray, gamma, beta, w: np.ndarray, eps: float, dtype=np.float16):
    """The pre-pass: per row (mean, rstd) from sums shifted by the row's first element,
    W' = gamma * W rounded to ``dtype``, c = column sums of W', d = beta @ W (W is K x N)."""
    x32 = x.astype(np.float32)
    shifted = x32 - x32[:, :1]
    dm = shifted.sum(axis=1, dtype=np.float32) / np.float32(x.shape[1])
    var = np.maximum((shifted * shifted).sum(axis=1) / np.float32(x.shape[1]) - dm * dm, 0)
    stats = np.stack([x32[:, 0] + dm, 1.0 / np.sqrt(var + np.float32(eps))], axis=1)
    w32 = w.astype(np.float32)
    folded = (gamma.astype(np.float32)[:, None] * w32).astype(dtype)
    c = folded.astype(np.float32).sum(axis=0)
    d = beta.astype(np.float32) @ w32
    return stats.astype(np.float32), folded, c, d


def layernorm_epilogue(acc: np.ndarray, stats: np.ndarray, c: np.ndarray, d: np.ndarray):
    """The GEMM epilogue's rewrite: rstd_i * (acc_ij - mu_i c_j) + d_j."""
    return stats[:, 1:2] * (acc - stats[:, 0:1] * c[None, :]) + d[None, :]
