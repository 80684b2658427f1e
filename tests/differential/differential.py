"""Helpers of the differential tests: compile a ``Graph``, run it, compare with the reference.

The ground truth is the float64 reference executor on the IR as written. A
compiled result matches with numpy's semantics when

* NaN sits exactly where the reference has NaN, and +-Inf exactly where it has
  the same infinity (a NaN or Inf anywhere else fails);
* every other element passes the suite's one elementwise comparison
  (``tests/numerics.py``: allclose with rtol and atol from the element type,
  atol scaled to the output's RMS), at the tolerance of the least precise
  element type anywhere in the graph: an f16 intermediate bounds the accuracy
  of an f32 result.

Outputs are poisoned (NaN) before the kernels run, so an element a kernel
forgets to write shows up as a NaN where the reference has a number.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import HealthCheck, settings
from numerics import RTOL, compare
from profiles import examples
from strategies import Const, Graph

from fusec.dialect import ops as ai

#: Element types from the most to the least precise.
PRECISION_ORDER = ("f32", "bf16", "f16")


def graph_settings(base: int) -> settings:
    """Settings of a property over random graphs: ``base`` graphs scaled by the loaded
    hypothesis profile (``tests/profiles.py``: ``ci`` keeps them, ``slow`` is 10x), no
    deadline (the first call of a graph compiles kernels)."""
    return settings(
        max_examples=examples(base),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def kernel_budget(graph: Graph, layout_copies: bool = False) -> int:
    """One kernel per op, but two for a ``batch_norm`` whose statistics are not all
    constants: its factor ``scale / sqrt(var + eps)`` has the shape (C,), not the
    input's, and the planner does not recompute a smaller producer inside a pointwise
    group, so the factor is a kernel of its own (with constant statistics it is folded
    at compile time). ``layout_copies`` (the cuda pipeline): up to two more per conv,
    ``conv-layout``'s channels-last copies of its input and its graph-input weights."""
    convs = sum(1 for node in graph.nodes if node.op is ai.Conv2DOp)
    runtime_batch_norms = sum(
        1
        for node in graph.nodes
        if node.op is ai.BatchNormOp
        and not all(isinstance(graph.defs[v], Const) for v in node.operands[1:])
    )
    return len(graph.nodes) + runtime_batch_norms + (2 * convs if layout_copies else 0)


def poison(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


def least_precise(dtypes: set[str]) -> str:
    """The element type whose tolerance applies to a graph using ``dtypes`` (its floats:
    integer and bool values are exact)."""
    floats = [d for d in dtypes if d in PRECISION_ORDER] or ["f32"]
    return max(floats, key=lambda d: (RTOL[d], PRECISION_ORDER.index(d)))


def mismatch(out: np.ndarray, ref: np.ndarray, dtype: str) -> str | None:
    """Why ``out`` does not match ``ref`` at ``dtype``'s tolerance (see the module
    docstring), or None."""
    got = np.asarray(out).astype(np.float64)
    want = np.asarray(ref, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    if not np.array_equal(nan_got, nan_want):
        where = tuple(np.argwhere(nan_got != nan_want)[0])
        return f"NaN mismatch at {where}: got {got[where]}, want {want[where]}"
    inf_got, inf_want = np.isinf(got), np.isinf(want)
    if not np.array_equal(inf_got, inf_want) or not np.array_equal(got[inf_got], want[inf_want]):
        where = tuple(np.argwhere((inf_got != inf_want) | (inf_want & (got != want)))[0])
        return f"Inf mismatch at {where}: got {got[where]}, want {want[where]}"
    finite = np.isfinite(want)
    result = compare(np.where(finite, got, 0.0), np.where(finite, want, 0.0), dtype)
    return None if result.passed else str(result)


def assert_matches(
    outputs: Sequence[np.ndarray], references: Sequence[np.ndarray], dtypes: set[str]
) -> None:
    """Every output matches its reference (``mismatch``), at the graph's tolerance."""
    assert len(outputs) == len(references), (len(outputs), len(references))
    dtype = least_precise(dtypes)
    problems = []
    for i, (out, ref) in enumerate(zip(outputs, references, strict=True)):
        why = mismatch(out, ref, dtype)
        if why is not None:
            problems.append(f"result #{i}: {why}")
    assert not problems, "\n".join(problems)
