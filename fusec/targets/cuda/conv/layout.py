"""``conv-layout``: channels-last activations and KRSC weights for the cuda conv groups.

The graph is NCHW with KCRS weights at the API; the implicit-GEMM conv reads its
input channels-last (``[N][H][W][C]``) and its weights as ``[K][R][S][C]``. This
pass, run after fusion in the cuda pipeline, makes that choice explicit in the IR:

* first, the target-independent ``channels-last`` pass (``fusec.passes.channels_last``,
  on f16/bf16) keeps depthwise conv stages channels-last: ConvNeXt's depthwise conv,
  its layer-scale and residual add run NHWC (the direct template's NHWC kernel,
  ``conv_depthwise_nhwc.cuh``), so the permutes around each block's LayerNorm and MLP
  go (issue 28; ``$FUSEC_CONV_DEPTHWISE=nchw`` or ``handoff=off`` keeps them NCHW); a
  relaid elementwise group that then reads a matmul group's result directly (the layer
  scale and residual add after the block's second Linear) becomes that GEMM's epilogue
  where the Tensor Core template takes the merged group (``_merge_into_gemms``);

* every conv group the implicit GEMM serves with one group and ``C % 8 == 0``,
  whose input and weights only the conv reads (``channels_last_plan``), takes its
  weights KRSC and, unless an in-place NCHW read is asked for
  (``$FUSEC_CONV_INPUT``), its input NHWC. Its result is stored NHWC when every
  use of it reads NHWC: the input of such a group (the conv -> conv hand-off) or of
  an elementwise group relaid as below (``handoff=off``, or
  ``$FUSEC_CONV_HANDOFF=off`` when the option is not given, keeps every result
  NCHW). The group says so in
  ``fusec.layout = {input = "nhwc", weight = "krsc", output = "nhwc"}``, and its body
  is the same computation on the new operand types: a ``ai.transpose`` from each
  relaid operand back to the conv's NCHW/KCRS view, and one to NHWC before the
  ``ai.yield`` (views the template folds into its addressing, never copies);
* an elementwise group between such convs follows them: a pointwise group of
  elementwise ops without an axis whose inputs are of its (4-D) result's shape or
  single elements computes on NHWC values (its body retyped, ``fusec.layout =
  {input = "nhwc", output = "nhwc"}``) when its full-shape inputs all come NHWC and
  its every reader reads NHWC, so the conversions on both sides cancel (with
  ``handoff=off``, never);
* a pool or reduce group reads its anchor's input NHWC where the producer stores it
  so (a channels-last reader, ``fusec.targets.cuda.anchored.nhwc_input_index``: its
  body views the NHWC input NCHW with an ``ai.transpose``, which its kernel folds into
  its addressing; a mean over H alone, which that would reorder, is none), and a pool
  stores its result NHWC when every reader reads NHWC (``fusec.layout = {input =
  "nhwc", output = "nhwc"}``, or input "nchw" after a conv that stores NCHW, as a stem
  conv on 3 channels): conv -> max pool -> conv and conv -> global mean need no
  conversion (with ``handoff=off``, never);
* conversions ``ai.transpose {perm = [0, 2, 3, 1]}`` (NCHW -> NHWC, also KCRS ->
  KRSC) are inserted in front of the relaid operands, and ``[0, 3, 1, 2]`` behind
  a relaid result for each of its uses; an operand that is a ``"copy"`` group's NHWC ->
  NCHW transpose is taken NHWC from that copy's source (the copy goes when unread), and
  a result whose readers are all ``"copy"`` groups transposing it NHWC is stored NHWC
  in their place (a LayerNorm2d's permutes, the channels-last stage's conversions);
* xDSL's pattern rewriter then composes adjacent conversions (a hand-off's
  NHWC -> NCHW -> NHWC pair cancels) and folds the conversion of a constant into a
  new ``arith.constant`` (constant weights are relaid at compile time);
* each conversion left is a ``ai.fused "copy"`` group of its own (the cuda copy
  template runs it as the channels-last transpose kernel): the graph's NCHW inputs
  and graph-input weights, converted once per call however many convs read them;
  one that moves only dimensions of size 1 (``[N, C, 1, 1]``, the model's own permute of
  a pooled value too) keeps the elements' order and becomes a ``"view"`` group.

Function arguments and results keep their NCHW types. Everything the pass writes
is ordinary ``ai`` IR, so the reference executor runs it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue, Use
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint, Rewriter

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.views import ComposeTransposes, at_function_level
from fusec.environ import switch
from fusec.ir.constants import constant_value, dense_constant
from fusec.passes.channels_last import Free, relayout_block, transpose_copy
from fusec.passes.fusion.outline import retyped_group
from fusec.targets.cuda.conv.layouts import (
    LAYOUT_ATTR,
    TO_CHANNELS_FIRST,
    TO_CHANNELS_LAST,
    Layout,
)

if TYPE_CHECKING:
    from fusec.targets.cuda.conv.template import ConvPlan

#: "off": every conv result stays NCHW (the pass option ``handoff`` wins when given)
HANDOFF_ENV = "FUSEC_CONV_HANDOFF"
HANDOFFS = ("nhwc", "off")
#: "nchw": depthwise conv stages stay NCHW (no ``channels-last`` step; an A/B switch);
#: unset or "nhwc": they run channels-last
DEPTHWISE_ENV = "FUSEC_CONV_DEPTHWISE"
#: the element types of the depthwise stages relaid (the NHWC direct kernel's)
DEPTHWISE_DTYPES = ("f16", "bf16")


def depthwise_from_env() -> str:
    """``$FUSEC_CONV_DEPTHWISE`` (validated: "", "nchw" or "nhwc"; "" is "nhwc")."""
    return switch(DEPTHWISE_ENV, ("nhwc", "nchw"))


#: "nhwc": a relaid conv group reads its residual (an epilogue input of the output's
#: shape) channels-last where its producer stores it so, and such a read counts as an
#: NHWC reader of that producer (ResNet-50's bottleneck outputs, read by the next block's
#: last conv, stay NHWC: 12 copies go; ResNet-50 b32 on the H200 2.443 -> 2.268 ms,
#: EfficientNet-B0 b32 2.229 -> 2.193, benchmarks/profile_zoo.py), the default;
#: "nchw": residuals are read NCHW (an A/B switch)
RESIDUAL_ENV = "FUSEC_CONV_RESIDUAL"


def residual_from_env() -> str:
    """``$FUSEC_CONV_RESIDUAL`` (validated: "", "nchw" or "nhwc"; "" is "nhwc")."""
    return switch(RESIDUAL_ENV, ("nhwc", "nchw"))


def residual_inputs(group: ai.FusedOp, p: ConvPlan) -> tuple[int, ...]:
    """The group inputs of a planned conv group that its epilogue alone reads at the output's
    shape (a residual), which the template can read channels-last."""
    out = spec_of(p.conv.output.type).shape
    found = []
    for index, arg in enumerate(group.block.args):
        if index in (p.x, p.w) or spec_of(arg.type).shape != out:
            continue
        if all(u.operation in p.epilogue_ops for u in arg.uses) and arg.uses:
            found.append(index)
    return tuple(found)


def handoff_from_env() -> str:
    """``$FUSEC_CONV_HANDOFF`` (validated: "", "off" or "nhwc"; "" is "nhwc")."""
    return switch(HANDOFF_ENV, HANDOFFS)


def channels_last_plan(fused_op: ai.FusedOp) -> ConvPlan | None:
    """The conv template's plan of ``fused_op`` when the implicit GEMM can take it with
    channels-last operands (one group, ``C % 8 == 0``: no channel padding, so NHWC and
    KRSC are plain permutations), else None."""
    from fusec.targets.cuda.conv import template

    if fused_op.kind_name != "conv" or LAYOUT_ATTR in fused_op.attributes:
        return None
    p = template.plan(fused_op)
    if isinstance(p, str) or template.route(p) not in ("implicit", "gemv"):
        return None  # (the gemv kernel reads every layout: a 1x1 plane is [N][C] in each)
    if template.im2col_for(p):
        return None  # (the im2col kernel reads the NCHW input, in KCRS order)
    args = fused_op.block.args
    if any([u.operation for u in args[i].uses] != [p.conv] for i in (p.x, p.w)):
        return None  # the epilogue reads the input too (conv(x) + x): it stays NCHW
    return p if p.geo.groups == 1 and p.geo.cg % 8 == 0 else None


@dataclass(frozen=True)
class ConvLayoutPass(ModulePass):
    """Choose NHWC activations and KRSC weights for the cuda conv groups, explicitly."""

    name = "conv-layout"

    handoff: str = ""
    """"nhwc": a result read only NHWC (as relaid conv groups' input, or through relaid
    elementwise groups) is stored NHWC; "off": every result stays NCHW, elementwise
    groups are not relaid ("": ``$FUSEC_CONV_HANDOFF``, default "nhwc")."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from fusec.errors import FusecError

        try:
            handoff = self.handoff or handoff_from_env()
            depthwise = depthwise_from_env()
        except ValueError as err:
            raise FusecError(f"conv-layout: {err}") from None
        if handoff not in HANDOFFS:
            raise FusecError(f"conv-layout option handoff={handoff!r}: expected 'nhwc' or 'off'")
        for function in op.walk():
            if isinstance(function, func.FuncOp) and function.body.blocks:
                block = function.body.block
                if handoff == "nhwc" and depthwise == "nhwc":
                    if relayout_block(block, DEPTHWISE_DTYPES, _FREE, epilogues=True):
                        _merge_into_gemms(block)
                _relayout_function(block, handoff == "nhwc")
        PatternRewriteWalker(
            GreedyRewritePatternApplier([ComposeTransposes(), FoldConstantTranspose()])
        ).rewrite_module(op)
        for function in op.walk():
            if isinstance(function, func.FuncOp) and function.body.blocks:
                for transpose in list(function.body.block.ops):
                    if isinstance(transpose, ai.TransposeOp):
                        _outline_copy(transpose)
                for group in list(function.body.block.ops):
                    _copy_as_view(group)


