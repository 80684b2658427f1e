"""Every fused kind on the cpu target vs the reference executor (hand-written groups)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check, poison, wrap_group

from fusec.api import parse
from fusec.dialect import ops as ai
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _t(shape, dtype):
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


# ------------------------------------------------------------------ pointwise

#: Functions defined on part of the line only: in one chain they would make every value
#: NaN (tests/targets/cpu/test_cpu_unary_math.py runs each on its domain).
DOMAIN_LIMITED = ("log", "asin", "acos", "acosh", "atanh")
#: Every other unary op of the dialect on floats (sqrt has its own safe operand below), and
#: tanh-gelu; the bool ones (ai.not) are tests/targets/cpu/test_cpu_integers.py's.
ALL_UNARY = [
    *(
        op.name.removeprefix("ai.")
        for op in ai.TENSOR_OPS
        if issubclass(op, ai.UnaryOp) and "f32" in op.DTYPES
    ),
    'gelu {approximate = "tanh"}',
]
ALL_UNARY = [name for name in ALL_UNARY if name not in ("sqrt", *DOMAIN_LIMITED)]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_pointwise_every_op_with_broadcasts(cache, dtype):
    t, row, col, vec = _t((6, 40), dtype), _t((40,), dtype), _t((6, 1), dtype), _t((6,), dtype)
    lines = [f"%e1 = ai.exp %e : {t}", f"%u0 = ai.mul %x, %s : {t} * {row}"]
    for i, name in enumerate(ALL_UNARY):
        opname, _, attrs = name.partition(" ")
        lines.append(f"%u{i + 1} = ai.{opname} %u{i} {attrs} : {t}")
    n = len(ALL_UNARY)
    lines += [
        f"%a = ai.add %u{n}, %c : {t} * {col}",
        f"%b = ai.sub %a, %x : {t} * {t}",
        f"%m = ai.maximum %b, %s : {t} * {row}",
        f"%q = ai.sqrt %e1 : {t}",
        f"%d = ai.div %m, %q : {t} * {t}",  # sqrt(exp(e)) > 0: a safe divisor
        f"%e0 = ai.bias_add %d, %bias {{axis = 0}} : {t} * {vec}",
    ]
    body = "\n  ".join(lines)
    text = f"""
func.func @f(%x: {t}, %s: {row}, %c: {col}, %e: {t}, %bias: {vec}) -> ({t}, {t}) {{
  {body}
  return %e0, %u3 : {t}, {t}
}}"""
    check(text, cache=cache, kind="pointwise")


@pytest.mark.parametrize("mid", ["f16", "bf16"])
def test_mid_chain_casts_round_exactly(cache, mid: str):
    """A cast to a 16-bit type inside a kernel rounds (nearest-even), bit for bit as numpy
    and ml_dtypes do: the result is compared exactly, so a cast that does not round
    (whose error a sigmoid or an f32 tolerance could hide) fails here."""
    import ml_dtypes

    t32, t16 = _t((3, 257), "f32"), _t((3, 257), mid)
    text = f"""
func.func @f(%x: {t32}) -> {t32} {{
  %a = ai.add %x, %x : {t32} * {t32}
  %h = ai.cast %a : {t32} to {t16}
  %b = ai.cast %h : {t16} to {t32}
  %o = ai.add %b, %x : {t32} * {t32}
  return %o : {t32}
}}"""
    program = Program(wrap_group(text, "pointwise"), target="cpu", cache=cache)
    x = np.random.default_rng(7).standard_normal((3, 257)).astype(np.float32)
    (out,) = program([x], alloc=poison)
    storage = np.float16 if mid == "f16" else ml_dtypes.bfloat16
    want = (x + x).astype(storage).astype(np.float32) + x  # float32 throughout, like the kernel
    np.testing.assert_array_equal(out, want)


def test_pointwise_mid_chain_casts_round_like_the_reference(cache):
    t32, t16 = _t((4, 300), "f32"), _t((4, 300), "f16")
    text = f"""
