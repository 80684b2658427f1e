"""Integer and bool tensors on the cpu target (issue 29): token ids, masks, position ids.

Each graph is compiled with the default pipeline, run with poisoned outputs on random
inputs (integers in [0, 4), fair-coin bools) and compared with the float64 reference
(integers exactly): the pointwise kernels compute i64/i32 as integers and i1 as
conditions, ``ai.take`` gathers at the run-time indices, ``ai.cumsum`` runs in copy
groups, and the arrays of integer values keep their own dtypes.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check, poison

import fusec
from fusec.errors import FusecError
from fusec.runtime.cache import KernelCache


@pytest.fixture(scope="module")
def tmp_cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


EMBEDDING_AND_MASK = """
func.func @f(%ids: tensor<2x6xi64>, %mask: tensor<2x6xi64>, %table: tensor<7x16xf32>,
             %pos: tensor<6x16xf32>) -> (tensor<2x6x16xf32>, tensor<2x1x1x6xf32>) {
  %e = ai.take %table, %ids : tensor<7x16xf32> * tensor<2x6xi64>
  %p = ai.add %e, %pos : tensor<2x6x16xf32> * tensor<6x16xf32>
  %z = arith.constant dense<0> : tensor<i64>
  %b = ai.equal %mask, %z : tensor<2x6xi64> * tensor<i64>
  %bf = ai.cast %b : tensor<2x6xi1> to tensor<2x6xf32>
  %big = arith.constant dense<-1.0e4> : tensor<f32>
  %m = ai.mul %bf, %big : tensor<2x6xf32> * tensor<f32>
  %m4 = ai.reshape %m {shape = array<i64: 2, 1, 1, 6>} : tensor<2x6xf32>
  return %p, %m4 : tensor<2x6x16xf32>, tensor<2x1x1x6xf32>
}
"""

INTEGER_ARITHMETIC = """
func.func @f(%a: tensor<3x8xi64>, %b: tensor<8xi64>, %c: tensor<3x8xi32>) -> (tensor<3x8xi64>,
    tensor<3x8xi64>, tensor<3x8xi64>, tensor<3x8xi32>, tensor<3x8xf32>) {
  %two = arith.constant dense<2> : tensor<i64>
  %s = ai.sub %a, %two : tensor<3x8xi64> * tensor<i64>
  %m = ai.mul %s, %b : tensor<3x8xi64> * tensor<8xi64>
  %four = arith.constant dense<4> : tensor<i64>
  %d = ai.div %m, %four : tensor<3x8xi64> * tensor<i64>
  %r = ai.mod %s, %b : tensor<3x8xi64> * tensor<8xi64>
  %rt = ai.mod %s, %b {fmod = true} : tensor<3x8xi64> * tensor<8xi64>
  %x = ai.maximum %d, %r : tensor<3x8xi64> * tensor<3x8xi64>
  %n = ai.neg %x : tensor<3x8xi64>
  %k = ai.cast %n : tensor<3x8xi64> to tensor<3x8xi32>
  %ci = ai.add %k, %c : tensor<3x8xi32> * tensor<3x8xi32>
  %f = ai.cast %ci : tensor<3x8xi32> to tensor<3x8xf32>
  %h = arith.constant dense<0.75> : tensor<f32>
  %g = ai.mul %f, %h : tensor<3x8xf32> * tensor<f32>
  return %d, %r, %rt, %ci, %g : tensor<3x8xi64>, tensor<3x8xi64>, tensor<3x8xi64>,
    tensor<3x8xi32>, tensor<3x8xf32>
}
"""

LOGIC_AND_WHERE = """
func.func @f(%a: tensor<4x5xi64>, %p: tensor<4x5xi1>, %x: tensor<4x5xf16>, %y: tensor<5xf16>)
    -> (tensor<4x5xf16>, tensor<4x5xi1>, tensor<4x5xi64>) {
  %one = arith.constant dense<1> : tensor<i64>
  %lt = ai.less %a, %one : tensor<4x5xi64> * tensor<i64>
  %ge = ai.greater_equal %a, %one : tensor<4x5xi64> * tensor<i64>
  %gt = ai.greater %a, %one : tensor<4x5xi64> * tensor<i64>
  %le = ai.less_equal %a, %one : tensor<4x5xi64> * tensor<i64>
  %n = ai.not %p : tensor<4x5xi1>
  %o = ai.or %lt, %n : tensor<4x5xi1> * tensor<4x5xi1>
  %q = ai.and %o, %ge : tensor<4x5xi1> * tensor<4x5xi1>
  %w = ai.xor %q, %gt : tensor<4x5xi1> * tensor<4x5xi1>
  %v = ai.and %w, %le : tensor<4x5xi1> * tensor<4x5xi1>
  %s = ai.where %v, %x, %y : tensor<4x5xi1> * tensor<4x5xf16> * tensor<5xf16>
  %i = ai.where %p, %a, %one : tensor<4x5xi1> * tensor<4x5xi64> * tensor<i64>
  return %s, %v, %i : tensor<4x5xf16>, tensor<4x5xi1>, tensor<4x5xi64>
}
"""

POSITIONS_AND_EXPAND = """
func.func @f(%mask: tensor<2x7xi64>, %x: tensor<2x1x7xf32>) -> (tensor<2x7xi64>,
    tensor<2x3x7xf32>, tensor<2x7xi64>, tensor<2x7xf32>) {
  %c = ai.cumsum %mask {axis = 1 : i64} : tensor<2x7xi64>
  %p = ai.mul %c, %mask : tensor<2x7xi64> * tensor<2x7xi64>
  %rc = ai.cumsum %mask {axis = 1 : i64, exclusive = true, reverse = true} : tensor<2x7xi64>
  %e = ai.expand %x {shape = array<i64: 2, 3, 7>} : tensor<2x1x7xf32>
  %f = ai.cast %c : tensor<2x7xi64> to tensor<2x7xf32>
  %fc = ai.cumsum %f {axis = 0 : i64} : tensor<2x7xf32>
  return %p, %e, %rc, %fc : tensor<2x7xi64>, tensor<2x3x7xf32>, tensor<2x7xi64>, tensor<2x7xf32>
}
"""

FLOAT_TO_INTEGER = """
func.func @f(%x: tensor<4x6xf32>) -> (tensor<4x6xi64>, tensor<4x6xi1>, tensor<4x6xf32>) {
  %s = arith.constant dense<3.5> : tensor<f32>
  %y = ai.mul %x, %s : tensor<4x6xf32> * tensor<f32>
  %i = ai.cast %y : tensor<4x6xf32> to tensor<4x6xi64>
  %b = ai.cast %i : tensor<4x6xi64> to tensor<4x6xi1>
  %f = ai.cast %b : tensor<4x6xi1> to tensor<4x6xf32>
  %g = ai.add %f, %x : tensor<4x6xf32> * tensor<4x6xf32>
  return %i, %b, %g : tensor<4x6xi64>, tensor<4x6xi1>, tensor<4x6xf32>
}
"""


ARG_REDUCTIONS = """
func.func @f(%x: tensor<3x7xf32>, %i: tensor<3x7xi64>) -> (tensor<3xi64>, tensor<1x7xi64>,
    tensor<3x1xi64>) {
  %a = ai.argmax %x {axis = 1 : i64, keepdims = false} : tensor<3x7xf32>
  %b = ai.argmin %i {select_last_index = true} : tensor<3x7xi64>
  %c = ai.argmax %i {axis = -1 : i64, select_last_index = true} : tensor<3x7xi64>
  return %a, %b, %c : tensor<3xi64>, tensor<1x7xi64>, tensor<3x1xi64>
}
"""


@pytest.mark.parametrize(
    "text",
    [EMBEDDING_AND_MASK, pytest.param(INTEGER_ARITHMETIC, marks=pytest.mark.slow),
     LOGIC_AND_WHERE, POSITIONS_AND_EXPAND, FLOAT_TO_INTEGER, ARG_REDUCTIONS],
    ids=["embedding_and_mask", "integer_arithmetic", "logic_and_where", "positions", "casts",
         "arg_reductions"],
)  # fmt: skip
def test_integer_graphs_match_the_reference(text, tmp_cache):
    for seed in (0, 1):
        check(text, cache=tmp_cache, fuse=True, seed=seed)


def test_integer_results_keep_their_dtypes(tmp_cache):
    program = check(INTEGER_ARITHMETIC, cache=tmp_cache, fuse=True)
    rng = np.random.default_rng(5)
    a, b = rng.integers(-9, 9, (3, 8)), rng.integers(1, 5, 8)
    c = rng.integers(-9, 9, (3, 8)).astype(np.int32)
    outputs = program([a, b, c], alloc=poison)
    assert [o.dtype for o in outputs] == [np.int64, np.int64, np.int64, np.int32, np.float32]
    s = a - 2
    np.testing.assert_array_equal(outputs[0], np.trunc(s * b / 4).astype(np.int64))
    np.testing.assert_array_equal(outputs[1], np.mod(s, b))
    np.testing.assert_array_equal(outputs[2], np.fmod(s, b))


def test_negative_token_ids_count_from_the_end_and_out_of_range_is_an_error():
    compiled = fusec.compile(EMBEDDING_AND_MASK, target="cpu")
    rng = np.random.default_rng(0)
    table = rng.standard_normal((7, 16)).astype(np.float32)
    pos = rng.standard_normal((6, 16)).astype(np.float32)
    ids = np.array([[0, 1, -1, -7, 6, 3]] * 2)
    mask = np.ones((2, 6), np.int64)
    out, _ = compiled(ids, mask, table, pos)
    np.testing.assert_array_equal(out, table[ids % 7] + pos)
    with pytest.raises(FusecError, match="index 7 is out of range for dim 0 of size 7"):
        compiled(np.full((2, 6), 7), mask, table, pos)


def test_an_integer_argument_of_another_dtype_is_refused():
    compiled = fusec.compile(EMBEDDING_AND_MASK, target="cpu")
    table, pos = np.zeros((7, 16), np.float32), np.zeros((6, 16), np.float32)
    ids = np.zeros((2, 6), np.int32)
    with pytest.raises(FusecError, match=r"argument #0 has dtype int32, expected int64"):
        compiled(ids, np.ones((2, 6), np.int64), table, pos)