def _merge_into_gemms(block: Block) -> None:
    """A pointwise group the channels-last step relaid that reads the result of a matmul
    group (its only reader) becomes that group's epilogue when the Tensor Core GEMM takes
    the merged group (the target's ``accepts``, as fusion asks it): ConvNeXt's layer scale
    and residual add after the block's second Linear, which fusion could not merge across
    the permute between them."""
    from fusec.target import get_target

    accepts = get_target("cuda").templates["matmul"].accepts
    for group in [op for op in block.ops if isinstance(op, ai.FusedOp)]:
        if group.kind_name != "pointwise" or LAYOUT_ATTR not in group.attributes:
            continue
        producers = [
            (i, v.owner)
            for i, v in enumerate(group.inputs)
            if isinstance(v.owner, ai.FusedOp)
            and v.owner.kind_name == "matmul"
            and len(v.owner.results) == 1
            and len(list(v.uses)) == 1
        ]
        if len(producers) != 1:
            continue
        index, gemm = producers[0]
        assert isinstance(gemm, ai.FusedOp)
        merged = _merged(gemm, group, index)
        ops = [op for op in merged.block.ops if not isinstance(op, ai.YieldOp)]
        anchor = next((op for op in ops if isinstance(op, ai.MatmulOp)), None)
        if accepts is None or anchor is None or accepts(ops, anchor) is not None:
            merged.erase(safe_erase=False)
            continue
        Rewriter.insert_op(merged, InsertPoint.before(group))
        merged.results[0].name_hint = group.results[0].name_hint
        group.results[0].replace_all_uses_with(merged.results[0])
        Rewriter.erase_op(group)
        Rewriter.erase_op(gemm)


