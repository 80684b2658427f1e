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
