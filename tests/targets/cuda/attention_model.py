"""A numpy model of the attention kernel's tiling and online softmax, for CPU tests.

It follows ``cpp.generate`` block by block: per (batch, query block) and per
consumer slice of 64 rows, the keys in blocks of ``BN`` (only up to the
diagonal block when causal), the scores scaled to base 2, the ragged-key and
causal masks on the blocks that need them (``edge``), the running maximum
and sum, the rescale of O, P rounded to the operand type for the second
product, and the final ``O / l``. Rows past the sequence are not stored.
"""

from __future__ import annotations

import numpy as np

from fusec.targets.cuda.attention.cpp import BM, BN, AttentionSpec

LOG2E = 1.4426950408889634


def run(
    spec: AttentionSpec,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
):
    """``q`` (batch, sq, d), ``k`` (batch, sk, d), ``v`` (batch, sk, dv) -> (out, writes);
    ``mask`` (batch, sq, sk): the mask a ``spec.mask`` kernel reads (``mask_as_addressed``),
    added to the scores in natural units, log2 e applied after the maximum."""
    out = np.full((spec.batch, spec.sq, spec.dv), np.nan, dtype=np.float32)
    writes = np.zeros(out.shape, dtype=np.int64)
    p_type = np.float16 if spec.dtype == "f16" else np.float32  # bf16: no numpy type
    has_mask = bool(spec.mask)
    assert has_mask == (mask is not None)
    sl2 = np.float32(spec.scale if has_mask else spec.scale * LOG2E)
    unit = np.float32(LOG2E if has_mask else 1.0)
    nkv_all = -(-spec.sk // BN)
    for bh in range(spec.batch):
        for qb in range(spec.q_blocks):
            nkv = min(nkv_all, -(-((qb + 1) * BM) // BN)) if spec.causal else nkv_all
            for cw in range(2):
                rows = qb * BM + cw * 64 + np.arange(64)
                q_tile = _rows(q[bh], rows)
                o = np.zeros((64, spec.dv), dtype=np.float32)
                m_run = np.full(64, -np.inf, dtype=np.float32)
                l_run = np.zeros(64, dtype=np.float32)
                for j in range(nkv):
                    cols = j * BN + np.arange(BN)
                    s = (q_tile @ _rows(k[bh], cols).T).astype(np.float32)
                    if spec.softcap:  # cap * tanh(S * scale / cap), in the units above
                        cap = np.float32(spec.softcap * (1.0 if has_mask else LOG2E))
                        s = cap * np.tanh(s * np.float32(spec.scale / spec.softcap))
                    else:
                        s = s * sl2
                    if mask is not None:  # read where row and key exist
                        ok = (rows[:, None] < spec.sq) & (cols[None, :] < spec.sk)
                        tile = mask[bh][
                            np.ix_(np.minimum(rows, spec.sq - 1), np.minimum(cols, spec.sk - 1))
                        ]
                        with np.errstate(invalid="ignore"):
                            s = s + np.where(ok, tile, np.float32(0)).astype(np.float32)
                    edge = (j + 1) * BN > spec.sk or (
                        spec.causal and (j + 1) * BN > qb * BM + cw * 64
                    )
                    if edge:
                        masked = cols[None, :] >= spec.sk
                        if spec.causal:
                            masked = masked | (cols[None, :] > rows[:, None])
                        s = np.where(masked, -np.inf, s)
                    mx = np.fmax(m_run, np.fmax.reduce(s, axis=1))  # fmaxf: NaN ignored
                    shift = np.where(mx == -np.inf, 0.0, mx).astype(np.float32)
                    with np.errstate(invalid="ignore", over="ignore"):
                        corr = np.exp2((m_run - shift) * unit)
                        p = np.exp2((s - shift[:, None]) * unit)
                    l_run = l_run * corr + p.sum(axis=1)
                    m_run = mx
                    p16 = p.astype(p_type).astype(np.float32)
                    o = o * corr[:, None] + p16 @ _rows(v[bh], cols)
                empty = np.nan if has_mask and not spec.nan_to_zero else 0.0
                inv = np.where(l_run > 0, 1.0 / np.where(l_run > 0, l_run, 1.0), empty)
                valid = rows < spec.sq
                result = o * inv[:, None]
                if spec.nan_to_zero:  # the kernel's zero_row: a NaN sum (a NaN score) gives 0
                    result = np.where(np.isnan(l_run)[:, None], 0.0, result)
                out[bh, rows[valid]] = result[valid]
                writes[bh, rows[valid]] += 1
    return out, writes


def _rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of ``a`` as TMA loads them: zeros past the end."""
    out = np.zeros((len(rows), a.shape[1]), dtype=np.float32)
    valid = rows < a.shape[0]
    out[valid] = a[rows[valid]]
    return out


def reference(q, k, v, scale: float, causal: bool) -> np.ndarray:
    """softmax(q k^T * scale [+ causal mask]) v in float64."""
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        sq, sk = s.shape[1:]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v.astype(np.float64)


def _function_body(cpp: str, name: str) -> str:
    """The one statement of ``Config``'s ``name`` (a generated one-line function)."""
    import re

    match = re.search(rf"{name}\([^)]*\) \{{\n\s*(.*?);\n\s*\}}", cpp)
    assert match, f"{name} not in the generated C++"
    return match.group(1)


def _c_eval(expression: str, **values: int) -> int:
    """A generated C++ index expression of non-negative ints, evaluated as C does."""
    python = expression.replace("(long long)", "").replace("/", "//")
    return int(eval(python, {"__builtins__": {}}, values))  # noqa: S307 (generated ints)


def operands_as_addressed(spec: AttentionSpec, inputs: dict, buffers: list) -> dict:
    """q, k and v ``(batch, rows, cols)`` as the kernel reads them from the flat group
    ``buffers``: each tensor map's geometry (``launcher.map_geometry``) and the batch
    coordinates the generated C++ computes from ``bh`` (``load_q`` ...), with TMA's zero
    fill outside the map."""
    import re

    from fusec.targets.cuda.attention.launcher import map_geometry

    cpp = spec.cpp_source()
    out = {}
    for role in "qkv":
        offset, dims, strides, _ = map_geometry(spec, role)
        call = _function_body(cpp, f"load_{role}")
        coords = re.fullmatch(r"fs_tma_load\(dst, map, bar, c0, row, (.*)\)", call).group(1)
        exprs = coords.split(", ")
        assert len(exprs) == len(dims) - 2, (call, dims)
        flat = np.asarray(buffers[inputs[role]]).reshape(-1)
        cols, rows = dims[0], dims[1]
        tile = np.zeros((spec.batch, rows, cols), dtype=np.float64)
        for bh in range(spec.batch):
            at = [_c_eval(e, bh=bh) for e in exprs]
            assert all(0 <= a < n for a, n in zip(at, dims[2:], strict=True)), (role, bh, at)
            base = offset + sum(a * s for a, s in zip(at, strides[1:], strict=True))
            for r in range(rows):
                start = (base + r * strides[0]) // 2
                tile[bh, r] = flat[start : start + cols]
        out[role] = tile
    return out


def scatter_output(spec: AttentionSpec, result: np.ndarray, size: int):
    """``result`` ``(batch, sq, dv)`` stored where the generated ``out_offset`` puts each row
    in a flat output of ``size`` elements: (output, writes per element)."""
    expression = _function_body(spec.cpp_source(), "out_offset").removeprefix("return ")
    out = np.full(size, np.nan)
    writes = np.zeros(size, dtype=np.int64)
    for bh in range(spec.batch):
        for row in range(spec.sq):
            start = _c_eval(expression, bh=bh, row=row)
            out[start : start + spec.dv] = result[bh, row]
            writes[start : start + spec.dv] += 1
    return out, writes


def mask_as_addressed(spec: AttentionSpec, flat: np.ndarray) -> np.ndarray:
    """The (batch, sq, sk) mask a ``spec.mask`` kernel reads from the group input ``flat``:
    the generated C++'s ``mask_offset(bh, row, col)`` evaluated at every score."""
    return read_as_addressed(spec, "mask_offset", flat, spec.sq, spec.sk)


def read_as_addressed(
    spec: AttentionSpec, function: str, flat: np.ndarray, rows: int, cols: int
) -> np.ndarray:
    """The (batch, rows, cols) elements of ``flat`` at the generated C++'s offsets
    ``function(bh, row, col)`` (``mask_offset``, ``q_cos_offset``...), float32."""
    import re

    found = re.search(
        function + r"\(int bh, int row, int col\) \{\s*return (.*?);", spec.cpp_source()
    )
    assert found, f"no {function} in the generated C++"
    expression = found.group(1).replace("(long long)", "").replace("/", "//")
    bh, row, col = np.meshgrid(
        np.arange(spec.batch), np.arange(rows), np.arange(cols), indexing="ij"
    )
    offsets = eval(expression, {"bh": bh, "row": row, "col": col})  # generated integer maths
    return np.asarray(flat, dtype=np.float32).reshape(-1)[np.broadcast_to(offsets, bh.shape)]


def operand_as_addressed(spec: AttentionSpec, role: str, flat: np.ndarray) -> np.ndarray:
    """Operand ``role`` (batch, rows, cols) as the kernel's tensor maps read it from its
    group input ``flat``: element (bh, r, c) at ``offset + digits(bh) . batch + r *
    row_stride + c`` (``AttentionSpec.view``)."""
    view = spec.view(role)
    rows = spec.sq if role == "q" else spec.sk
    cols = spec.dv if role == "v" else spec.d
    offset = np.full(spec.batch, view.offset, dtype=np.int64)
    div = 1
    for n, stride in reversed(view.batch):
        offset += (np.arange(spec.batch) // div % n) * stride
        div *= n
    index = offset[:, None, None] + np.arange(rows)[:, None] * view.row_stride + np.arange(cols)
    return np.asarray(flat).reshape(-1)[index]


def rotated_as_kernel(
    spec: AttentionSpec, role: str, x: np.ndarray, cos: np.ndarray, sin: np.ndarray
) -> np.ndarray:
    """Operand ``x`` (batch, rows, d) of the 16-bit type after the kernel's RoPE prologue
    (``attention_rope``) over its first R = ``spec.rotary or spec.d`` dims: ``x[d] cos -
    x[d + R/2] sin`` below R/2, ``x[d] cos + x[d - R/2] sin`` from R/2 to R, in float32
    with one rounding, the dims past R as loaded; ``cos``/``sin`` (batch, rows, R) the
    factors as addressed (``read_as_addressed`` of ``<role>_cos_offset``...)."""
    rot = spec.rotary or spec.d
    half = rot // 2
    a, b = x[..., :half].astype(np.float32), x[..., half:rot].astype(np.float32)
    lo = a * cos[..., :half] - b * sin[..., :half]
    hi = b * cos[..., half:rot] + a * sin[..., half:rot]
    return np.concatenate([lo.astype(x.dtype), hi.astype(x.dtype), x[..., rot:]], axis=-1)
