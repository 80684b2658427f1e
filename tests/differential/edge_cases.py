"""Numeric edge cases with numpy's semantics, shared by the reference, cpu and simulator runs.

Each case is a small function of ``ai`` ops and inputs full of special values:
NaN, +-Inf, -0.0, subnormals, values at the edge of a type's range. The
expected behaviour is numpy's (NaN propagates, ``relu(NaN)`` is NaN, a maximum
with NaN is NaN, ``-0.0`` keeps its sign, subnormals are not flushed), plus
what a numerically careful kernel must do: softmax of large f16 values does
not overflow, LayerNorm of a constant row does not divide by zero.

``CASES`` maps a name to ``(ir text, inputs, check)``; ``check(outputs)``
asserts the case's own semantic facts on any path's outputs (the reference
included), and every compiled path must also equal the reference with NaN,
Inf and signed zeros in the same places (``tests/differential/test_edge_cases.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from fusec.dialect import ops as ai

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
NAN, INF = float("nan"), float("inf")

#: Special values per element type: NaN, infinities, signed zeros, subnormals,
#: ordinary values, values near overflow of exp and of the type itself.
SPECIALS = {
    "f32": [NAN, INF, -INF, -0.0, 0.0, 1e-40, -1e-40, 3.0, -2.5, 1.1754944e-38, 88.8, -104.0,
            1e30, -1e30],
    "f16": [NAN, INF, -INF, -0.0, 0.0, 6e-8, -6e-8, 3.0, -2.5, 6.1e-5, 11.5, -20.0, 65504.0,
            -65504.0],
    "bf16": [NAN, INF, -INF, -0.0, 0.0, 1e-40, -1e-40, 3.0, -2.5, 1.2e-38, 88.0, -104.0, 3e38,
             -3e38],
}  # fmt: skip

Check = Callable[[list[np.ndarray]], None]
Case = tuple[str, list[np.ndarray], Check]


def _t(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _fn(params: list[tuple[str, str]], body: list[str], results: list[tuple[str, str]]) -> str:
    args = ", ".join(f"%{n}: {t}" for n, t in params)
    types = ", ".join(t for _, t in results)
    names = ", ".join(f"%{n}" for n, _ in results)
    lines = "".join(f"  {line}\n" for line in body)
    return f"func.func @edge({args}) -> ({types}) {{\n{lines}  return {names} : {types}\n}}\n"


def _array(values, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype(NP[dtype])


def _nothing(outputs: list[np.ndarray]) -> None:
    """No facts beyond equality with the reference."""


def _same_specials(x: np.ndarray, keep_nan: bool = True) -> Check:
    """NaN in, NaN out (elementwise)."""

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        nan_in = np.isnan(x.astype(np.float64))
        assert np.isnan(y.astype(np.float64))[nan_in].all(), "NaN did not propagate"

    return check


def unary_case(op: type[ai.AiOp], dtype: str, attrs: str = "") -> Case:
    x = _array(SPECIALS[dtype], dtype)
    t = _t(x.shape, dtype)
    text = _fn([("x", t)], [f"%y = {op.name} %x{attrs} : {t}"], [("y", t)])
    check = _same_specials(x)
    if op is ai.ReluOp:
        check = _relu_facts(x)
    elif op is ai.IsNanOp:
        check = _isnan_facts(x)
    return text, [x], check


def _isnan_facts(x: np.ndarray) -> Check:
    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        want = np.isnan(x.astype(np.float64)).astype(np.float64)
        assert np.array_equal(y.astype(np.float64), want), "isnan is 1 exactly where x is NaN"

    return check


def _relu_facts(x: np.ndarray) -> Check:
    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        xd, yd = x.astype(np.float64), y.astype(np.float64)
        assert np.isnan(yd[np.isnan(xd)]).all(), "relu(NaN) must be NaN"
        sub = (np.abs(xd) > 0) & (np.abs(xd) < 1.2e-38) & (xd > 0)
        assert (yd[sub] == xd[sub]).all(), "relu flushed a positive subnormal to zero"
        neg_zero = (xd == 0) & np.signbit(xd)
        # numpy's maximum(a, b) is b when a == b: relu(-0.0) = maximum(-0.0, 0.0) = 0.0
        assert not np.signbit(yd[neg_zero]).any(), "relu(-0.0) is +0.0 in numpy"

    return check


def binary_case(op: type[ai.AiOp], dtype: str) -> Case:
    values = SPECIALS[dtype]
    a = _array([u for u in values for _ in values], dtype)  # every pair of specials
    b = _array([v for _ in values for v in values], dtype)
    t = _t(a.shape, dtype)
    text = _fn([("a", t), ("b", t)], [f"%y = {op.name} %a, %b : {t} * {t}"], [("y", t)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        ad, bd, yd = (v.astype(np.float64) for v in (a, b, y))
        either = np.isnan(ad) | np.isnan(bd)
        if op is ai.PowOp:  # IEEE pow: x ** 0 and 1 ** y are 1, even for NaN
            either &= ~((bd == 0) | (ad == 1))
        if op is ai.PReluOp:  # the slope is used only where x < 0 (ONNX, PyTorch)
            either = np.isnan(ad) | (np.isnan(bd) & (ad < 0))
        assert np.isnan(yd[either]).all(), f"{op.name} with a NaN operand must be NaN"
        if op is ai.AddOp:
            both = (ad == 0) & np.signbit(ad) & (bd == 0) & np.signbit(bd)
            assert np.signbit(yd[both]).all(), "-0.0 + -0.0 is -0.0"
        if op in (ai.MaximumOp, ai.MinimumOp):  # numpy: a if a > b (a < b) or a is NaN, else b
            ties = (ad == bd) & ~either
            assert np.array_equal(np.signbit(yd[ties]), np.signbit(bd[ties])), (
                f"{op.name}(a, b) with a == b is b in numpy (maximum(-0.0, 0.0) = 0.0)"
            )
        if op is ai.MulOp:
            neg = (ad == 0) & np.signbit(ad) & (bd == 3.0)
            assert np.signbit(yd[neg]).all(), "-0.0 * 3 is -0.0"

    return text, [a, b], check


def cast_case(src: str, dst: str) -> Case:
    extra = {"f32": [65519.0, 65520.0, 70000.0, 3.4e38, 1e-8, -1e-8, 5.960464477539063e-08]}
    x = _array(SPECIALS[src] + extra.get(src, []), src)
    ts, td = _t(x.shape, src), _t(x.shape, dst)
    text = _fn([("x", ts)], [f"%y = ai.cast %x : {ts} to {td}"], [("y", td)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        expected = x.astype(np.float64).astype(NP[dst])  # numpy's rounding, to nearest even
        assert np.array_equal(y.astype(np.float64), expected.astype(np.float64), equal_nan=True)
        zeros = x.astype(np.float64) == 0
        assert np.array_equal(np.signbit(y[zeros]), np.signbit(x[zeros])), "cast lost a -0.0"

    return text, [x], check


SOFTMAX_ROWS = [
    [60000.0, 65504.0, 100.0, -65504.0],  # large f16 values: exp(x - max), never exp(x)
    [1.0, 2.0, 3.0, 4.0],
    [-INF, 0.0, 1.0, 2.0],  # exp(-inf) = 0
    [-INF, -INF, -INF, -INF],  # 0 / 0: NaN, as numpy
    [NAN, 1.0, 2.0, 3.0],  # NaN poisons the row
    [INF, 1.0, 2.0, 3.0],  # inf - inf: NaN, as numpy
    [-0.0, 0.0, 6e-8, -6e-8],
]


def softmax_case(dtype: str, axis: int = -1) -> Case:
    x = _array(SOFTMAX_ROWS, dtype)
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    t = _t(x.shape, dtype)
    text = _fn([("x", t)], [f"%y = ai.softmax %x {{axis = {axis} : i64}} : {t}"], [("y", t)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        rows = y.astype(np.float64) if axis == -1 else y.astype(np.float64).T
        for i in (0, 1, 2, 6):
            assert np.isfinite(rows[i]).all(), f"softmax row {i} overflowed: {rows[i]}"
            assert abs(rows[i].sum() - 1) < 1e-2, f"softmax row {i} sums to {rows[i].sum()}"
        assert rows[2][0] == 0.0, "exp(-inf - max) is 0"
        assert np.isnan(rows[4]).all(), "a NaN makes its softmax row NaN"

    return text, [x], check


def layernorm_case(dtype: str, n: int = 48) -> Case:
    constants = {"f32": [1000.1, 0.0, -3.0e4, 1e-40], "f16": [300.0, 0.0, -2.0e3, 6e-8],
                 "bf16": [300.0, 0.0, -3.0e4, 1e-40]}[dtype]  # fmt: skip
    rows = [[c] * n for c in constants]
    rows.append([1.0] * (n - 1) + [NAN])
    rows.append([1.0] * (n - 1) + [INF])
    x = _array(rows, dtype)
    rng = np.random.default_rng(0)
    gamma = _array(rng.uniform(0.5, 2.0, n), dtype)
    beta = _array(rng.standard_normal(n), dtype)
    t, v = _t(x.shape, dtype), _t((n,), dtype)
    text = _fn(
        [("x", t), ("g", v), ("b", v)], [f"%y = ai.layernorm %x, %g, %b : {t} * {v} * {v}"],
        [("y", t)],
    )  # fmt: skip

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd, bd = y.astype(np.float64), beta.astype(np.float64)
        for i in range(len(constants)):  # (x - mean) is 0: beta, with no 0 / 0
            assert np.isfinite(yd[i]).all(), f"layernorm of constant row {i} is not finite"
            np.testing.assert_allclose(yd[i], bd, rtol=1e-2, atol=1e-2)
        assert np.isnan(yd[len(constants)]).all(), "a NaN makes its layernorm row NaN"

    return text, [x, gamma, beta], check


#: Rows of huge finite values per element type: a float32 sum of them overflows (mean
#: Inf, or a variance of Inf) where the float64 reference is finite (issue #26: the cuda
#: target gave NaN for a row of 3e38). Constant rows normalise to beta; the others to
#: finite values of unit variance.
HUGE = {"f32": 3e38, "f16": 6e4, "bf16": 3e38}


def layernorm_huge_case(dtype: str, n: int) -> Case:
    big = HUGE[dtype]
    ramp = np.linspace(0.5, 1.0, n)
    signs = np.where(np.arange(n) % 2, -1.0, 1.0)
    rows = [
        [big] * n,  # constant
        [-big] * n,
        big * ramp,  # varied, one sign
        big * signs * ramp,  # mean near 0, variance ~ big^2
        min(1e20, big) * signs * ramp,  # only the squares overflow (f32, bf16)
        [big] * (n // 2) + [1.0] * (n - n // 2),  # huge and ordinary values
    ]
    x = _array(rows, dtype)
    rng = np.random.default_rng(1)
    gamma = _array(rng.uniform(0.5, 2.0, n), dtype)
    beta = _array(rng.standard_normal(n), dtype)
    t, v = _t(x.shape, dtype), _t((n,), dtype)
    text = _fn(
        [("x", t), ("g", v), ("b", v)], [f"%y = ai.layernorm %x, %g, %b : {t} * {v} * {v}"],
        [("y", t)],
    )  # fmt: skip

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd, bd = y.astype(np.float64), beta.astype(np.float64)
        assert np.isfinite(yd).all(), "layernorm of finite rows must be finite"
        for i in (0, 1):
            np.testing.assert_allclose(yd[i], bd, rtol=1e-2, atol=1e-2)

    return text, [x, gamma, beta], check


def rms_norm_huge_case(dtype: str, n: int) -> Case:
    """``ai.rms_norm`` of ``layernorm_huge_case``'s rows and a row of zeros: the float32
    sum of squares of a row of 3e38 (or 1e20) overflows where the float64 reference is
    finite (issue #26's LayerNorm rows, for issue #28's RMSNorm). Finite everywhere;
    a constant row gives sign * gamma, a row of zeros 0."""
    big = HUGE[dtype]
    ramp = np.linspace(0.5, 1.0, n)
    signs = np.where(np.arange(n) % 2, -1.0, 1.0)
    rows = [
        [big] * n,
        [-big] * n,
        big * ramp,
        big * signs * ramp,
        min(1e20, big) * signs * ramp,  # only the squares overflow (f32, bf16)
        [big] * (n // 2) + [1.0] * (n - n // 2),
        [0.0] * n,
    ]
    x = _array(rows, dtype)
    gamma = _array(np.random.default_rng(3).uniform(0.5, 2.0, n), dtype)
    t, v = _t(x.shape, dtype), _t((n,), dtype)
    text = _fn(
        [("x", t), ("g", v)], [f"%y = ai.rms_norm %x, %g : {t} * {v}"], [("y", t)]
    )  # fmt: skip

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd, gd = y.astype(np.float64), gamma.astype(np.float64)
        assert np.isfinite(yd).all(), "rms_norm of finite rows must be finite"
        for i, sign in ((0, 1.0), (1, -1.0)):
            np.testing.assert_allclose(yd[i], sign * gd, rtol=1e-2, atol=1e-2)
        assert (yd[6] == 0).all(), "a row of zeros normalises to 0"

    return text, [x, gamma], check


def rms_norm_pattern_case(dtype: str) -> Case:
    """Llama's RMSNorm as torch.onnx writes it (x cast to f32, x * x, the last axis' mean,
    + eps, sqrt, 1 / ., the product, cast back, the scale): ``recognize-patterns`` makes
    it one ``ai.rms_norm`` (issue #28); the reference runs the ops as written. A NaN row
    is NaN, a row with an Inf is NaN at the Inf and 0 elsewhere (x / Inf), the others
    finite."""
    n = 48
    rng = np.random.default_rng(4)
    x = 3.0 * rng.standard_normal((6, n))
    x[0, 5] = NAN
    x[1, 7] = INF
    x[2] = 0.0
    x[3] *= 1e-30  # tiny rows: the epsilon dominates
    xa = _array(x, dtype)
    w = _array(1.0 + 0.1 * rng.standard_normal(n), dtype)
    t, tf, v, r = _t(xa.shape, dtype), _t(xa.shape, "f32"), _t((n,), dtype), _t((6, 1), "f32")
    s = _t((), "f32")
    cast = f" : {t} to {tf}" if dtype != "f32" else None
    body = [f"%xs = ai.cast %x{cast}"] if cast else []
    xs = "%xs" if cast else "%x"
    body += [
        f"%sq = ai.mul {xs}, {xs} : {tf} * {tf}",
        f"%ms = ai.reduce_mean %sq {{axes = array<i64: 1>, keepdims = true}} : {tf}",
        f"%eps = arith.constant dense<1.0e-06> : {s}",
        f"%a = ai.add %ms, %eps : {r} * {s}",
        f"%sd = ai.sqrt %a : {r}",
        f"%one = arith.constant dense<1.0> : {s}",
        f"%inv = ai.div %one, %sd : {s} * {r}",
        f"%y = ai.mul {xs}, %inv : {tf} * {r}",
    ]
    body += [f"%yh = ai.cast %y : {tf} to {t}"] if cast else []
    body.append(f"%o = ai.mul {'%yh' if cast else '%y'}, %w : {t} * {v}")
    text = _fn([("x", t), ("w", v)], body, [("o", t)])

    def check(outputs: list[np.ndarray]) -> None:
        (o,) = outputs
        od = o.astype(np.float64)
        assert np.isnan(od[0]).all(), "a NaN makes its row NaN"
        assert np.isnan(od[1, 7]) and (od[1, np.arange(n) != 7] == 0).all(), "x / Inf"
        assert (od[2] == 0).all() and np.isfinite(od[3:]).all()

    return text, [xa, w], check


def layernorm_matmul_huge_case(dtype: str, n: int = 48, width: int = 40) -> Case:
    """``layernorm_huge_case``'s rows through LN(x) @ W (a LayerNorm prologue of a GEMM:
    the cpu target normalises each block's rows first; the cuda target folds gamma and
    beta into W and applies the statistics in the epilogue, ``ln=fold``, whose x @ W'
    of a bf16 row of 3e38 overflowed, issue #26). Finite everywhere; constant rows give
    beta @ W."""
    text, (x, gamma, beta), _ = layernorm_huge_case(dtype, n)
    rng = np.random.default_rng(2)
    w = _array(rng.standard_normal((n, width)) / np.sqrt(n), dtype)
    tx, v, tw, ty = (
        _t(x.shape, dtype),
        _t((n,), dtype),
        _t(w.shape, dtype),
        _t((len(x), width), dtype),
    )
    body = [
        f"%y = ai.layernorm %x, %g, %b : {tx} * {v} * {v}",
        f"%h = ai.matmul %y, %w : {tx} * {tw}",
    ]
    text = _fn([("x", tx), ("g", v), ("b", v), ("w", tw)], body, [("h", ty)])
    expect = beta.astype(np.float64) @ w.astype(np.float64)

    def check(outputs: list[np.ndarray]) -> None:
        (h,) = outputs
        hd = h.astype(np.float64)
        assert np.isfinite(hd).all(), "LN(x) @ W of finite rows must be finite"
        for i in (0, 1):  # constant rows: LN(x) is beta
            np.testing.assert_allclose(hd[i], expect, rtol=2e-2, atol=2e-2 * np.abs(expect).max())

    return text, [x, gamma, beta, w], check


def matmul_case(dtype: str) -> Case:
    a = _array([[NAN, 1.0], [2.0, 3.0], [INF, 1.0], [1e-40, 1e-40]], dtype)
    b = _array([[0.0, 1.0], [1.0, 1.0]], dtype)
    ta, tb, to = _t(a.shape, dtype), _t(b.shape, dtype), _t((4, 2), dtype)
    text = _fn([("a", ta), ("b", tb)], [f"%y = ai.matmul %a, %b : {ta} * {tb}"], [("y", to)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd = y.astype(np.float64)
        assert np.isnan(yd[0]).all(), "NaN propagates through a matmul row"
        assert np.isnan(yd[2, 0]), "inf * 0 is NaN"
        assert yd[2, 1] == INF

    return text, [a, b], check


def matmul_epilogue_case(op: type[ai.AiOp], dtype: str, attrs: str = "") -> Case:
    """``op`` on the special values as a matmul epilogue: x @ w with x's first column the
    specials, its others 0, and w all ones, so every output column is the specials
    (plus zeros); on cuda an f16/bf16 group runs the Tensor Core GEMM with the
    epilogue rendered as C++."""
    specials = SPECIALS[dtype]
    m, k, n = len(specials), 16, 16
    x = np.zeros((m, k))
    x[:, 0] = specials
    a, w = _array(x, dtype), _array(np.ones((k, n)), dtype)
    ta, tw, to = _t(a.shape, dtype), _t(w.shape, dtype), _t((m, n), dtype)
    body = [f"%p = ai.matmul %a, %w : {ta} * {tw}", f"%y = {op.name} %p{attrs} : {to}"]
    return _fn([("a", ta), ("w", tw)], body, [("y", to)]), [a, w], _nothing


#: Rows for reductions: NaN, +-Inf, Inf - Inf, signed zeros, subnormals, large values.
REDUCE_ROWS = [
    [NAN, 1.0, 2.0, 3.0],
    [INF, 1.0, -2.0, 3.0],
    [-INF, -1.0, -2.0, -3.0],
    [INF, -INF, 0.0, 1.0],  # sum: NaN; max: Inf
    [-0.0, -0.0, -0.0, -0.0],  # max: -0.0 (numpy); sum: 0.0 (numpy adds to 0.0)
    [0.0, -0.0, 0.0, -0.0],
    [1e-40, 1e-40, -1e-40, 1e-40],  # subnormal (f32, bf16; f16 flushes on rounding)
    [60000.0, 60000.0, 1.0, 2.0],  # overflows f16 when summed
]


def reduce_case(op: type[ai.AiOp], dtype: str, axes: tuple[int, ...], keepdims: bool) -> Case:
    x = _array(REDUCE_ROWS, dtype)
    shape = [d for i, d in enumerate(x.shape) if i not in axes or keepdims]
    if keepdims:
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
    t, to = _t(x.shape, dtype), _t(tuple(shape), dtype)
    attrs = (
        f"{{axes = array<i64: {', '.join(map(str, axes))}>, keepdims = {str(keepdims).lower()}}}"
    )
    text = _fn([("x", t)], [f"%y = {op.name} %x {attrs} : {t}"], [("y", to)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        if axes != (1,):
            return
        yd = y.astype(np.float64).reshape(len(REDUCE_ROWS))
        assert np.isnan(yd[0]), f"{op.name} of a row with NaN must be NaN"
        if op is ai.ReduceMaxOp:
            assert yd[1] == INF and yd[3] == INF, "max with +Inf is +Inf"
            assert yd[4] == 0 and np.signbit(yd[4]), "max of -0.0s is -0.0 (numpy)"
        else:
            assert np.isnan(yd[3]), f"{op.name} of Inf and -Inf is NaN"
            assert yd[2] == -INF, f"{op.name} with -Inf is -Inf"

    return text, [x], check


def pool_case(op: type[ai.AiOp], dtype: str) -> Case:
    values = SPECIALS[dtype]
    x = _array(np.resize(np.asarray(values, dtype=np.float64), 2 * 4 * 4), dtype)
    x = x.reshape(1, 2, 4, 4)
    t, to = _t(x.shape, dtype), _t((1, 2, 2, 2), dtype)
    attrs = "{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}"
    text = _fn([("x", t)], [f"%y = {op.name} %x {attrs} : {t}"], [("y", to)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        windows = x.astype(np.float64).reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
        has_nan = np.isnan(windows).any(axis=(-1, -2))
        assert np.isnan(y.astype(np.float64))[has_nan].all(), "a window with NaN pools to NaN"

    return text, [x], check


def clip_case(dtype: str, low: float, high: float) -> Case:
    x = _array(SPECIALS[dtype], dtype)
    t = _t(x.shape, dtype)
    attrs = f"{{min = {low!r} : f32, max = {high!r} : f32}}"
    text = _fn([("x", t)], [f"%y = ai.clip %x {attrs} : {t}"], [("y", t)])

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        xd, yd = x.astype(np.float64), y.astype(np.float64)
        assert np.isnan(yd[np.isnan(xd)]).all(), "clip(NaN) is NaN"
        inside = (xd >= low) & (xd <= high)
        assert np.array_equal(np.signbit(yd[inside]), np.signbit(xd[inside])), (
            "clip keeps a value inside its bounds, -0.0 included"
        )

    return text, [x], check


def where_case(dtype: str) -> Case:
    values = SPECIALS[dtype]
    n = len(values)
    condition = _array([NAN, -0.0, 0.0, 1.0, -INF, 6e-8 if dtype == "f16" else 1e-40] * 3, dtype)
    condition = condition[:n] if len(condition) >= n else np.resize(condition, n)
    a = _array(values, dtype)
    b = _array(values[::-1], dtype)
    t = _t(a.shape, dtype)
    text = _fn(
        [("c", t), ("a", t), ("b", t)], [f"%y = ai.where %c, %a, %b : {t} * {t} * {t}"],
        [("y", t)],
    )  # fmt: skip

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        chosen = np.where(condition.astype(np.float64) != 0, a, b).astype(np.float64)
        got = y.astype(np.float64)
        assert np.array_equal(got, chosen, equal_nan=True), "where: NaN is true, -0.0 false"
        assert np.array_equal(np.signbit(got), np.signbit(chosen)), "where moves -0.0 as is"

    return text, [condition, a, b], check


def batch_norm_case(dtype: str) -> Case:
    x = _array(np.asarray(SPECIALS[dtype], dtype=np.float64).reshape(1, 2, -1, 1), dtype)
    c = x.shape[1]
    params = [_array(v, dtype) for v in ([1.0, -2.0], [0.5, 0.0], [0.0, 1.0], [0.0, 4.0])]
    t, v = _t(x.shape, dtype), _t((c,), dtype)
    body = [f"%y = ai.batch_norm %x, %s, %b, %m, %v : {t} * {v} * {v} * {v} * {v}"]
    text = _fn([("x", t), *((n, v) for n in "sbmv")], body, [("y", t)])
    return text, [x, *params], _same_specials(x)


def copy_cases(dtype: str) -> dict[str, Case]:
    """Data movement moves bits: NaN, +-Inf, -0.0 and subnormals come out unchanged."""
    x = _array(np.resize(np.asarray(SPECIALS[dtype], dtype=np.float64), 4 * 7), dtype)
    x = x.reshape(4, 7)
    t = _t(x.shape, dtype)
    bodies = {
        "transpose": ("ai.transpose %x {perm = array<i64: 1, 0>}", (7, 4)),
        "slice": (
            "ai.slice %x {offsets = array<i64: 3, 6>, sizes = array<i64: 2, 4>, "
            "strides = array<i64: -1, -2>}",
            (2, 4),
        ),
        "gather": ("ai.gather %x {axis = 1 : i64, indices = array<i64: 3, 0, 3>}", (4, 3)),
        "concat": ("ai.concat %x, %x {axis = 0 : i64}", (8, 7)),
    }

    def moved(expected: np.ndarray) -> Check:
        def check(outputs: list[np.ndarray]) -> None:
            (y,) = outputs
            assert np.array_equal(y.view(np.uint16 if y.itemsize == 2 else np.uint32),
                                  expected.view(np.uint16 if y.itemsize == 2 else np.uint32)), (
                "a copy changed the bits of a special value")  # fmt: skip

        return check

    expected = {
        "transpose": x.T,
        "slice": x[3:1:-1, 6::-2],
        "gather": x[:, [3, 0, 3]],
        "concat": np.concatenate([x, x]),
    }
    out = {}
    for name, (op, shape) in bodies.items():
        to = _t(shape, dtype)
        operands = " * ".join([t] * op.count("%x"))
        text = _fn([("x", t)], [f"%y = {op} : {operands}"], [("y", to)])
        out[f"copy-{name}-{dtype}"] = (text, [x], moved(np.ascontiguousarray(expected[name])))
    return out


def _float_op(op: type[ai.AiOp]) -> bool:
    """A float op with a result of its operands' type (the bool logic and the i1-valued
    comparisons are tests/targets/cpu/test_cpu_integers.py's and test_op_facts.py's)."""
    return "f32" in op.DTYPES and not issubclass(op, ai.CompareOp)


def _unary_ops() -> list[type[ai.AiOp]]:
    from strategies import ai_ops

    return [op for op in ai_ops() if issubclass(op, ai.UnaryOp) and _float_op(op)]


def _binary_ops() -> list[type[ai.AiOp]]:
    from strategies import ai_ops

    return [op for op in ai_ops() if issubclass(op, ai.BinaryOp) and _float_op(op)]


def cases() -> dict[str, Case]:
    """Every edge case by name (``uses_anchor``: the ones that need a conv/matmul template)."""
    out: dict[str, Case] = {}
    for dtype in NP:
        for op in _unary_ops():
            out[f"{op.name}-{dtype}"] = unary_case(op, dtype)
        out[f"ai.gelu-tanh-{dtype}"] = unary_case(ai.GeluOp, dtype, ' {approximate = "tanh"}')
        for op in _binary_ops():
            out[f"{op.name}-{dtype}"] = binary_case(op, dtype)
        for dst in NP:
            if dst != dtype:
                out[f"cast-{dtype}-{dst}"] = cast_case(dtype, dst)
        out[f"softmax-{dtype}"] = softmax_case(dtype)
        out[f"softmax-axis0-{dtype}"] = softmax_case(dtype, axis=0)
        out[f"layernorm-constant-rows-{dtype}"] = layernorm_case(dtype)
        for n in (48, 1536):  # a warp per row, a block per row (cuda)
            out[f"layernorm-huge-rows-{n}-{dtype}"] = layernorm_huge_case(dtype, n)
            out[f"rms-norm-huge-rows-{n}-{dtype}"] = rms_norm_huge_case(dtype, n)
        out[f"rms-norm-pattern-{dtype}"] = rms_norm_pattern_case(dtype)
        PATHS[f"rms-norm-pattern-{dtype}"] = "ai.rms_norm"  # recognised: one row kernel
        out[f"matmul-{dtype}"] = matmul_case(dtype)
        for op in _unary_ops():
            out[f"matmul-epilogue-{op.name}-{dtype}"] = matmul_epilogue_case(op, dtype)
        for op in (ai.ReduceMaxOp, ai.ReduceSumOp, ai.ReduceMeanOp):
            for axes, keepdims in (((1,), False), ((0,), True), ((0, 1), False)):
                suffix = "-".join(map(str, axes)) + ("-keep" if keepdims else "")
                out[f"reduce-{op.name}-{suffix}-{dtype}"] = reduce_case(op, dtype, axes, keepdims)
        for op in (ai.MaxPool2DOp, ai.AvgPool2DOp):
            out[f"pool-{op.name}-{dtype}"] = pool_case(op, dtype)
        out[f"clip-{dtype}"] = clip_case(dtype, -1.0, 1.0)
        out[f"clip-relu6-{dtype}"] = clip_case(dtype, 0.0, 6.0)
        out[f"where-{dtype}"] = where_case(dtype)
        out[f"batch-norm-{dtype}"] = batch_norm_case(dtype)
        out.update(copy_cases(dtype))
    out.update(path_cases())
    return out


def uses_anchor(name: str) -> bool:
    """The case needs a template the CUDA simulator cannot run: conv/matmul groups, and
    copy groups (through PyTorch on cuda). (Reduce and pool groups are Numba kernels.)"""
    return name.startswith(
        ("ai.matmul", "matmul", "ai.conv2d", "copy-", "conv-", "gemm-", "attention-")
    )  # fmt: skip


# ------------------------------------------------- conv, pool, GEMM and attention paths
# Issue #26: a 3x3 conv (the cpu target's Winograd) turned +Inf into NaN. Each case
# below makes one cpu code path run on NaN and +-Inf in its inputs and in its weights
# (constant weights too, which the Program lays out once); ``PATHS`` names the words
# the case's cpu kernel must describe itself with, so that a change of the rule that
# picks a path cannot silently drop a case (``test_edge_cases.py`` asserts them).

#: Case name -> the words its cpu kernel's source must hold (the path taken).
PATHS: dict[str, str] = {}

#: Where the specials go: an input's (or weight's) first element (a corner: the
#: padding's zeros meet it), one inside, and its last element.
SPECIAL_AT = (INF, -INF, NAN)


def _with_specials(shape: tuple[int, ...], dtype: str, seed: int, specials=True) -> np.ndarray:
    """Random values (never zeros) of ``shape``; with ``specials`` +Inf at the first
    element, -Inf at the middle one and NaN at the last."""
    values = np.random.default_rng(seed).uniform(0.25, 1.5, shape)
    values *= np.where(np.random.default_rng(seed + 1).random(shape) < 0.5, -1.0, 1.0)
    if specials:
        flat = values.reshape(-1)
        for at, special in zip((0, flat.size // 2, flat.size - 1), SPECIAL_AT, strict=True):
            flat[at] = special
    return _array(values, dtype)


def _dense_hex(array: np.ndarray) -> str:
    """An ``arith.constant`` value holding ``array``'s bits (NaN and Inf included)."""
    return f'dense<"0x{np.ascontiguousarray(array).tobytes().hex().upper()}">'


