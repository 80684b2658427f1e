"""A numpy model of the implicit-GEMM conv kernel's index arithmetic, for CPU tests.

The CUDA simulator cannot run linked C++, so this replays what the generated
block program does, with the formulas of ``cpp.generate``: the weight
re-layout and the channels-last copy of the input (``transpose_threads``: the copy
kernel's thread blocks and lanes), the persistent walk over
(channel block, strip block, group) tiles, the producer's TMA boxes per (tap,
channel chunk) with zero fill outside the tensor (``tma_box``; the innermost
coordinate always 16-byte aligned), the consumers' split of the tile and the
wgmma accumulator fragments (``gemm_model.fragment_coords``), and the
epilogue's strip decoding and bounds checks. ``run`` returns the output and
how many times each element was written. ``input="nchw"`` replays the variant
that reads the NCHW input in place (``nchw_box``: ``[channel][pixel]`` boxes, the
MN-major B operand); ``nchw_columns`` lays its boxes out as the im2col matrix.
``input="nchw-ld"`` replays the producer warpgroup's loads bit for bit (``ld_row``:
16-byte vectors, the word and half-word shift, the 128-byte swizzle of the stores).
"""

from __future__ import annotations

import numpy as np
from gemm_model import fragment_coords

from fusec.targets.cuda.conv.config import (
    CHUNK,
    STRIP,
    ConvGeometry,
    ConvTile,
    cdiv,
    nhwc_box,
    nhwc_element_strides,
)
from fusec.targets.cuda.conv.config import nchw_box as config_nchw_box
from fusec.targets.cuda.conv.transpose import THREADS, TransposeTiling


def relayout(geo: ConvGeometry, w: np.ndarray) -> np.ndarray:
    """The re-laid weights ``[K][R*S][CGP]`` of KCRS ``w`` (``fusec_convw_*``)."""
    wp = np.zeros((geo.k, geo.r * geo.s, geo.cgp), dtype=np.float32)
    wp[:, :, : geo.cg] = w.reshape(geo.k, geo.cg, geo.r * geo.s).transpose(0, 2, 1)
    return wp


def channels_last(geo: ConvGeometry, x: np.ndarray) -> np.ndarray:
    """The input as ``fusec_convx_*`` writes it: ``[N][H][W][G][CGP]``, padding zero."""
    xt = np.zeros((geo.n, geo.h, geo.w, geo.groups, geo.cgp), dtype=np.float32)
    grouped = x.reshape(geo.n, geo.groups, geo.cg, geo.h, geo.w)
    xt[..., : geo.cg] = grouped.transpose(0, 3, 4, 1, 2)
    return xt