def _merged(gemm: ai.FusedOp, pointwise: ai.FusedOp, index: int) -> ai.FusedOp:
    """One group: ``gemm``'s body, then ``pointwise``'s on its result (input ``index``);
    inputs in order of first use, each once."""
    inputs: list[SSAValue] = []
    for v in [*gemm.inputs, *(v for i, v in enumerate(pointwise.inputs) if i != index)]:
        if v not in inputs:
            inputs.append(v)
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = {}
    for source, args in ((gemm, gemm.block.args), (pointwise, pointwise.block.args)):
        for k, arg in enumerate(args):
            if source is pointwise and k == index:
                continue
            outer = source.inputs[k]
            mapping[arg] = block.args[inputs.index(outer)]
            block.args[inputs.index(outer)].name_hint = arg.name_hint
    for op in gemm.block.ops:
        if isinstance(op, ai.YieldOp):
            mapping[pointwise.block.args[index]] = mapping[op.operands[0]]
            break
        block.add_op(op.clone(value_mapper=mapping))
    for op in pointwise.block.ops:
        block.add_op(op.clone(value_mapper=mapping))
    result = [pointwise.results[0].type]
    return ai.FusedOp("matmul", inputs, result, Region(block), dict(gemm.attributes))


def _stores_nhwc(op: Operation) -> bool:
    """A conv group whose result this pass can store NHWC (an implicit-GEMM conv)."""
    return isinstance(op, ai.FusedOp) and channels_last_plan(op) is not None


