"""``reduce_rows``: the reduction of short rows a cpu "reduce" kernel calls (compiled once).

The "reduce" template (``fusec.targets.cpu.reduce``) calls it instead of numpy where
rows are short, as numpy's per-row cost dominates them; it lives apart from the
template so that generating a kernel does not start Numba.
"""

from __future__ import annotations

import numpy as np

from fusec.runtime.numba_cache import sealed_njit


@sealed_njit
def reduce_rows(x, out, rows, inner, kind):
    """``out[i]`` = the sum (kind 0), mean (1) or max (2) of ``x[i * inner:][:inner]``:
    sums in float64 then rounded once; a max is NaN when the row holds one, and of equal
    values (-0.0 and 0.0) the later, as numpy's."""
    for i in range(rows):  # sequential: the helper is not a parallel kernel
        row = x[i * inner : (i + 1) * inner]
        if kind == 2:
            m = row[0]
            for j in range(1, inner):
                v = row[j]
                m = v if (v >= m or v != v) and m == m else m  # ties: the later, as numpy
            out[i] = m
        else:
            total = 0.0
            for j in range(inner):
                total += np.float64(row[j])
            out[i] = np.float32(total / inner if kind == 1 else total)