func.func @f(%x: {t32}, %y: {t32}) -> ({t32}, {_t((4, 300), "bf16")}) {{
  %a = ai.mul %x, %y : {t32} * {t32}
  %h = ai.cast %a : {t32} to {t16}
  %g = ai.sigmoid %h : {t16}
  %b = ai.cast %g : {t16} to {t32}
  %c = ai.add %b, %x : {t32} * {t32}
  %d = ai.cast %c : {t32} to {_t((4, 300), "bf16")}
  return %c, %d : {t32}, {_t((4, 300), "bf16")}
}}"""
    check(text, cache=cache, kind="pointwise")


def test_pointwise_large_flat_chain_is_split_over_tasks(cache):
    t = _t((1 << 16,), "f32")
    text = f"""
func.func @f(%x: {t}, %a: {t}, %b: {t}, %c: {t}) -> {t} {{
  %0 = ai.mul %x, %a : {t} * {t}
  %1 = ai.add %0, %b : {t} * {t}
  %2 = ai.relu %1 : {t}
  %3 = ai.mul %2, %c : {t} * {t}
  return %3 : {t}
}}"""
    program = check(text, cache=cache, kind="pointwise")
    assert "numba.prange(32)" in program.kernels[0].source  # 2^16 / 2048 chunks


def test_pointwise_multi_output_of_different_shapes_and_yielded_input(cache):
    big, small = _t((3, 5, 7), "f32"), _t((5, 1), "f32")
    text = f"""
func.func @f(%x: {big}, %s: {small}) -> ({big}, {small}, {small}) {{
  %a = ai.tanh %s : {small}
  %b = ai.mul %x, %a : {big} * {small}
  return %b, %a, %s : {big}, {small}, {small}
}}"""
    check(text, cache=cache, kind="pointwise")


def test_nan_inputs_propagate_through_relu_and_maximum(cache):
    t = _t((64,), "f32")
    text = f"""
func.func @f(%x: {t}, %y: {t}) -> ({t}, {t}) {{
  %a = ai.relu %x : {t}
  %b = ai.maximum %y, %x : {t} * {t}
  return %a, %b : {t}, {t}
}}"""
    from cpu_check import wrap_group

    program = Program(wrap_group(text, "pointwise"), target="cpu", cache=cache)
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    x[3] = np.nan
    a, b = program([x, np.zeros(64, np.float32)], alloc=poison)
    assert np.isnan(a[3]) and np.isnan(b[3])
    assert np.isfinite(np.delete(a, 3)).all() and np.isfinite(np.delete(b, 3)).all()


# ---------------------------------------------------------------- row_reduce


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_layernorm_with_residual_prologue_and_gelu_epilogue(cache, dtype):
    t, v = _t((37, 96), dtype), _t((96,), dtype)
    text = f"""
func.func @f(%x: {t}, %r: {t}, %g: {v}, %b: {v}) -> ({t}, {t}) {{
  %s = ai.add %x, %r : {t} * {t}
  %n = ai.layernorm %s, %g, %b {{epsilon = 1.0e-3 : f32}} : {t} * {v} * {v}
  %y = ai.gelu %n : {t}
  return %s, %y : {t}, {t}
}}"""
    check(text, cache=cache, kind="row_reduce")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_any_axis_with_prologue_reused_in_epilogue(cache, axis):
    t, c = _t((4, 9, 300), "f32"), _t((9, 1), "f32")
    text = f"""
func.func @f(%x: {t}, %c: {c}) -> {t} {{
  %a = ai.mul %x, %c : {t} * {c}
  %s = ai.softmax %a {{axis = {axis}}} : {t}
  %y = ai.add %s, %a : {t} * {t}
  return %y : {t}
}}"""
    check(text, cache=cache, kind="row_reduce")


@pytest.mark.parametrize("op", ["layernorm", "softmax"])
def test_reduction_reading_input_rows_directly(cache, op):
    t, v = _t((33, 200), "f32"), _t((200,), "f32")
    reduce = (
        f"ai.layernorm %x, %g, %b : {t} * {v} * {v}"
        if op == "layernorm"
        else f"ai.softmax %x : {t}"
    )
    text = f"""