def _converts_input(op: Operation) -> bool:
    """A conv group this pass gives an NHWC input (an implicit-GEMM conv): it converts an
    NCHW value, and ``_convert`` takes a channels-last stage's NHWC value as it is."""
    from fusec.targets.cuda.conv.template import input_for

    p = channels_last_plan(op) if isinstance(op, ai.FusedOp) else None
    return p is not None and input_for(p.geo)[0] == "nhwc"


def _reads_nhwc_input(op: Operation) -> bool:
    """A pool or reduce group whose kernel reads its anchor's input NHWC in place, or a
    conv group given its input NHWC."""
    from fusec.targets.cuda.anchored import nhwc_input_index

    if not isinstance(op, ai.FusedOp):
        return False
    return _converts_input(op) or nhwc_input_index(op) is not None


#: the conversions this pass removes, or adds, after ``channels-last``: counted so by it
_FREE = Free(source=_stores_nhwc, reader=_reads_nhwc_input, wants_nhwc=_converts_input)


def _relayout_function(block: Block, handoff: bool) -> None:
    from fusec.targets.cuda.conv.template import input_for

    plans = {}
    for op in block.ops:
        if isinstance(op, ai.FusedOp) and (p := channels_last_plan(op)) is not None:
            plans[op] = p
    nhwc_input = {op for op, p in plans.items() if input_for(p.geo)[0] == "nhwc"}
    pointwise = {op for op in block.ops if isinstance(op, ai.FusedOp) and _relayable(op)}
    readers = _nhwc_readers(block) if handoff else {}
    pools = {op for op in readers if op.kind_name == "pool" and len(op.results) == 1}
    residuals = (
        {op: residual_inputs(op, p) for op, p in plans.items()}
        if handoff and residual_from_env() == "nhwc"
        else {}
    )
    nhwc_output = (
        _nhwc_outputs(plans, nhwc_input, pointwise | pools, readers, residuals)
        if handoff
        else set()
    )
    conversions: dict[tuple[SSAValue, tuple[int, ...]], SSAValue] = {}
    groups = [op for op in block.ops if isinstance(op, ai.FusedOp)]
    for op in groups:  # in order: a producer's conversions exist for its readers
        if op in plans:
            output = "nhwc" if op in nhwc_output else "nchw"
            relaid_residuals = [i for i in residuals.get(op, ()) if _comes_nhwc(op.inputs[i])]
            layout = Layout(
                "nhwc" if op in nhwc_input else "nchw",
                "krsc",
                output,
                "nhwc" if relaid_residuals else "nchw",
            )
            _relayout_group(op, plans[op], layout, conversions, relaid_residuals)
        elif op in readers:
            _relayout_reader(op, readers[op], op in nhwc_output, conversions)
        elif op in nhwc_output:
            _relayout_pointwise(op, conversions)
    for op in groups:  # "copy" groups whose readers now take their source (``_convert``)
        if op.parent is block and _copy_transpose(op) is not None and not op.results[0].uses:
            Rewriter.erase_op(op)


def _relayable(op: ai.FusedOp) -> bool:
    """A pointwise group that computes the same elements in any layout: one 4-D result,
    elementwise ops without an axis (no ``ai.bias_add``), and inputs of the result's
    shape (at least one) or single elements."""
    if op.kind_name != "pointwise" or len(op.results) != 1 or LAYOUT_ATTR in op.attributes:
        return False
    shape = spec_of(op.results[0].type).shape
    if len(shape) != 4:
        return False
    for body_op in op.block.ops:
        if isinstance(body_op, ai.YieldOp):
            continue
        if not isinstance(body_op, ai.AiOp) or not body_op.has_scalar():
            return False
        if "axis" in body_op.declared_properties():
            return False
    inputs = [spec_of(v.type).shape for v in op.inputs]
    single = all(s == shape or (math.prod(s) == 1 and len(s) <= 4) for s in inputs)
    return single and shape in inputs


