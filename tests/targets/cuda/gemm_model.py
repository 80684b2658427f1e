"""A numpy model of the GEMM kernel's tile arithmetic, for CPU tests on tiny shapes.

The CUDA simulator cannot run linked C++, so this model replays what the
generated block program does, with the same formulas as ``cpp.generate``:
the persistent walk over tiles in grouped order (``tile_coords``), which
consumer warpgroup takes which tile and at which ring position
(``ring_schedule``: cooperative or pingpong), TMA box loads with zero fill
outside the tensor (``tma_box``), the per-stage K loop of 64-deep steps, the
wgmma accumulator fragment layout of each consumer thread
(``fragment_coords``) and the epilogue: bounds-checked stores ("direct"), or
("smem") each warp's 16-row chunks staged through the 128-byte-swizzled
shared-memory buffer exactly as the stmatrix / v2 stores address it
(``stage_chunk``), then a TMA store box clipped at the tensor's bounds
(``tma_store_box``) or the masked copy of the no-map fallback. ``run`` returns
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


def ring_schedule(config: TileConfig, block: int, grid: int, tiles: int, kblocks: int):
    """The block's K steps in the order the consumers wait for them: (ring position ``it``,
    consumer, tile, kb) tuples, ``consumers`` per step (cooperative: all of them) or one
    (pingpong: consumer ``local % 2`` takes the block's ``local``-th tile, its steps at
    ``it = local * kblocks + kb``; the named barriers let a consumer start a main loop
    only after the other issued the previous tile's, so the steps come in ring order).

    The producer fills position ``it`` = (its count of the block's K steps so far) into
    stage ``it % stages`` at phase ``it // stages``: a consumer's parity wait is exact only
    if no position is waited for before all earlier ones were (tests check this order)."""
    order: list[tuple[int, int, int, int]] = []
    for local, t in enumerate(range(block, tiles, grid)):
        owners = [local % 2] if config.pingpong else range(config.consumers)
        for kb in range(kblocks):
            order.extend((local * kblocks + kb, cw, t, kb) for cw in owners)
    return order


def run(
    config: TileConfig,
    a: np.ndarray,
    b: np.ndarray,
    *,
    grid: int,
    epilogue: Callable[[float, int, int, int], float] | None = None,
    out_dtype: str = "f16",
    tma_out: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Model of the kernel on ``a`` (batch x M x K) and ``b`` (batch x K x N), ``grid`` blocks.

    Returns (output, write counts). A and B are given in their logical
    orientation; the operand layouts only change which TMA box is loaded,
    which the kernel's GPU tests cover. ``out_dtype`` sets the "smem" epilogue's
    staging layout (its values stay float32 here), ``tma_out=False`` models a launch
    without an output tensor map (the masked fallback copy).
    """
    batches, m, k = a.shape
    n = b.shape[2]
    tiles_m, tiles_n = -(-m // config.bm), -(-n // config.bn)
    tiles = tiles_m * tiles_n * batches
    kblocks = -(-k // config.bk)
    out = np.full((batches, m, n), np.nan, dtype=np.float32)
    writes = np.zeros((batches, m, n), dtype=np.int64)
    per = config.rows_per_consumer
    for block in range(grid):
        steps = ring_schedule(config, block, grid, tiles, kblocks)
        owners: dict[int, list[int]] = {}
        for _, cw, t, _ in steps:
            if cw not in owners.setdefault(t, []):
                owners[t].append(cw)
        for t, consumers in owners.items():
            pm, pn, pz = tile_coords(t, tiles_m, tiles_n, config.group_m)
            acc = np.zeros((config.bm, config.bn), dtype=np.float32)
            for kb in range(kblocks):
                a_tile = tma_box(a[pz], kb * config.bk, pm * config.bm, config.bk, config.bm)
                b_tile = tma_box(b[pz].T, kb * config.bk, pn * config.bn, config.bk, config.bn)
                acc += a_tile @ b_tile.T
            for cw in consumers:
                first = pm * config.bm + (0 if config.pingpong else cw * per)
                rows = acc[first - pm * config.bm : first - pm * config.bm + per]
                regs = _fragments(rows, config.bn)
                if config.epilogue == "smem":
                    _store_staged(
                        config, regs, out, writes, first, pn, pz, epilogue, out_dtype, tma_out
                    )
                else:
                    _store(config, regs, out, writes, first, pn, pz, epilogue)
    return out, writes


def _fragments(rows: np.ndarray, bn: int) -> np.ndarray:
    """The consumer's registers: [m64 block, thread, register] of its accumulator rows."""
    blocks = rows.shape[0] // 64
    regs = np.zeros((blocks, 128, bn // 2), dtype=np.float32)
    for thread in range(128):
        for j in range(bn // 2):
            r, c = fragment_coords(thread, j)
            regs[:, thread, j] = rows[r::64, c]
    return regs


def _store(config, regs, out, writes, first, pn, pz, epilogue) -> None:
    """The direct epilogue of one consumer: fragment registers -> bounds-checked stores."""
    _, m, n = out.shape
    for block in range(regs.shape[0]):
        for thread in range(128):
            for j in range(config.bn // 2):
                r, c = fragment_coords(thread, j)
                row, col = first + block * 64 + r, pn * config.bn + c
                if row < m and col < n:
                    value = regs[block, thread, j]
                    if epilogue is not None:
                        value = epilogue(value, row, col, pz)
                    out[pz, row, col] = value
                    writes[pz, row, col] += 1


# ------------------------------------------------------------------ smem epilogue

CHUNK_ROWS = 16
CHUNK_BYTES = 128


def swizzled(r: int, chunk: int) -> int:
    """Byte offset of 16-byte chunk ``chunk`` of row ``r`` in a 128-byte-swizzled buffer."""
    return r * CHUNK_BYTES + ((chunk ^ (r % 8)) << 4)


def stage_chunk(regs: np.ndarray, warp: int, ch: int, element_bytes: int):
    """The staging stores of warp ``warp``'s chunk ``ch`` of one m64 block, as the C++
    issues them: a list of store instructions, each a list of (byte offset, values, lanes)
    per lane. ``regs`` is [thread, register] of the consumer (128 threads)."""
    stores = []
    if element_bytes == 2:  # stmatrix x4: matrix i's row j at the address of lane 8i + j
        for p in range(4):
            q = ch * 8 + 2 * p
            for i in range(4):  # one 8x8 matrix = one 128-byte wavefront of the instruction
                lanes = []
                for j in range(8):
                    lane = 8 * i + j
                    r, k = (lane % 8) + 8 * (i % 2), 2 * p + i // 2
                    values = [
                        regs[warp * 32 + 4 * j + e // 2, 4 * q + 2 * i + e % 2] for e in range(8)
                    ]
                    lanes.append((swizzled(r, k), values, lane))
                stores.append(lanes)
        return stores
    for qq in range(4):  # st.shared.v2.f32: two adjacent accumulators per lane
        for h in range(2):
            q = ch * 4 + qq
            lanes = []
            for lane in range(32):
                r, k = lane // 4 + 8 * h, 2 * qq + (lane % 4) // 2
                offset = swizzled(r, k) + (lane % 2) * 8
                thread = warp * 32 + lane
                lanes.append((offset, [regs[thread, 4 * q + 2 * h + e] for e in range(2)], lane))
            stores.append(lanes)
    return stores


def stage_buffer(stores, element_bytes: int) -> np.ndarray:
    """The 2 KB buffer after ``stores`` (element-indexed, NaN where nothing was written)."""
    buffer = np.full(2048 // element_bytes, np.nan, dtype=np.float32)
    seen = np.zeros(buffer.shape, dtype=np.int64)
    for lanes in stores:
        for offset, values, _ in lanes:
            first = offset // element_bytes
            buffer[first : first + len(values)] = values
            seen[first : first + len(values)] += 1
    if (seen != 1).any():
        raise AssertionError("a staging byte written twice or never")
    return buffer


def unswizzle(buffer: np.ndarray, element_bytes: int) -> np.ndarray:
    """The logical 16 x (128 / element_bytes) box TMA reads from a swizzled buffer."""
    per_chunk = 16 // element_bytes
    box = np.zeros((CHUNK_ROWS, CHUNK_BYTES // element_bytes), dtype=np.float32)
    for r in range(CHUNK_ROWS):
        for k in range(8):
            first = swizzled(r, k) // element_bytes
            box[r, k * per_chunk : (k + 1) * per_chunk] = buffer[first : first + per_chunk]
    return box


def wavefronts(addresses: list[tuple[int, int]]) -> int:
    """Shared-memory wavefronts of one warp-wide access: (byte offset, bytes) per lane, 32
    banks of 4 bytes; distinct words in one bank need one wavefront each."""
    words: dict[int, set[int]] = {}
    for offset, size in addresses:
        for word in range(offset // 4, (offset + size) // 4):
            words.setdefault(word % 32, set()).add(word)
    return max(len(w) for w in words.values())


def _store_staged(config, regs, out, writes, first, pn, pz, epilogue, out_dtype, tma_out):
    """The smem epilogue of one consumer: per warp and chunk, stage then store the box."""
    _, m, n = out.shape
    es = 4 if out_dtype == "f32" else 2
    cols = CHUNK_BYTES // es
    values = regs.copy()
    rolled = config.loop == "rolled"
    if rolled:  # staged as the output type, the epilogue applied to the staged chunk
        values = _rounded(values, out_dtype)
    if epilogue is not None and not rolled:  # every element of the matrix once, in place
        # (the C++ does it chunk by chunk just before staging: the same values)
        for block in range(regs.shape[0]):
            for thread in range(128):
                for j in range(config.bn // 2):
                    r, c = fragment_coords(thread, j)
                    row, col = first + block * 64 + r, pn * config.bn + c
                    if row < m and col < n:
                        values[block, thread, j] = epilogue(regs[block, thread, j], row, col, pz)
    for block in range(regs.shape[0]):
        for warp in range(4):
            for ch in range(config.bn // cols):
                box = unswizzle(stage_buffer(stage_chunk(values[block], warp, ch, es), es), es)
                row0, col0 = first + block * 64 + warp * 16, pn * config.bn + ch * cols
                if rolled and epilogue is not None:
                    rolled_apply(box, row0, col0, pz, m, n, es, epilogue, out_dtype)
                tma_store_box(
                    out[pz], writes[pz], box, row0, col0, per_lane=None if tma_out else es
                )


def _rounded(values: np.ndarray, out_dtype: str) -> np.ndarray:
    """``values`` rounded to the output type (kept as float32)."""
    if out_dtype == "f32":
        return values.copy()
    if out_dtype == "f16":
        return values.astype(np.float16).astype(np.float32)
    import ml_dtypes

    return values.astype(ml_dtypes.bfloat16).astype(np.float32)


def rolled_apply(box, row0, col0, pz, m, n, es, epilogue, out_dtype) -> None:
    """``gemm_rolled_apply`` on a staged chunk (its logical 16-row box): 4 steps of 32 lanes,
    lane ``l`` of step ``i`` takes the 16 bytes of row ``4 i + l / 8`` at chunk ``l % 8``;
    the epilogue sees the row and column clamped into the matrix; values rounded again."""
    per = 16 // es
    for i in range(4):
        for lane in range(32):
            r, k = i * 4 + lane // 8, lane % 8
            row, col = row0 + r, col0 + k * per
            for j in range(per):
                y = epilogue(box[r, k * per + j], min(row, m - 1), min(col + j, n - 1), pz)
                box[r, k * per + j] = y
    box[:] = _rounded(box, out_dtype)


def tma_store_box(out, writes, box, row0: int, col0: int, per_lane: int | None = None) -> None:
    """Write ``box`` at (row0, col0) of the 2-D ``out``: a TMA store (elements outside the
    tensor dropped) or, with ``per_lane`` (element bytes), the fallback: each lane copies
    16 bytes, the elements of the row's end masked."""
    rows, cols = out.shape
    if per_lane is None:
        r1, c1 = min(row0 + box.shape[0], rows), min(col0 + box.shape[1], cols)
        if row0 < rows and col0 < cols:
            out[row0:r1, col0:c1] = box[: r1 - row0, : c1 - col0]
            writes[row0:r1, col0:c1] += 1
        return
    per = 16 // per_lane
    for i in range(4):
        for lane in range(32):
            r, k = i * 4 + lane // 8, lane % 8
            row, col = row0 + r, col0 + k * per
            if row < rows and col < cols:
                left = min(per, cols - col)
                out[row, col : col + left] = box[r, k * per : k * per + left]
                writes[row, col : col + left] += 1


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
    """The pre-pass: per row (mean, rstd) from sums shifted by the row's first element
    (again, of x times a power of 2 near 1 / max|x|, where they overflow: ``aux``'s
    ``fs_finish_stats``), W' = gamma * W rounded to ``dtype``, c = column sums of W',
    d = beta @ W (W is K x N)."""
    x32 = x.astype(np.float32)
    k = np.float32(x.shape[1])
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = x32 - x32[:, :1]
        s1 = shifted.sum(axis=1, dtype=np.float32)
        s2 = (shifted * shifted).sum(axis=1, dtype=np.float32)
        top = np.nanmax(np.abs(x32), axis=1)
        redo = ~(np.isfinite(s1) & np.isfinite(s2)) & np.isfinite(top)
        xs = np.ones(len(x32), np.float32)
        xs[redo] = np.ldexp(np.float32(1), 2 - np.frexp(top[redo])[1]).astype(np.float32)
        scaled = x32 * xs[:, None] - (x32[:, :1] * xs[:, None])
        s1 = np.where(redo, scaled.sum(axis=1, dtype=np.float32), s1)
        s2 = np.where(redo, (scaled * scaled).sum(axis=1, dtype=np.float32), s2)
        scaled_eps = np.where(
            redo, np.maximum(np.float32(eps) * xs * xs, np.finfo(np.float32).tiny), eps
        ).astype(np.float32)
        dm = s1 / k
        var = np.maximum(s2 / k - dm * dm, 0)
        rstd = np.float32(1) / np.sqrt(var + scaled_eps) * xs
        stats = np.stack([(x32[:, 0] * xs + dm) / xs, rstd], axis=1)
    w32 = w.astype(np.float32)
    folded = (gamma.astype(np.float32)[:, None] * w32).astype(dtype)
    c = folded.astype(np.float32).sum(axis=0)
    d = beta.astype(np.float32) @ w32
    return stats.astype(np.float32), folded, c, d


def layernorm_epilogue(acc: np.ndarray, stats: np.ndarray, c: np.ndarray, d: np.ndarray):
    """The GEMM epilogue's rewrite: rstd_i * (acc_ij - mu_i c_j) + d_j."""
    return stats[:, 1:2] * (acc - stats[:, 0:1] * c[None, :]) + d[None, :]


LN_EXACT_RATIO = np.float32(128.0)  # gemm.cuh: FS_LN_EXACT_RATIO


def layernorm_epilogue_exact(x, folded, acc, stats, c, d):
    """The epilogue as ``gemm.cuh`` computes it with ``ln_exact``: the rewrite y, except where
    ``gemm_ln_inexact`` (finite statistics, and |mu| rstd > LN_EXACT_RATIO or y not finite)
    takes the element again as sum_k ((x_k / 2 - mu / 2) (2 rstd)) W'_kc + d_c
    (``gemm_ln_exact``, f32 terms)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = layernorm_epilogue(acc, stats, c, d).astype(np.float32)
        mu, rstd = stats[:, 0:1], stats[:, 1:2]
        fmax = np.finfo(np.float32).max
        finite_stats = (np.abs(mu) <= fmax) & (rstd <= fmax)
        redo = (np.abs(mu) * rstd > LN_EXACT_RATIO) | ~(np.abs(out) <= fmax)
        redo &= finite_stats
        half = np.float32(0.5)
        xhat = (half * x.astype(np.float32) - half * mu) * (np.float32(2) * rstd)
        exact = (xhat @ folded.astype(np.float32)).astype(np.float32) + d[None, :]
    return np.where(redo, exact, out)


def ln_tile_stages(x: np.ndarray, bk: int = 64) -> list[np.ndarray]:
    """The A stages of a tile as TMA writes them (``ln="tile"``): per 64-deep K step, a
    128-byte-swizzled buffer of the tile's rows (``x``: rows x K, 16-bit), zero past K."""
    rows, k = x.shape
    stages = []
    for kb in range(-(-k // bk)):
        box = np.zeros((rows, bk), dtype=x.dtype)
        part = x[:, kb * bk : (kb + 1) * bk]
        box[:, : part.shape[1]] = part
        buffer = np.zeros(rows * bk, dtype=x.dtype)
        for r in range(rows):
            for chunk in range(8):
                first = swizzled(r, chunk) // 2
                buffer[first : first + 8] = box[r, chunk * 8 : chunk * 8 + 8]
        stages.append(buffer)
    return stages


def ln_tile_normalise(
    stages: list[np.ndarray], k: int, gamma, beta, eps: float, rows: int, bk: int = 64
) -> np.ndarray:
    """Replays the consumers' in-place normalisation of ``ln="tile"`` on ``stages``
    (``ln_tile_stages``) as ``cpp._ln_tile_prologue`` addresses them: ``128 / rows``
    threads per row (one warpgroup), each reading chunks ``part * chunks + c`` of every
    stage through the swizzle; the mean, then the mean squared deviation of the columns
    below K (again, of x scaled by a power of 2, where huge finite values overflow them),
    then (x - mean) * rstd * gamma + beta rounded to the stages' type (gamma and beta zero
    past K). Returns how many times each 16-byte chunk was written (1 each)."""
    tpr = 128 // rows
    chunks = 8 // tpr
    padded = len(stages) * bk
    g = np.zeros(padded, np.float32)
    b = np.zeros(padded, np.float32)
    g[:k], b[:k] = gamma.astype(np.float32), beta.astype(np.float32)
    writes = np.zeros((len(stages), rows, 8), dtype=np.int64)
    for r in range(rows):
        mine = [
            (kb, part * chunks + c)
            for part in range(tpr)
            for kb in range(len(stages))
            for c in range(chunks)
        ]

        def load(kb: int, chunk: int, r: int = r) -> np.ndarray:
            first = swizzled(r, chunk) // 2
            return stages[kb][first : first + 8].astype(np.float32)

        def statistics(xs: np.float32, mine=mine, load=load) -> tuple[np.float32, np.float32]:
            total = np.float32(sum((load(kb, ch) * xs).sum(dtype=np.float32) for kb, ch in mine))
            mean = total / np.float32(k)
            ssd = np.float32(0)
            for kb, ch in mine:
                cols = kb * bk + ch * 8 + np.arange(8)
                dev = np.where(cols < k, load(kb, ch) * xs - mean, np.float32(0))
                ssd += (dev * dev).sum(dtype=np.float32)
            return mean, ssd

        with np.errstate(over="ignore", invalid="ignore"):
            xs, scaled_eps = np.float32(1), np.float32(eps)
            mean, ssd = statistics(xs)
            top = max(np.nanmax(np.abs(load(kb, ch))) for kb, ch in mine)
            if not (np.isfinite(mean) and np.isfinite(ssd)) and np.isfinite(top):
                # huge finite values: again, over a power of 2 (ldexpf(1, 1 - ilogbf(top)))
                xs = np.float32(np.ldexp(np.float32(1), 1 - int(np.frexp(top)[1] - 1)))
                scaled_eps = max(np.float32(eps) * xs * xs, np.finfo(np.float32).tiny)
                mean, ssd = statistics(xs)
            rstd = np.float32(1) / np.sqrt(ssd / np.float32(k) + scaled_eps)
        for kb, ch in mine:
            cols = kb * bk + ch * 8 + np.arange(8)
            y = (load(kb, ch) * xs - mean) * rstd * g[cols] + b[cols]
            first = swizzled(r, ch) // 2
            stages[kb][first : first + 8] = y.astype(stages[kb].dtype)
            writes[kb, r, ch] += 1
    return writes


def ln_tile_unswizzle(stages: list[np.ndarray], rows: int, k: int, bk: int = 64) -> np.ndarray:
    """The logical rows x K matrix the wgmma reads from ``stages``."""
    out = np.zeros((rows, len(stages) * bk), dtype=stages[0].dtype)
    for kb, buffer in enumerate(stages):
        for r in range(rows):
            for chunk in range(8):
                first = swizzled(r, chunk) // 2
                out[r, kb * bk + chunk * 8 : kb * bk + chunk * 8 + 8] = buffer[first : first + 8]
    return out[:, :k]
