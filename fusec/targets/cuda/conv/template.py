"""The cuda target's ``conv`` template: one kernel per ``ai.fused "conv"`` group.

A group is ``ai.conv2d`` on two group inputs followed by elementwise ops of the
conv's output shape (bias, BatchNorm folded to a per-channel scale and shift,
activations, a residual add, casts: the epilogue, rendered to C++ by
``CppExprGenerator`` and run on the f32 accumulators before the one rounding
to the output type). It runs as

* the implicit GEMM on the Hopper Tensor Cores (``cpp.ConvSpec``) for f16/bf16
  with at least 16 input channels per group and a stride along W of at most 4 (a
  strided conv reads its channels-last input by TMA boxes that step over pixels);
* the direct template (``cpp.DirectConvSpec``) for f16/bf16 depthwise and other
  grouped convs of fewer than 16 channels a group (not a GEMM worth the name); a
  depthwise group the ``channels-last`` pass relaid (``fusec.layout`` input and output
  "nhwc") runs its NHWC kernel (``conv_depthwise_nhwc.cuh``); an
  ungrouped conv of fewer channels (a stem) is the implicit GEMM of a 1x1 conv over its
  im2col matrix, any stride (``conv.im2col``; ``FEW_CHANNELS_ENV``);
* a 1x1 conv on a 1x1 plane of at most ``gemv.MAX_ROWS`` images (squeeze-excite at small
  batch: one row of a GEMM) as dot products on CUDA cores (``gemv``), in any layout;
* the PyTorch fallback (``fusec.targets.cuda.torch_fallback``) otherwise, the reason in
  its header: f32 graphs (IEEE f32 through cuDNN without TF32; the templates
  are 16-bit Tensor Core kernels), a stride along W over 4 with many channels (a
  strip's box would traverse more than TMA's 256 pixels).

Memory layouts come from the IR: ``fusec.layout`` on the group (written by the
``conv-layout`` pass, ``conv.layout``) says whether the implicit GEMM takes its
input channels-last (``ConvSpec`` input "given", else the NCHW input is copied
channels-last by the module's own kernel, or read in place: ``$FUSEC_CONV_INPUT``),
its weights KRSC (else re-laid out per call) and stores its result NHWC. The
body's ``ai.transpose`` views around the conv must agree (``plan`` checks them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation, SSAValue

from fusec.codegen import KernelSource
from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    broadcast_offset,
    header,
    leaf_shapes,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.shapes import conv2d_padding
from fusec.environ import switch
from fusec.ir.module import precision_of
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.common import as_packed, body_ops, integer_values, kernel_name, yielded
from fusec.targets.cuda.conv import gemv
from fusec.targets.cuda.conv.config import ConvGeometry, ConvTile, choose_tile
from fusec.targets.cuda.conv.cpp import (
    INPUTS,
    ConvSpec,
    DirectConvSpec,
    implicit_gemm_problem,
    nchw_input_problem,
)
from fusec.targets.cuda.conv.im2col import im2col_problem
from fusec.targets.cuda.conv.layouts import (
    LAYOUT_ATTR,
    TO_CHANNELS_FIRST,
    TO_CHANNELS_LAST,
    Layout,
    layout_of,
)
from fusec.targets.cuda.cpp_expr import CppExprGenerator
from fusec.targets.cuda.epilogue import Epilogue
from fusec.targets.cuda.linked import linked_kernel_source, loads_early

TILE_ATTR = "fusec.tile"
TILE_ENV = "FUSEC_CONV_TILE"
#: "nchw": the implicit GEMM reads the NCHW input in place by TMA where the shape allows
#: (``cpp.nchw_input_problem``: tap shifts along W in multiples of 8 pixels), no
#: channels-last copy; "nchw-ld": in place by the producer warpgroup's 16-byte loads
#: (any tap shift, W a multiple of 8); unset or "nhwc": the copy (the default)
INPUT_ENV = "FUSEC_CONV_INPUT"
#: "early": the implicit GEMM's epilogue loads its per-channel vectors and output-shaped
#: inputs (a residual) with predicated loads issued ahead of use (``cpp.ConvSpec``
#: ``epilogue_loads``), the default since measured on the H200 (ResNet block's second conv
#: 38.5 -> 31.9 us, benchmarks/results/profile.md); "inline": at each element
EPILOGUE_ENV = "FUSEC_CONV_EPILOGUE"
_DTYPES = ("f16", "bf16")
#: The kernels a conv group may run as (``route``); anything else is the fallback's reason.
ROUTES = ("implicit", "direct", "gemv")
#: below this many input channels per group the direct template serves the conv
MIN_GEMM_CHANNELS = 16
#: An ungrouped conv of fewer than MIN_GEMM_CHANNELS input channels (a stem: 3 channels of
#: an image) runs as the implicit GEMM of a 1x1 conv over its im2col matrix ("im2col", the
#: default: 3 reduction chunks for the 7x7 stem instead of 49, ``conv.im2col``), as the
#: implicit GEMM over taps with its 64-channel reduction chunks zero-filled past the real
#: channels ("implicit": ResNet-50's 7x7/2 stem at batch 32 took 0.886 ms, against the
#: direct kernel's 1.716 ms on the H200, conv-attn.md), or as the direct template
#: ("direct"); A/B switches: conv_attn_bench.py --only stem
FEW_CHANNELS_ENV = "FUSEC_CONV_FEW_CHANNELS"
FEW_CHANNELS = ("im2col", "implicit", "direct")


@dataclass(frozen=True)
class ConvPlan:
    """How a group maps onto the templates."""

    conv: ai.Conv2DOp
    epilogue_ops: tuple
    geo: ConvGeometry
    x: int  # group input index of the conv input
    w: int  # ... and of the weights
    #: the memory layouts of the input, weights and result (``fusec.layout``, written by
    #: the ``conv-layout`` pass; NCHW/KCRS without it)
    layout: Layout = Layout()
    #: the NCHW views of the epilogue inputs read channels-last (``residual = "nhwc"``):
    #: (view result, its group input index) pairs
    residual_views: tuple[tuple[SSAValue, int], ...] = ()

    @property
    def result(self):
        """The NCHW value the epilogue computes (the body's view before an NHWC store)."""
        return self.epilogue_ops[-1].results[0] if self.epilogue_ops else self.conv.output


def plan(fused_op: ai.FusedOp) -> ConvPlan | str:
    """The templates' view of ``fused_op``, or why the group needs the fallback."""
    layout = layout_of(fused_op)
    if isinstance(layout, str):
        return layout
    ops = body_ops(fused_op)
    args: dict[SSAValue, int] = {arg: i for i, arg in enumerate(fused_op.block.args)}
    views = _views(ops, args, layout)
    if isinstance(views, str):
        return views
    ops = ops[len(views) :]
    residual: dict[SSAValue, int] = {}
    while layout.residual == "nhwc" and ops and _is_view(ops[0], TO_CHANNELS_FIRST):
        view = ops.pop(0)
        if view.input not in args:
            return f"{LAYOUT_ATTR} residual nhwc: a view of a value computed in the group"
        residual[view.output] = args[view.input]
    if layout.residual == "nhwc" and not residual:
        return f"{LAYOUT_ATTR} says residual nhwc, but the body views no input so"
    if layout.output == "nhwc":
        if not ops or not _is_view(ops[-1], TO_CHANNELS_LAST, yielded(fused_op)[0]):
            return f"{LAYOUT_ATTR} says output nhwc, but the body does not end in that transpose"
        ops = ops[:-1]
    p = plan_ops(ops, views, args, len(fused_op.results), layout)
    if isinstance(p, str) or not residual:
        return p
    out_shape = spec_of(p.conv.output.type).shape
    for value in residual:
        if spec_of(value.type).shape != out_shape or p.conv in [u.operation for u in value.uses]:
            return f"{LAYOUT_ATTR} residual nhwc: a viewed input is not a residual of the output"
    return replace(p, residual_views=tuple(residual.items()))


def plan_ops(
    ops: Sequence[Operation],
    views: Sequence[ai.TransposeOp],
    args: Mapping[SSAValue, int],
    results: int,
    layout: Layout,
) -> ConvPlan | str:
    """The plan of a group of ``ops`` (in block order, after the operand ``views`` that
    ``layout`` relays) whose inputs are ``args`` (value -> group input index) and which
    writes ``results`` values, or why the templates cannot compute it: the one rule that
    fusion (``accepts``) and code generation (``plan``) ask."""
    if (reason := integer_values([*views, *ops], "the cuda conv templates")) is not None:
        return reason
    if not ops or not isinstance(ops[0], ai.Conv2DOp):
        return "the group does not start with its conv2d (a prologue?)"
    conv = ops[0]
    rest = tuple(ops[1:])
    if results != 1 or not all(isinstance(op, ELEMENTWISE_OPS) for op in rest):
        return "the epilogue is not a chain of elementwise ops with one result"
    if any([u.operation for u in v.output.uses] != [conv] for v in views):
        return "a transposed operand is read beyond the conv"
    sources = {view.output: view.input for view in views}
    x_arg, w_arg = (sources.get(v, v) for v in (conv.input, conv.weight))
    if x_arg not in args or w_arg not in args:
        return "a conv operand is computed inside the group"
    if (x_arg is not conv.input) != (layout.input == "nhwc") or (w_arg is not conv.weight) != (
        layout.weight == "krsc"
    ):
        return f"the body's transposes do not match its {LAYOUT_ATTR}"
    x, w, out = (spec_of(v.type) for v in (conv.input, conv.weight, conv.output))
    if x.dtype not in _DTYPES:
        if x.dtype == "f32" and precision_of(conv) == "tf32":
            return (
                "f32 conv with precision=tf32: the implicit-GEMM template is an f16/bf16 "
                "kernel; cuDNN runs the conv in tf32 (allow_tf32 for this call)"
            )
        return (
            f"{x.dtype} conv: f32 graphs keep IEEE f32 maths (cuDNN without TF32); "
            "the conv templates are f16/bf16 kernels with f32 accumulation"
        )
    if any(spec_of(op.results[0].type).shape != out.shape for op in rest):
        return "an epilogue op broadcasts beyond the conv's shape"
    geo = geometry(conv)
    if (geo.p, geo.q) != out.shape[2:] or 0 in (*x.shape, *w.shape):
        return "an empty dimension"
    return ConvPlan(conv, rest, geo, args[x_arg], args[w_arg], layout)


def _is_view(op, perm: tuple[int, ...], value=None) -> bool:
    """``op`` is ``ai.transpose {perm}`` (whose result is ``value``, when given)."""
    return (
        isinstance(op, ai.TransposeOp)
        and op.attr("perm") == perm
        and (value is None or op.output is value)
    )


def _views(ops: list, args: dict, layout: Layout) -> list | str:
    """The leading ``ai.transpose`` views of a channels-last input and KRSC weights (as
    many as ``layout`` relays), or what is wrong with them."""
    count = (layout.input == "nhwc") + (layout.weight == "krsc")
    views = ops[:count]
    if len(views) < count or not all(
        _is_view(v, TO_CHANNELS_FIRST) and v.input in args for v in views
    ):
        return f"{LAYOUT_ATTR} relays {count} operand(s), but the body lacks their transposes"
    return views


def geometry(conv: ai.Conv2DOp) -> ConvGeometry:
    """The ``ConvGeometry`` of ``conv`` (shapes and attributes)."""
    x, w = (spec_of(v.type) for v in (conv.input, conv.weight))
    attrs = conv.attr_values()
    pt, pl, pb, pr = conv2d_padding(attrs["padding"])
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    groups = int(attrs["groups"])
    return ConvGeometry(n, c, h, wd, k, r, s, sh, sw, pt, pl, pb, pr, dh, dw, groups)


def plan_members(members: Sequence[Operation]) -> ConvPlan | str:
    """``plan_ops`` of the group fusion would pack from ``members`` (flat ops of one block,
    before ``conv-layout``: NCHW/KCRS operands, no views): the body order, inputs and
    results ``outline.pack`` gives it."""
    ordered, inputs, results = as_packed(members)
    return plan_ops(ordered, (), inputs, results, Layout())


def accepts(members: Sequence[Operation], anchor: Operation | None) -> str | None:
    """Whether a template of this module computes a conv group of ``members`` fused
    (``Template.accepts`` of the cuda target): ``plan_members`` and a route other than
    the fallback, so fusion forms no group that code generation would hand to PyTorch,
    where fused work runs op by op, slower than a separate kernel."""
    if len(members) == 1 or not isinstance(anchor, ai.Conv2DOp):
        return None
    fallback = "so the group would run op by op through PyTorch"
    p = plan_members(members)
    if isinstance(p, str):
        return f"the cuda conv templates cannot take the group ({p}), {fallback}"
    how = route(p)
    return None if how in ROUTES else f"{how}, {fallback}"


def epilogue(fused_op: ai.FusedOp, p: ConvPlan) -> tuple[Epilogue, tuple[int, ...]]:
    """The group's elementwise tail as C++ on ``acc`` at NCHW output element ``i0..i3``,
    and the group inputs it reads (in ``e0, e1...`` order)."""
    out_shape = spec_of(p.conv.output.type).shape
    index_vars = ["i0", "i1", "i2", "i3"]
    args = {arg: index for index, arg in enumerate(fused_op.block.args)}
    shapes = leaf_shapes(p.epilogue_ops) if p.epilogue_ops else {}
    extras: list[str] = []
    extra_inputs: list[int] = []
    gen = CppExprGenerator()

    channel_args: list[int] = []
    pixel_args: list[int] = []
    pixel_nhwc: list[int] = []

    residual = dict(p.residual_views)

    def leaf(value) -> str:
        if value is p.conv.output:
            return "acc"
        index = residual[value] if value in residual else args[value]
        if index not in extra_inputs:
            extra_inputs.append(index)
            extras.append(spec_of(value.type).dtype)
        slot = extra_inputs.index(index)
        if value in residual:  # an NHWC input the kernel loads at the element's NHWC index
            if slot not in pixel_args:
                pixel_args.append(slot)
                pixel_nhwc.append(slot)
            return f"ev{slot}"
        offset = broadcast_offset(out_shape, shapes[value], index_vars)
        # per-channel vectors and output-shaped tensors are loaded by the kernel (once per
        # tile row, ahead of use: ``cpp.ConvSpec.epilogue_loads``) and passed as arguments
        if offset == "i1":
            if slot not in channel_args:
                channel_args.append(slot)
            return f"ev{slot}"
        if tuple(shapes[value]) == tuple(out_shape):
            if slot not in pixel_args:
                pixel_args.append(slot)
            return f"ev{slot}"
        return f"fs_ld_{spec_of(value.type).dtype}(e{slot}, {offset})"

    stmts, names = gen.chain(p.epilogue_ops, leaf)
    final = names[p.result] if p.epilogue_ops else "acc"
    body = "\n".join([*stmts, f"y = {final};"])
    name = " -> ".join(op.name for op in p.epilogue_ops) or "identity"
    epi = Epilogue(
        body,
        tuple(extras),
        name,
        gen.helper_source(),
        channel_args=tuple(channel_args),
        pixel_args=tuple(pixel_args),
        pixel_nhwc=tuple(pixel_nhwc),
    )
    return epi, tuple(extra_inputs)


def tile_for(fused_op: ai.FusedOp, geo: ConvGeometry, sms: int = H200.sms) -> ConvTile:
    """The group's ``fusec.tile`` attribute, else ``$FUSEC_CONV_TILE`` (e.g. "64x128 s6
    c2n": an A/B switch for benchmarks, applied to every implicit-GEMM conv it fits),
    else ``choose_tile``."""
    attr = fused_op.attributes.get(TILE_ATTR)
    if isinstance(attr, StringAttr):
        return ConvTile.parse(attr.data)
    forced = os.environ.get(TILE_ENV, "").strip()
    if forced:
        try:
            return ConvTile.parse(forced)
        except ValueError as err:
            raise ValueError(f"${TILE_ENV}: {err}") from None
    return choose_tile(geo, sms)


def input_for(geo: ConvGeometry) -> tuple[str, str | None]:
    """The input layout of the implicit GEMM (``$FUSEC_CONV_INPUT``, an opt-in A/B switch:
    "nchw" or "nchw-ld" where ``nchw_input_problem`` allows it, else the channels-last
    copy) and, when the in-place read was asked for but cannot serve ``geo``, what and
    why (validated words and ``nchw_input_problem``'s text, never the raw variable)."""
    asked = switch(INPUT_ENV, INPUTS)
    if asked == "nhwc":
        return "nhwc", None
    why = nchw_input_problem(geo, tma=asked == "nchw")
    return ("nhwc", f"{asked} not applied: {why}") if why else (asked, None)


def few_channels_mode() -> str:
    """``$FUSEC_CONV_FEW_CHANNELS`` (validated: "im2col", the default, "implicit" or
    "direct")."""
    return switch(FEW_CHANNELS_ENV, FEW_CHANNELS)


def im2col_for(p: ConvPlan) -> bool:
    """Whether ``p``'s implicit GEMM is the 1x1 conv over its im2col matrix: an ungrouped
    few-channel conv with NCHW input and KCRS weights (the matrix's column order is theirs)."""
    return (
        p.geo.cg < MIN_GEMM_CHANNELS
        and few_channels_mode() == "im2col"
        and p.layout.input == "nchw"
        and p.layout.weight == "kcrs"
        and im2col_problem(p.geo) is None
    )


def epilogue_loads_for() -> str:
    """``$FUSEC_CONV_EPILOGUE`` (an A/B switch: "early", the default, or "inline")."""
    return switch(EPILOGUE_ENV, ("early", "inline"))


#: the layout of a depthwise group the ``channels-last`` pass relaid (NHWC in and out)
DEPTHWISE_NHWC = Layout(input="nhwc", output="nhwc")


def depthwise(geo: ConvGeometry) -> bool:
    """One input and one output channel a group."""
    return geo.groups == geo.c == geo.k and geo.cg == 1


def gemm_geometry(p: ConvPlan) -> ConvGeometry:
    """The conv the implicit GEMM of ``p`` runs: the 1x1 conv over the im2col matrix
    (``im2col_for``), a 1x1 conv's pixels as one row (``pixel_row``), else ``p``'s own."""
    if im2col_for(p):
        return p.geo.im2col()
    return pixel_row(p) or p.geo


def pixel_row(p: ConvPlan) -> ConvGeometry | None:
    """A 1x1 conv of stride 1 without padding as the same conv over one row of pixels:
    ``[N][1][H*W]`` (every layout stores an image's pixels in that order), or
    ``[1][1][N*H*W]`` when everything it addresses by pixel is channels-last. The implicit
    GEMM's tiles are strips of 64 pixels of one output row: a 14x14 output filled them to
    22%, a 7x7 one to 11% (ResNet-50's last two stages, benchmarks/results/models-gpu.md);
    one row fills them but for its last strip. None when the conv is not such a 1x1 or
    an epilogue input is indexed by H or W apart (``[..., H, 1]``, ``[..., 1, W]``): the
    epilogue's indices (n, p, q) become (n, 0, h * W + w), or (0, 0, (n * H + h) * W + w)."""
    geo = p.geo
    if (geo.r, geo.s, geo.stride_h, geo.stride_w, geo.groups) != (1, 1, 1, 1, 1):
        return None
    if any((geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right)):
        return None
    out = tuple(spec_of(p.conv.output.type).shape)
    residuals = {view for view, _ in p.residual_views}
    shapes = leaf_shapes(p.epilogue_ops) if p.epilogue_ops else {}
    leaves = [
        (value, (1,) * (4 - len(shape)) + tuple(shape))
        for value, shape in shapes.items()
        if value is not p.conv.output
    ]
    if not all(shape[2:] in ((1, 1), out[2:]) for _, shape in leaves):
        return None
    whole = (
        p.layout.input == "nhwc"
        and p.layout.output == "nhwc"
        and all(v in residuals or (s[0], s[2:]) == (1, (1, 1)) for v, s in leaves)
    )
    if whole:
        return replace(geo, n=1, h=1, w=geo.n * geo.h * geo.w)
    return replace(geo, h=1, w=geo.h * geo.w)


def _pixel_row_note(geo: ConvGeometry, gemm_geo: ConvGeometry, source: object) -> list[str]:
    if source is not None or gemm_geo == geo:
        return []
    rows = "the batch's" if gemm_geo.n == 1 and geo.n > 1 else "each image's"
    return [f"pixels as one row: {rows} {gemm_geo.w} pixels in strips of 64 (a 1x1 conv)"]


#: ``$FUSEC_CONV_GEMV``: "off" routes the convs ``gemv.gemv_problem`` accepts to the
#: implicit GEMM as before (an A/B switch; unset or "on": the gemv kernel)
GEMV_ENV = "FUSEC_CONV_GEMV"


def gemv_enabled() -> bool:
    """``$FUSEC_CONV_GEMV`` (validated: "on", the default, or "off")."""
    return switch(GEMV_ENV, ("on", "off")) == "on"


def route(p: ConvPlan) -> str:
    """``"gemv"``, ``"implicit"``, ``"direct"`` or the reason for the fallback."""
    if gemv_enabled() and gemv.gemv_problem(p.geo, p.residual_views) is None:
        return "gemv"
    if im2col_for(p):
        return implicit_gemm_problem(gemm_geometry(p)) or "implicit"
    how = route_geometry(p.geo)
    if how == "direct" and p.layout != Layout():
        if p.layout == DEPTHWISE_NHWC and depthwise(p.geo):
            return how  # the NHWC depthwise kernel
        return (
            f"the direct conv reads NCHW/KCRS operands (or NHWC ones of a depthwise conv) "
            f"only, not {LAYOUT_ATTR} {p.layout}"
        )
    return how


def route_geometry(geo: ConvGeometry) -> str:
    """``"implicit"``, ``"direct"`` or the reason for the fallback."""
    if geo.cg < MIN_GEMM_CHANNELS and (geo.groups != 1 or few_channels_mode() == "direct"):
        return "direct"
    why = implicit_gemm_problem(geo)
    return why or "implicit"


_INPUT_NOTES = {
    "nhwc": "input made channels-last per call (a small launch before the conv); 5-D TMA "
    "boxes per tap, padding = zero fill;",
    "given": f"input given channels-last by the previous conv group or a layout conversion "
    f"({LAYOUT_ATTR} input = nhwc): no copy; 5-D TMA boxes per tap, padding = zero fill;",
    "nchw": "NCHW input read in place by 5-D TMA boxes per tap (MN-major B, transposed "
    "wgmma), padding = zero fill;",
    "nchw-ld": "NCHW input loaded in place by the producer warpgroup (16-byte loads shifted "
    "in registers, MN-major B, transposed wgmma), padding = zeros;",
    "im2col": "few channels: the NCHW input gathered per call into its im2col matrix "
    "[N][P][Q][C*R*S] (a small launch before the conv), the GEMM a 1x1 conv over its "
    "{ck} channels;",
}
_WEIGHT_NOTES = {
    "kcrs": "weights re-laid out to [K][R*S][C] per call (a small launch before the conv);",
    "krsc": f"weights given [K][R][S][C] ({LAYOUT_ATTR} weight = krsc): no re-layout;",
    "im2col": "weights read as [K][C*R*S] and padded per call (a small launch before the conv);",
}


def _geometry_text(geo: ConvGeometry) -> str:
    """``geo`` as the generated module constructs it."""
    return (
        f"ConvGeometry({geo.n}, {geo.c}, {geo.h}, {geo.w}, {geo.k}, {geo.r}, {geo.s}, "
        f"{geo.stride_h}, {geo.stride_w}, {geo.pad_top}, {geo.pad_left}, {geo.pad_bottom}, "
        f"{geo.pad_right}, {geo.dil_h}, {geo.dil_w}, {geo.groups}"
        + (f", max_strip_rows={geo.max_strip_rows})" if geo.max_strip_rows != ROWS else ")")
    )


#: ``ConvGeometry.max_strip_rows``'s default (written only when another)
ROWS = ConvGeometry.__dataclass_fields__["max_strip_rows"].default


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of a conv group (the fallback's when no template can serve it)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    p = plan(fused_op)
    how = p if isinstance(p, str) else route(p)
    if isinstance(p, str) or how not in ROUTES:
        return torch_fallback.generate(fused_op, name, reason=how)
    if how == "gemv":
        return gemv.generate(fused_op, p.conv, name, p.geo)
    epi, extra_inputs = epilogue(fused_op, p)
    dtype = spec_of(p.conv.input.type).dtype
    out_dtype = spec_of(fused_op.results[0].type).dtype
    geo = p.geo
    geo_text = _geometry_text(geo)
    epi_text = (
        f"Epilogue({epi.body!r}, {epi.extras!r}, {epi.name!r}, {epi.helpers!r}, "
        f"channel_args={epi.channel_args!r}, pixel_args={epi.pixel_args!r}, "
        f"pixel_nhwc={epi.pixel_nhwc!r})"
    )
    layout_text = ""
    shape = (
        f"N{geo.n} C{geo.c} {geo.h}x{geo.w} -> K{geo.k} {geo.p}x{geo.q}, {geo.r}x{geo.s}, "
        f"stride {geo.stride_h}x{geo.stride_w}, pad {geo.pad_top},{geo.pad_left},"
        f"{geo.pad_bottom},{geo.pad_right}, dilation {geo.dil_h}x{geo.dil_w}, groups {geo.groups}"
    )
    spec: ConvSpec | DirectConvSpec
    if how == "implicit":
        gemm_geo = gemm_geometry(p)
        source = geo if im2col_for(p) else None
        layout, refused = ("im2col", None) if source else input_for(geo)
        if p.layout.input == "nhwc":  # conv-layout relaid it (refused: why not in place)
            layout = "given"
        if layout in ("nchw", "nchw-ld"):  # read in place: a strip is one row (ConvSpec)
            gemm_geo = replace(gemm_geo, max_strip_rows=1)
        tile = tile_for(fused_op, gemm_geo)
        weight = "krsc" if p.layout.weight == "krsc" else "kcrs"
        loads = epilogue_loads_for()
        spec = ConvSpec(
            gemm_geo, tile, dtype, out_dtype, epi, layout, loads, p.layout.output, weight, source
        )
        early_w = spec.weights_as_given and loads_early(fused_op, p.w)
        spec = replace(spec, early_w=True) if early_w else spec
        notes = [
            "target: cuda, implicit-GEMM conv2d on the Hopper Tensor Cores (wgmma + TMA, "
            f"sm_90a), tile {tile.text}, {spec.tiles} tiles;",
            f"{shape}; {dtype} -> {out_dtype}, f32 accumulation;",
            _INPUT_NOTES[spec.input].format(ck=gemm_geo.c),
            *_pixel_row_note(geo, gemm_geo, source),
            _WEIGHT_NOTES["im2col" if source else spec.weight],
            f"epilogue on the accumulators: {epi.name} (f32, one rounding at the store)",
        ]
        if refused:
            notes.append(f"${INPUT_ENV}={refused}")
        spec_text = f"ConvSpec({_geometry_text(gemm_geo)}, ConvTile.parse({tile.text!r}), "
        spec_text += f"{dtype!r}, "
        layout_text = "" if spec.copies_input else f", input={spec.input!r}"
        if source:
            layout_text += f", source={geo_text}"
        if spec.out_layout != "nchw":
            layout_text += f", out_layout={spec.out_layout!r}"
            notes.append(
                "output stored channels-last [N][P][Q][K] for the next conv group(s), its only "
                f"readers ({LAYOUT_ATTR} output = nhwc)"
            )
        if spec.weight != "kcrs":
            layout_text += f", weight={spec.weight!r}"
        if early_w:
            layout_text += ", early_w=True"
            notes.append(
                "constant weights: the first stages loaded before the wait for the kernel before it"
            )
        if loads != "inline":
            layout_text += f", epilogue_loads={loads!r}"
            notes.append(
                "epilogue inputs (per-channel vectors, output-shaped tensors) loaded "
                "ahead of use ($FUSEC_CONV_EPILOGUE=early)"
            )
    elif p.layout == DEPTHWISE_NHWC:
        spec = DirectConvSpec(geo, dtype, out_dtype, epi, "nhwc")
        dw = spec.tile
        assert dw is not None
        notes = [
            "target: cuda, direct conv2d channels-last (depthwise, NHWC input and output, "
            f"{LAYOUT_ATTR} from the channels-last pass; f32 accumulation): "
            f"{geo.cg} input channel(s) per group is not a Tensor Core GEMM;",
            f"{shape}; {dtype} -> {out_dtype};",
            f"tile {dw.tp}x{dw.tq} pixels x {dw.cb} channels a block ({dw.threads} "
            f"threads, {spec.smem_bytes} B shared: the input window and f32 weights), "
            f"{dw.cv} channel(s) x {dw.qt} pixels a thread;",
            f"epilogue: {epi.name} (f32, one rounding at the store)",
        ]
        spec_text = f"DirectConvSpec({geo_text}, {dtype!r}, "
        layout_text = ", layout='nhwc'"
    else:
        spec = DirectConvSpec(geo, dtype, out_dtype, epi)
        notes = [
            "target: cuda, direct conv2d (one output element per thread, f32 accumulation): "
            f"{geo.cg} input channel(s) per group is not a Tensor Core GEMM;",
            f"{shape}; {dtype} -> {out_dtype};",
            f"epilogue: {epi.name} (f32, one rounding at the store)",
        ]
        spec_text = f"DirectConvSpec({geo_text}, {dtype!r}, "
    lines = [
        header(fused_op, notes=notes),
        "from fusec.targets.cuda.abi import (  # noqa: F401",
        "    ConvGeometry, ConvLaunch, ConvSpec, ConvTile, DirectConvSpec, Epilogue,",
        ")",
        "",
        "CONV = ConvLaunch(",
        f"    {spec_text}{out_dtype!r},",
        f"        {epi_text}{layout_text}),",
        f"    x={p.x}, w={p.w}, extras={extra_inputs!r},",
        ")",
    ]
    return linked_kernel_source(
        fused_op,
        name,
        "conv",
        lines,
        var="CONV",
        launcher="ConvLaunch",
        spec=spec,
        tail=("CONV_SPECS = [CONV.spec]",),
    )