def _nhwc_readers(block: Block) -> dict[ai.FusedOp, int]:
    """The pool and reduce groups whose kernel can read its anchor's input channels-last
    (``fusec.targets.cuda.anchored.nhwc_input_index``): group -> that input's index."""
    from fusec.targets.cuda.anchored import nhwc_input_index

    readers = {}
    for op in block.ops:
        if isinstance(op, ai.FusedOp) and (index := nhwc_input_index(op)) is not None:
            readers[op] = index
    return readers


def _full(value: SSAValue, group: ai.FusedOp) -> bool:
    """``value`` has the shape of ``group``'s (4-D) result."""
    return spec_of(value.type).shape == spec_of(group.results[0].type).shape


def _comes_nhwc(value: SSAValue) -> bool:
    """``value`` is the NCHW view of a value stored NHWC (its conversion back, a transpose
    or a ``"copy"`` group), so reading it NHWC cancels that conversion."""
    source = value.owner
    return (
        isinstance(source, ai.TransposeOp) and source.attr("perm") == TO_CHANNELS_FIRST
    ) or _copy_transpose(source) == TO_CHANNELS_FIRST


def _nhwc_outputs(
    plans: dict, nhwc_input: set, pointwise: set, readers: dict, residuals: dict
) -> set:
    """The groups whose result is stored NHWC: relaid convs, and relayable pointwise (or
    pool) groups, whose every reader reads NHWC (the input of an NHWC-input conv, an input
    of the result's shape of a relaid pointwise group, the anchor's input of a pool or
    reduce group in ``readers``); a pointwise group is relaid only when its inputs of the
    result's shape all come NHWC (then it saves its result's conversion and adds none), a
    pool whatever its input's layout (its kernel reads either, its stores replace the
    conversion of its result). The largest such sets: start from every candidate, drop
    until stable."""
    relaid = set(pointwise)

    def sources(group: ai.FusedOp) -> list[SSAValue]:
        if group in readers:  # a pool: its kernel reads either layout, reads dominate
            return []
        return [v for v in group.inputs if _full(v, group)]

    while True:
        stored = {
            group
            for group in (*plans, *relaid)
            if group.results[0].uses
            and all(
                _reads_nhwc(u, plans, nhwc_input, relaid, readers, residuals)
                for u in group.results[0].uses
            )
        }
        kept = {
            group
            for group in relaid
            if group in stored and all(v.owner in stored for v in sources(group))
        }
        if kept == relaid:
            return stored
        relaid = kept


def _copy_transpose(op: object) -> tuple[int, ...] | None:
    """The permutation of a ``"copy"`` group that is one NCHW <-> NHWC transpose of its
    input, else None."""
    for perm in (TO_CHANNELS_LAST, TO_CHANNELS_FIRST):
        if transpose_copy(op, perm):
            return perm
    return None


def _reads_nhwc(
    use: Use, plans: dict, nhwc_input: set, relaid: set, readers: dict, residuals: dict
) -> bool:
    """``use`` reads its value NHWC: an NHWC-input conv's input, a relaid conv's residual
    (``residuals``, with ``$FUSEC_CONV_RESIDUAL=nhwc``), an input of the result's shape of
    a relaid pointwise group, the anchor's input of a pool or reduce group that can read
    it so, or a ``"copy"`` group converting it to NHWC (replaced by the result)."""
    reader = use.operation
    if not isinstance(reader, ai.FusedOp):
        return False
    if _copy_transpose(reader) == TO_CHANNELS_LAST:
        return True
    if use.index in residuals.get(reader, ()):
        return True
    if reader in nhwc_input:
        return use.index == plans[reader].x
    if reader in readers:
        return use.index == readers[reader]
    return reader in relaid and _full(reader.operands[use.index], reader)


def _convert(value: SSAValue, perm: tuple[int, ...], before, conversions: dict) -> SSAValue:
    """``ai.transpose(value, perm)`` at function level (one per value and permutation);
    the source of a ``"copy"`` group that is the inverse transpose."""
    owner = value.owner
    inverse = TO_CHANNELS_FIRST if perm == TO_CHANNELS_LAST else TO_CHANNELS_LAST
    if perm in (TO_CHANNELS_LAST, TO_CHANNELS_FIRST) and _copy_transpose(owner) == inverse:
        assert isinstance(owner, ai.FusedOp)
        return owner.inputs[0]
    key = (value, perm)
    if key not in conversions:
        transpose = ai.TransposeOp(value, perm=perm)
        Rewriter.insert_op(transpose, InsertPoint.before(before))
        conversions[key] = transpose.output
    return conversions[key]


