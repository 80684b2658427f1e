"""Conv graphs shared by the CPU and GPU tests of the conv template: a ResNet basic block
(conv-bn-relu-conv-bn-add-relu, BatchNorm folded to a per-channel scale and shift)."""

from __future__ import annotations


def _t(shape, dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def resnet_basic_body(x: str, w: str, c: str) -> str:
    """The block's ops on ``%x`` with weights ``%w1``, ``%w2`` and BatchNorm scales and
    shifts ``%s1, %t1, %s2, %t2``, of types ``x``, ``w`` and ``c``; returns ``%r``."""
    return f"""  %c1 = ai.conv2d %x, %w1 {{padding = array<i64: 1, 1>}} : {x} * {w}
  %m1 = ai.mul %c1, %s1 : {x} * {c}
  %a1 = ai.add %m1, %t1 : {x} * {c}
  %r1 = ai.relu %a1 : {x}
  %c2 = ai.conv2d %r1, %w2 {{padding = array<i64: 1, 1>}} : {x} * {w}
  %m2 = ai.mul %c2, %s2 : {x} * {c}
  %a2 = ai.add %m2, %t2 : {x} * {c}
  %s = ai.add %a2, %x : {x} * {x}
  %r = ai.relu %s : {x}
  return %r : {x}"""


def resnet_basic(n=2, c=64, h=16, w=16, t="f16") -> str:
    """A ResNet basic block on an ``n x c x h x w`` input, every weight a graph argument."""
    x, wt, ct = _t((n, c, h, w), t), _t((c, c, 3, 3), t), _t((c, 1, 1), t)
    return f"""func.func @block(%x: {x}, %w1: {wt}, %s1: {ct}, %t1: {ct}, %w2: {wt}, %s2: {ct},
    %t2: {ct}) -> {x} {{
{resnet_basic_body(x, wt, ct)}
}}"""


def resnet_downsample(n=2, c=64, h=16, w=16, t="f16") -> str:
    """A ResNet basic block that halves the image: a 3x3/2 conv and a 1x1/2 downsample of
    the input (both strided along W), each with BatchNorm folded, added, relu."""
    k = 2 * c
    x, y = _t((n, c, h, w), t), _t((n, k, (h + 1) // 2, (w + 1) // 2), t)
    w1, w2, wd, ck = _t((k, c, 3, 3), t), _t((k, k, 3, 3), t), _t((k, c, 1, 1), t), _t((k, 1, 1), t)
    stride2 = "strides = array<i64: 2, 2>"
    return f"""func.func @down(%x: {x}, %w1: {w1}, %s1: {ck}, %t1: {ck}, %w2: {w2}, %s2: {ck},
    %t2: {ck}, %wd: {wd}, %sd: {ck}, %td: {ck}) -> {y} {{
  %c1 = ai.conv2d %x, %w1 {{{stride2}, padding = array<i64: 1, 1>}} : {x} * {w1}
  %m1 = ai.mul %c1, %s1 : {y} * {ck}
  %a1 = ai.add %m1, %t1 : {y} * {ck}
  %r1 = ai.relu %a1 : {y}
  %c2 = ai.conv2d %r1, %w2 {{padding = array<i64: 1, 1>}} : {y} * {w2}
  %m2 = ai.mul %c2, %s2 : {y} * {ck}
  %a2 = ai.add %m2, %t2 : {y} * {ck}
  %cd = ai.conv2d %x, %wd {{{stride2}}} : {x} * {wd}
  %md = ai.mul %cd, %sd : {y} * {ck}
  %ad = ai.add %md, %td : {y} * {ck}
  %s = ai.add %a2, %ad : {y} * {y}
  %r = ai.relu %s : {y}
  return %r : {y}
}}"""


def resnet_block_constant_weights(n: int = 4, c: int = 64, hw: int = 28) -> str:
    """A ResNet basic block whose conv weights are constants (an ONNX model's: relaid KRSC
    at compile time) and its BatchNorm scales arguments."""
    from cuda_cases import constant_dense

    def constant(shape: tuple, seed: int) -> str:
        return constant_dense(shape, seed, "f16", scale=0.05)

    x, w, v = _t((n, c, hw, hw), "f16"), _t((c, c, 3, 3), "f16"), _t((c, 1, 1), "f16")
    return f"""func.func @block(%x: {x}, %s1: {v}, %t1: {v}, %s2: {v}, %t2: {v}) -> {x} {{
  %w1 = arith.constant {constant((c, c, 3, 3), 1)}
  %w2 = arith.constant {constant((c, c, 3, 3), 2)}
{resnet_basic_body(x, w, v)}
}}"""
