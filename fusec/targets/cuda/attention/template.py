"""The cuda target's ``attention`` template: an ``ai.fused "attention"`` (one ``ai.attention``,
which ``recognize-patterns`` made of the chain matmul -> scale -> [mask] -> softmax ->
matmul) runs as the flash-style kernel (``cpp.AttentionSpec``) when it can: f16/bf16
operands with head sizes 64 or 128, q, key and v with the same batch dims, and a mask
that is a constant zero (no mask) or causal (0 on and below the diagonal, -inf or at
most ``MASKED`` above: the kernel masks by index instead). Otherwise it runs through
the PyTorch fallback (``ieee_attention``: the op's semantics in its declared types),
the reason in the module's header and in ``--remarks``.

The kernel reads q, key and v from memory by TMA through strides (``views``): the
group may hold the layout ops between its inputs and the operands (the head split
``[B,S,H*D] -> [B,H,S,D]``, the slice of a fused QKV projection, the GQA/MQA head repeat
``ai.expand``, as the rules' attention prologue takes them) and between the result and
its output (the head merge's transpose and reshapes, the attention epilogue the cuda
target's ``attention_layout_ops`` allows), where they are strides the kernel addresses
with, not copies (issue 28). Anything else stays a kernel of its own. ``plan`` is the one
acceptance rule: fusion asks it of the group it would pack (``accepts``), code generation
of the group it gets.
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
from fusec.passes.matching import ATTENTION_VIEWS
from fusec.targets.cuda.attention.cpp import AttentionSpec
from fusec.targets.cuda.attention.views import (
    Layout,
    MaskView,
    OperandView,
    mask_view,
    operand_view,
)
from fusec.targets.cuda.common import body_ops, kernel_name, plan_accepts, yielded
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


#: Which masks the kernel takes: "tensor" (the default: none or causal by index, any
#: other read from memory: a padding mask from an ``attention_mask`` input, a
#: relative-position bias) or "index" (none or causal only; any other mask sends the
#: attention to the PyTorch fallback: the A/B baseline). The reads from memory passed
#: ``tests/targets/cuda/test_attention_mask_gpu.py`` and the zoo with padding masks on an
#: H100 (2026-12-07, benchmarks/results/models-gpu.md).
MASKS_ENV = "FUSEC_ATTENTION_MASKS"


def tensor_masks() -> bool:
    """Whether ``$FUSEC_ATTENTION_MASKS`` lets the kernel read masks from memory."""
    from fusec.environ import switch

    return switch(MASKS_ENV, ("tensor", "index")) == "tensor"


def kernel_spec(
    op: ai.AttentionOp,
    mask: SSAValue,
    views: tuple[OperandView, ...] = (),
    mask_view: MaskView | None = None,
    rope: tuple = (),
    rotary: int = 0,
) -> AttentionSpec | str:
    """The flash kernel's spec for ``op`` (``mask`` the value outside the group that
    feeds its mask operand; ``views`` how q, k, v and the output are addressed, none
    when all are contiguous; ``mask_view`` how it reads a mask that is neither zero nor
    causal from memory), or why the kernel cannot compute it."""
    q, key, v = (spec_of(x.type) for x in op.operands[:3])
    if not q.shape[:-2] == key.shape[:-2] == v.shape[:-2]:
        return "q, key and v have different batch dims (the kernel does not broadcast them)"
    kind = mask_kind(mask, q.shape[-2], key.shape[-2])
    if kind is None and mask_view is None:
        return "the mask is neither zero nor a causal constant (0 on and below the diagonal)"
    batch = math.prod(q.shape[:-2])
    rows = {"q": q.shape[-2], "k": key.shape[-2], "v": key.shape[-2], "o": q.shape[-2]}
    cols = {"q": q.shape[-1], "k": key.shape[-1], "v": v.shape[-1], "o": v.shape[-1]}
    plain = tuple(OperandView.contiguous(batch, rows[r], cols[r]) for r in "qkvo")
    try:
        return AttentionSpec(
            batch=batch,
            sq=q.shape[-2],
            sk=key.shape[-2],
            d=q.shape[-1],
            dv=v.shape[-1],
            dtype=q.dtype,
            out_dtype=spec_of(op.output.type).dtype,
            scale=float(op.attr("scale")),
            causal=kind == "causal",
            nan_to_zero=bool(op.attr("nan_to_zero")),
            softcap=float(op.attr("softcap")),
            views=() if not views or views == plain else tuple(w.as_tuple() for w in views),
            mask=mask_view.as_tuple() if kind is None and mask_view is not None else (),
            rope=rope,
            rotary=rotary,
        )
    except ValueError as err:
        return str(err)


def _outer(fused_op: ai.FusedOp, inner: SSAValue) -> SSAValue:
    """The group operand a block argument of ``fused_op`` stands for (a value defined in
    the group, a constant, is itself)."""
    if isinstance(inner, BlockArgument) and inner.block is fused_op.block:
        return fused_op.operands[inner.index]
    return inner


#: The layout ops the kernel writes its result through (a permutation of its elements).
_VIEWS_OUT = (ai.ReshapeOp, ai.TransposeOp)


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(spec_of(value.type).shape)


def _through(layout: Layout, op: ai.AiOp) -> Layout | None:
    """``layout`` of ``op``'s operand as the layout of its result (None: no strided view)."""
    shape = _shape(op.results[0])
    if isinstance(op, ai.ReshapeOp):
        return layout.reshape(shape)
    if isinstance(op, ai.TransposeOp):
        return layout.transpose(op.attr("perm"))
    if isinstance(op, ai.SliceOp):
        return layout.slice(op.attr("offsets"), shape, op.attr("strides"))
    if isinstance(op, ai.ExpandOp):
        return layout.expand(_shape(op.operands[0]), shape)
    axis = op.attr("axis") % len(_shape(op.operands[0]))
    return layout.gather(axis, [int(i) for i in op.attr("indices")])


