"""RoPE's rotate-half on the cpu target (issue 28/30): ``q * cos + concat(-q2, q1) * sin``
as the exporters write it (slices of the last axis' halves, a negation, a concat) is one
pointwise kernel that reads ``q`` twice in place (``ai.rotate_half``), no copy kernel and
no negation kernel. Outputs poisoned (NaN), fresh random inputs, against the float64
reference of the IR as written (before the rewrite)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import poison
from numerics import assert_close

import fusec
from fusec.api import reference_outputs
from fusec.errors import FusecError
from fusec.runtime.launch import Program


def _t(shape, dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def rope_text(shape: tuple[int, ...], dtype: str, head_split: bool = False) -> str:
    """``q * cos + rotate_half(q) * sin`` over ``shape`` (..., S, D) with cos/sin (S, D);
    with ``head_split``, q is the (B, S, H*D) input split into heads (reshape, transpose)."""
    *lead, s, d = shape
    h = d // 2
    rank = len(shape)
    q, half, cs = _t(shape, dtype), _t((*lead, s, h), dtype), _t((s, d), dtype)
    zeros = ", ".join(["0"] * rank)
    sizes = ", ".join(map(str, (*lead, s, h)))
    ones = ", ".join(["1"] * rank)
    hi = ", ".join(["0"] * (rank - 1) + [str(h)])
    lines = []
    params = f"%cos: {cs}, %sin: {cs}"
    if head_split:
        b, heads = lead
        flat = _t((b, s, heads * d), dtype)
        split = _t((b, s, heads, d), dtype)
        params = f"%x: {flat}, " + params
        lines += [
            f"%v = ai.reshape %x {{shape = array<i64: {b}, {s}, {heads}, {d}>}} : {flat}",
            f"%q = ai.transpose %v {{perm = array<i64: 0, 2, 1, 3>}} : {split}",
        ]
    else:
        params = f"%q: {q}, " + params
    lines += [
        f"%a = ai.mul %q, %cos : {q} * {cs}",
        f"%lo = ai.slice %q {{offsets = array<i64: {zeros}>, sizes = array<i64: {sizes}>, "
        f"strides = array<i64: {ones}>}} : {q}",
        f"%hi = ai.slice %q {{offsets = array<i64: {hi}>, sizes = array<i64: {sizes}>, "
        f"strides = array<i64: {ones}>}} : {q}",
        f"%n = ai.neg %hi : {half}",
        f"%r = ai.concat %n, %lo {{axis = -1 : i64}} : {half} * {half}",
        f"%b = ai.mul %r, %sin : {q} * {cs}",
        f"%y = ai.add %a, %b : {q} * {q}",
    ]
    body = "\n".join(f"  {line}" for line in lines)
    return f"func.func @rope({params}) -> {q} {{\n{body}\n  return %y : {q}\n}}\n"


def _inputs(compiled, seed: int) -> list[np.ndarray]:
    from fusec.dialect.ops import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function

    rng = np.random.default_rng(seed)
    types = entry_function(compiled.module).function_type.inputs.data
    return [
        rng.standard_normal(spec_of(t).shape).astype(numpy_dtype(spec_of(t).dtype)) for t in types
    ]


def _run(compiled, args: list[np.ndarray]) -> np.ndarray:
    """The compiled program's result, its output buffer filled with NaN first."""
    (out,) = Program(compiled.module, target="cpu")(args, alloc=poison)
    return out


def _rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize(
    ("shape", "dtype", "head_split"),
    [
        ((1, 4, 16, 16), "f32", False),
        ((2, 3, 5, 6), "f16", False),  # n/2 = 3: odd halves
        ((7, 10), "f32", False),
        ((2, 4, 8, 16), "f32", True),  # the head split before it: a copy kernel of its own
    ],
)
def test_rope_is_one_pointwise_kernel(shape, dtype: str, head_split: bool) -> None:
    text = rope_text(shape, dtype, head_split)
    compiled = fusec.compile(text, target="cpu")
    kinds = [k.kind for k in compiled.kernels]
    assert kinds == (["copy", "pointwise"] if head_split else ["pointwise"]), kinds
    rope = compiled.kernels[-1]
    assert "ai.rotate_half" in rope.source and "jr = j +" in rope.source
    for seed in (0, 1):
        args = _inputs(compiled, seed)
        got = _run(compiled, args)
        (want,) = reference_outputs(text, args)
        assert not np.isnan(got).any()
        assert_close(got, want, dtype)
        assert _rel_l2(got, want) < (1e-2 if dtype == "f16" else 1e-4)


def test_rotate_half_of_a_computed_value_is_its_own_group() -> None:
    """rotate_half(x * x) + x * x: the product is written once, then read rotated."""
    text = """
func.func @f(%x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %q = ai.mul %x, %x : tensor<3x8xf32> * tensor<3x8xf32>
  %r = ai.rotate_half %q : tensor<3x8xf32>
  %y = ai.add %r, %q : tensor<3x8xf32> * tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}
"""
    compiled = fusec.compile(text, target="cpu")
    assert [k.kind for k in compiled.kernels] == ["pointwise", "pointwise"]
    args = _inputs(compiled, 3)
    got = _run(compiled, args)
    (want,) = reference_outputs(text, args)
    assert_close(got, want, "f32")


def test_rotate_half_of_an_odd_axis_is_a_located_error() -> None:
    text = """
func.func @f(%x: tensor<3x7xf32>) -> tensor<3x7xf32> {
  %r = ai.rotate_half %x : tensor<3x7xf32>
  return %r : tensor<3x7xf32>
}
"""
    with pytest.raises(FusecError, match=r"must be even") as err:
        fusec.compile(text, target="cpu")
    assert ":3:" in str(err.value)