func.func @f(%x: {t}, %g: {v}, %b: {v}) -> ({t}, {t}) {{
  %n = {reduce}
  %y = ai.mul %n, %x : {t} * {t}
  return %n, %y : {t}, {t}
}}"""
    program = check(text, cache=cache, kind="row_reduce")
    assert "xrow = in0[row * 200:row * 200 + 200]" in program.kernels[0].source


def test_softmax_f16_rows_with_gamma_computed_in_prologue(cache):
    t, v = _t((16, 128), "f16"), _t((128,), "f16")
    text = f"""
func.func @f(%x: {t}, %g: {v}, %b: {v}) -> {t} {{
  %g2 = ai.sigmoid %g : {v}
  %n = ai.layernorm %x, %g2, %b : {t} * {v} * {v}
  %s = ai.softmax %n : {t}
  return %s : {t}
}}"""
    # two reductions do not fit one row_reduce kernel: fusion splits them
    check(text, cache=cache, fuse=True)


def test_layernorm_gamma_from_prologue(cache):
    t, v = _t((16, 128), "f32"), _t((128,), "f32")
    text = f"""
func.func @f(%x: {t}, %g: {v}, %b: {v}) -> {t} {{
  %g2 = ai.sigmoid %g : {v}
  %n = ai.layernorm %x, %g2, %b : {t} * {v} * {v}
  return %n : {t}
}}"""
    check(text, cache=cache, kind="row_reduce")


# -------------------------------------------------------------------- matmul


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_matmul_layernorm_prologue_bias_softmax_epilogue(cache, dtype):
    x, v, w, b, y = (
        _t((2, 24, 32), dtype),
        _t((32,), dtype),
        _t((48, 32), dtype),
        _t((48,), dtype),
        _t((2, 24, 48), dtype),
    )
    text = f"""
func.func @f(%x: {x}, %g: {v}, %be: {v}, %w: {w}, %b: {b}) -> ({x}, {y}, {y}) {{
  %n = ai.layernorm %x, %g, %be : {x} * {v} * {v}
  %m = ai.matmul %n, %w {{transpose_b = true}} : {x} * {w}
  %c = ai.bias_add %m, %b {{axis = -1}} : {y} * {b}
  %s = ai.softmax %c : {y}
  %o = ai.mul %s, %c : {y} * {y}
  return %n, %m, %o : {x}, {y}, {y}
}}"""
    check(text, cache=cache, kind="matmul")


def test_matmul_transpose_a_batched_broadcast_no_epilogue(cache):
    a, b, y = _t((3, 16, 8), "f32"), _t((16, 20), "f32"), _t((3, 8, 20), "f32")
    text = f"""
func.func @f(%a: {a}, %b: {b}) -> ({y}, {y}) {{
  %m = ai.matmul %a, %b {{transpose_a = true}} : {a} * {b}
  return %m, %m : {y}, {y}
}}"""
    check(text, cache=cache, kind="matmul")


def test_matmul_elementwise_prologue_and_residual_epilogue(cache):
    a, b, y = _t((32, 64), "f32"), _t((64, 16), "f32"), _t((32, 16), "f32")
    text = f"""