def transpose_threads(
    geo: ConvGeometry, x: np.ndarray, vector: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``fusec_convx_*`` thread by thread (``transpose``): the channels-last copy it writes,
    flattened ``[N][H*W][G*CGP]``, and how many times each element was written."""
    tiling = TransposeTiling(geo)
    if vector and not tiling.vectorizable:
        raise ValueError("the vector path needs H*W % 8 == 0")
    hw, ct = tiling.pixels, tiling.channels
    rows = x.reshape(geo.n, geo.c, hw)
    out = np.full((geo.n, hw, ct), np.nan, dtype=np.float32)
    writes = np.zeros(out.shape, dtype=np.int64)
    gx, gy, gz = tiling.grid
    for n, by, bx, t in np.ndindex(gz, gy, gx, THREADS):
        c0, p0 = tiling.thread_block(bx, by, t)
        if c0 >= ct or p0 >= hw:
            continue
        block = np.zeros((8, 8), dtype=np.float32)  # [channel i][pixel j]
        for i in range(8):
            g, cg = divmod(c0 + i, geo.cgp)
            if cg < geo.cg:
                valid = 8 if vector else min(8, hw - p0)
                block[i, :valid] = rows[n, g * geo.cg + cg, p0 : p0 + valid]
        for j in range(8 if vector else min(8, hw - p0)):
            out[n, p0 + j, c0 : c0 + 8] = block[:, j]
            writes[n, p0 + j, c0 : c0 + 8] += 1
    return out, writes


def tma_box(
    tensor: np.ndarray,
    coords: tuple[int, ...],
    box: tuple[int, ...],
    element_strides: tuple[int, ...] | None = None,
) -> np.ndarray:
    """A TMA tile box: ``tensor`` indexed innermost-first by ``coords`` (may be negative or
    past the end), ``box`` elements traversed per dimension (innermost first), of which
    every ``element_strides[d]``-th is loaded (``ceil(box / stride)`` of them, packed);
    zeros outside."""
    rank = tensor.ndim
    steps = element_strides or (1,) * rank
    loaded = [-(-b // t) for b, t in zip(box, steps, strict=True)]
    out = np.zeros(tuple(reversed(loaded)), dtype=np.float32)
    src, dst = [], []
    for d in range(rank):  # d counts from the innermost dimension
        size, step = tensor.shape[rank - 1 - d], steps[d]
        taken = np.arange(coords[d], coords[d] + box[d], step)  # the traversed coordinates
        inside = (taken >= 0) & (taken < size)
        if not inside.any():
            return out
        src.append(taken[inside])
        dst.append(np.flatnonzero(inside))
    out[np.ix_(*reversed(dst))] = tensor[np.ix_(*reversed(src))]
    return out


def nchw_map(geo: ConvGeometry, x: np.ndarray) -> np.ndarray:
    """NCHW ``x`` as the in-place tensor map sees it: dims (W, H, CG, G, N) innermost first."""
    return x.reshape(geo.n, geo.groups, geo.cg, geo.h, geo.w)


def nchw_coords(geo: ConvGeometry, n: int, p: int, q0: int, tap: int, cc: int, g: int) -> tuple:
    """The box coordinates the producer of ``input="nchw"`` issues for one strip (``cpp``'s
    ``_strip_load``): (W, H, channel, group, image), innermost first."""
    r, s = divmod(tap, geo.s)
    return (
        q0 + s * geo.dil_w - geo.pad_left,
        p * geo.stride_h + r * geo.dil_h - geo.pad_top,
        cc * CHUNK,
        g,
        n,
    )


def nchw_box(geo: ConvGeometry, x_map: np.ndarray, coords: tuple) -> np.ndarray:
    """One strip's B tile ``[CHUNK channels][STRIP pixels]`` (MN-major: pixels contiguous,
    row after row of a strip of several rows)."""
    return tma_box(x_map, coords, config_nchw_box(geo)).reshape(CHUNK, STRIP)


def strip_pixel(geo: ConvGeometry, p0: int, q0: int, j: int) -> tuple[int, int]:
    """Output (p, q) of column ``j`` of a strip at (p0, q0): ``TH`` rows of ``TW``."""
    return p0 + j // geo.strip_width, q0 + j % geo.strip_width


def nchw_columns(
    geo: ConvGeometry, x: np.ndarray, input: str = "nchw"
) -> tuple[np.ndarray, set[int]]:
    """The im2col matrix ``[G][R*S*CC*CHUNK][N*P*Q]`` (rows (tap, channel), columns output
    pixels) assembled from the in-place boxes of every strip, tap and channel chunk (TMA
    boxes, or for ``input="nchw-ld"`` the producer threads' loads of f16 ``x``), and the
    set of W coordinates issued (TMA needs them multiples of 8 pixels)."""
    x_map = nchw_map(geo, x)
    bits = np.ascontiguousarray(x, dtype=np.float16).view(np.uint16)
    rows = geo.r * geo.s * geo.chunks * CHUNK
    cols = np.full((geo.groups, rows, geo.n * geo.p * geo.q), np.nan, dtype=np.float32)
    w_coords: set[int] = set()
    for g, strip, tap, cc in np.ndindex(geo.groups, geo.strips, geo.r * geo.s, geo.chunks):
        n, p, q0 = strip_coords(geo, strip)
        coords = nchw_coords(geo, n, p, q0, tap, cc, g)
        w_coords.add(coords[0])
        box = (
            ld_box(geo, bits, coords, np.float16)
            if input == "nchw-ld"
            else nchw_box(geo, x_map, coords)
        )
        row = (tap * geo.chunks + cc) * CHUNK
        for j in range(STRIP):
            pj, qj = strip_pixel(geo, p, q0, j)
            if pj < geo.p and qj < geo.q:
                cols[g, row : row + CHUNK, (n * geo.p + pj) * geo.q + qj] = box[:, j]
    return cols, w_coords


def ld_row(geo: ConvGeometry, bits: np.ndarray, n: int, g: int, ch: int, h: int, ws: int):
    """``fs_ld_row``: row ``c`` of a strip's tile as the 32 words the producer thread stores
    (before the swizzle), from ``bits``, the f16/bf16 input as uint16 NCHW; pixels ``ws ..
    ws + 63`` of channel ``ch`` of group ``g``, input row ``h`` of image ``n``."""
    live = ch < geo.cg and 0 <= h < geo.h
    a = ws & ~7
    shift = ws - a
    words = np.zeros(36, dtype=np.uint64)
    for k in range(9):
        w0 = a + 8 * k
        if live and 0 <= w0 < geo.w:
            v = bits[n, g * geo.cg + ch, h, w0 : w0 + 8].astype(np.uint64)
            words[4 * k : 4 * k + 4] = v[0::2] | (v[1::2] << np.uint64(16))
    wo, half = shift >> 1, np.uint64((shift & 1) * 16)
    lo, hi = words[wo : wo + 32], words[wo + 1 : wo + 33]
    return (((hi << np.uint64(32)) | lo) >> half) & np.uint64(0xFFFFFFFF)


def swizzle_128(c: int, words: np.ndarray) -> np.ndarray:
    """Row ``c``'s 32 words where ``fs_st_row`` stores them: 16-byte chunk ``u`` at chunk
    ``u ^ (c % 8)`` (the 128-byte swizzle of TMA and of the wgmma descriptors)."""
    out = np.empty_like(words)
    for u in range(8):
        slot = u ^ (c & 7)
        out[4 * slot : 4 * slot + 4] = words[4 * u : 4 * u + 4]
    return out


def ld_box(geo: ConvGeometry, bits: np.ndarray, coords: tuple, dtype) -> np.ndarray:
    """One strip's B tile ``[CHUNK][STRIP]`` as the producer warpgroup writes it, read back
    through the swizzle (what the MN-major descriptors address)."""
    ws, h, c0, g, n = coords
    tile = np.zeros((CHUNK, STRIP), dtype=np.float32)
    for c in range(CHUNK):
        stored = swizzle_128(c, ld_row(geo, bits, n, g, c0 + c, h, ws))
        words = swizzle_128(c, stored).astype(np.uint32)  # the swizzle is an involution
        pixels = np.empty(STRIP, dtype=np.uint16)
        pixels[0::2], pixels[1::2] = words & 0xFFFF, words >> 16
        tile[c] = pixels.view(dtype).astype(np.float32)
    return tile


def tile_coords(t: int, tiles_m: int, tiles_n: int) -> tuple[int, int, int]:
    """(pm, pn, g) of tile ``t``: ``fs_tile``."""
    g, r = divmod(t, tiles_m * tiles_n)
    return r % tiles_m, r // tiles_m, g


def strip_coords(geo: ConvGeometry, strip: int) -> tuple[int, int, int]:
    """(n, p0, q0) of a strip: ``conv_strip``."""
    rest, qs = divmod(strip, geo.strips_per_row)
    n, band = divmod(rest, geo.strip_bands)
    return n, band * geo.strip_rows, qs * geo.strip_width


def run(
    geo: ConvGeometry,
    tile: ConvTile,
    x: np.ndarray,
    w: np.ndarray,
    *,
    grid: int,
    epilogue=None,
    input: str = "nhwc",
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel on NCHW ``x`` and KCRS ``w`` with ``grid`` persistent blocks; ``input`` as
    ``ConvSpec.input``."""
    wp = relayout(geo, w)
    # the tensors as the TMA maps see them: weights [G][KG][RS][CG], input [N][H][W][G][CG]
    # (or [N][G][CG][H][W] read in place)
    w_map = wp[:, :, : geo.cg].reshape(geo.groups, geo.kg, geo.r * geo.s, geo.cg)
    nchw = input != "nhwc"
    x_map = nchw_map(geo, x) if nchw else channels_last(geo, x)[..., : geo.cg]
    bits = np.ascontiguousarray(x, dtype=np.float16).view(np.uint16)
    spt = tile.bn // STRIP
    tiles_m, tiles_n = cdiv(geo.kg, tile.bm), cdiv(geo.strips, spt)
    tiles = tiles_m * tiles_n * geo.groups
    out = np.full((geo.n, geo.k, geo.p, geo.q), np.nan, dtype=np.float32)
    writes = np.zeros(out.shape, dtype=np.int64)
    for block in range(grid):
        for t in range(block, tiles, grid):
            pm, pn, g = tile_coords(t, tiles_m, tiles_n)
            acc = np.zeros((tile.bm, tile.bn), dtype=np.float32)
            for kb in range(geo.kblocks):
                tap, cc = divmod(kb, geo.chunks)
                r, s = divmod(tap, geo.s)
                a = tma_box(w_map, (cc * CHUNK, tap, pm * tile.bm, g), (CHUNK, 1, tile.bm, 1))
                assert (cc * CHUNK) % 8 == 0
                a = a.reshape(tile.bm, CHUNK)
                b = np.zeros((CHUNK, tile.bn), dtype=np.float32)
                for j in range(spt):
                    n, p, q0 = strip_coords(geo, min(pn * spt + j, geo.strips - 1))
                    if input == "nchw-ld":  # bit-exact on the f16 rounding of x
                        coords = nchw_coords(geo, n, p, q0, tap, cc, g)
                        box = ld_box(geo, bits, coords, np.float16)
                        b[:, j * STRIP : (j + 1) * STRIP] = box
                        continue
                    if nchw:
                        coords = nchw_coords(geo, n, p, q0, tap, cc, g)
                        assert coords[0] % 8 == 0, "TMA: innermost coordinate 16-byte aligned"
                        b[:, j * STRIP : (j + 1) * STRIP] = nchw_box(geo, x_map, coords)
                        continue
                    coords = (
                        cc * CHUNK,
                        g,
                        q0 * geo.stride_w + s * geo.dil_w - geo.pad_left,
                        p * geo.stride_h + r * geo.dil_h - geo.pad_top,
                        n,
                    )
                    assert coords[0] % 8 == 0, "TMA: innermost coordinate 16-byte aligned"
                    # 64 pixel rows, every stride_w-th of the 64 * stride_w traversed
                    box = tma_box(x_map, coords, nhwc_box(geo), nhwc_element_strides(geo))
                    b[:, j * STRIP : (j + 1) * STRIP] = box.reshape(STRIP, CHUNK).T
                acc += a @ b
            _store(geo, tile, acc, out, writes, pm, pn, g, epilogue)
    return out, writes


def _store(geo, tile, acc, out, writes, pm, pn, g, epilogue) -> None:
    spt = tile.bn // STRIP
    for cw in range(tile.consumers):
        row0 = cw * tile.wm if tile.split == "m" else 0
        col0 = cw * tile.wn if tile.split == "n" else 0
        for thread in range(128):
            for m in range(tile.wm // 64):
                for j in range(tile.wn // 2):
                    r, c = fragment_coords(thread, j)
                    kg = pm * tile.bm + row0 + m * 64 + r
                    jc = col0 + c
                    strip = pn * spt + jc // STRIP
                    n, p0, q0 = strip_coords(geo, strip)
                    p, q = strip_pixel(geo, p0, q0, jc % STRIP)
                    if kg < geo.kg and strip < geo.strips and p < geo.p and q < geo.q:
                        ko = g * geo.kg + kg
                        value = acc[row0 + m * 64 + r, jc]
                        if epilogue is not None:
                            value = epilogue(value, n, ko, p, q)
                        out[n, ko, p, q] = value
                        writes[n, ko, p, q] += 1