def _through_chain(layout: Layout, chain: list[ai.AiOp], what: str) -> Layout | str:
    """``layout`` through the layout ops of ``chain`` (the last op first: ``chain`` runs
    from the value read back to its source), or why ``what`` is no strided view."""
    result: Layout | None = layout
    for op in reversed(chain):
        assert result is not None
        result = _through(result, op)
        if result is None:
            return f"{what} is read through {op.name}, which is no strided view of it"
    assert result is not None
    return result


def _layout_in(
    fused_op: ai.FusedOp, value: SSAValue, role: str, seen: set, ropes: dict | None = None
) -> tuple[int, Layout] | str:
    """(group input, its layout as the operand ``value``) through the group's layout ops,
    or why the operand is not a view of one group input. With ``ropes`` (q and k) the chain
    may pass one RoPE (``_rope_of``, or ``_partial_rope_of``): the kernel loads what it
    rotates and rotates it after the load, so the layout is that of the rotated value's
    source, and ``ropes[role]`` says where its cos and sin factors are (``_rope_factors``)
    and how many head dims it rotates."""
    chain: list[ai.AiOp] = []
    rope: tuple | None = None
    passed: SSAValue | None = None  # a partial RoPE's passed-through part: x's too
    while not (isinstance(value, BlockArgument) and value.block is fused_op.block):
        op = value.owner
        found = _rope_or_partial(op) if ropes is not None and rope is None else None
        if found is not None:
            x, cos, sin, ops, passed = found
            rope = (list(chain), x, cos, sin, ops)
            value = x if passed is None else x.owner.operands[0]  # x: a[..., :R]
            continue
        if not isinstance(op, ATTENTION_VIEWS):
            return f"{role} is computed inside the group ({getattr(op, 'name', op)})"
        chain.append(op)
        value = op.operands[0]
    seen.update(chain)
    layout = _through_chain(Layout.contiguous(_shape(value)), chain, role)
    if isinstance(layout, str):
        return layout
    if rope is not None:
        assert ropes is not None
        if passed is not None and not _same_source(fused_op, value, chain, rope, passed, seen):
            return f"{role}'s partial RoPE passes through elements of another tensor"
        factors = _rope_factors(fused_op, role, rope, seen)
        if isinstance(factors, str):
            return factors
        ropes[role] = (*factors, _shape(rope[1])[-1])
    return value.index, layout


