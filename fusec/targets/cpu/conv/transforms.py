"""The Winograd transforms of the cpu conv kernels as generated statements: B^T d B of
an input tile and A^T M A of a tile of products, for F(2x2, 3x3) and F(4x4, 3x3); and
the stride of a block's transformed matrices."""

from __future__ import annotations

from collections.abc import Sequence

#: F(2x2, 3x3) (Lavin and Gray): V = B^T d B of each 4x4 input tile d, U = G g G^T of
#: each 3x3 filter g, the 2x2 output tile A^T (U * V) A; the products summed over input
#: channels are 16 GEMMs. Rows of B^T and A^T as the generated code spells them out.
WINOGRAD_G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))


def bt(m: int, d: Sequence[str], t: str) -> tuple[list[str], list[str]]:
    """B^T of F(m x m, 3x3) applied to the ``m + 2`` values ``d``: statements binding
    temporaries named ``t...`` and the ``m + 2`` result expressions."""
    if m == 2:
        return [], [f"{d[0]} - {d[2]}", f"{d[1]} + {d[2]}", f"{d[2]} - {d[1]}", f"{d[1]} - {d[3]}"]
    lines = [
        f"{t}p = {d[4]} - f32(4.0) * {d[2]}",
        f"{t}q = {d[3]} - f32(4.0) * {d[1]}",
        f"{t}u = {d[4]} - {d[2]}",
        f"{t}v = f32(2.0) * ({d[3]} - {d[1]})",
    ]
    return lines, [
        f"f32(4.0) * {d[0]} - f32(5.0) * {d[2]} + {d[4]}",
        f"{t}p + {t}q",
        f"{t}p - {t}q",
        f"{t}u + {t}v",
        f"{t}u - {t}v",
        f"f32(4.0) * {d[1]} - f32(5.0) * {d[3]} + {d[5]}",
    ]


def at(m: int, v: Sequence[str], t: str) -> tuple[list[str], list[str]]:
    """A^T of F(m x m, 3x3) applied to the ``m + 2`` values ``v``: temporaries ``t...``
    and the ``m`` result expressions."""
    if m == 2:
        return [], [f"{v[0]} + {v[1]} + {v[2]}", f"{v[1]} - {v[2]} - {v[3]}"]
    lines = [
        f"{t}a = {v[1]} + {v[2]}",
        f"{t}b = {v[1]} - {v[2]}",
        f"{t}c = {v[3]} + {v[4]}",
        f"{t}d = {v[3]} - {v[4]}",
    ]
    return lines, [
        f"{v[0]} + {t}a + {t}c",
        f"{t}b + f32(2.0) * {t}d",
        f"{t}a + f32(4.0) * {t}c",
        f"{t}b + f32(8.0) * {t}d + {v[5]}",
    ]


def transform_2d(
    one_d, m: int, x: Sequence[Sequence[str]], out: Sequence[Sequence[str]]
) -> list[str]:
    """Statements computing ``T x T^T`` of the square tile ``x`` (names, ``x[row][col]``)
    for the 1-D transform ``one_d`` (``bt`` or ``at``), assigned to ``out[a][b]``:
    first down the columns (``T`` times each column), then along the rows."""
    lines: list[str] = []
    cols = len(x[0])
    mid: list[list[str]] = []
    for j in range(cols):
        temps, exprs = one_d(m, [row[j] for row in x], f"c{j}")
        lines += temps
        names = [f"h{a}_{j}" for a in range(len(exprs))]
        lines += [f"{name} = {e}" for name, e in zip(names, exprs, strict=True)]
        mid.append(names)
    for a in range(len(mid[0])):
        temps, exprs = one_d(m, [mid[j][a] for j in range(cols)], f"r{a}")
        lines += temps
        lines += [f"{out[a][b]} = {e}" for b, e in enumerate(exprs)]
    return lines


def winograd_stride(rows: int, pitch: int) -> int:
    """Floats from one of a block's 16 Winograd matrices (``rows`` rows of ``pitch``, in
    ``wv`` or ``wm``) to the next: rounded up to an odd number of 64-byte lines, so that
    the 16 start in 16 different lines of a 4 KiB window (``e * odd`` differs mod 64 for
    every ``e``). The transforms touch all 16 at the same column: 16 streams that, a
    multiple of 4 KiB apart, fall into one set of the 8-way L1 (64 rows of 96: the conv
    ran 2.3x slower, benchmarks/results/cpu-notes.md)."""
    lines = -(-rows * pitch // 16)
    return 16 * (lines | 1)
