"""What ``@fusec.fuse`` traces: the ai IR of decorated Python functions.

The design document's conv/bias/relu, the MLP block and the attention core,
written as Python, must trace to the IR of the corresponding ``examples/``
files (up to SSA value names and the position of constants), and their
traced IR is pinned by snapshots in ``tests/passes/golden/traced/``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith

import fusec
from fusec import ops

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "passes" / "golden" / "traced"


# ------------------------------------------------------------ the programs


def fused_conv_bias_relu(input, weight, bias):  # noqa: A002 - the design document's names
    return ops.relu(ops.conv2d(input, weight) + bias[None, :, None, None])


def mlp_block(x, gamma, beta, w1, b1, w2, b2):
    h = ops.gelu(ops.layernorm(x, gamma, beta) @ w1 + b1)
    return (h @ w2 + b2) + x


def attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return ops.softmax(q @ k.mT * scale) @ v


PROGRAMS = {
    "conv_bias_relu": fused_conv_bias_relu,
    "mlp_block": mlp_block,
    "attention": attention,
}

# Fixed signatures for the snapshots (the examples' shapes may change independently).
SNAPSHOT_SHAPES = {
    "conv_bias_relu": ([(1, 32, 28, 28), (64, 32, 3, 3), (64,)], np.float16),
    "mlp_block": ([(2, 16, 64), (64,), (64,), (64, 256), (256,), (256, 64), (64,)], np.float32),
    "attention": ([(4, 64, 32)] * 3, np.float32),
}


def canonical_ir(text: str) -> str:
    """IR text with constants first and SSA names numbered by first appearance."""
    module = fusec.parse(text)
    for fn in module.ops:
        block = fn.body.block
        constants = [op for op in block.ops if isinstance(op, arith.ConstantOp)]
        for op in reversed(constants):
            op.detach()
            block.insert_op_before(op, block.first_op)
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        return names.setdefault(match.group(0), f"%v{len(names)}")

    return re.sub(r"%[A-Za-z0-9_$.\-]+", rename, str(module))


def snapshot_args(name: str, rng) -> list[np.ndarray]:
    shapes, dtype = SNAPSHOT_SHAPES[name]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# ------------------------------------------------------------------ goldens


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_traced_ir_matches_the_example(name, random_args):
    path = EXAMPLES / f"{name}.mlir"
    if not path.exists():
        pytest.skip(f"{path} is not written yet")
    example = fusec.parse(path)
    traced = fusec.fuse(PROGRAMS[name], disk_cache=False).ir(*random_args(example))
    assert canonical_ir(traced) == canonical_ir(str(example))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_traced_ir_snapshot(name, rng, golden):
    traced = fusec.fuse(PROGRAMS[name], disk_cache=False).ir(*snapshot_args(name, rng))
    golden(GOLDEN / f"{name}.mlir", traced)
    assert fusec.parse(traced) is not None  # the traced text parses and verifies


def test_fused_ir_is_the_pipeline_output(rng):
    args = snapshot_args("conv_bias_relu", rng)
    block = fusec.fuse(fused_conv_bias_relu, disk_cache=False)
    assert block.fused_ir(*args) == fusec.compile(block.ir(*args)).ir
    assert block.kernels(*args) == block.compiled(*args).kernels


# --------------------------------------------------------- lowering rules


def trace(fn, *args) -> str:
    return fusec.fuse(fn, disk_cache=False).ir(*args)


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)


def test_scalars_become_0d_constants_of_the_tensor_type():
    x = f32(2, 3).astype(np.float16)
    ir = trace(lambda x: 2.0 - x * 3, x)
    assert "arith.constant dense<3.000000e+00> : tensor<f16>" in ir
    assert "arith.constant dense<2.000000e+00> : tensor<f16>" in ir
    assert re.search(r"ai.sub %\d+, %\d+ : tensor<f16> \* tensor<2x3xf16>", ir)
    assert "func.func @_lambda_" in ir  # '<lambda>' made a safe symbol


def test_unary_minus_and_numpy_ufuncs_map_to_ops():
    ir = trace(
        lambda x: np.maximum(np.tanh(-x), np.exp(abs(x))) / np.sqrt(np.negative(x * x) + 1),
        f32(4),
    )
    assert re.search(r"ai.neg %x : tensor<4xf32>", ir) and "ai.mul %x, %x" in ir
    assert ir.count("ai.neg") == 2 and "dense<-1.0" not in ir
    for op in ("ai.tanh", "ai.exp", "ai.abs", "ai.maximum", "ai.sqrt", "ai.div"):
        assert op in ir
    ir = trace(lambda x: np.absolute(+x), f32(4))
    assert "ai.abs %x : tensor<4xf32>" in ir


def test_one_dim_bias_becomes_bias_add_on_its_axis():
    x, b = f32(2, 3, 5, 4), f32(5)
    assert "ai.bias_add %x, %b {axis = 2 : i64}" in trace(lambda x, b: x + b[:, None], x, b)
    assert "ai.bias_add %x, %b {axis = 3 : i64}" in trace(lambda x, b: b + x, x, f32(4))
    ir = trace(lambda x, b: x + b[None, :, None, None], f32(2, 5, 3, 3), b)
    assert "ai.bias_add %x, %b : tensor<2x5x3x3xf32> * tensor<5xf32>" in ir  # axis 1


def test_leading_unit_dims_are_plain_broadcasting():
    ir = trace(lambda x, b: x * b[None, None, :], f32(2, 5, 3), f32(3))
    assert "ai.mul %x, %b : tensor<2x5x3xf32> * tensor<3xf32>" in ir


def test_indexed_argument_becomes_a_reshape():
    x, s = f32(2, 4, 3, 3), f32(4)
    block = fusec.fuse(lambda x, s: x * s[None, :, None, None], disk_cache=False)
    ir = block.ir(x, s)
    assert "ai.reshape %s {shape = array<i64: 1, 4, 1, 1>} : tensor<4xf32>" in ir
    np.testing.assert_allclose(block(x, s), x * s[None, :, None, None], rtol=1e-6)


def test_views_outside_a_matmul_are_reshape_and_transpose_ops():
    ir = trace(lambda x: ops.relu(x.T), f32(2, 3))
    assert "ai.transpose %x {perm = array<i64: 1, 0>} : tensor<2x3xf32>" in ir
    ir = trace(lambda x, y: ops.relu(x)[:, None] * y, f32(3), f32(2, 3, 4))
    assert re.search(r"ai.reshape %\d+ \{shape = array<i64: 3, 1>\} : tensor<3xf32>", ir)
    ir = trace(lambda x: x.transpose(2, 0, 1), f32(2, 3, 4))
    assert "{perm = array<i64: 2, 0, 1>}" in ir


def test_transposes_become_matmul_flags():
    a, b = f32(3, 4), f32(5, 4)
    assert "{transpose_b = true}" in trace(lambda a, b: a @ b.T, a, b)
    assert "{transpose_a = true}" in trace(lambda a, b: a.T @ b.T.T, f32(4, 3), f32(4, 5))
    ir = trace(lambda a, b: ops.matmul(a.T, b, transpose_a=True, transpose_b=True), a, b)
    assert "ai.matmul %a, %b {transpose_b = true}" in ir
    ir = trace(lambda a, b: a @ b.transpose(0, 2, 1), f32(2, 3, 4), f32(2, 5, 4))
    assert "{transpose_b = true}" in ir


def test_closure_constants_are_captured_once():
    w = np.random.default_rng(0).standard_normal((4, 2))  # float64: takes the tensor's type
    ir = trace(lambda x: x @ w + x @ w, f32(3, 4))
    constants = re.findall(r"arith.constant .* : tensor<4x2xf32>", ir)
    assert len(constants) == 1
    assert ir.index("arith.constant") < ir.index("ai.matmul")  # hoisted to the top


def test_closure_constant_values_are_exact():
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    block = fusec.fuse(lambda x: x * w, disk_cache=False)
    x = f32(2, 3)
    np.testing.assert_array_equal(block(x), x * w)


def test_cast_and_astype():
    ir = trace(lambda x: ops.cast(x, "f16").astype(np.float32), f32(2))
    assert "ai.cast %x : tensor<2xf32> to tensor<2xf16>" in ir
    assert "to tensor<2xf32>" in ir


def test_ops_keyword_arguments_become_attributes():
    x, w = f32(1, 4, 9, 9), f32(8, 2, 3, 3)
    ir = trace(lambda x, w: ops.conv2d(x, w, stride=2, padding=(1, 0, 1, 2), groups=2), x, w)
    assert "strides = array<i64: 2, 2>" in ir
    assert "padding = array<i64: 1, 0, 1, 2>" in ir
    assert "groups = 2 : i64" in ir
    ir = trace(lambda x, w, b: ops.conv2d(x, w, b, dilation=(2, 1)), x, f32(8, 4, 3, 3), f32(8))
    assert "dilations = array<i64: 2, 1>" in ir and "ai.bias_add %0, %b :" in ir
    ir = trace(lambda x: ops.gelu(ops.softmax(x, axis=0), approximate="tanh"), f32(3, 4))
    assert 'approximate = "tanh"' in ir and "axis = 0 : i64" in ir
    ir = trace(lambda x, g: ops.layernorm(x, g, g, eps=1e-3), f32(3, 4), f32(4))
    assert "epsilon = 1.000000e-03 : f32" in ir


def test_locations_point_at_the_user_line():
    block = fusec.fuse(mlp_block, disk_cache=False)
    module = block.compiled(*snapshot_args("mlp_block", np.random.default_rng(1))).module
    from fusec.ir.diagnostics import location_of

    lines = {location_of(op).line for op in module.walk() if op.name.startswith("ai.")}
    first = mlp_block.__code__.co_firstlineno
    assert lines <= {first + 1, first + 2} and len(lines) == 2
    assert all(location_of(op).file == __file__ for op in module.walk() if op.name == "ai.gelu")
