"""cpu template for "attention" groups: both products and the softmax in one launch.

The core is numpy on the shaped operands (the head split's layout ops made
contiguous first, as every cpu template reads row-major operands): the scores
``q @ key^T`` (BLAS reads the key transposed), scaled and masked in place, a
numerically safe softmax over the last axis in place, NaN probabilities set to
0 when the op says so, and the product with ``v`` straight into the output
(or a scratch buffer that the fused elementwise epilogue then reads; the
prologue/epilogue split is ``reduce.library_group``'s). The scores never leave
the kernel.
"""

from __future__ import annotations

from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu.common import Buffers
from fusec.targets.cpu.reduce import library_group


def generate(fused_op, name: str) -> KernelSource:
    return library_group(fused_op, name, "attention", ai.AttentionOp, attention_core)


def attention_core(op: Operation, out: str, buffers: Buffers) -> list[str]:
    assert isinstance(op, ai.AttentionOp)
    q, key, v, mask = (f"{buffers.reads[x]}.reshape({shape_of(x)!r})" for x in op.operands)
    scale = float(op.attr("scale"))
    lines = [
        f"s = np.matmul({q}, np.swapaxes({key}, -1, -2))",
        f"s *= f32({scale!r})" if scale != 1.0 else "",
        f"s += {mask}",
        "s -= s.max(axis=-1, keepdims=True)",
        "np.exp(s, out=s)",
        "s /= s.sum(axis=-1, keepdims=True)",
        "s[np.isnan(s)] = f32(0.0)" if op.attr("nan_to_zero") else "",
        f"np.matmul(s, {v}, out={out}.reshape({shape_of(op.output)!r}))",
    ]
    lines = [line for line in lines if line]
    return ["with np.errstate(all='ignore'):", *(f"    {line}" for line in lines)]