def _relayout_group(
    fused: ai.FusedOp,
    p: ConvPlan,
    layout: Layout,
    conversions: dict,
    residuals: Sequence[int] = (),
) -> None:
    """Replace conv group ``fused`` by one taking and giving the operands of ``layout`` (and
    the ``residuals`` inputs channels-last)."""
    relaid = ([p.x] if layout.input == "nhwc" else []) + [p.w] + list(residuals)
    _relayout_operands(fused, relaid, layout.output == "nhwc", layout.to_attr(), conversions)


def _relayout_operands(
    fused: ai.FusedOp, relaid: list[int], nhwc_output: bool, layout: DictionaryAttr, conversions
) -> None:
    """Replace group ``fused`` by one taking its inputs ``relaid`` channels-last (each
    viewed NCHW/KCRS by an ``ai.transpose`` at the top of the body) and storing its result
    NHWC when ``nhwc_output`` (a transpose before the ``ai.yield``, converted back for its
    readers); ``layout`` becomes its ``fusec.layout``."""
    body = fused.block
    inputs = list(fused.inputs)
    for index in relaid:
        inputs[index] = _convert(inputs[index], TO_CHANNELS_LAST, fused, conversions)
    for index in reversed(relaid):  # (each view goes first: the input's ends up on top)
        old = body.args[index]
        arg = body.insert_arg(inputs[index].type, index)
        arg.name_hint = old.name_hint
        view = ai.TransposeOp(arg, perm=TO_CHANNELS_FIRST)
        Rewriter.insert_op(view, InsertPoint.at_start(body))
        old.replace_all_uses_with(view.output)
        body.erase_arg(old)
    result_types = [r.type for r in fused.results]
    if nhwc_output:
        # (callers store NHWC only from one-result groups: ``pools``, ``channels_last_plan``)
        assert len(fused.results) == 1, "an NHWC store of a group with several results"
        term = body.last_op
        assert isinstance(term, ai.YieldOp)
        store = ai.TransposeOp(term.operands[0], perm=TO_CHANNELS_LAST)
        Rewriter.insert_op(store, InsertPoint.before(term))
        term.operands = [store.output]
        result_types = [store.output.type]
    attributes = {**fused.attributes, LAYOUT_ATTR: layout}
    region = fused.detach_region(fused.body)
    new = ai.FusedOp(fused.kind_name, inputs, result_types, region, attributes)
    Rewriter.insert_op(new, InsertPoint.before(fused))
    for old_result, new_result in zip(fused.results, new.results, strict=True):
        new_result.name_hint = old_result.name_hint
    if nhwc_output:
        _absorb_copies(fused.results[0], new.results[0])
        if fused.results[0].uses:
            back = ai.TransposeOp(new.results[0], perm=TO_CHANNELS_FIRST)
            Rewriter.insert_op(back, InsertPoint.after(new))
            fused.results[0].replace_all_uses_with(back.output)
    else:  # every result, as it was: a pool group also yields its epilogue's (DenseNet)
        for old_result, new_result in zip(fused.results, new.results, strict=True):
            old_result.replace_all_uses_with(new_result)
    Rewriter.erase_op(fused)


def _absorb_copies(nchw: SSAValue, nhwc: SSAValue) -> None:
    """The ``"copy"`` groups converting ``nchw`` to NHWC read ``nhwc``, the same values
    stored so: their results become it and they go."""
    for use in list(nchw.uses):
        reader = use.operation
        if _copy_transpose(reader) == TO_CHANNELS_LAST:
            assert isinstance(reader, ai.FusedOp)
            reader.results[0].replace_all_uses_with(nhwc)
            Rewriter.erase_op(reader)