def _rope_of(op: object) -> tuple[SSAValue, SSAValue, SSAValue, list] | None:
    """(x, cos, sin, the ops) when ``op`` is rotary position embedding's ``x * cos +
    rotate_half(x) * sin`` (either order of each sum and product), its products and
    rotation read by it alone, the result of ``x``'s shape; else None."""
    if not isinstance(op, ai.AddOp):
        return None
    for first, second in (op.operands, reversed(op.operands)):
        plain, rotated = first.owner, second.owner
        if not (isinstance(plain, ai.MulOp) and isinstance(rotated, ai.MulOp)):
            continue
        for x, cos in (plain.operands, reversed(plain.operands)):
            for turn, sin in (rotated.operands, reversed(rotated.operands)):
                half = turn.owner
                if not (isinstance(half, ai.RotateHalfOp) and half.input is x):
                    continue
                ops = [op, plain, rotated, half]
                if _shape(x) != _shape(op.results[0]) or any(
                    len(list(o.results[0].uses)) != 1 for o in ops[1:]
                ):
                    return None
                return x, cos, sin, ops
    return None


def _rope_or_partial(op: object) -> tuple | None:
    """(x, cos, sin, the ops, None) of a RoPE ``op`` (``_rope_of``), or (the rotated
    slice, cos, sin, the ops, the tensor the passed-through slice reads) of a partial one
    (``_partial_rope_of``)."""
    found = _rope_of(op)
    if found is not None:
        return (*found, None)
    return _partial_rope_of(op)


def _partial_rope_of(op: object) -> tuple | None:
    """GPT-NeoX's partial rotary ``concat(rope(a[..., :R]), b[..., R:])`` along the last
    axis (``a`` and ``b`` views of one tensor, which ``_same_source`` checks; the group
    holds the chains of both when the RoPE came from another group): (the slice
    ``a[..., :R]``, cos, sin, the ops (the RoPE's, then the two slices and the concat),
    ``b``); else None."""
    if not isinstance(op, ai.ConcatOp) or len(op.operands) != 2:
        return None
    width = _shape(op.results[0])
    if op.attr("axis") % len(width) != len(width) - 1:
        return None
    rotated, passed = op.operands
    found = _rope_of(rotated.owner)
    if found is None or len(list(rotated.uses)) != 1 or len(list(passed.uses)) != 1:
        return None
    x, cos, sin, ops = found
    rot = _shape(x)[-1]
    head, tail = _last_axis_slice(x, 0, rot), _last_axis_slice(passed, rot, width[-1] - rot)
    if head is None or tail is None or len(list(x.uses)) != 2:
        return None
    return x, cos, sin, [*ops, head, tail, op], tail.operands[0]


def _last_axis_slice(value: SSAValue, start: int, size: int) -> ai.SliceOp | None:
    """The ``ai.slice`` that makes ``value`` as elements [start, start + size) of its
    operand's last axis (the others whole, unit steps), else None."""
    op = value.owner
    if not isinstance(op, ai.SliceOp):
        return None
    full = _shape(op.operands[0])
    offsets, sizes = tuple(op.attr("offsets")), tuple(op.attr("sizes"))
    whole = offsets[:-1] == (0,) * (len(full) - 1) and sizes[:-1] == full[:-1]
    if not (whole and set(op.attr("strides")) == {1} and (offsets[-1], sizes[-1]) == (start, size)):
        return None
    return op


def _same_source(
    fused_op: ai.FusedOp, value: SSAValue, chain: list, rope: tuple, passed: SSAValue, seen: set
) -> bool:
    """Whether a partial RoPE's passed-through slice reads the tensor its rotated slice
    reads (the same group input at the same layout): the kernel loads the whole head
    from there. ``chain`` from the operand to the group input ``value``, ``rope[0]`` its
    part after the RoPE; ``passed`` the tensor the passed-through slice takes."""
    assert isinstance(value, BlockArgument)
    below = chain[len(rope[0]) :]
    rotated = _through_chain(Layout.contiguous(_shape(value)), below, "x")
    traced = _layout_in(fused_op, passed, "x", seen)
    return not isinstance(traced, str) and traced == (value.index, rotated)


def _keeps_last_axis(op: ai.AiOp) -> bool:
    """Whether layout op ``op`` leaves its operand's last axis as its result's (RoPE's
    rotate_half pairs elements of that axis)."""
    old, new = _shape(op.operands[0]), _shape(op.results[0])
    if isinstance(op, ai.TransposeOp):
        return tuple(op.attr("perm"))[-1] == len(old) - 1
    if isinstance(op, ai.SliceOp):
        return new[-1] == old[-1] and tuple(op.attr("strides"))[-1] == 1
    if isinstance(op, ai.ReshapeOp | ai.ExpandOp):
        return new[-1] == old[-1]
    return op.attr("axis") % len(old) != len(old) - 1  # a gather


