"""``channels-last``: depthwise conv stages computed channels-last (issues 30, 28).

ConvNeXt's block is a depthwise 7x7 conv (NCHW), a permute to NHWC, LayerNorm, Linear,
GELU, Linear, a permute back, layer-scale and the residual add. After fusion the two
permutes are ``ai.fused "copy"`` groups of their own: 36 of ConvNeXt-T's 45 copies,
2.7 of its 36 ms at batch 1 on one thread on the cpu (benchmarks/results/cpu-notes.md),
48 of its 131 kernels on the H200 (models-gpu.md). This pass, run after ``fuse``, keeps
such a stage channels-last so that the copies go. It is target-independent: the cpu
target runs it as ``cpu-channels-last`` (float32, ``fusec-cpu``), the cuda target's
``conv-layout`` pass as its first step (f16/bf16, ``fusec.targets.cuda.conv.layout``);
``dtypes`` names the element types whose depthwise convs the target runs NHWC:

* a depthwise conv group (``ai.conv2d`` with one input and one output channel a group,
  at most an ``ai.bias_add`` after it, of one of ``dtypes``, the input read by the conv
  alone) takes its input NHWC and stores its result NHWC: its body views the input NCHW
  with an ``ai.transpose`` and ends with one to NHWC before the ``ai.yield``, and
  ``fusec.layout = {input = "nhwc", output = "nhwc"}`` tells the target's conv template
  to run it channels-last (``fusec.targets.cpu.depthwise_nhwc``, the cuda
  ``conv_depthwise_nhwc.cuh``);
* a pointwise group of elementwise ops without an axis, of one of ``dtypes``, whose
  inputs are of its 4-D result's shape, single elements, constants that broadcast to
  it (ConvNeXt's layer-scale, ``96x1x1``) or per-channel values ``[N, C, 1, 1]`` (the
  squeeze-excite scale of MobileNetV3 and EfficientNet), computes on NHWC values:
  full-shape inputs NHWC, the constants relaid at compile time, a per-channel value
  viewed ``[N, 1, 1, C]`` (a ``"view"`` group, the same elements in the same order),
  every full-shape value of its body retyped;
* each full-shape input of a relaid group is taken NHWC from where it already is: the
  relaid producer's result, or the source of a ``"copy"`` group that is one
  NHWC -> NCHW transpose; else a new NCHW -> NHWC copy group converts it (once per
  value). A relaid result read by a copy group that transposes it to NHWC replaces that
  copy; any other reader gets one NHWC -> NCHW copy group.

Which groups are relaid is chosen per connected set of candidates (groups linked
through a result, a shared input or one of those transposes): a set is relaid when the
copy groups left afterwards are fewer than before (``_copies``). A MobileNet's depthwise
convs, between NCHW 1x1 convs, stay as they are; ConvNeXt-T's 45 copies become 9. A
target whose later passes remove some conversions says which (``Free``: the cuda
``conv-layout`` stores an implicit-GEMM conv's result NHWC in place of its conversion, and
a reduce or pool group reads an NHWC input in place), and those are not counted.

Function arguments and results keep their types; everything the pass writes is ordinary
``ai`` IR, so the reference executor runs it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.passes.fusion.outline import retyped_group

#: NCHW -> NHWC and back, as ``ai.transpose`` permutations.
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
#: The attribute naming a group's operand layouts (as the cuda ``conv-layout`` pass's).
LAYOUT_ATTR = "fusec.layout"


@dataclass(frozen=True)
class ChannelsLastPass(ModulePass):
    """Keep depthwise conv stages channels-last: no NCHW <-> NHWC copies between them."""

    name = "channels-last"

    dtypes: str = "f32"
    """The element types (space-separated: "f16 bf16") of the groups relaid."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        dtypes = tuple(self.dtypes.split())
        for function in op.walk():
            if isinstance(function, func.FuncOp) and function.body.blocks:
                relayout_block(function.body.block, dtypes)


@dataclass(frozen=True)
class Free:
    """The conversions a target's later passes remove, not counted by ``_copies``."""

    #: a new NCHW -> NHWC conversion of this value's producer (a group)
    source: Callable[[Operation], bool] = lambda op: False
    #: a new NHWC -> NCHW conversion read by this group
    reader: Callable[[Operation], bool] = lambda op: False
    #: a group that converts an NCHW input to NHWC itself (a cuda implicit-GEMM conv): an
    #: unrelaid group it reads costs that conversion, a relaid one none
    wants_nhwc: Callable[[Operation], bool] = lambda op: False


