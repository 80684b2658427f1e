"""Layout round trips cancel in canonicalisation (``fusec.dialect.views``).

Each case is checked twice: the ops left after ``canonicalize`` (counted in the
printed IR), and the numbers (the canonicalised module on the reference executor
against the module as written, on fresh random inputs, bit for bit: views only
move elements). ``restores_order`` is also checked against numpy on random chains: it
never claims a chain that moves elements restores their order.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Block, Operation

import fusec
from fusec.dialect import ops as ai
from fusec.dialect.views import restores_order

# PyTorch's k.transpose(-1, -2) read back as K by the attention recogniser (dynamo's
# BERT and GPT-2 exports): head split, [B*H, S, D], transposed, [B, H, D, S], back.
K_ROUND_TRIP = """func.func @f(%x: tensor<2x16x64xf32>) -> tensor<2x4x16x16xf32> {
  %a = ai.reshape %x {shape = array<i64: 2, 16, 4, 16>} : tensor<2x16x64xf32>
  %k = ai.transpose %a {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x4x16xf32>
  %b = ai.reshape %k {shape = array<i64: 8, 16, 16>} : tensor<2x4x16x16xf32>
  %c = ai.transpose %b {perm = array<i64: 0, 2, 1>} : tensor<8x16x16xf32>
  %d = ai.reshape %c {shape = array<i64: 2, 4, 16, 16>} : tensor<8x16x16xf32>
  %e = ai.transpose %d {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x16x16xf32>
  return %e : tensor<2x4x16x16xf32>
}
"""

TRANSPOSE_PAIR = """func.func @f(%x: tensor<2x3x4x5xf32>) -> tensor<2x3x4x5xf32> {
  %a = ai.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x3x4x5xf32>
  %b = ai.transpose %a {perm = array<i64: 0, 3, 1, 2>} : tensor<2x4x5x3xf32>
  return %b : tensor<2x3x4x5xf32>
}
"""

TWO_TRANSPOSES = """func.func @f(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %a = ai.transpose %x {perm = array<i64: 1, 0, 2>} : tensor<2x3x4xf32>
  %b = ai.transpose %a {perm = array<i64: 2, 1, 0>} : tensor<3x2x4xf32>
  return %b : tensor<4x2x3xf32>
}
"""

# a head merge then a split of the same rows: the elements stay in order, one reshape
MERGE_SPLIT = """func.func @f(%x: tensor<2x4x16x8xf32>) -> tensor<8x128xf32> {
  %a = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x16x8xf32>
  %b = ai.reshape %a {shape = array<i64: 2, 16, 32>} : tensor<2x16x4x8xf32>
  %c = ai.reshape %b {shape = array<i64: 2, 16, 4, 8>} : tensor<2x16x32xf32>
  %d = ai.transpose %c {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x4x8xf32>
  %e = ai.reshape %d {shape = array<i64: 8, 128>} : tensor<2x4x16x8xf32>
  return %e : tensor<8x128xf32>
}
"""

# a real transpose stays (the elements move)
MOVES = """func.func @f(%x: tensor<2x16x64xf32>) -> tensor<2x4x16x16xf32> {
  %a = ai.reshape %x {shape = array<i64: 2, 16, 4, 16>} : tensor<2x16x64xf32>
  %b = ai.transpose %a {perm = array<i64: 0, 2, 1, 3>} : tensor<2x16x4x16xf32>
  return %b : tensor<2x4x16x16xf32>
}
"""


def _canonical(text: str) -> str:
    return fusec.compile(text, target="reference", pipeline="infer-shapes,canonicalize").ir


def _same_numbers(text: str, ir: str) -> None:
    function = fusec.parse(text).body.block.first_op
    assert isinstance(function, func.FuncOp)
    shape = function.function_type.inputs.data[0].get_shape()
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want = fusec.reference(text)(x)
    got = fusec.reference(ir)(x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "text, transposes, reshapes",
    [
        (K_ROUND_TRIP, 1, 1),  # the head split is all that is left
        (TRANSPOSE_PAIR, 0, 0),
        (TWO_TRANSPOSES, 1, 0),
        (MERGE_SPLIT, 0, 1),
        (MOVES, 1, 1),
    ],
    ids=["k-round-trip", "transpose-pair", "two-transposes", "merge-split", "moves"],
)
def test_view_round_trips_cancel(text: str, transposes: int, reshapes: int) -> None:
    ir = _canonical(text)
    assert (ir.count("ai.transpose"), ir.count("ai.reshape")) == (transposes, reshapes), ir
    _same_numbers(text, ir)


def test_views_inside_a_group_are_left_alone() -> None:
    fused = fusec.compile(TRANSPOSE_PAIR, target="reference", pipeline="fuse").ir
    again = fusec.compile(fused, target="reference", pipeline="canonicalize").ir
    assert again.count("ai.transpose") == fused.count("ai.transpose") == 2


def _factors(n: int, rng: random.Random) -> list[int]:
    """A random shape of ``n`` elements (prime factors grouped at random, a 1 at times)."""
    primes, m, d = [], n, 2
    while d * d <= m:
        while m % d == 0:
            primes.append(d)
            m //= d
        d += 1
    primes += [m] if m > 1 else []
    rng.shuffle(primes)
    shape: list[int] = []
    for p in primes:
        if shape and rng.random() < 0.5:
            shape[-1] *= p
        else:
            shape.append(p)
    if rng.random() < 0.3:
        shape.insert(rng.randrange(len(shape) + 1), 1)
    return shape or [1]


def _random_chain(rng: random.Random) -> tuple[list[int], list[Operation], np.ndarray]:
    n = rng.choice([8, 12, 24, 36, 48, 64, 96, 120, 210])
    shape = _factors(n, rng)
    block = Block(arg_types=[TensorType(f32, shape)])
    value, chain, index = block.args[0], [], np.arange(n).reshape(shape)
    for _ in range(rng.randint(2, 6)):
        if rng.random() < 0.5 and index.ndim > 1:
            perm = list(range(index.ndim))
            rng.shuffle(perm)
            op: Operation = ai.TransposeOp(value, perm=tuple(perm))
            index = index.transpose(perm)
        else:
            new = _factors(n, rng)
            op = ai.ReshapeOp(value, shape=tuple(new))
            index = index.reshape(new)
        block.add_op(op)
        chain.append(op)
        value = op.results[0]
    return shape, chain, index


def test_restores_order_agrees_with_numpy_on_random_chains() -> None:
    """Sound always; complete where every reshape boundary divides the digits it cuts
    (a chain regrouping elements across a boundary that does not is left alone)."""
    rng = random.Random(11)
    found = missed = 0
    for _ in range(1500):
        shape, chain, index = _random_chain(rng)
        want = bool(np.array_equal(index.reshape(-1), np.arange(index.size)))
        got = restores_order(shape, chain)
        assert not got or want, (shape, [str(op) for op in chain])
        found += got
        missed += want and not got
    assert found > 300 and missed <= found // 50, (found, missed)