def _rope_factors(fused_op: ai.FusedOp, role: str, rope: tuple, seen: set) -> tuple | str:
    """Where the kernel reads the cos and sin factors of element (bh, row, col) of operand
    ``role``, whose chain passes the RoPE ``rope`` (the layout ops after it, x, cos, sin,
    its ops): each factor's group input and ``MaskView``, broadcast to the rotated value
    and then through the same layout ops as the operand; or why it cannot."""
    after, _x, cos, sin, ops = rope
    if not all(_keeps_last_axis(op) for op in after):
        return f"{role}'s RoPE is followed by a layout op that moves its head dimension"
    rotated = _shape(ops[0].results[0])
    # a partial RoPE's factors address the first columns of the whole head (the concat's
    # result); the kernel reads none past them
    head = _shape(ops[-1].results[0]) if isinstance(ops[-1], ai.ConcatOp) else rotated
    operand = _shape(after[0].results[0]) if after else head
    found = []
    for which, factor in (("cos", cos), ("sin", sin)):
        traced = _layout_in(fused_op, factor, f"{role}'s RoPE {which}", seen)
        if isinstance(traced, str):
            return traced
        index, layout = traced
        shape = _shape(factor)
        if len(shape) > len(rotated) or any(
            a not in (1, b) for a, b in zip(shape[::-1], rotated[::-1], strict=False)
        ):
            return f"{role}'s RoPE {which} of shape {list(shape)} does not broadcast to it"
        wide = _widened(layout.expand(shape, rotated), rotated[-1], head[-1])
        if wide is None:
            return f"{role}'s RoPE {which} is not one stride along the head"
        view = _through_chain(wide, after, f"{role}'s RoPE {which}")
        if isinstance(view, str):
            return view
        read = mask_view(view, operand, operand, spec_of(factor.type).dtype)
        if isinstance(read, str):
            return f"{role}'s RoPE {which}: {read}"
        found.append((index, read))
    seen.update(ops)
    return tuple(found)


def _widened(layout: Layout, size: int, width: int) -> Layout | None:
    """``layout`` of a tensor whose last dimension is ``size`` long, that dimension made
    ``width`` long at its stride (a partial RoPE's factors as columns of the whole head;
    the kernel reads the first ``size`` only); None where it is no one stride."""
    *dims, last = layout.dims
    if width == size:
        return layout
    if len(last) != 1:
        return None
    return Layout((*dims, ((width, last[0][1]),)), layout.offset)


def _layout_out(fused_op: ai.FusedOp, op: ai.AttentionOp, seen: set) -> Layout | str:
    """The layout of the attention result in the group's one output (through the head
    merge's transposes and reshapes), or why the kernel cannot write it so."""
    results = yielded(fused_op)
    if len(results) != 1:
        return f"the group has {len(results)} results (the kernel writes one)"
    value = results[0]
    layout: Layout | None = Layout.contiguous(_shape(value))
    while value is not op.output:
        user = value.owner
        if not isinstance(user, _VIEWS_OUT):
            return f"the kernel has no epilogue ({getattr(user, 'name', user)} after it)"
        seen.add(user)
        value = user.operands[0]
        assert layout is not None
        if isinstance(user, ai.ReshapeOp):
            layout = layout.reshape(_shape(value))
        else:
            dims: list = [None] * len(layout.dims)
            for k, p in enumerate(user.attr("perm")):
                dims[p] = layout.dims[k]
            layout = Layout(tuple(dims), layout.offset)
        if layout is None:
            return f"the output is written through {user.name}, which is no strided view"
    assert layout is not None
    return layout


