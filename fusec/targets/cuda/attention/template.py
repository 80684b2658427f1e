"""The cuda target's ``attention`` template: an ``ai.fused "attention"`` (one ``ai.attention``,
which ``recognize-patterns`` made of the chain matmul -> scale -> [mask] -> softmax ->
matmul) runs as the flash-style kernel (``cpp.AttentionSpec``) when it can: f16/bf16
operands with head sizes 64 or 128, q, key and v with the same batch dims, and a mask
that is a constant zero (no mask) or causal (0 on and below the diagonal, -inf or at
most ``MASKED`` above: the kernel masks by index instead). Otherwise it runs through
the PyTorch fallback (``ieee_attention``: the op's semantics in its declared types),
the reason in the module's header and in ``--remarks``.

The kernel reads q, key and v from memory as they are (TMA), so the group is the
attention op alone: the head split's layout ops stay kernels of their own here. ``plan``
is the one acceptance rule: fusion asks it of the group it would pack (``accepts``),
code generation of the group it gets.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects import arith
from xdsl.ir import BlockArgument, SSAValue

from fusec.codegen import KernelSource
from fusec.codegen.expr import header
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.targets.cuda.attention.cpp import AttentionSpec
from fusec.targets.cuda.common import body_ops, kernel_name, plan_accepts
from fusec.targets.cuda.linked import linked_kernel_source

#: A mask entry at most this is "masked": exp(-5e3 + any score the inputs reach) is 0 in
#: f32. Not -1e4 itself: bf16 rounds a written -1e4 to -9984 (a bf16 causal mask of -1e4
#: fell back to PyTorch on the H200).
MASKED = -5.0e3


def mask_kind(mask: SSAValue, queries: int, keys: int) -> str | None:
    """ "none" or "causal" for a constant mask of (..., ``queries``, ``keys``) scores that
    the kernel computes by index, else None."""
    from fusec.ir.constants import constant_value

    const = mask.owner
    if not isinstance(const, arith.ConstantOp):
        return None
    try:
        values = np.asarray(constant_value(const), dtype=np.float64)
    except FusecError:  # not a dense constant: not one the kernel can take
        return None
    if not values.any():
        return "none"
    if values.shape[-2:] != (queries, keys):
        return None  # a mask broadcast along queries or keys is no causal one
    # exporters expand the causal mask over the batch (GPT-2 at batch > 1): one grid
    # repeated over the leading dims is that grid for every (batch, head)
    stack = values.reshape(-1, queries, keys)
    if not (stack == stack[:1]).all():
        return None
    grid = stack[0]
    above = np.triu(np.ones((queries, keys), dtype=bool), k=1)
    causal = not grid[~above].any() and bool(np.all(grid[above] <= MASKED))
    return "causal" if causal else None


def kernel_spec(op: ai.AttentionOp, mask: SSAValue) -> AttentionSpec | str:
    """The flash kernel's spec for ``op`` (``mask`` the value outside the group that
    feeds its mask operand), or why the kernel cannot compute it."""
    q, key, v = (spec_of(x.type) for x in op.operands[:3])
    if not q.shape[:-2] == key.shape[:-2] == v.shape[:-2]:
        return "q, key and v have different batch dims (the kernel does not broadcast them)"
    kind = mask_kind(mask, q.shape[-2], key.shape[-2])
    if kind is None:
        return "the mask is neither zero nor a causal constant (0 on and below the diagonal)"
    try:
        return AttentionSpec(
            batch=math.prod(q.shape[:-2]),
            sq=q.shape[-2],
            sk=key.shape[-2],
            d=q.shape[-1],
            dv=v.shape[-1],
            dtype=q.dtype,
            out_dtype=spec_of(op.output.type).dtype,
            scale=float(op.attr("scale")),
            causal=kind == "causal",
            nan_to_zero=bool(op.attr("nan_to_zero")),
        )
    except ValueError as err:
        return str(err)


def _outer(fused_op: ai.FusedOp, inner: SSAValue) -> SSAValue:
    """The group operand a block argument of ``fused_op`` stands for (a value defined in
    the group, a constant, is itself)."""
    if isinstance(inner, BlockArgument) and inner.block is fused_op.block:
        return fused_op.operands[inner.index]
    return inner


def plan(fused_op: ai.FusedOp) -> tuple[AttentionSpec, dict[str, int]] | str:
    """The kernel's spec and the group inputs it reads, or why the fallback serves it."""
    ops = body_ops(fused_op)
    others = [op.name for op in ops if not isinstance(op, ai.AttentionOp)]
    if others or len(ops) != 1:
        return (
            "it takes ai.attention alone (the flash kernel reads q, key and v from memory "
            f"by TMA, and has no epilogue): {', '.join(others) or 'another ai.attention'} "
            "stays a kernel of its own"
        )
    op = ops[0]
    spec = kernel_spec(op, _outer(fused_op, op.mask))
    if isinstance(spec, str):
        return spec
    inputs = {}
    for role, value in (("q", op.query), ("k", op.key), ("v", op.value)):
        if not isinstance(value, BlockArgument) or value.block is not fused_op.block:
            return f"{role} is computed inside the group"
        inputs[role] = value.index
    return spec, inputs


def plan_problem(fused_op: ai.FusedOp) -> str | None:
    """Why the kernel cannot serve ``fused_op`` (``plan``'s refusal), or None."""
    planned = plan(fused_op)
    return planned if isinstance(planned, str) else None


#: The one acceptance rule: fusion asks ``plan`` of the group it would pack, so it forms
#: no group (the attention op and more) that code generation would hand to PyTorch.
accepts = plan_accepts("attention", "the cuda attention kernel", plan_problem)


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
        f"{spec.dtype} -> {spec.out_dtype}, scale {spec.scale!r}"
        f"{', causal' if spec.causal else ''}{', NaN rows to 0' if spec.nan_to_zero else ''}; "
        f"{spec.grid} blocks of 128 query rows",
    ]
    lines = [
        header(fused_op, notes=notes),
        "from fusec.targets.cuda.abi import AttentionLaunch, AttentionSpec",
        "",
        f"ATTENTION = AttentionLaunch({spec!r}, {inputs!r})",
    ]
    return linked_kernel_source(
        fused_op,
        name,
        "attention",
        lines,
        var="ATTENTION",
        launcher="AttentionLaunch",
        spec=spec,
        launch_args="stream",
    )