def _relayout_reader(fused: ai.FusedOp, index: int, nhwc_output: bool, conversions: dict) -> None:
    """A pool or reduce group reading input ``index`` channels-last when its producer
    stores it so (the value is then the conversion back to NCHW, which the new conversion
    cancels), and a pool storing its result NHWC when ``nhwc_output``: the same body on
    the new operand types, through ``ai.transpose`` views its kernel folds into its
    addressing (``fusec.targets.cuda.anchored``)."""
    source = fused.inputs[index].owner
    nhwc_input = (
        isinstance(source, ai.TransposeOp) and source.attr("perm") == TO_CHANNELS_FIRST
    ) or _copy_transpose(source) == TO_CHANNELS_FIRST
    if not (nhwc_input or nhwc_output):
        return
    layout = DictionaryAttr(
        {
            "input": StringAttr("nhwc" if nhwc_input else "nchw"),
            "output": StringAttr("nhwc" if nhwc_output else "nchw"),
        }
    )
    _relayout_operands(fused, [index] if nhwc_input else [], nhwc_output, layout, conversions)


def _relayout_pointwise(fused: ai.FusedOp, conversions: dict) -> None:
    """Replace pointwise group ``fused`` by the same elementwise ops on NHWC values: its
    inputs of its result's shape converted, every value of that shape retyped (single
    elements broadcast the same in any layout)."""
    shape = spec_of(fused.results[0].type).shape

    def nhwc(t: Attribute) -> Attribute:
        if not isinstance(t, TensorType) or tuple(t.get_shape()) != shape:
            return t
        return TensorType(t.get_element_type(), [shape[i] for i in TO_CHANNELS_LAST])

    inputs = [
        _convert(v, TO_CHANNELS_LAST, fused, conversions) if _full(v, fused) else v
        for v in fused.inputs
    ]
    layout = DictionaryAttr({"input": StringAttr("nhwc"), "output": StringAttr("nhwc")})
    group = retyped_group(fused, inputs, nhwc, {**fused.attributes, LAYOUT_ATTR: layout})
    Rewriter.insert_op(group, InsertPoint.before(fused))
    group.results[0].name_hint = fused.results[0].name_hint
    _absorb_copies(fused.results[0], group.results[0])
    if fused.results[0].uses:
        back = ai.TransposeOp(group.results[0], perm=TO_CHANNELS_FIRST)
        Rewriter.insert_op(back, InsertPoint.after(group))
        fused.results[0].replace_all_uses_with(back.output)
    Rewriter.erase_op(fused)


class FoldConstantTranspose(RewritePattern):
    """``transpose(arith.constant)`` -> the transposed ``arith.constant`` (constant
    weights are relaid once, at compile time)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ai.TransposeOp, rewriter: PatternRewriter) -> None:
        source = op.input.owner
        if not isinstance(source, arith.ConstantOp) or not at_function_level(op):
            return
        value = constant_value(source).transpose(op.attr("perm"))
        rewriter.replace(op, dense_constant(value, spec_of(op.output.type).dtype))


def _keeps_order(perm: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Transposing ``shape`` by ``perm`` moves only dimensions of size 1: the elements stay
    in the same row-major order (``[N, C, 1, 1]`` to ``[N, 1, 1, C]``)."""
    moved = [axis for axis in perm if shape[axis] != 1]
    return moved == sorted(moved)


def _copy_as_view(group: Operation) -> None:
    """A ``"copy"`` group of one NCHW <-> NHWC transpose that keeps the elements' order (a
    pooled ``[N, C, 1, 1]`` value, a squeeze-excite scale) becomes a ``"view"`` group, a
    reshape: no kernel, the runtime aliases the buffer."""
    perm = _copy_transpose(group)
    if perm is None:
        return
    assert isinstance(group, ai.FusedOp)
    shape = tuple(spec_of(group.inputs[0].type).shape)
    if not _keeps_order(perm, shape):
        return
    block = Block(arg_types=[group.inputs[0].type])
    out_shape = tuple(spec_of(group.results[0].type).shape)
    inner = ai.ReshapeOp(block.args[0], shape=out_shape)
    block.add_ops([inner, ai.YieldOp(inner.output)])
    view = ai.FusedOp("view", [group.inputs[0]], [group.results[0].type], Region(block))
    Rewriter.replace_op(group, view)


def _outline_copy(transpose: ai.TransposeOp) -> None:
    """Wrap a function-level conversion into an ``ai.fused "copy"`` group (the runtime
    launches groups only)."""
    block = Block(arg_types=[transpose.input.type])
    inner = ai.TransposeOp(block.args[0], perm=transpose.attr("perm"))
    block.add_ops([inner, ai.YieldOp(inner.output)])
    group = ai.FusedOp("copy", [transpose.input], [transpose.output.type], Region(block))
    Rewriter.replace_op(transpose, group)