func.func @f(%a: {a}, %s: {a}, %b: {b}, %r: {y}) -> {y} {{
  %p = ai.mul %a, %s : {a} * {a}
  %q = ai.silu %p : {a}
  %m = ai.matmul %q, %b : {a} * {b}
  %o = ai.add %m, %r : {y} * {y}
  %z = ai.tanh %o : {y}
  return %z : {y}
}}"""
    check(text, cache=cache, kind="matmul")


# ---------------------------------------------------------------------- conv

CONV_CASES = [
    # strides, padding, dilations, groups, (N, C, H, W), (K, kh, kw)
    ((1, 1), (1, 1), (1, 1), 1, (2, 8, 10, 10), (16, 3, 3)),
    ((2, 2), (0, 1, 1, 2), (1, 1), 2, (1, 6, 11, 9), (4, 3, 3)),
    ((1, 2), (2, 2), (2, 1), 1, (1, 3, 12, 12), (5, 3, 2)),
    ((1, 1), (0, 0), (1, 1), 1, (2, 16, 7, 7), (8, 1, 1)),  # the 1x1 path
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_conv_bias_residual_relu(cache, case, dtype):
    strides, padding, dil, groups, (n, c, h, w), (k, kh, kw) = case
    pads = padding * 2 if len(padding) == 2 else padding
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    x, wt, b, y = (
        _t((n, c, h, w), dtype),
        _t((k, c // groups, kh, kw), dtype),
        _t((k,), dtype),
        _t((n, k, oh, ow), dtype),
    )

    def arr(v):
        return ", ".join(map(str, v))

    text = f"""
func.func @f(%x: {x}, %w: {wt}, %b: {b}, %r: {y}) -> {y} {{
  %c = ai.conv2d %x, %w {{strides = array<i64: {arr(strides)}>,
                          padding = array<i64: {arr(padding)}>,
                          dilations = array<i64: {arr(dil)}>, groups = {groups}}} : {x} * {wt}
  %a = ai.bias_add %c, %b : {y} * {b}
  %s = ai.add %a, %r : {y} * {y}
  %o = ai.relu %s : {y}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="conv")
    # im2col only where conv_method's rule says so (stride above 1, or a padded 1x1)
    im2col = strides != (1, 1) or (kh, kw) == (1, 1) and any(padding)
    assert ("cols = ws[" in program.kernels[0].source) == im2col


def test_unfused_op_is_a_located_error(cache):
    from fusec.errors import FusecError

    module = parse(
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %y = ai.relu %x : tensor<4xf32>\n  return %y : tensor<4xf32>\n}"
    )
    with pytest.raises(FusecError, match="outside any ai.fused group") as err:
        Program(module, target="cpu", cache=cache)
    assert err.value.location is not None and err.value.location.line == 2


def test_each_launch_gets_an_nvtx_range_named_after_its_group(cache, monkeypatch):
    import contextlib
    import sys
    import types

    from cpu_check import wrap_group

    from fusec.runtime import launch

    names = []
    fake = types.ModuleType("nvtx")
    fake.annotate = lambda name, domain: contextlib.nullcontext(names.append((name, domain)))
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    monkeypatch.setattr(launch, "_nvtx", None)
    t = _t((8,), "f32")
    text = f"func.func @f(%x: {t}) -> {t} {{\n  %y = ai.relu %x : {t}\n  return %y : {t}\n}}"
    program = Program(wrap_group(text, "pointwise"), target="cpu", cache=cache)
    program([np.ones(8, np.float32)])
    assert names == [("fusec k0 (pointwise)", "fusec")]
    monkeypatch.setattr(launch, "_nvtx", False)  # nvtx absent: a no-op
    program([np.ones(8, np.float32)])
    assert len(names) == 1


def test_layernorm_of_rows_with_tiny_variance(cache):
    """Epsilon matters where a row's variance is near it: inputs scaled by 1e-3 (variance
    ~1e-6 against epsilon 1e-5); with standard-normal rows dropping epsilon changes the
    result by ~5e-6, below any tolerance."""
    from numerics import assert_close

    from fusec.runtime.reference import run_reference

    t, v = _t((4, 64), "f32"), _t((64,), "f32")
    text = f"""
func.func @f(%x: {t}, %g: {v}, %b: {v}) -> {t} {{
  %y = ai.layernorm %x, %g, %b {{epsilon = 1.0e-05 : f32}} : {t} * {v} * {v}
  return %y : {t}
}}"""
    module = wrap_group(text, "row_reduce")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 64)) * 1e-3).astype(np.float32)
    g, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    (out,) = Program(module, target="cpu", cache=cache)([x, g, b], alloc=poison)
    (want,) = run_reference(module, [x, g, b], rounding="groups")
    assert_close(out, want)