def relayout_block(
    block: Block,
    dtypes: tuple[str, ...] = ("f32",),
    free: Free = Free(),
    epilogues: bool = False,
) -> int:
    """Relay the chosen groups of ``block`` (a function body) whose values are of
    ``dtypes``, the conversions ``free`` names not counted; with ``epilogues``, depthwise
    groups with any elementwise epilogue (the target's NHWC kernel runs it: the cuda
    one), else at most a bias. The number relaid."""
    candidates = [
        g for g in _groups(block) if _depthwise(g, dtypes, epilogues) or _pointwise(g, dtypes)
    ]
    if not candidates:
        return 0
    chosen: set[ai.FusedOp] = set()
    for component in _components(block, candidates):
        if _copies(block, chosen | component, free) < _copies(block, chosen, free):
            chosen |= component
    if chosen:
        _rewrite(block, chosen)
    return len(chosen)


# ------------------------------------------------------------------ what is a candidate


def _groups(block: Block) -> list[ai.FusedOp]:
    return [op for op in block.ops if isinstance(op, ai.FusedOp)]


def _body(group: ai.FusedOp) -> list[Operation]:
    return [op for op in group.block.ops if not isinstance(op, ai.YieldOp)]


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(spec_of(value.type).shape)


def _float_4d(value: SSAValue, dtypes: tuple[str, ...]) -> bool:
    spec = spec_of(value.type)
    return spec.dtype in dtypes and len(spec.shape) == 4


def _depthwise(group: ai.FusedOp, dtypes: tuple[str, ...], epilogues: bool = False) -> bool:
    """A conv group of one depthwise ``ai.conv2d`` (of ``dtypes``) and at most a per-channel
    ``ai.bias_add`` of a group input (with ``epilogues``: any elementwise ops of the conv's
    shape, ``_epilogue``), its input block argument read by the conv alone."""
    if group.kind_name != "conv" or LAYOUT_ATTR in group.attributes or len(group.results) != 1:
        return False
    ops = _body(group)
    if not ops or not isinstance(ops[0], ai.Conv2DOp) or (len(ops) > 2 and not epilogues):
        return False
    conv = ops[0]
    x, w = conv.operands
    k, cg, _, _ = _shape(w)
    if cg != 1 or k != conv.attr("groups") or _shape(x)[1] != k:
        return False
    if not (isinstance(x, SSAValue) and x in group.block.args and w in group.block.args):
        return False
    if [u.operation for u in x.uses] != [conv]:
        return False
    if not _float_4d(x, dtypes) or not _float_4d(conv.results[0], dtypes):
        return False
    if epilogues:
        if not _epilogue(group, ops):
            return False
    elif len(ops) == 2:
        bias = ops[1]
        if not isinstance(bias, ai.BiasAddOp) or bias.operands[0] is not conv.results[0]:
            return False
        if bias.attr("axis") != 1 or bias.operands[1] not in group.block.args:
            return False
    term = group.block.last_op
    return isinstance(term, ai.YieldOp) and term.operands[0] is ops[-1].results[0]


def _epilogue(group: ai.FusedOp, ops: list[Operation]) -> bool:
    """The ops after the conv are elementwise of its shape (a channel bias, activations, a
    folded BatchNorm's scale and shift) whose group inputs broadcast along the pixels (a
    per-channel vector or constant: the same values in any layout of the result)."""
    shape = _shape(ops[0].results[0])
    image = group.block.args[0]
    for op in ops[1:]:
        if isinstance(op, ai.BiasAddOp):
            if op.attr("axis") != 1 or not _results_of_shape(op, shape):
                return False
        elif not _layout_free(op, shape):
            return False
        for value in op.operands:
            if value is image:
                return False
            if value in group.block.args and _shape(value) == shape:
                return False  # a full-shape input (a residual): read NCHW, not relaid
    return True


def _pointwise(group: ai.FusedOp, dtypes: tuple[str, ...]) -> bool:
    """A pointwise group computing the same elements in any layout: one 4-D result of
    ``dtypes``, elementwise ops without an axis whose results are all of that shape, inputs
    of that shape (at least one), single elements or function-level constants that
    broadcast to it."""
    if group.kind_name != "pointwise" or LAYOUT_ATTR in group.attributes:
        return False
    if len(group.results) != 1 or not _float_4d(group.results[0], dtypes):
        return False
    shape = _shape(group.results[0])
    if not all(_layout_free(op, shape) for op in _body(group)):
        return False
    full = 0
    for value in group.inputs:
        s = _shape(value)
        if s == shape:
            full += 1
        elif math.prod(s) != 1 and not (_constant(value) and _broadcasts(s, shape)):
            if not _per_channel(s, shape):
                return False
    return full > 0


