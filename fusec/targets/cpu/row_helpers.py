"""Row reductions the row loops call, as source (``ROW_HELPERS``): ``assemble`` adds the
ones a stage names (``Stage.helpers``) to its kernel module, under the cpu helper decorator.
"""

from __future__ import annotations

# ---------------------------------------------------------------- row helpers
#
# Without fast-math, LLVM vectorises no floating-point reduction (reordering
# the additions changes the rounding), and a loop that keeps 8 scalar
# accumulators is not vectorised either: such a loop ran at 0.24-0.33 ns per
# element, the exponential included in none of it. The helpers below get
# vectors another way each.

_ROW_MAX = '''def row_max(buf):
    """The largest element, as an integer max over the bits (LLVM vectorises that).

    ``i ^ ((i >> 31) & 0x7FFFFFFF)`` maps the float32 bit patterns to int32s in
    the order of their values, NaN aside: a NaN with the sign bit clear comes
    out as the max, one with it set is skipped. Only softmax calls this, and a
    NaN anywhere in its row makes every output NaN through exp and the sum
    either way, as numpy's does. The ``np.int32`` around the key matters: Numba
    widens int32 arithmetic to int64, and the loop then ran on 8 lanes, not 16
    (7.3 cycles per 16 floats on Zen 4, 2.0 with it).
    """
    m = np.int32(-2147483648)
    for k in range(buf.size):
        i = f32(buf[k]).view(np.int32)
        i = np.int32(i ^ ((i >> np.int32(31)) & np.int32(0x7FFFFFFF)))
        m = i if i > m else m
    m = m ^ ((m >> np.int32(31)) & np.int32(0x7FFFFFFF))
    return np.int32(m).view(np.float32)'''


_ROW_SCALE_MAX = '''def row_scale_max(dst, inv, nxt):
    """dst[k] * inv stored in dst, and the largest element of nxt (as ``row_max``), in
    one loop: the scale of one softmax row and the max of the next."""
    m = np.int32(-2147483648)
    for k in range(dst.size):
        dst[k] = dst[k] * inv
        i = f32(nxt[k]).view(np.int32)
        i = np.int32(i ^ ((i >> np.int32(31)) & np.int32(0x7FFFFFFF)))
        m = i if i > m else m
    m = m ^ ((m >> np.int32(31)) & np.int32(0x7FFFFFFF))
    return np.int32(m).view(np.float32)'''


def _sum_helper(name: str, doc: str, params: str, term: str) -> str:
    """A strict wrapper (the caller's decorator) around a float64 sum marked ``reassoc``.

    ``reassoc`` alone, on this one float64 accumulation of float32 terms, lets
    LLVM keep several vector accumulators: only the order of the additions
    changes (a difference of ~n * 2**-53 relative, invisible once rounded to
    float32); NaN, inf and every other operation keep IEEE semantics, and the
    kernels themselves stay ``fastmath=False``.
    """
    return "\n".join(
        [
            f"def {name}({params}):",
            f'    """{doc}, in float64 (see {name}_f64)."""',
            f"    return {name}_f64({params})",
            "",
            "",
            '@cached_njit(fastmath={"reassoc"}, error_model="numpy")',
            f"def {name}_f64({params}):",
            '    """Reassociable float64 sum, vectorised; see fusec.targets.cpu.row_helpers."""',
            "    s = 0.0",
            "    for k in range(buf.size):",
            f"        s += {term}",
            "    return s",
        ]
    )


#: Elements of a softmax row whose exponentials are summed in float32 (then in float64).
EXP_SUM_CHUNK = 1024


def _exp_sum_helper(name: str, params: str, src: str, shift: str = "x - m") -> str:
    """Stores ``exp(x - m)`` and sums it in the same loop: one pass over the row, not two.

    The sum is float32 per chunk of ``EXP_SUM_CHUNK`` elements and float64 over the
    chunks. The chunk loop is marked ``reassoc`` (its float32 additions may be done in
    vector lanes, as in ``_sum_helper``): a float64 accumulator there made LLVM pick
    8-wide vectors for the exponential too (0.30 ns/element against 0.27 for the exp
    loop and ``row_sum`` apart, 0.21 with this form; benchmarks/results/cpu-notes.md).
    Each lane then adds at most 64 terms in [0, 1]: relative error < 2**-24 * 70 of the
    sum. ``exp_nonpos_f32`` is compiled strictly on its own and inlined with its own
    flag-free instructions. The in-place form reads and writes one array: with two
    arguments that are the same array, LLVM's runtime alias check would take the
    scalar fallback loop.

    ``shift`` is the exponent as an expression of ``x`` (the element) and the other
    parameters; a compound one is its own strict function (``{name}_shift``): inlined
    into the ``reassoc`` loop, its instructions keep IEEE order (the flag is per
    instruction), so ``x * a + c - m`` is never regrouped.
    """
    chunk = EXP_SUM_CHUNK
    rest = params.split(", ")
    assert not {"c", "e", "k", "s"} & set(rest), "the loops' own names"
    args = ", ".join(f"{p}[c:e]" if p in ("src", "dst") else p for p in rest)
    extra = [p for p in rest if p not in ("src", "dst")]
    exponent = f"{src}[k] - m"
    doc = shift.replace("x", f"{src}[k]")
    shift_def: list[str] = []
    if shift != "x - m":
        exponent = f"{name}_shift({src}[k], {', '.join(extra)})"
        shift_def = [
            "",
            "",
            '@cached_njit(fastmath=False, error_model="numpy")',
            f"def {name}_shift(x, {', '.join(extra)}):",
            '    """The exponent, in IEEE order (see _exp_sum_helper)."""',
            f"    return {shift}",
        ]
    return "\n".join(
        [
            f"def {name}({params}):",
            f'    """Stores exp({doc}) in dst[k] and returns their sum (see {name}_f32)."""',
            "    s = 0.0",
            f"    for c in range(0, dst.size, {chunk}):",
            f"        e = min(c + {chunk}, dst.size)",
            f"        s += {name}_f32({args})",
            "    return s",
            "",
            "",
            '@cached_njit(fastmath={"reassoc"}, error_model="numpy")',
            f"def {name}_f32({params}):",
            '    """One chunk: exp(x - m) <= 1 stored and summed in float32 lanes, vectorised."""',
            "    s = f32(0.0)",
            "    for k in range(dst.size):",
            f"        e = exp_nonpos_f32({exponent})  # x - max <= 0 (or NaN)",
            "        dst[k] = e",
            "        s += e",
            "    return s",
            *shift_def,
        ]
    )


#: Row reductions called by the row loops (name -> source; ``common.assemble`` adds the decorator).
#: ``row_exp_sum*`` call ``exp_nonpos_f32``: whoever uses them adds that expression helper.
ROW_HELPERS = {
    "row_max": _ROW_MAX,
    "row_scale_max": _ROW_SCALE_MAX,
    "row_sum": _sum_helper("row_sum", "The sum of the elements", "buf", "buf[k]"),
    "row_sq_dev": _sum_helper(
        "row_sq_dev",
        "The sum of squared deviations from mean",
        "buf, mean",
        "(buf[k] - mean) * (buf[k] - mean)",
    ),
    "row_exp_sum": _exp_sum_helper("row_exp_sum", "src, m, dst", "src"),
    "row_exp_sum_inplace": _exp_sum_helper("row_exp_sum_inplace", "dst, m", "dst"),
    "row_exp_sum_affine_inplace": _exp_sum_helper(
        "row_exp_sum_affine_inplace", "dst, scale, shift, m", "dst", "x * scale + shift - m"
    ),
}
