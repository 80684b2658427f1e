"""CUDA fallback: a group's ops through PyTorch on the GPU, for the groups no kernel serves.

The Tensor Core templates (``gemm/``, ``conv/``, ``attention/``) take f16/bf16
matmul, conv and attention groups within their limits; each hands the others
here with the reason (f32 operands, kept IEEE f32; a conv or attention shape
or mask they do not cover), as do the Numba templates for what they cannot serve
(the "copy", "reduce" and "pool" kernels: a prologue, a layout they do not read;
integer values outside the pointwise kernel). Such a group runs op by op through PyTorch
(cuDNN/cuBLAS for a conv or matmul core). It is correct but not fused: the
kernel header and ``--remarks`` say why. The aim is to cost no more than the
same ops in PyTorch eager:

* every op runs in its declared element type, as eager would: no float32
  copies of 16-bit tensors (PyTorch computes 16-bit elementwise ops and
  reductions in float32 inside each kernel and rounds the result, so a 16-bit
  value is rounded after every op, exactly as between unfused ops);
* a bias that follows the core rides on it (``conv2d(x, w, bias)``,
  ``addmm(bias, a, b)``: cuBLAS's bias epilogue);
* the results are the tensors PyTorch returns (no copy into preallocated
  outputs);
* f32 conv/matmul stay IEEE f32 per call (``fusec.targets.cuda.torch_runtime``),
  never by switching PyTorch's process-wide TF32 flags.

Each op maps to the one PyTorch function computing it (``TORCH_FUNCTIONS``:
one kernel, float32 inside for 16-bit tensors, one rounding, as eager); an
elementwise op without one is computed from its scalar semantics (the op's
``scalar`` fact rendered for PyTorch) on float32 copies and rounded once to its
declared type, so every op the dialect can fuse has a lowering.

The module defines ``run(torch, *inputs) -> tuple`` over torch tensors of the
group's operand shapes and element types, run on the current torch stream;
the runtime makes that the caller's stream. ``TORCH_FALLBACK = True`` marks
it; ``KERNELS`` is empty (nothing for ``--emit ptx``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.ir import BlockArgument, SSAValue

from fusec.codegen import KernelRemark, KernelSource, io_specs
from fusec.codegen.expr import TORCH, ExprGenerator, error_at, header
from fusec.codegen.layout import torch_expression
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.diagnostics import location_of
from fusec.ir.dtypes import ELEMENT_TYPES, is_float
from fusec.ir.module import precision_of
from fusec.targets.cuda.common import Source, body_ops, check_leaves, kernel_name, yielded

TORCH_DTYPE = {name: f"torch.{t.torch}" for name, t in ELEMENT_TYPES.items()}

#: One PyTorch call per op, over the operand expressions (each already in the
#: op's element type). Elementwise ops missing here use their scalar fact.
LOWERINGS: dict[type[ai.AiOp], Callable[[ai.AiOp, list[str]], str]] = {}


def _simple(pattern: str) -> Callable[[ai.AiOp, list[str]], str]:
    return lambda op, a: pattern.format(*a)


LOWERINGS.update(
    {
        ai.AddOp: _simple("torch.add({0}, {1})"),
        ai.SubOp: _simple("torch.sub({0}, {1})"),
        ai.MulOp: _simple("torch.mul({0}, {1})"),
        ai.MaximumOp: _simple("torch.maximum({0}, {1})"),
        ai.ReluOp: _simple("torch.relu({0})"),
        ai.SigmoidOp: _simple("torch.sigmoid({0})"),
        ai.TanhOp: _simple("torch.tanh({0})"),
        ai.ExpOp: _simple("torch.exp({0})"),
        ai.SqrtOp: _simple("torch.sqrt({0})"),
        ai.NegOp: _simple("torch.neg({0})"),
        ai.AbsOp: _simple("torch.abs({0})"),
        ai.SiluOp: _simple("torch.nn.functional.silu({0})"),
        ai.MinimumOp: _simple("torch.minimum({0}, {1})"),
        ai.PowOp: _simple("torch.pow({0}, {1})"),
        ai.ErfOp: _simple("torch.erf({0})"),
        ai.WhereOp: _simple("torch.where({0} != 0, {1}, {2})"),
    }
)


def _div(op: ai.AiOp, a: list[str]) -> str:
    """Float division; integers divide truncating, 0 where the divisor is 0 (the scalar
    fact: ``torch.div`` of integers would be a true division)."""
    if is_float(spec_of(op.results[0].type).dtype):
        return f"torch.div({a[0]}, {a[1]})"
    return _from_scalar_fact(op, a)


def _expand(op: ai.AiOp, a: list[str]) -> str:
    """A broadcast to the result shape (the scalar fact, an identity, relies on a kernel's
    broadcast indexing, which a lone PyTorch op does not do)."""
    shape = tuple(spec_of(op.results[0].type).shape)
    return f"{a[0]}.expand({shape!r}).contiguous()"


def _clip(op: ai.AiOp, a: list[str]) -> str:
    bounds = [f"{k}={op.attr(k)!r}" for k in ("min", "max") if abs(op.attr(k)) != math.inf]
    return f"torch.clamp({a[0]}, {', '.join(bounds)})" if bounds else a[0]


def _isnan(op: ai.AiOp, a: list[str]) -> str:
    return f"torch.isnan({a[0]}).to({a[0]}.dtype)"


def _gelu(op: ai.AiOp, a: list[str]) -> str:
    approximate = "tanh" if op.attr("approximate") == "tanh" else "none"
    return f"torch.nn.functional.gelu({a[0]}, approximate={approximate!r})"


def _bias_add(op: ai.AiOp, a: list[str]) -> str:
    rank = len(spec_of(op.results[0].type).shape)
    shape = [1] * rank
    shape[op.attr("axis") % rank] = -1
    return f"torch.add({a[0]}, {a[1]}.view({tuple(shape)!r}))"


def _layernorm(op: ai.AiOp, a: list[str]) -> str:
    length = spec_of(op.results[0].type).shape[-1]
    eps = float(op.attr("epsilon"))
    return f"torch.nn.functional.layer_norm({a[0]}, ({length},), {a[1]}, {a[2]}, {eps!r})"


def _rms_norm(op: ai.AiOp, a: list[str]) -> str:
    # ATen's rms_norm takes the statistics in float32 for f16/bf16 (its opmath type), as
    # the row kernel and the reference do
    length = spec_of(op.results[0].type).shape[-1]
    eps = float(op.attr("epsilon"))
    return f"torch.nn.functional.rms_norm({a[0]}, ({length},), {a[1]}, {eps!r})"


def _rotate_half(op: ai.AiOp, a: list[str]) -> str:
    half = spec_of(op.results[0].type).shape[-1] // 2
    return f"torch.cat((-{a[0]}[..., {half}:], {a[0]}[..., :{half}]), dim=-1)"


def _softmax(op: ai.AiOp, a: list[str]) -> str:
    return f"torch.softmax({a[0]}, dim={int(op.attr('axis'))})"


def _cast(op: ai.AiOp, a: list[str]) -> str:
    return f"{a[0]}.to({TORCH_DTYPE[spec_of(op.results[0].type).dtype]})"


def _conv2d(op: ai.AiOp, a: list[str], bias: str = "None") -> str:
    attrs = op.attr_values()
    strides, dilations = tuple(attrs["strides"]), tuple(attrs["dilations"])
    groups = int(attrs["groups"])
    pads = tuple(attrs["padding"])
    x = a[0]
    if len(pads) == 4 and pads[:2] != pads[2:]:  # (h_begin, w_begin, h_end, w_end)
        x = f"torch.nn.functional.pad({x}, {(pads[1], pads[3], pads[0], pads[2])!r})"
        pads = (0, 0)
    padding = pads[:2]
    if spec_of(op.results[0].type).dtype == "f32":
        helper = "tf32_conv2d" if precision_of(op) == "tf32" else "ieee_conv2d"
        return f"{helper}(torch, {x}, {a[1]}, {bias}, {strides}, {padding}, {dilations}, {groups})"
    return (
        f"torch.nn.functional.conv2d({x}, {a[1]}, {bias}, stride={strides}, "
        f"padding={padding}, dilation={dilations}, groups={groups})"
    )


def _operands_of_matmul(op: ai.AiOp, a: list[str]) -> tuple[str, str]:
    ranks = [len(spec_of(v.type).shape) for v in op.operands]
    lhs = f"{a[0]}.transpose(-1, -2)" if op.attr("transpose_a") and ranks[0] >= 2 else a[0]
    rhs = f"{a[1]}.transpose(-1, -2)" if op.attr("transpose_b") and ranks[1] >= 2 else a[1]
    return lhs, rhs


def _matmul(op: ai.AiOp, a: list[str]) -> str:
    lhs, rhs = _operands_of_matmul(op, a)
    if spec_of(op.results[0].type).dtype == "f32":
        return f"ieee_matmul(torch, {lhs}, {rhs})"
    return f"torch.matmul({lhs}, {rhs})"


def _addmm(op: ai.AiOp, a: list[str], bias: str) -> str:
    """bias + a @ b as one cuBLAS call; a (..., M, K) with a 2-D b is viewed as (-1, K)
    (the operands are contiguous), as ``torch.nn.functional.linear`` does."""
    lhs, rhs = _operands_of_matmul(op, a)
    out = spec_of(op.results[0].type).shape
    if len(out) > 2:
        lhs = f"{lhs}.reshape(-1, {spec_of(op.operands[0].type).shape[-1]})"
    call = f"torch.addmm({bias}, {lhs}, {rhs})"
    if spec_of(op.results[0].type).dtype == "f32":
        call = f"ieee_addmm(torch, {bias}, {lhs}, {rhs})"
    return f"{call}.view({out!r})" if len(out) > 2 else call


def _attention(op: ai.AiOp, a: list[str]) -> str:
    scale, nan = float(op.attr("scale")), bool(op.attr("nan_to_zero"))
    softcap = float(op.attr("softcap"))  # where the flash kernel refuses the attention
    cap = f", softcap={softcap!r}" if softcap else ""
    return f"ieee_attention(torch, {', '.join(a)}, {scale!r}, {nan}{cap})"


def _moe_experts(op: ai.AiOp, a: list[str]) -> str:
    return f"moe_experts(torch, {', '.join(a)})"


def _layout(op: ai.AiOp, a: list[str]) -> str:
    return torch_expression(op, a)


def _reduce(op: ai.AiOp, a: list[str]) -> str:
    assert isinstance(op, ai.ReduceOp)
    axes = tuple(int(d) for d in op.reduced_axes())
    function = {"mean": "torch.mean", "sum": "torch.sum", "max": "torch.amax"}[op.KIND]
    return f"{function}({a[0]}, dim={axes!r}, keepdim={bool(op.attr('keepdims'))})"


def _pool(op: ai.AiOp, a: list[str]) -> str:
    """Max pooling through ``max_pool2d`` (asymmetric padding as an explicit -inf pad;
    torch's own ceil_mode rule on the padded input may add a window: cut to the
    result's size). Average pooling as window sums over counts, both by
    ``unfold``, so that padding, dilations, ceil_mode and count_include_pad follow
    the dialect's definition exactly."""
    from fusec.dialect.shapes import conv2d_padding

    assert isinstance(op, ai.Pool2DOp)
    attrs = op.attr_values()
    kernel, strides, dil = (tuple(attrs[k]) for k in ("kernel", "strides", "dilations"))
    pt, pl, pb, pr = conv2d_padding(attrs["padding"])
    n, c, h, w = spec_of(op.input.type).shape
    _, _, oh, ow = spec_of(op.output.type).shape
    f = "torch.nn.functional"
    x = a[0]
    if op.KIND == "max":
        padded = f"{f}.pad({x}, ({pl}, {pr}, {pt}, {pb}), value=float('-inf'))"
        pooled = (
            f"{f}.max_pool2d({padded}, {kernel!r}, {strides!r}, 0, {dil!r}, "
            f"ceil_mode={bool(attrs['ceil_mode'])})"
        )
        return f"{pooled}[:, :, :{oh}, :{ow}]"
    # the zeros a ceil_mode window overhangs beyond the padding count nothing
    extra_h = max(0, (oh - 1) * strides[0] + dil[0] * (kernel[0] - 1) + 1 - (h + pt + pb))
    extra_w = max(0, (ow - 1) * strides[1] + dil[1] * (kernel[1] - 1) + 1 - (w + pl + pr))
    grow = f"({pl}, {pr + extra_w}, {pt}, {pb + extra_h})"
    window = f"{kernel!r}, dilation={dil!r}, stride={strides!r}"
    total = f"{f}.unfold({f}.pad({x}, {grow}).view({n * c}, 1, {h + pt + pb + extra_h}, "
    total += f"{w + pl + pr + extra_w}), {window}).sum(1)"
    pad_value = 1.0 if attrs["count_include_pad"] else 0.0
    ones = f"torch.ones((1, 1, {h}, {w}), dtype={x}.dtype, device={x}.device)"
    mask = f"{f}.pad({f}.pad({ones}, ({pl}, {pr}, {pt}, {pb}), value={pad_value}), "
    mask += f"(0, {extra_w}, 0, {extra_h}))"
    count = f"{f}.unfold({mask}, {window}).sum(1)"
    return f"({total} / {count}).view({n}, {c}, {oh}, {ow})"


LOWERINGS.update(
    {
        ai.ReshapeOp: _layout,
        ai.TransposeOp: _layout,
        ai.SliceOp: _layout,
        ai.ConcatOp: _layout,
        ai.GatherOp: _layout,
        ai.DivOp: _div,
        ai.ExpandOp: _expand,
        ai.TakeOp: _layout,
        ai.CumSumOp: _layout,
        ai.ArgMaxOp: _layout,
        ai.ArgMinOp: _layout,
        ai.ReduceMeanOp: _reduce,
        ai.ReduceSumOp: _reduce,
        ai.ReduceMaxOp: _reduce,
        ai.MaxPool2DOp: _pool,
        ai.AvgPool2DOp: _pool,
        ai.AttentionOp: _attention,
        ai.MoEExpertsOp: _moe_experts,
        ai.ClipOp: _clip,
        ai.IsNanOp: _isnan,
        ai.GeluOp: _gelu,
        ai.BiasAddOp: _bias_add,
        ai.LayerNormOp: _layernorm,
        ai.RMSNormOp: _rms_norm,
        ai.RotateHalfOp: _rotate_half,
        ai.SoftmaxOp: _softmax,
        ai.CastOp: _cast,
        ai.Conv2DOp: _conv2d,
        ai.MatmulOp: _matmul,
    }
)


MARKER = "TORCH_FALLBACK = True"


def runs_op_by_op(source: str) -> bool:
    """Whether a generated kernel module is this fallback (every op rounds to its type)."""
    return MARKER in source


def lowerable(op_type: type[ai.AiOp]) -> bool:
    """Whether the fallback computes ``op_type``: a PyTorch function or its scalar fact."""
    return op_type in LOWERINGS or op_type.has_scalar()


def _from_scalar_fact(op: ai.AiOp, a: list[str]) -> str:
    """An elementwise op without a PyTorch function: its scalar semantics on float32
    copies of its float operands (integer and bool ones as they are), rounded once to the
    declared type (as one kernel would)."""
    dtypes = [spec_of(v.type).dtype for v in op.operands]
    args = [f"{x}.float()" if is_float(d) else x for x, d in zip(a, dtypes, strict=True)]
    expression = ExprGenerator(language=TORCH).scalar(op, args)
    return f"({expression}).to({TORCH_DTYPE[spec_of(op.results[0].type).dtype]})"


def generate(
    fused_op: ai.FusedOp,
    name: str,
    reason: str | None = None,
    template: str = "the Tensor Core template",
) -> KernelSource:
    """A module whose ``run`` evaluates the group body with PyTorch; ``reason`` says why
    the group's template (a Tensor Core one, or the pointwise kernel for integer values)
    cannot serve it."""
    name = kernel_name(name)
    ops = body_ops(fused_op)
    results = yielded(fused_op)
    check_leaves(fused_op, [v for op in ops for v in op.operands if v.owner not in ops])
    for op in ops:
        if not lowerable(type(op)):
            raise error_at(op, "has no PyTorch lowering on the cuda target")
    names: dict[SSAValue, str] = {value: f"x{k}" for k, value in enumerate(fused_op.block.args)}
    code = Source([])
    code.add(0, f"def run(torch, {', '.join(names.values())}):")
    code.add(
        1,
        f'"""The group\'s {len(ops)} op(s) through PyTorch on the current torch stream; '
        'its results."""',
    )
    absorbed = _absorbed_biases(ops, results)
    for n, op in enumerate(ops):
        if op in absorbed.values():
            names[op.results[0]] = names[_absorbing(absorbed, op).results[0]]
            continue
        operands = [_in_dtype(names[v], v, op) for v in op.operands]
        bias_op = absorbed.get(op)
        if bias_op is None:
            lower = LOWERINGS.get(type(op), _from_scalar_fact)
            expression = lower(op, operands)
        else:
            bias = _bias_operand(bias_op, op)
            text = _in_dtype(names[bias], bias, op)
            fuse = _conv2d if isinstance(op, ai.Conv2DOp) else _addmm
            expression = fuse(op, operands, text)
        names[op.results[0]] = f"v{n}"
        code.add(1, f"v{n} = {expression}")
    code.add(1, f"return ({', '.join(names[v] for v in results)},)")
    why = (
        f"{template} cannot serve it: {reason};"
        if reason
        else "no fused CUDA template for this kind yet (Tensor Core templates: issue 12);"
    )
    notes = [
        f"target: cuda, FALLBACK: {why}",
        "runs the group's ops one by one through PyTorch (cuDNN/cuBLAS) on the GPU, "
        "each in its declared element type, on the caller's stream",
    ]
    if "tf32_conv2d(torch," in code.text():
        notes.append("precision: tf32 (cuDNN's Tensor Core conv with allow_tf32 for this call)")
    helper_names = (
        "ieee_conv2d",
        "tf32_conv2d",
        "ieee_matmul",
        "ieee_addmm",
        "ieee_attention",
        "moe_experts",
    )
    helpers = [h for h in helper_names if f"{h}(torch," in code.text()]
    imports = [f"from fusec.targets.cuda.abi import {', '.join(helpers)}", ""] if helpers else []
    source = "\n".join(
        [
            header(fused_op, notes=notes),
            *imports,
            MARKER,
            "KERNELS = []  # no Numba kernels: nothing for --emit ptx",
            "",
            "",
            code.text(),
        ]
    )
    inputs, outputs = io_specs(fused_op)
    kind = fused_op.kind_name
    remark = None
    if reason:
        anchor = next((op for op in ops if not op.has_scalar()), ops[0])
        remark = KernelRemark(location_of(anchor), anchor.name, "cuda", reason)
    return KernelSource(
        name,
        kind,
        "cuda",
        source,
        inputs,
        outputs,
        array_dtype=None,
        runs_op_by_op=True,
        remark=remark,
    )


def _in_dtype(name: str, value, op: ai.AiOp) -> str:
    """``name`` converted to the element type ``op`` computes in, when it differs: one
    float type to another only (a comparison's, a where's condition, a lookup's indices
    and integer operands keep their types)."""
    want = _compute_dtype(op)
    have = spec_of(value.type).dtype
    if want is None or have == want or not (is_float(have) and is_float(want)):
        return name
    return f"{name}.to({TORCH_DTYPE[want]})"


def _compute_dtype(op: ai.AiOp) -> str | None:
    """The element type an op's operands must have in PyTorch (None: any, e.g. a cast)."""
    if isinstance(op, ai.CastOp):
        return None
    return spec_of(op.results[0].type).dtype


def _absorbed_biases(ops: list, results: list) -> dict:
    """core op -> the bias op that follows it and rides on its call (conv2d's bias,
    addmm's): the core's only use, its bias a vector along the output channels/columns."""
    absorbed = {}
    for op in ops:
        if not isinstance(op, (ai.Conv2DOp, ai.MatmulOp)):
            continue
        value = op.results[0]
        uses = list(value.uses)
        if value in results or len(uses) != 1:
            continue
        user = uses[0].operation
        bias = _bias_operand(user, op) if user in ops else None
        if isinstance(bias, BlockArgument):  # defined before the core's call
            absorbed[op] = user
    return absorbed


def _absorbing(absorbed: dict, bias_op) -> ai.AiOp:
    return next(core for core, user in absorbed.items() if user is bias_op)


def _bias_operand(user, core: ai.AiOp):
    """The vector that ``user`` adds to ``core``'s result, if it is a bias the core's call
    can take; else None."""
    out = spec_of(core.results[0].type)
    if spec_of(user.results[0].type) != out:
        return None
    value = core.results[0]
    if isinstance(core, ai.Conv2DOp):
        channels = out.shape[1]
        if isinstance(user, ai.BiasAddOp) and user.operands[0] is value:
            if user.attr("axis") % 4 == 1 and spec_of(user.operands[1].type).shape == (channels,):
                return user.operands[1]
        return None
    lhs_rank, rhs_rank = (len(spec_of(v.type).shape) for v in core.operands)
    if lhs_rank < 2 or rhs_rank != 2 or (lhs_rank > 2 and core.attr("transpose_a")):
        return None  # addmm is for (rows, K) @ (K, N), rows possibly flattened batch dims
    rank, columns = len(out.shape), out.shape[-1]
    if isinstance(user, ai.BiasAddOp) and user.operands[0] is value:
        if user.attr("axis") % rank == rank - 1:
            if spec_of(user.operands[1].type).shape == (columns,):
                return user.operands[1]
        return None
    if isinstance(user, ai.AddOp):
        for mine, other in ((0, 1), (1, 0)):
            if user.operands[mine] is value and user.operands[other] is not value:
                if spec_of(user.operands[other].type).shape in ((columns,), (1, columns)):
                    return user.operands[other]
    return None