def _layout_free(op: Operation, shape: tuple[int, ...]) -> bool:
    """An elementwise ai op without an axis whose results are all of ``shape``: it computes
    the same elements in any layout of its operands."""
    return (
        isinstance(op, ai.AiOp)
        and op.has_scalar()
        and "axis" not in op.declared_properties()
        and _results_of_shape(op, shape)
    )


def _results_of_shape(op: Operation, shape: tuple[int, ...]) -> bool:
    return all(_shape(r) == shape for r in op.results)


def _per_channel(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """``small`` is a per-channel operand ``[N or 1, C, 1, 1]`` of the 4-D ``shape`` (a
    squeeze-excite scale): NHWC it is ``[N or 1, 1, 1, C]``, the same elements in the same
    order, so its conversion is a view, no copy."""
    return (
        len(small) == 4
        and small[2:] == (1, 1)
        and small[1] == shape[1]
        and small[0] in (1, shape[0])
    )


def _constant(value: SSAValue) -> bool:
    """An ``arith.constant`` (by name: a plain compile does not import xdsl's arith)."""
    return isinstance(value.owner, Operation) and value.owner.name == "arith.constant"


def _broadcasts(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    if len(small) > len(shape):
        return False
    padded = (1,) * (len(shape) - len(small)) + small
    return all(a in (1, b) for a, b in zip(padded, shape, strict=True))


def transpose_copy(op: object, perm: tuple[int, ...]) -> bool:
    """``op`` is a ``"copy"`` group that is one 4-D transpose by ``perm`` of its input."""
    if not isinstance(op, ai.FusedOp) or op.kind_name != "copy" or len(op.inputs) != 1:
        return False
    ops = _body(op)
    if len(ops) != 1 or not isinstance(ops[0], ai.TransposeOp):
        return False
    t = ops[0]
    term = op.block.last_op
    return (
        t.operands[0] is op.block.args[0]
        and tuple(t.attr("perm")) == perm
        and isinstance(term, ai.YieldOp)
        and term.operands[0] is t.results[0]
    )


def _full_inputs(group: ai.FusedOp) -> list[SSAValue]:
    """The inputs a relaid ``group`` takes NHWC: a depthwise conv's image, a pointwise
    group's inputs of its result's shape."""
    if group.kind_name == "conv":
        return [group.inputs[0]]
    shape = _shape(group.results[0])
    return [v for v in group.inputs if _shape(v) == shape]


# ------------------------------------------------------------------ which to relay


def _components(block: Block, candidates: list[ai.FusedOp]) -> list[set[ai.FusedOp]]:
    """Candidates linked by a value (a result one reads, through at most one transpose
    copy group, or an input they share), each set in block order of its first group."""
    parent = {g: g for g in candidates}

    def find(g: ai.FusedOp) -> ai.FusedOp:
        while parent[g] is not g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    def root_value(v: SSAValue) -> SSAValue:
        owner = v.owner
        if transpose_copy(owner, TO_NCHW) or transpose_copy(owner, TO_NHWC):
            assert isinstance(owner, ai.FusedOp)
            return owner.inputs[0]
        return v

    by_value: dict[SSAValue, ai.FusedOp] = {}
    for g in candidates:
        values = [root_value(v) for v in _full_inputs(g)] + [g.results[0]]
        for v in values:
            other = by_value.setdefault(v, g)
            parent[find(other)] = find(g)
        for use in g.results[0].uses:  # T(result) read by another candidate
            reader = use.operation
            if transpose_copy(reader, TO_NHWC):
                assert isinstance(reader, ai.FusedOp)
                other = by_value.setdefault(reader.results[0], g)
                parent[find(other)] = find(g)
    sets: dict[ai.FusedOp, set[ai.FusedOp]] = {}
    for g in candidates:
        sets.setdefault(find(g), set()).add(g)
    return list(sets.values())


def _copies(block: Block, relaid: set[ai.FusedOp], free: Free = Free()) -> int:
    """The NCHW <-> NHWC copy groups ``block`` would hold with ``relaid`` relaid (the new
    ones ``free`` names not counted)."""
    alive = 0
    for op in _groups(block):
        if transpose_copy(op, TO_NHWC) and op.inputs[0].owner in relaid:
            continue  # T(result of a relaid group): the relaid result itself
        if transpose_copy(op, TO_NCHW) and _all_relaid_reads(op.results[0], relaid):
            continue  # every reader takes its NHWC source instead
        alive += transpose_copy(op, TO_NHWC) or transpose_copy(op, TO_NCHW)
    new: set[tuple[str, SSAValue]] = set()
    for g in relaid:
        for v in _full_inputs(g):
            if v.owner not in relaid and not transpose_copy(v.owner, TO_NCHW):
                if not (isinstance(v.owner, Operation) and free.source(v.owner)):
                    new.add(("to_nhwc", v))
        readers = [use.operation for use in g.results[0].uses]
        if any(_nchw_reader(r, relaid) and not free.reader(r) for r in readers):
            new.add(("to_nchw", g.results[0]))
    for op in _groups(block):  # the target's own conversions of NCHW results
        if op not in relaid and len(op.results) == 1:
            if any(free.wants_nhwc(use.operation) for use in op.results[0].uses):
                new.add(("target", op.results[0]))
    return alive + len(new)


def _all_relaid_reads(value: SSAValue, relaid: set[ai.FusedOp]) -> bool:
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        reader = use.operation
        if not (isinstance(reader, ai.FusedOp) and reader in relaid):
            return False
        if value not in _full_inputs(reader):
            return False
    return True


def _nchw_reader(reader: Operation, relaid: set[ai.FusedOp]) -> bool:
    """A reader of a relaid group's result that still needs it NCHW."""
    return not (reader in relaid or transpose_copy(reader, TO_NHWC))


# ------------------------------------------------------------------ the rewrite


def _rewrite(block: Block, relaid: set[ai.FusedOp]) -> None:
    nhwc: dict[SSAValue, SSAValue] = {}  # an NCHW value -> the same values NHWC
    old_groups = [g for g in _groups(block) if g in relaid]
    new_of: dict[ai.FusedOp, ai.FusedOp] = {}
    constants: dict[SSAValue, SSAValue] = {}  # a broadcast constant -> relaid
    for group in old_groups:  # in order: a producer's NHWC result exists for its readers
        inputs = []
        for v in group.inputs:
            if v in _full_inputs(group):
                inputs.append(_nhwc_of(v, group, nhwc, relaid))
            elif group.kind_name == "pointwise" and math.prod(_shape(v)) != 1:
                if v not in constants:  # relaid once, however many groups read it
                    constants[v] = (
                        _relaid_constant(v, _shape(group.results[0]), group)
                        if _constant(v)
                        else _channels_view(v, group)
                    )
                inputs.append(constants[v])
            else:
                inputs.append(v)
        if group.kind_name == "conv":
            new = _depthwise_group(group, inputs)
        else:
            new = _pointwise_group(group, inputs)
        Rewriter.insert_op(new, InsertPoint.before(group))
        new.results[0].name_hint = group.results[0].name_hint
        nhwc[group.results[0]] = new.results[0]
        new_of[group] = new
    # readers of the old results: a T copy becomes the NHWC result, others read it NCHW
    for group in old_groups:
        result, new_result = group.results[0], nhwc[group.results[0]]
        back: SSAValue | None = None
        for use in list(result.uses):
            reader = use.operation
            if reader in relaid:
                continue  # erased below
            if transpose_copy(reader, TO_NHWC):
                assert isinstance(reader, ai.FusedOp)
                reader.results[0].replace_all_uses_with(new_result)
                Rewriter.erase_op(reader)
                continue
            if back is None:
                copy = _copy_group(new_result, TO_NCHW)
                Rewriter.insert_op(copy, InsertPoint.after(new_of[group]))
                back = copy.results[0]
            reader.operands[use.index] = back
    for group in reversed(old_groups):
        for result in group.results:
            assert not any(u.operation not in relaid for u in result.uses)
        group.detach()
    for group in reversed(old_groups):
        group.erase(safe_erase=False)
    for op in list(block.ops):  # NHWC -> NCHW copies every reader of which went NHWC
        if transpose_copy(op, TO_NCHW) and not op.results[0].uses:
            Rewriter.erase_op(op)
    for value in constants:  # constants only the relaid groups read
        if not value.uses and isinstance(value.owner, Operation) and _constant(value):
            Rewriter.erase_op(value.owner)


def _nhwc_of(
    value: SSAValue, reader: ai.FusedOp, nhwc: dict[SSAValue, SSAValue], relaid
) -> SSAValue:
    """``value`` NHWC for ``reader``: a relaid producer's result, the source of an NHWC ->
    NCHW copy, or a new NCHW -> NHWC copy group (one per value)."""
    if value in nhwc:
        return nhwc[value]
    owner = value.owner
    if transpose_copy(owner, TO_NCHW):
        assert isinstance(owner, ai.FusedOp)
        return owner.inputs[0]
    copy = _copy_group(value, TO_NHWC)
    Rewriter.insert_op(copy, InsertPoint.before(reader))
    nhwc[value] = copy.results[0]
    return copy.results[0]


def _relaid_constant(value: SSAValue, shape: tuple[int, ...], before: Operation) -> SSAValue:
    """A constant that broadcasts to ``shape`` (NCHW) as one that broadcasts to its NHWC
    form: padded to rank 4 with leading ones and transposed, at compile time."""
    from xdsl.dialects import arith

    from fusec.ir.constants import constant_value, dense_constant

    owner = value.owner
    assert isinstance(owner, arith.ConstantOp)
    array = constant_value(owner)
    small = _shape(value)
    array = array.reshape((1,) * (len(shape) - len(small)) + small).transpose(TO_NHWC)
    constant = dense_constant(array, spec_of(value.type).dtype)
    Rewriter.insert_op(constant, InsertPoint.before(before))
    return constant.results[0]


def _channels_view(value: SSAValue, before: Operation) -> SSAValue:
    """A per-channel value ``[N, C, 1, 1]`` as ``[N, 1, 1, C]``: a ``"view"`` group (a
    reshape: the elements keep their order; the runtime aliases the buffer)."""
    n, c, _, _ = _shape(value)
    block = Block(arg_types=[value.type])
    inner = ai.ReshapeOp(block.args[0], shape=(n, 1, 1, c))
    block.add_ops([inner, ai.YieldOp(inner.output)])
    view = ai.FusedOp("view", [value], [inner.output.type], Region(block))
    Rewriter.insert_op(view, InsertPoint.before(before))
    return view.results[0]


def _nhwc_type(t: Attribute, shape: tuple[int, ...]) -> Attribute:
    if not isinstance(t, TensorType) or tuple(t.get_shape()) != shape:
        return t
    return TensorType(t.get_element_type(), [shape[i] for i in TO_NHWC])


def _layout() -> DictionaryAttr:
    return DictionaryAttr({"input": StringAttr("nhwc"), "output": StringAttr("nhwc")})


def _pointwise_group(group: ai.FusedOp, inputs: list[SSAValue]) -> ai.FusedOp:
    """``group``'s elementwise ops on NHWC values: each value of its result's shape
    retyped, the other inputs as given (single elements, relaid constants)."""
    shape = _shape(group.results[0])
    attributes = {**group.attributes, LAYOUT_ATTR: _layout()}
    return retyped_group(group, inputs, lambda t: _nhwc_type(t, shape), attributes)


def _depthwise_group(group: ai.FusedOp, inputs: list[SSAValue]) -> ai.FusedOp:
    """``group`` reading its image NHWC (viewed NCHW by an ``ai.transpose`` at the top of
    its body) and storing its result NHWC (an ``ai.transpose`` before the ``ai.yield``)."""
    old = group.block
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = {}
    for new, arg in zip(block.args, old.args, strict=True):
        new.name_hint = arg.name_hint
        mapping[arg] = new
    view = ai.TransposeOp(block.args[0], perm=TO_NCHW)
    block.add_op(view)
    mapping[old.args[0]] = view.output
    last: SSAValue | None = None
    for op in old.ops:
        if isinstance(op, ai.YieldOp):
            assert last is not None
            store = ai.TransposeOp(mapping[op.operands[0]], perm=TO_NHWC)
            block.add_ops([store, ai.YieldOp(store.output)])
            break
        clone = op.clone(value_mapper=mapping)
        block.add_op(clone)
        for o, n in zip(op.results, clone.results, strict=True):
            mapping[o] = n
            last = n
    attributes = {**group.attributes, LAYOUT_ATTR: _layout()}
    shape = _shape(group.results[0])
    result_type = _nhwc_type(group.results[0].type, shape)
    return ai.FusedOp(group.kind_name, inputs, [result_type], Region(block), attributes)


def _copy_group(value: SSAValue, perm: tuple[int, ...]) -> ai.FusedOp:
    """A ``"copy"`` group transposing ``value`` by ``perm``."""
    block = Block(arg_types=[value.type])
    inner = ai.TransposeOp(block.args[0], perm=perm)
    block.add_ops([inner, ai.YieldOp(inner.output)])
    return ai.FusedOp("copy", [value], [inner.output.type], Region(block))


def relaid_groups(ops: Iterable[Operation]) -> list[ai.FusedOp]:
    """The groups among ``ops`` this pass relaid (their ``fusec.layout``)."""
    return [op for op in ops if isinstance(op, ai.FusedOp) and LAYOUT_ATTR in op.attributes]
