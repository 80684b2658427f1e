"""The one numerics comparison of the tests: elementwise, like ``numpy.allclose``.

A result passes when every element satisfies

    |actual - expected| <= atol + rtol * |expected|,   atol = ATOL[dtype] * scale

where ``scale`` is the root-mean-square of the finite expected values (the
output's magnitude; 1 when they are all zero) and ``rtol``/``ATOL`` come from
the result's element type: f32 1e-4, f16/bf16 1e-2 (16-bit storage, float32
arithmetic). An absolute term scaled to the output lets an element that
cancels to nearly zero keep a small absolute error, while a wrong element of
the usual size (a dropped bias on one channel, a swapped operand) fails on its
own, however many correct elements surround it. NaN in the result never
passes; equal infinities agree.

The relative L2 error ``||actual - expected|| / ||expected||`` is reported as
information only: it averages one wrong channel away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RTOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2, "i64": 0.0, "i32": 0.0, "i1": 0.0}
ATOL = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2, "i64": 0.0, "i32": 0.0, "i1": 0.0}
# ||out - ref|| / ||ref||: the standard where the reference rounds elsewhere than the kernels
# (a graph rounded after every op against kernels that keep f32 through a fused chain)
REL_L2 = {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}


def dtype_name(array) -> str:
    """'f32', 'f16' or 'bf16' of a numpy (or ml_dtypes) array, f64 compares as f32;
    'i64', 'i32' or 'i1' of an integer or bool one (compared exactly)."""
    name = np.asarray(array).dtype.name
    known = {"float16": "f16", "bfloat16": "bf16", "int64": "i64", "int32": "i32", "bool": "i1"}
    return known.get(name, "f32")


@dataclass(frozen=True)
class Comparison:
    """How a result compares with its expected value."""

    passed: bool
    bad: int  # elements outside the tolerance
    size: int
    worst: str  # the worst element, for the failure message
    rel_l2: float
    rtol: float
    atol: float

    def __str__(self) -> str:
        verdict = "ok" if self.passed else f"{self.bad} of {self.size} elements out of tolerance"
        return (
            f"{verdict} (rtol {self.rtol:.0e}, atol {self.atol:.3g}); worst {self.worst}; "
            f"rel L2 {self.rel_l2:.3e} (information)"
        )


def compare(actual, expected, dtype: str | None = None, tol: float | None = None) -> Comparison:
    """Compare ``actual`` with ``expected`` at the tolerance of ``dtype`` (default: the
    element type of ``actual``), or at rtol = atol-per-RMS = ``tol`` when given (float64
    maths checked tighter than any element type)."""
    dtype = dtype or dtype_name(actual)
    got = np.asarray(actual).astype(np.float64)
    want = np.asarray(expected).astype(np.float64)
    if got.shape != want.shape:
        return Comparison(
            False, got.size, got.size, f"shape {got.shape} != {want.shape}", float("inf"), 0, 0
        )
    finite = want[np.isfinite(want)]
    scale = float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0
    rtol = RTOL[dtype] if tol is None else tol
    atol = (ATOL[dtype] if tol is None else tol) * (scale if scale > 0 else 1.0)
    with np.errstate(invalid="ignore"):
        error = np.where(got == want, 0.0, np.abs(got - want))  # equal infinities agree
    limit = atol + rtol * np.abs(want)
    bad_mask = ~(error <= limit)  # NaN anywhere (result or error) is bad
    bad = int(bad_mask.sum())
    if got.size:
        excess = np.nan_to_num(error - limit, nan=np.inf)
        index = np.unravel_index(int(np.argmax(excess)), got.shape)
        worst = f"at {tuple(int(i) for i in index)}: {got[index]!r} vs {want[index]!r}"
    else:
        worst = "(empty)"
    norm = np.linalg.norm(finite) if finite.size else 0.0
    with np.errstate(invalid="ignore"):
        rel_l2 = float(np.linalg.norm(np.nan_to_num(error, nan=np.inf)) / (norm or 1.0))
    return Comparison(bad == 0, bad, got.size, worst, rel_l2, rtol, atol)


def assert_close(
    actual, expected, dtype: str | None = None, what: str = "result", tol: float | None = None
) -> None:
    """Fail with the worst element when ``actual`` is not close to ``expected``."""
    result = compare(actual, expected, dtype, tol)
    assert result.passed, f"{what}: {result}"


def assert_rel_l2(actual, expected, dtype: str | None = None, what: str = "result") -> None:
    """Fail unless ``actual`` is finite and within ``REL_L2`` of ``expected`` in relative L2
    norm: for references whose rounding points differ from the kernels', where single
    elements may differ by more than the elementwise tolerance."""
    dtype = dtype or dtype_name(actual)
    result = compare(actual, expected, dtype)
    finite = bool(np.isfinite(np.asarray(actual, dtype=np.float64)).all())
    assert finite and result.rel_l2 < REL_L2[dtype], f"{what}: {result}"
