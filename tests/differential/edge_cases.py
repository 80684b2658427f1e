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


def _unary_ops() -> list[type[ai.AiOp]]:
    from strategies import ai_ops

    return [op for op in ai_ops() if issubclass(op, ai.UnaryOp)]


def _binary_ops() -> list[type[ai.AiOp]]:
    from strategies import ai_ops

    return [op for op in ai_ops() if issubclass(op, ai.BinaryOp)]


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
    return out


def uses_anchor(name: str) -> bool:
    """The case needs a template the CUDA simulator cannot run: conv/matmul groups, and
    reduce, pool and copy groups (through PyTorch on cuda)."""
    return name.startswith(("ai.matmul", "matmul", "ai.conv2d", "reduce-", "pool-", "copy-"))
