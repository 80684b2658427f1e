"""Helpers of the differential tests: compile a ``Graph``, run it, compare with the reference.

The ground truth is the float64 reference executor on the IR as written. A
compiled result matches when, element by element and with numpy's semantics,

* NaN sits exactly where the reference has NaN, and +-Inf exactly where it has
  the same infinity (a NaN or Inf anywhere else fails);
* every finite element is within ``atol + rtol * |ref|``, with ``rtol`` the
  tolerance of the least precise element type anywhere in the graph (f32 1e-4,
  f16/bf16 1e-2: an f16 intermediate bounds the accuracy of an f32 result) and
  ``atol = rtol * max |ref|`` of that result (the error of a sum is relative to
  its terms, not to a result that cancels to near zero).

Outputs are poisoned (NaN) before the kernels run, so an element a kernel
forgets to write shows up as a NaN where the reference has a number.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import HealthCheck, settings

#: Relative tolerance by element type (the project's numerics standard).
RTOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}


def examples(base: int) -> int:
    """``base`` scaled by the loaded hypothesis profile (``max_examples`` / 100).

    The default and CI profiles keep the bounded count; a long profile
    (``--hypothesis-profile=long``) multiplies it.
    """
    return max(1, round(base * settings().max_examples / 100))


def graph_settings(base: int) -> settings:
    """Settings of a property over random graphs: ``examples(base)`` graphs, no deadline
    (the first call of a graph compiles kernels)."""
    return settings(
        max_examples=examples(base),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def poison(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def tolerance(dtypes: set[str]) -> float:
    return max(RTOL[d] for d in dtypes)


def mismatch(out: np.ndarray, ref: np.ndarray, rtol: float) -> str | None:
    """Why ``out`` does not match ``ref`` (see the module docstring), or None."""
    got = np.asarray(out).astype(np.float64)
    want = np.asarray(ref, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    if not np.array_equal(nan_got, nan_want):
        where = np.argwhere(nan_got != nan_want)[0]
        return f"NaN mismatch at {tuple(where)}: got {got[tuple(where)]}, want {want[tuple(where)]}"
    inf_got, inf_want = np.isinf(got), np.isinf(want)
    if not np.array_equal(inf_got, inf_want) or not np.array_equal(got[inf_got], want[inf_want]):
        where = np.argwhere((inf_got != inf_want) | (inf_want & (got != want)))[0]
        return f"Inf mismatch at {tuple(where)}: got {got[tuple(where)]}, want {want[tuple(where)]}"
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]), initial=0.0)) or 1.0
    with np.errstate(invalid="ignore"):
        bad = finite & ~(np.abs(got - want) <= rtol * scale + rtol * np.abs(want))
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        diff = got[finite] - want[finite]
        rel_l2 = np.linalg.norm(diff) / (np.linalg.norm(want[finite]) or 1.0)
        return (
            f"{int(bad.sum())} of {got.size} elements off, e.g. at {where}: got {got[where]!r}, "
            f"want {want[where]!r} (rtol {rtol:g}, atol {rtol * scale:.3g}; "
            f"relative L2 error {rel_l2:.3g})"
        )
    return None


def assert_matches(
    outputs: Sequence[np.ndarray], references: Sequence[np.ndarray], dtypes: set[str]
) -> None:
    """Every output matches its reference (``mismatch``), at the graph's tolerance."""
    assert len(outputs) == len(references), (len(outputs), len(references))
    rtol = tolerance(dtypes)
    problems = []
    for i, (out, ref) in enumerate(zip(outputs, references, strict=True)):
        why = mismatch(out, ref, rtol)
        if why is not None:
            problems.append(f"result #{i}: {why}")
    assert not problems, "\n".join(problems)
