"""The shared expression generator: literals, offsets, chains and the rounding helpers."""

from __future__ import annotations

import math

import ml_dtypes
import numba
import numpy as np
import pytest
from numpy import float32 as f32

from fusec.api import parse
from fusec.codegen.expr import (
    CodegenError,
    ExprGenerator,
    broadcast_offset,
    header,
    helper_source,
    leaf_shapes,
    literal,
    operand_shape,
)
from fusec.dialect import ops as ai

GROUP = """
func.func @f(%x: tensor<2x3x4xf32>, %b: tensor<3xf32>, %r: tensor<4xf32>) -> tensor<2x3x4xf16> {
  %o = ai.fused "pointwise" (%x, %b, %r) : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<4xf32>)
                                             -> tensor<2x3x4xf16> {
  ^bb0(%a: tensor<2x3x4xf32>, %c: tensor<3xf32>, %d: tensor<4xf32>):
    %1 = ai.bias_add %a, %c {axis = 1} : tensor<2x3x4xf32> * tensor<3xf32>
    %2 = ai.mul %1, %d : tensor<2x3x4xf32> * tensor<4xf32>
    %3 = ai.maximum %2, %a : tensor<2x3x4xf32> * tensor<2x3x4xf32>
    %4 = ai.cast %3 : tensor<2x3x4xf32> to tensor<2x3x4xf16>
    ai.yield %4 : tensor<2x3x4xf16>
  }
  return %o : tensor<2x3x4xf16>
}
"""


def _group():
    module = parse(GROUP)
    fused = next(op for op in module.walk() if isinstance(op, ai.FusedOp))
    return fused, [op for op in fused.block.ops if not isinstance(op, ai.YieldOp)]


@pytest.mark.parametrize(
    "value", [0.0, -0.0, 1.5, -2.25e-7, 1e-45, 3.4028234663852886e38, 0.1, math.pi]
)
def test_literal_round_trips_exactly(value):
    text = literal(value)
    assert text.startswith("f32(") and text.endswith(")")
    got = eval(text, {"f32": f32, "math": math})  # noqa: S307 - our own generated text
    assert got == f32(value) and math.copysign(1, got) == math.copysign(1, value)


def test_literal_inf_and_nan():
    ns = {"f32": f32, "math": math}
    assert eval(literal(math.inf), ns) == np.inf  # noqa: S307
    assert eval(literal(-math.inf), ns) == -np.inf  # noqa: S307
    assert np.isnan(eval(literal(math.nan), ns))  # noqa: S307


@pytest.mark.parametrize(
    ("out", "inp", "expected"),
    [
        ((2, 3, 4), (2, 3, 4), "i0 * 12 + i1 * 4 + i2"),
        ((2, 3, 4), (4,), "i2"),
        ((2, 3, 4), (3, 1), "i1"),
        ((2, 3, 4), (2, 1, 4), "i0 * 4 + i2"),
        ((2, 3, 4), (1, 1, 1), "0"),
        ((2, 3, 4), (), "0"),
    ],
)
def test_broadcast_offset(out, inp, expected):
    assert broadcast_offset(out, inp, ["i0", "i1", "i2"]) == expected


def test_broadcast_offset_matches_numpy_indexing():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3, 1, 5))
    full = np.broadcast_to(data, (2, 3, 4, 5))
    flat = data.reshape(-1)
    expr = broadcast_offset((2, 3, 4, 5), (3, 1, 5), ["a", "b", "c", "d"])
    for idx in np.ndindex(2, 3, 4, 5):
        env = dict(zip("abcd", idx, strict=True))
        assert flat[eval(expr, {}, env)] == full[idx]  # noqa: S307


def test_broadcast_offset_rejects_bad_input():
    with pytest.raises(ValueError):
        broadcast_offset((2, 3), (4,), ["i", "j"])
    with pytest.raises(ValueError):
        broadcast_offset((2, 3), (3,), ["i", "j; import os"])


def test_bias_is_indexed_along_its_axis():
    fused, ops = _group()
    assert operand_shape(ops[0], 1) == (3, 1)
    shapes = leaf_shapes(ops)
    args = list(fused.block.args)
    assert shapes[args[0]] == (2, 3, 4)
    assert shapes[args[1]] == (3, 1)
    assert shapes[args[2]] == (4,)


def test_input_used_as_bias_and_as_broadcast_operand_is_reported():
    text = """
func.func @f(%x: tensor<3x3xf32>, %b: tensor<3xf32>) -> tensor<3x3xf32> {
  %1 = ai.bias_add %x, %b {axis = 0} : tensor<3x3xf32> * tensor<3xf32>
  %2 = ai.add %1, %b : tensor<3x3xf32> * tensor<3xf32>
  return %2 : tensor<3x3xf32>
}"""
    module = parse(text)
    ops = [op for op in module.walk() if isinstance(op, ai.AiOp)]
    with pytest.raises(CodegenError, match="both as a bias"):
        leaf_shapes(ops)


