"""The cuda target's ``attention`` template: one flash-style kernel per ``ai.fused "attention"``.

The group (the ``attention`` stage of ``fuse``) is ``matmul(q, k^T) [-> mul/div by one value]
[-> + causal constant] -> softmax -> matmul(., v)``. It runs as the fused
kernel (``cpp.AttentionSpec``) for f16/bf16 with head sizes 64 or 128;
otherwise through the PyTorch fallback op by op (f32 graphs keep IEEE f32
maths; other head sizes have no kernel yet), the reason in its header.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import UnitAttr

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import header
from fusec.dialect import ops as ai
from fusec.dialect.facts import CAUSAL_ATTR
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.attention.cpp import AttentionSpec
from fusec.targets.cuda.common import body_ops, kernel_name


def plan(fused_op: ai.FusedOp) -> tuple[AttentionSpec, dict[str, int]] | str:
    """The kernel's spec and the group inputs it reads, or why the fallback serves it."""
    ops = body_ops(fused_op)
    if len(ops) < 3 or not isinstance(ops[0], ai.MatmulOp) or not isinstance(ops[-1], ai.MatmulOp):
        return "the group is not an attention chain"
    scores, out = ops[0], ops[-1]
    args = {arg: i for i, arg in enumerate(fused_op.block.args)}
    for value in (scores.lhs, scores.rhs, out.rhs):
        if value not in args:
            return "an operand of the chain is computed inside the group"
    inputs = {"q": args[scores.lhs], "k": args[scores.rhs], "v": args[out.rhs]}
    scale_op = "none"
    scale_dtype = "f32"
    for op in ops[1:-1]:
        if isinstance(op, (ai.MulOp, ai.DivOp)):
            if op.rhs not in args:
                return "the scale is computed inside the group"
            scale_op = "mul" if isinstance(op, ai.MulOp) else "div"
            scale_dtype = spec_of(op.rhs.type).dtype
            inputs["scale"] = args[op.rhs]
        elif not isinstance(op, (ai.AddOp, ai.SoftmaxOp)):
            return f"{op.name} inside the attention chain"
    causal = isinstance(fused_op.attributes.get(CAUSAL_ATTR), UnitAttr)
    q, k, v = (spec_of(x.type) for x in (scores.lhs, scores.rhs, out.rhs))
    try:
        spec = AttentionSpec(
            batch=math.prod(q.shape[:-2]),
            sq=q.shape[-2],
            sk=k.shape[-2],
            d=q.shape[-1],
            dv=v.shape[-1],
            dtype=q.dtype,
            out_dtype=spec_of(fused_op.results[0].type).dtype,
            scale_dtype=scale_dtype,
            scale_op=scale_op,
            causal=causal,
        )
    except ValueError as err:
        return str(err)
    return spec, inputs


def accepts(members, anchor) -> str | None:
    """Whether the kernel takes an attention chain of ``members`` (``Template.accepts``):
    otherwise its ops are better off as two matmul kernels than one PyTorch group."""
    matmuls = [op for op in members if isinstance(op, ai.MatmulOp)]
    if len(matmuls) != 2:
        return "an attention group has two matmuls"
    scores, out = matmuls
    q, k, v = (spec_of(x.type) for x in (scores.lhs, scores.rhs, out.rhs))
    try:
        AttentionSpec(
            math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], q.dtype
        )
    except ValueError as err:
        return f"the cuda attention kernel cannot take it: {err}"
    return None


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of an attention group (the fallback's when the kernel cannot)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    planned = plan(fused_op)
    if isinstance(planned, str):
        return torch_fallback.generate(fused_op, name, reason=planned)
    spec, inputs = planned
    notes = [
        "target: cuda, fused flash-style attention on the Hopper Tensor Cores (wgmma + TMA, "
        "sm_90a): online softmax, the scores never leave registers;",
        f"batch {spec.batch}, {spec.sq} queries x {spec.sk} keys, head {spec.d}/{spec.dv}, "
        f"{spec.dtype} -> {spec.out_dtype}, scale {spec.scale_op}"
        f"{', causal' if spec.causal else ''}; {spec.grid} blocks of 128 query rows",
    ]
    args = ", ".join(f"in{k}" for k in range(len(fused_op.inputs)))
    source = "\n".join(
        [
            header(fused_op, notes=notes),
            "from fusec.targets.cuda.attention.cpp import AttentionSpec",
            "from fusec.targets.cuda.attention.launcher import AttentionLaunch",
            "",
            f"ATTENTION = AttentionLaunch({spec!r}, {inputs!r})",
            "",
            "",
            f"def launch({args}, out0, stream=0, sms=132):",
            f"    ATTENTION(({args},), out0, stream)",
            "",
            "",
            "LINKED = ATTENTION  # the runtime launches it by address (ATTENTION.direct)",
            "",
            f"KERNELS = []  # a linked cubin, launched by AttentionLaunch ({spec.function_name})",
            "",
        ]
    )
    ins, outs = io_specs(fused_op)
    return KernelSource(name, "attention", "cuda", source, ins, outs, array_dtype=None)
