"""Inputs of ``ai.moe_experts`` tests (issue 31), shared by the cpu, simulator and GPU
tests: random tokens, routing weights and expert weights, and expert indices that
route every token to k distinct experts (some experts get no token, some negative
indices count from the end), and the module text of one op."""

from __future__ import annotations

import numpy as np

from fusec.ir.dtypes import numpy_dtype


def moe_text(tokens: int, width: int, hidden: int, count: int, k: int, dtype: str = "f32",
             index: str = "i64") -> str:  # fmt: skip
    t = f"tensor<{tokens}x{width}x{dtype}>"
    w = f"tensor<{tokens}x{k}xf32>"
    e = f"tensor<{tokens}x{k}x{index}>"
    gu = f"tensor<{count}x{2 * hidden}x{width}x{dtype}>"
    dn = f"tensor<{count}x{width}x{hidden}x{dtype}>"
    return (
        f"func.func @moe(%x: {t}, %w: {w}, %e: {e}, %gu: {gu}, %dn: {dn}) -> {t} {{\n"
        f"  %y = ai.moe_experts %x, %w, %e, %gu, %dn : {t} * {w} * {e} * {gu} * {dn}\n"
        f"  return %y : {t}\n"
        "}\n"
    )


def moe_inputs(tokens: int, width: int, hidden: int, count: int, k: int, dtype: str = "f32",
               index: str = "i64", seed: int = 0) -> list[np.ndarray]:  # fmt: skip
    """x, weights, experts, gate_up, down: experts[t] are k distinct experts of the first
    ``count - 1`` (the last gets no token), every other token's written from the end."""
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(dtype)
    x = rng.standard_normal((tokens, width)).astype(dt)
    weights = rng.random((tokens, k)).astype(np.float32) + np.float32(0.1)
    picks = np.stack([rng.permutation(count - 1)[:k] for _ in range(tokens)])
    picks[1::2] -= count  # negative: from the end
    scale = 1.0 / np.sqrt(width)
    gate_up = (rng.standard_normal((count, 2 * hidden, width)) * scale).astype(dt)
    down = (rng.standard_normal((count, width, hidden)) / np.sqrt(hidden)).astype(dt)
    return [x, weights, picks.astype(numpy_dtype(index)), gate_up, down]


def dense_moe(x, weights, experts, gate_up, down) -> np.ndarray:
    """The experts' sum token by token in float64 (the definition, no sorting)."""
    count = gate_up.shape[0]
    hidden = gate_up.shape[1] // 2
    out = np.zeros(x.shape, dtype=np.float64)
    for t in range(x.shape[0]):
        for j in range(experts.shape[1]):
            e = int(experts[t, j]) % count
            p = gate_up[e].astype(np.float64) @ x[t].astype(np.float64)
            g, u = p[:hidden], p[hidden:]
            h = g / (1.0 + np.exp(-g)) * u
            out[t] += float(weights[t, j]) * (down[e].astype(np.float64) @ h)
    return out