def test_chain_binds_leaves_once_and_names_everything():
    fused, ops = _group()
    gen = ExprGenerator()
    loads = {arg: f"in{i}[k]" for i, arg in enumerate(fused.block.args)}
    stmts, names = gen.chain(ops, lambda v: loads[v])
    assert stmts[0] == "l0 = in0[k]"
    assert sum(s.startswith("l") for s in stmts) == 3  # %a is used twice, loaded once
    assert names[ops[-1].results[0]] == "t3"
    assert stmts[-1] == "t3 = round_f16(t2)"
    assert gen.helpers == {"round_f16"}


def test_chain_values_match_numpy():
    fused, ops = _group()
    gen = ExprGenerator()
    stmts, names = gen.chain(ops, lambda v: f"x{list(fused.block.args).index(v)}")
    ns = {"math": math, "f32": f32}
    exec(helper_source(gen.helpers, ""), ns)  # noqa: S102 - plain Python helpers
    x = np.float32([0.3, -1.7, 2.5])
    env = dict(ns, x0=x[0], x1=x[1], x2=x[2])
    exec("\n".join(stmts), env)  # noqa: S102
    expected = np.float16(max((x[0] + x[1]) * x[2], x[0]))
    assert env[names[ops[-1].results[0]]] == expected


CLIP = """
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %c = ai.clip %x {min = 0.0 : f32, max = 6.0 : f32} : tensor<8xf32>
  return %c : tensor<8xf32>
}
"""


def test_a_clip_is_two_selects_in_sequence_numba_vectorises():
    """Nested selects (``lo if x < lo else (hi if x > hi else x)``) stayed branches in
    Numba's LLVM code, the loop scalar; bound one after the other they become selects.
    The values are numpy.clip's: -0.0 kept, NaN through."""
    (op,) = [op for op in parse(CLIP).walk() if isinstance(op, ai.ClipOp)]
    stmts, names = ExprGenerator().chain([op], lambda v: "x")
    assert stmts == [
        "t0 = (f32(6.0) if (x > f32(6.0)) else x)",
        "t1 = (f32(0.0) if (x < f32(0.0)) else t0)",
    ]
    assert ExprGenerator().scalar(op, ["x"]).count(" if ") == 2  # no chain: one expression
    kernel = numba.njit("float32(float32)")(_function("x", stmts, names[op.results[0]]))
    for x in (-1.0, -0.0, 3.5, 7.0, math.nan, -math.inf):
        want = np.clip(f32(x), f32(0.0), f32(6.0))
        got = kernel(f32(x))
        assert (math.isnan(got) and math.isnan(want)) or (
            got == want and math.copysign(1, got) == math.copysign(1, want)
        )


def _function(arg: str, stmts: list[str], result: str):
    source = f"def clip({arg}):\n" + "".join(f"    {s}\n" for s in stmts) + f"    return {result}\n"
    ns = {"f32": f32}
    exec(source, ns)  # noqa: S102 - generated from the test's own IR
    return ns["clip"]


def test_header_names_ops_only():
    fused, _ = _group()
    text = header(fused)
    assert all(line.startswith("#") for line in text.splitlines())
    assert "ai.bias_add -> ai.mul -> ai.maximum -> ai.cast" in text
    assert "tensor<2x3x4xf16>" in text


# ------------------------------------------------------------- rounding helpers


def _compiled_helpers():
    ns = {"math": math, "f32": f32, "numba": numba}
    exec(helper_source(["round_f16", "round_bf16"], "@numba.njit"), ns)  # noqa: S102
    f16, bf16 = ns["round_f16"], ns["round_bf16"]

    @numba.njit
    def apply(x, which):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = f16(x[i]) if which == 0 else bf16(x[i])
        return out

    return apply


def _interesting_floats() -> np.ndarray:
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, size=400_000, dtype=np.uint64).astype(np.uint32)
    # ties and near-ties of both formats: low 13 (f16) / 16 (bf16) bits at the halfway point
    exps = rng.integers(90, 160, size=20_000, dtype=np.uint32) << 23
    mant = rng.integers(0, 2**23, size=20_000, dtype=np.uint32)
    ties16 = (exps | (mant & ~np.uint32(0x1FFF)) | 0x1000).astype(np.uint32)
    tiesbf = (exps | (mant & ~np.uint32(0xFFFF)) | 0x8000).astype(np.uint32)
    specials = np.float32(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            65504.0,
            65519.99,
            65520.0,
            65536.0,
            6.1035e-05,
            5.96e-08,
            2.98e-08,
            2.99e-08,
            1e-40,
            3.4028235e38,
            3.3961776e38,
            3.3895314e38,
        ]
    )
    pool = np.concatenate([bits, ties16, ties16 + 1, ties16 - 1, tiesbf, tiesbf + 1, tiesbf - 1])
    return np.concatenate([pool.view(np.float32), specials, -specials])


def test_round_helpers_match_numpy_and_ml_dtypes():
    apply = _compiled_helpers()
    x = _interesting_floats()
    with np.errstate(over="ignore"):
        for which, dtype in ((0, np.float16), (1, ml_dtypes.bfloat16)):
            got = apply(x, which)
            want = x.astype(dtype).astype(np.float32)
            same = (got == want) | (np.isnan(got) & np.isnan(want))
            assert same.all(), (dtype, x[~same][:5], got[~same][:5], want[~same][:5])