def _non_finite_facts(expect_inf: bool = True) -> Check:
    """The specials reach the result: a NaN (NaN in, or 0 * Inf, or Inf - Inf), and an
    infinity where an Inf meets no NaN."""

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd = y.astype(np.float64)
        assert np.isnan(yd).any(), "the NaN did not reach the result"
        assert not expect_inf or np.isinf(yd).any(), "the infinities did not reach the result"
        assert np.isfinite(yd).any(), "every element is non-finite: the case tests nothing"

    return check


#: Conv cases: (x shape, w shape, strides, padding, dilations, groups, the kernel's words).
CONVS = {
    "depthwise": ((1, 4, 6, 6), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4, "(depthwise)"),
    "direct": ((1, 4, 6, 6), (4, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, "output rows: sgemm,"),
    # a 1x1 read in place over rows of whole vectors, few input channels: gemm_nn
    "direct-nn": ((1, 4, 9, 32), (4, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, "rows: gemm_nn,"),
    # blocks of several images when the batch gives every thread (MIN_BLOCKS) two
    "images-direct": ((64, 4, 2, 2), (4, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, "side (copied)"),
    "images-im2col": ((64, 4, 3, 3), (4, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1, "side (im2col)"),
    # ... but 3x3 stride-1 planes whose blocks fill a vector with F(2x2, 3x3) tiles
    "winograd-images": ((32, 4, 4, 4), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, " images)"),
    "winograd": ((1, 4, 7, 6), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, "Winograd F(2x2"),
    "winograd-groups": ((1, 4, 5, 8), (6, 2, 3, 3), (1, 1), (0, 1), (1, 1), 2, "Winograd F(2x2"),
    # F(4x4, 3x3): constant weights only (``CONSTANT_ONLY``); 9x10 outputs, partial tiles
    "winograd4": ((1, 4, 9, 10), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, "Winograd F(4x4"),
    # ... blocks of several images' 8x8 planes (4 tiles each: fewer than a vector)
    "winograd4-images": ((8, 4, 8, 8), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, " images)"),
    # one image's small plane (not whole vectors) by im2row and the packed weight:
    # constant weights only
    "im2row": ((1, 4, 3, 5), (64, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, "im2row, gemm_packed"),
    # one image's plane of whole vectors: blocks of output channels, gemm_nn
    "channels": ((1, 4, 8, 8), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1, "by im2col of the"),
    "channels-direct": ((1, 4, 4, 4), (6, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, "by the input"),
    "taps": ((1, 4, 6, 7), (4, 4, 5, 5), (1, 1), (2, 2), (1, 1), 1, "(one per tap)"),
    "taps-dilated": ((1, 4, 7, 6), (4, 4, 3, 3), (1, 1), (2, 2), (2, 2), 1, "(one per tap)"),
    "im2col-strided": ((1, 4, 7, 9), (4, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1, "im2col, sgemm"),
    "im2col-padded-1x1": ((1, 4, 5, 5), (4, 4, 1, 1), (1, 1), (1, 1), (1, 1), 1, "im2col, sgemm"),
    # output rows of 16 pixels (whole vectors), few channels: gemm_nn (COLS_NN_ROWS)
    "im2col-nn": ((1, 4, 31, 31), (4, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1, "im2col, gemm_nn"),
}


#: Methods the cpu target takes only for a constant weight.
CONSTANT_ONLY = frozenset({"winograd4", "winograd4-images", "im2row"})


def conv_case(
    method: str,
    dtype: str,
    special_in: str,
    constant_weight: bool = False,
    weight_scale: float = 1.0,
) -> Case:
    """A conv that the cpu target computes by ``method`` (``CONVS``) with the specials
    in its input (``special_in`` "x") or its weights ("w"), the weights an argument or
    an ``arith.constant``, scaled by ``weight_scale``."""
    xs, ws, strides, padding, dilations, groups, _ = CONVS[method]
    x = _with_specials(xs, dtype, 1, special_in == "x")
    w = _with_specials(ws, dtype, 3, special_in == "w")
    if weight_scale != 1.0:
        w = (w * weight_scale).astype(w.dtype)
    n, _, h, wd = xs
    oh = (h + 2 * padding[0] - dilations[0] * (ws[2] - 1) - 1) // strides[0] + 1
    ow = (wd + 2 * padding[1] - dilations[1] * (ws[3] - 1) - 1) // strides[1] + 1
    tx, tw, ty = _t(xs, dtype), _t(ws, dtype), _t((n, ws[0], oh, ow), dtype)
    attrs = (
        f"{{strides = array<i64: {strides[0]}, {strides[1]}>, padding = array<i64: "
        f"{padding[0]}, {padding[1]}>, dilations = array<i64: {dilations[0]}, "
        f"{dilations[1]}>, groups = {groups}}}"
    )
    conv = f"%y = ai.conv2d %x, %w {attrs} : {tx} * {tw}"
    if constant_weight:
        body = [f"%w = arith.constant {_dense_hex(w)} : {tw}", conv]
        return _fn([("x", tx)], body, [("y", ty)]), [x], _non_finite_facts()
    return _fn([("x", tx), ("w", tw)], [conv], [("y", ty)]), [x, w], _non_finite_facts()


def conv_huge_case(method: str, constant_weight: bool = False) -> Case:
    """A conv (``CONVS``) of finite inputs near float32's limit: +3e38 at the first
    pixel, -3e38 at the last (no window holds both), weights in +-[0.125, 0.75], so the
    reference (float64, rounded) is finite everywhere.
    Winograd's transforms scale the filters by up to 9/8 and add inputs: their products
    overflow to Inf, and the tiles with one must be recomputed to the finite answer."""
    text, inputs, _ = conv_case(method, "f32", "", constant_weight, weight_scale=0.5)
    inputs[0].reshape(-1)[[0, -1]] = (3e38, -3e38)

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd = y.astype(np.float64)
        assert np.isfinite(yd).all(), "finite inputs whose products do not overflow"
        assert np.abs(yd).max() > 1e37, "the huge inputs reach the result"

    return text, inputs, check


def conv_bias_relu_case(dtype: str) -> Case:
    """Issue #26 as reported: relu(conv3x3(x, pad 1) + bias) with x[0, 1, 5, 5] = +Inf
    (Winograd: the reference's 576 +Inf were 493 NaN and 83 Inf), at the example's
    shape."""
    rng = np.random.default_rng(0)
    x = _array(rng.random((1, 32, 28, 28)), dtype)
    w = _array(rng.random((64, 32, 3, 3)), dtype)
    b = _array(rng.random(64), dtype)
    x[0, 1, 5, 5] = INF
    tx, tw, tb, ty = (_t(s, dtype) for s in (x.shape, w.shape, b.shape, (1, 64, 28, 28)))
    body = [
        f"%c = ai.conv2d %x, %w {{padding = array<i64: 1, 1>}} : {tx} * {tw}",
        f"%a = ai.bias_add %c, %b : {ty} * {tb}",
        f"%y = ai.relu %a : {ty}",
    ]

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        yd = y.astype(np.float64)
        assert not np.isnan(yd).any(), "Inf * positive weights is +Inf, never NaN"
        assert (yd == INF).sum() == 64 * 9, "the Inf reaches a 3x3 window of every channel"

    return _fn([("x", tx), ("w", tw), ("b", tb)], body, [("y", ty)]), [x, w, b], check


def conv_cases() -> dict[str, Case]:
    out: dict[str, Case] = {}
    for method, (*_, words) in CONVS.items():
        if method in CONSTANT_ONLY:
            continue
        for special_in in ("x", "w"):
            name = f"conv-{method}-{special_in}-f32"
            out[name] = conv_case(method, "f32", special_in)
            PATHS[name] = words
    for special_in in ("x", "w"):  # weights laid out once by the Program
        for method in ("winograd", "winograd4", "winograd4-images", "im2row", "taps"):
            name = f"conv-{method}-constant-{special_in}-f32"
            out[name] = conv_case(method, "f32", special_in, constant_weight=True)
            PATHS[name] = CONVS[method][-1]
        out[f"conv-winograd-{special_in}-f16"] = conv_case("winograd", "f16", special_in)
        PATHS[f"conv-winograd-{special_in}-f16"] = CONVS["winograd"][-1]
        # the cuda target's direct conv (depthwise) in f16: its padding taps too
        out[f"conv-depthwise-{special_in}-f16"] = conv_case("depthwise", "f16", special_in)
        PATHS[f"conv-depthwise-{special_in}-f16"] = CONVS["depthwise"][-1]
    for method in ("winograd", "taps"):
        out[f"conv-{method}-huge-f32"] = conv_huge_case(method)
        PATHS[f"conv-{method}-huge-f32"] = CONVS[method][-1]
    out["conv-winograd4-constant-huge-f32"] = conv_huge_case("winograd4", constant_weight=True)
    PATHS["conv-winograd4-constant-huge-f32"] = CONVS["winograd4"][-1]
    for dtype in ("f32", "f16"):
        out[f"conv-bias-relu-inf-{dtype}"] = conv_bias_relu_case(dtype)
        PATHS[f"conv-bias-relu-inf-{dtype}"] = CONVS["winograd"][-1]
    for dtype in NP:  # the LayerNorm prologue of a GEMM on rows of huge values
        out[f"gemm-layernorm-huge-rows-{dtype}"] = layernorm_matmul_huge_case(dtype)
        PATHS[f"gemm-layernorm-huge-rows-{dtype}"] = "ai.layernorm -> ai.matmul"
    return out


#: Pool cases: (kind, x shape, attributes, result height and width).
POOLS = {
    "max-padded": ("max", (1, 2, 5, 6), "kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>",
                   (5, 6)),
    "avg-padded": ("avg", (1, 2, 5, 6), "kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>",
                   (5, 6)),
    "avg-count-pad": ("avg", (1, 2, 5, 6), "kernel = array<i64: 3, 3>, strides = array<i64: 2, "
                      "2>, padding = array<i64: 1, 1>, count_include_pad = true", (3, 3)),
    "max-ceil": ("max", (1, 2, 5, 5), "kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, "
                 "ceil_mode = true", (3, 3)),
    "max-global": ("max", (2, 3, 4, 5), "kernel = array<i64: 4, 5>", (1, 1)),
    "avg-global": ("avg", (2, 3, 4, 5), "kernel = array<i64: 4, 5>", (1, 1)),
    # the max pool's rows path (``fusec/targets/cpu/pool.py``): dilated windows; windows
    # of more than ``UNROLL`` (16) rows and columns, looped instead of unrolled; rows of
    # 72 padded columns, in bands of 56 output rows (``BAND_FLOATS``), two a plane
    "max-dilated": ("max", (1, 2, 7, 8), "kernel = array<i64: 3, 3>, padding = array<i64: 1, "
                    "1>, dilations = array<i64: 2, 2>", (5, 6)),
    "max-looped": ("max", (1, 2, 18, 19), "kernel = array<i64: 17, 17>, strides = array<i64: "
                   "2, 2>, padding = array<i64: 1, 1>", (2, 3)),
    "max-bands": ("max", (1, 2, 70, 70), "kernel = array<i64: 3, 3>, padding = array<i64: 1, "
                  "1>", (70, 70)),
}  # fmt: skip
#: The words of a pool path's cpu kernel (``PATHS``), for the pools above that have one.
POOL_WORDS = {
    "max-dilated": "(i * 1 + min(max(2, lo), hi - 1) * 2 - 1)",
    "max-looped": "for r in range(lo + 1, hi):",
    "max-bands": "for i0 in range(0, 70, 56):",
}


def pool_path_case(name: str, dtype: str) -> Case:
    """A pool (``POOLS``) of an input with +Inf, -Inf and NaN in different windows."""
    kind, shape, attrs, (oh, ow) = POOLS[name]
    x = _with_specials(shape, dtype, 5)
    tx, ty = _t(shape, dtype), _t((*shape[:2], oh, ow), dtype)
    text = _fn([("x", tx)], [f"%y = ai.{kind}_pool2d %x {{{attrs}}} : {tx}"], [("y", ty)])
    return text, [x], _non_finite_facts()


#: GEMM cases: (a shape, b shape, attributes, b an ``arith.constant``, the kernel's words).
GEMMS = {
    "sgemm": ((5, 6), (6, 5), "", False, ", sgemm, "),
    "gemm-nn": ((6, 8), (8, 16), "", False, ", gemm_nn, "),
    "packed": ((6, 136), (136, 192), "", True, "gemm_packed (B packed once)"),
    "packed-transposed": ((6, 16), (64, 16), "transpose_b = true", True, "gemm_packed (B pack"),
    "batched-nn": ((2, 5, 8), (2, 8, 16), "", False, ", gemm_nn, "),
    "batched-sgemm": ((2, 5, 8), (1, 8, 5), "", False, ", sgemm, "),
    "transposed-b": ((5, 8), (6, 8), "transpose_b = true", False, ", sgemm, "),
    "transposed-a": ((8, 5), (8, 6), "transpose_a = true", False, ", sgemm, "),
}


def gemm_case(path: str, dtype: str, special_in: str) -> Case:
    """A matmul that the cpu target runs by ``path`` (``GEMMS``) with the specials in A
    (``special_in`` "a") or B ("b"): NaN rows, Inf * 0 and Inf - Inf as numpy has them."""
    a_shape, b_shape, attrs, constant, _ = GEMMS[path]
    a = _with_specials(a_shape, dtype, 7, special_in == "a")
    b = _with_specials(b_shape, dtype, 9, special_in == "b")
    ta_, tb_ = "transpose_a = true" in attrs, "transpose_b = true" in attrs
    m = a_shape[-1] if ta_ else a_shape[-2]
    n = b_shape[-2] if tb_ else b_shape[-1]
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    ta, tb, ty = _t(a_shape, dtype), _t(b_shape, dtype), _t((*batch, m, n), dtype)
    matmul = f"%y = ai.matmul %a, %b {{{attrs}}} : {ta} * {tb}" if attrs else (
        f"%y = ai.matmul %a, %b : {ta} * {tb}")  # fmt: skip
    if constant:
        body = [f"%b = arith.constant {_dense_hex(b)} : {tb}", matmul]
        return _fn([("a", ta)], body, [("y", ty)]), [a], _non_finite_facts()
    return _fn([("a", ta), ("b", tb)], [matmul], [("y", ty)]), [a, b], _non_finite_facts()


def huge_average_case(kind: str) -> Case:
    """An average (``kind`` "pool": a 2x2/2 avg pool; "mean": a row mean) of finite
    float32 values near its largest, +-[1.5e38, 3e38] (plane or row 0 positive, 1
    negative, ...): the float64 mean is finite, a float32 sum of the window or row
    overflows to Inf."""
    shape = (1, 2, 6, 6) if kind == "pool" else (4, 64)
    ramp = np.random.default_rng(23).uniform(0.5, 1.0, shape) * 3e38
    signs = np.where(np.arange(shape[1] if kind == "pool" else shape[0]) % 2, -1.0, 1.0)
    x = _array(ramp * signs.reshape((1, -1, 1, 1) if kind == "pool" else (-1, 1)), "f32")
    t = _t(shape, "f32")
    if kind == "pool":
        ty = _t((1, 2, 3, 3), "f32")
        attrs = "kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>"
        op = f"%y = ai.avg_pool2d %x {{{attrs}}} : {t}"
    else:
        ty = _t((4,), "f32")
        op = f"%y = ai.reduce_mean %x {{axes = array<i64: 1>}} : {t}"

    def check(outputs: list[np.ndarray]) -> None:
        y = outputs[0].astype(np.float64)
        assert np.isfinite(y).all(), "the mean of finite values is finite"
        assert np.abs(y).min() > 1e38, "the huge values reach the result"

    return _fn([("x", t)], [op], [("y", ty)]), [x], check


def gemm_softmax_case(dtype: str, special_in: str) -> Case:
    """softmax(a @ b + mask), one matmul kernel on cpu (the softmax in the block's
    epilogue; on cuda the f16 Tensor Core GEMM's row-softmax epilogue): row 1 of the
    mask -Inf everywhere (NaN, as numpy), row 2 half -Inf, and the specials in A
    (``special_in`` "a") or nowhere ("")."""
    a = _with_specials((6, 8), dtype, 17, special_in == "a")
    b = _with_specials((8, 16), dtype, 19, False)
    mask = np.zeros((6, 16))
    mask[1, :] = -INF  # every column masked out
    mask[2, :8] = -INF
    mask = _array(mask, dtype)
    ta, tb, tm = _t((6, 8), dtype), _t((8, 16), dtype), _t((6, 16), dtype)
    body = [
        f"%s = ai.matmul %a, %b : {ta} * {tb}",
        f"%m = ai.add %s, %mask : {tm} * {tm}",
        f"%y = ai.softmax %m : {tm}",
    ]

    def check(outputs: list[np.ndarray]) -> None:
        y = outputs[0].astype(np.float64)
        assert np.isnan(y[1]).all(), "a row masked out entirely is NaN (0 / 0, numpy)"
        assert (y[2, :8] == 0).all(), "exp(-inf - max) is 0"
        assert np.isfinite(y[4]).all(), "a row without a special or a mask is finite"

    text = _fn([("a", ta), ("b", tb), ("mask", tm)], body, [("y", tm)])
    return text, [a, b, mask], check


#: Attention cases: (mask shape, nan_to_zero, where the specials go, the key given as
#: (..., D, T) through a transpose, the kernel's words). The mask's second query row is
#: -Inf everywhere: softmax of it is NaN (0 / 0, numpy), 0 with ``nan_to_zero``.
ATTENTIONS = {
    "mask-full-q": ((4, 16), False, "q", False, "row_exp_sum_inplace("),
    "mask-full-v-nan-to-zero": ((4, 16), True, "v", False, "row_exp_sum_inplace("),
    "mask-rows-k": ((2, 4, 1), False, "k", False, "row_exp_sum_affine_inplace("),
    "mask-rows-nan-to-zero": ((2, 4, 1), True, "", False, "row_exp_sum_affine_inplace("),
    "key-transposed-k": ((4, 16), False, "k", True, "gemm_nn scores"),
}


def attention_case(name: str, dtype: str) -> Case:
    """``ai.attention`` (B 2, S 4, T 16, D 8, E 16) with a query row masked out entirely
    and +Inf, -Inf and NaN in q, the key or v (``ATTENTIONS``)."""
    mask_shape, nan_to_zero, special_in, key_transposed, _ = ATTENTIONS[name]
    q = _with_specials((2, 4, 8), dtype, 11, special_in == "q")
    key = _with_specials((2, 16, 8), dtype, 13, special_in == "k")
    v = _with_specials((2, 16, 16), dtype, 15, special_in == "v")
    mask = np.zeros(mask_shape)
    mask[..., 1, :] = -INF  # query row 1: every key masked out
    mask[..., 2, : mask_shape[-1] // 2] = -INF
    mask = _array(mask, dtype)
    tq, tv, tm, ty = (_t(s, dtype) for s in ((2, 4, 8), (2, 16, 16), mask_shape, (2, 4, 16)))
    tk = _t((2, 16, 8), dtype)
    attrs = "scale = 0.35 : f32" + (", nan_to_zero = true" if nan_to_zero else "")
    body = [f"%y = ai.attention %q, %kt, %v, %m {{{attrs}}} : {tq} * {tk} * {tv} * {tm}"]
    params = [("q", tq), ("k", tk), ("v", tv), ("m", tm)]
    if key_transposed:  # a cache's layout: the kernel reads the (D, T) key in place
        key = np.ascontiguousarray(key.transpose(0, 2, 1))
        params[1] = ("k", _t(key.shape, dtype))
        body.insert(0, f"%kt = ai.transpose %k {{perm = array<i64: 0, 2, 1>}} : {params[1][1]}")
    else:
        body = [line.replace("%kt", "%k") for line in body]

    def check(outputs: list[np.ndarray]) -> None:
        (y,) = outputs
        masked = y.astype(np.float64)[:, 1]
        if nan_to_zero and special_in != "v":
            assert (masked == 0).all(), "a row masked out entirely is 0 with nan_to_zero"
        elif not nan_to_zero:
            assert np.isnan(masked).all(), "a row masked out entirely is NaN (0 / 0, numpy)"

    return _fn(params, body, [("y", ty)]), [q, key, v, mask], check


def path_cases() -> dict[str, Case]:
    """The conv, pool, GEMM and attention cases (``PATHS`` their kernels' words)."""
    out = conv_cases()
    for name in POOLS:
        for dtype in ("f32", "f16"):
            out[f"pool-{name}-{dtype}"] = pool_path_case(name, dtype)
            if name in POOL_WORDS:
                PATHS[f"pool-{name}-{dtype}"] = POOL_WORDS[name]
    out["pool-avg-huge-f32"] = huge_average_case("pool")
    PATHS["pool-avg-huge-f32"] = "f32(acc / count)"  # the average's float64 sum
    out["reduce-mean-huge-f32"] = huge_average_case("mean")
    for dtype, special_in in (("f32", "a"), ("f32", ""), ("f16", "")):
        name = f"gemm-softmax-{special_in or 'masked'}-{dtype}"
        out[name] = gemm_softmax_case(dtype, special_in)
        PATHS[name] = "#   ai.matmul -> ai.add -> ai.softmax"
    for path, (*_, words) in GEMMS.items():
        for special_in in ("a", "b"):
            out[f"gemm-{path}-{special_in}-f32"] = gemm_case(path, "f32", special_in)
            PATHS[f"gemm-{path}-{special_in}-f32"] = words
    for name, (*_, words) in ATTENTIONS.items():
        out[f"attention-{name}-f32"] = attention_case(name, "f32")
        PATHS[f"attention-{name}-f32"] = words
    return out