def plan(fused_op: ai.FusedOp) -> tuple[AttentionSpec, dict[str, int]] | str:
    """The kernel's spec and the group inputs it reads, or why the fallback serves it."""
    ops = body_ops(fused_op)
    anchors = [op for op in ops if isinstance(op, ai.AttentionOp)]
    if len(anchors) != 1:
        return f"{len(anchors)} ai.attention ops in the group"
    (op,) = anchors
    q, key = spec_of(op.query.type), spec_of(op.key.type)
    sizes = {
        "q": (op.query, q.shape[-2], q.shape[-1]),
        "k": (op.key, key.shape[-2], key.shape[-1]),
        "v": (op.value, key.shape[-2], spec_of(op.value.type).shape[-1]),
    }
    seen: set = {op}
    inputs, views = {}, []
    ropes: dict[str, tuple] = {}
    for role, (value, rows, cols) in sizes.items():
        traced = _layout_in(fused_op, value, role, seen, ropes if role in "qk" else None)
        if isinstance(traced, str):
            return traced
        inputs[role], layout = traced
        view = operand_view(layout, rows, cols, broadcast=True, what=role)
        if isinstance(view, str):
            return view
        views.append(view)
    out = _layout_out(fused_op, op, seen)
    if isinstance(out, str):
        return out
    view = operand_view(out, q.shape[-2], sizes["v"][2], broadcast=False, what="the output")
    if isinstance(view, str):
        return view
    views.append(view)
    read_mask = _mask_read(fused_op, op, seen, inputs)
    if isinstance(read_mask, str):
        return read_mask
    others = [o.name for o in ops if o not in seen]
    if others:
        return (
            "it takes ai.attention with the layout ops of its operands and output only (the "
            f"kernel has no prologue or epilogue): {', '.join(others)} stays a kernel of its own"
        )
    rope, rotary = [], set()
    for role, ((cos_index, cos), (sin_index, sin), dims) in ropes.items():
        inputs[f"{role}_cos"], inputs[f"{role}_sin"] = cos_index, sin_index
        rope.append((role, cos.as_tuple(), sin.as_tuple()))
        rotary.add(dims)
    if len(rotary) > 1:
        return f"q and k rotate different numbers of head dims ({sorted(rotary)})"
    dims = rotary.pop() if rotary else q.shape[-1]
    partial = dims if dims != q.shape[-1] else 0
    mask = _outer(fused_op, op.mask)
    spec = kernel_spec(op, mask, tuple(views), read_mask, tuple(rope), partial)
    if isinstance(spec, str):
        return spec
    return spec, inputs


def _mask_read(
    fused_op: ai.FusedOp, op: ai.AttentionOp, seen: set, inputs: dict[str, int]
) -> MaskView | None | str:
    """How the kernel reads ``op``'s mask from memory (its group input becomes
    ``inputs["mask"]``), None where it computes the mask by index or ``tensor_masks`` is
    off, or why it cannot read it."""
    scores = (*spec_of(op.query.type).shape[:-1], spec_of(op.key.type).shape[-2])
    if not tensor_masks() or mask_kind(_outer(fused_op, op.mask), *scores[-2:]) is not None:
        return None
    traced = _layout_in(fused_op, op.mask, "the mask", seen)
    if isinstance(traced, str):
        return traced
    inputs["mask"], layout = traced
    mask = spec_of(op.mask.type)
    return mask_view(layout, tuple(mask.shape), scores, mask.dtype)


def rope_note(spec: AttentionSpec) -> str:
    """The kernel header's words for the RoPE it applies ('' for none)."""
    roles = " and ".join(role for role, _, _ in spec.rope)
    part = f" (the first {spec.rotary} of {spec.d} head dims)" if spec.rotary else ""
    return f", RoPE of {roles}{part} applied in shared memory after the load" if roles else ""


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
        f"{', causal' if spec.causal else ''}{', NaN rows to 0' if spec.nan_to_zero else ''}"
        f"{', the mask read from memory' if spec.mask else ''}"
        f"{f', scores soft-capped at {spec.softcap!r} (tanh)' if spec.softcap else ''}"
        f"{rope_note(spec)}; "
        f"{spec.grid} blocks of 128 query rows",
    ]
    if spec.views:
        names = {"q": "q", "k": "k", "v": "v", "o": "output"}
        notes.append(
            "read and written in place through strides (no head split or merge copies): "
            + "; ".join(
                f"{names[r]} offset {w.offset}, row stride {w.row_stride}, batch "
                f"(size, stride) {list(w.batch)}"
                for r in "qkvo"
                for w in [spec.view(r)]
            )
        )
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
