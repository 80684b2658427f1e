"""The numpy model of the GEMM's fused prologue/epilogues (CPU, no compiler needed).

The row softmax epilogue's quad reduction, the long-row partials and their
finalise, and the LayerNorm pre-pass + epilogue rewrite, each against numpy's
direct computation on random data (ragged sizes, a large row mean).
"""

from __future__ import annotations

import gemm_model as model
import numpy as np
import pytest


@pytest.mark.parametrize("bn", [64, 128, 192, 256])
def test_each_accumulator_row_lives_in_one_quad(bn: int) -> None:
    owners = model.row_owners(bn)
    assert sorted(owners) == list(range(64))
    for row, pairs in owners.items():
        threads = {t for t, _ in pairs}
        quads = {(t // 32, (t % 32) // 4) for t in threads}
        assert len(quads) == 1, f"row {row} spans {len(quads)} quads"
        assert len(threads) == 4
        cols = {model.fragment_coords(t, j)[1] for t, j in pairs}
        assert cols == set(range(bn)), f"row {row} misses columns"


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("n, bn", [(4096, 256), (1000, 256), (300, 128), (64, 256)])
def test_softmax_partials_and_finalise(n: int, bn: int) -> None:
    rng = np.random.default_rng(n)
    logits = (rng.standard_normal((37, n)) * 4).astype(np.float16).astype(np.float32)
    partials = model.softmax_partials(logits, bn)
    assert partials.shape == (37, -(-n // bn), 2)
    got = model.softmax_finalise(logits, partials)
    np.testing.assert_allclose(got, _softmax(logits.astype(np.float64)), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("m, k, n, offset", [(33, 256, 40, 0.0), (17, 1000, 77, 30.0)])
def test_layernorm_rewrite_equals_layernorm_then_matmul(m, k, n, offset) -> None:
    rng = np.random.default_rng(k)
    x = (rng.standard_normal((m, k)) + offset).astype(np.float16)
    gamma = (1 + 0.2 * rng.standard_normal(k)).astype(np.float16)
    beta = (0.2 * rng.standard_normal(k)).astype(np.float16)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float16)
    stats, folded, c, d = model.layernorm_prep(x, gamma, beta, w, 1e-5)
    acc = x.astype(np.float32) @ folded.astype(np.float32)  # the GEMM on the raw x
    got = model.layernorm_epilogue(acc, stats, c, d)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    norm = (x64 - mean) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    ref = (norm * gamma.astype(np.float64) + beta.astype(np.float64)) @ w.astype(np.float64)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert rel < 2e-3, rel
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())
