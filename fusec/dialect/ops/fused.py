"""``ai.fused`` kernel groups and ``ai.yield``, ``TENSOR_OPS`` and the ``AI`` dialect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import FunctionType, StringAttr, TensorType
from xdsl.ir import Attribute, Block, Dialect, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator
from xdsl.utils.exceptions import VerifyException

from fusec.dialect.facts import FUSED_KINDS
from fusec.dialect.ops.activations import (
    AcoshOp,
    AcosOp,
    AsinhOp,
    AsinOp,
    AtanhOp,
    AtanOp,
    CeilOp,
    CeluOp,
    CoshOp,
    CosOp,
    EluOp,
    FloorOp,
    HardSigmoidOp,
    HardSwishOp,
    LeakyReluOp,
    LogOp,
    MishOp,
    PReluOp,
    ReciprocalOp,
    RoundOp,
    SeluOp,
    SignOp,
    SinhOp,
    SinOp,
    SoftplusOp,
    SoftsignOp,
    TanOp,
    ThresholdedReluOp,
    WhereOp,
)
from fusec.dialect.ops.anchors import (
    AttentionOp,
    BatchNormOp,
    BiasAddOp,
    CastOp,
    Conv2DOp,
    LayerNormOp,
    MatmulOp,
    MoEExpertsOp,
    RMSNormOp,
    SoftmaxOp,
)
from fusec.dialect.ops.base import AiOp
from fusec.dialect.ops.elementwise import (
    AbsOp,
    AddOp,
    ClipOp,
    DivOp,
    ErfOp,
    ExpOp,
    GeluOp,
    IsNanOp,
    MaximumOp,
    MinimumOp,
    MulOp,
    NegOp,
    PowOp,
    ReluOp,
    SigmoidOp,
    SiluOp,
    SqrtOp,
    SubOp,
    TanhOp,
)
from fusec.dialect.ops.indexing import ArgMaxOp, ArgMinOp, CumSumOp, ExpandOp, TakeOp
from fusec.dialect.ops.layout import (
    ConcatOp,
    GatherOp,
    ReshapeOp,
    RotateHalfOp,
    SliceOp,
    TransposeOp,
)
from fusec.dialect.ops.logic import (
    AndOp,
    EqualOp,
    GreaterEqualOp,
    GreaterOp,
    LessEqualOp,
    LessOp,
    ModOp,
    NotOp,
    OrOp,
    XorOp,
)
from fusec.dialect.ops.quantization import DequantizeOp, QuantizeOp
from fusec.dialect.ops.reductions import (
    AvgPool2DOp,
    MaxPool2DOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceSumOp,
)


@irdl_op_definition
class FusedOp(IRDLOperation):
    """One fusion group, run as one kernel.

    ``%r = ai.fused "KIND" (%a, %b) : (T_a, T_b) -> T_r {``
    ``^bb0(%x: T_a, %y: T_b): ... ai.yield %v : T_r }``

    The operands are the group's inputs and become the body's block arguments;
    ``ai.yield`` gives the results. ``kind`` names the kernel template: one of
    the registered ``FUSED_KINDS``.
    """

    name = "ai.fused"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    kind = prop_def(StringAttr)
    body = region_def("single_block")
    # A kernel sees only its operands: constants are passed in, never captured.
    traits = traits_def(IsolatedFromAbove())

    def __init__(
        self,
        kind: str,
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        body: Region,
        attributes: Mapping[str, Attribute] | None = None,
    ) -> None:
        super().__init__(
            operands=[list(inputs)],
            result_types=[list(result_types)],
            properties={"kind": StringAttr(kind)},
            regions=[body],
            attributes=dict(attributes or {}),
        )

    @property
    def kind_name(self) -> str:
        return self.kind.data

    @property
    def block(self) -> Block:
        return self.body.block

    def verify_(self) -> None:
        if not self.kind.data:
            raise VerifyException("'kind' must be a non-empty string")
        if self.kind.data not in FUSED_KINDS:
            raise VerifyException(
                f"unknown kind {self.kind.data!r} (registered kinds: {', '.join(FUSED_KINDS)})"
            )
        block = self.body.block
        arg_types = [a.type for a in block.args]
        in_types = [v.type for v in self.inputs]
        if arg_types != in_types:
            raise VerifyException(
                f"body arguments ({_types(arg_types)}) must match the operands ({_types(in_types)})"
            )
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException("body must end in 'ai.yield'")
        yielded = [v.type for v in term.operands]
        out_types = [r.type for r in self.results]
        if yielded != out_types:
            raise VerifyException(
                f"'ai.yield' types ({_types(yielded)}) must match the results ({_types(out_types)})"
            )

    @classmethod
    def parse(cls, parser: Parser) -> FusedOp:
        kind = parser.parse_str_literal(" (the kind of 'ai.fused', e.g. \"pointwise\")")
        unresolved = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, parser.parse_unresolved_operand
        )
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        fn_type: FunctionType = parser.parse_function_type()
        if len(fn_type.inputs) != len(unresolved):
            parser.raise_error(
                f"'ai.fused' op has {len(unresolved)} operand(s) but "
                f"{len(fn_type.inputs)} input type(s)",
                at_position=getattr(parser, "current_op_span", None),
            )
        operands = parser.resolve_operands(unresolved, fn_type.inputs.data, parser.pos)
        body = parser.parse_region()
        op = cls(kind, operands, fn_type.outputs.data, body, attributes=attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.kind.data)
        printer.print_string(" (")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(")")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type((v.type for v in self.inputs), (r.type for r in self.results))
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=True)


def _types(types: Sequence[Attribute]) -> str:
    return ", ".join(str(t) for t in types)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of an ``ai.fused`` body: ``ai.yield %a, %b : T_a, T_b``."""

    name = "ai.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(FusedOp))

    def __init__(self, *values: SSAValue) -> None:
        super().__init__(operands=[list(values)])

    @classmethod
    def parse(cls, parser: Parser) -> YieldOp:
        unresolved = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        )
        if not unresolved:
            return cls()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        return cls(*parser.resolve_operands(unresolved, types, parser.pos))

    def print(self, printer: Printer) -> None:
        if not self.operands:
            return
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list((v.type for v in self.operands), printer.print_attribute)


TENSOR_OPS: tuple[type[AiOp], ...] = (
    Conv2DOp,
    BiasAddOp,
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    MaximumOp,
    MinimumOp,
    ReluOp,
    SigmoidOp,
    TanhOp,
    ExpOp,
    SqrtOp,
    NegOp,
    AbsOp,
    SiluOp,
    GeluOp,
    ErfOp,
    IsNanOp,
    ClipOp,
    PowOp,
    LogOp,
    SinOp,
    CosOp,
    TanOp,
    AsinOp,
    AcosOp,
    AtanOp,
    SinhOp,
    CoshOp,
    AsinhOp,
    AcoshOp,
    AtanhOp,
    FloorOp,
    CeilOp,
    RoundOp,
    SignOp,
    ReciprocalOp,
    HardSigmoidOp,
    HardSwishOp,
    LeakyReluOp,
    PReluOp,
    EluOp,
    SeluOp,
    CeluOp,
    SoftplusOp,
    SoftsignOp,
    MishOp,
    ThresholdedReluOp,
    WhereOp,
    MatmulOp,
    AttentionOp,
    MoEExpertsOp,
    BatchNormOp,
    LayerNormOp,
    RMSNormOp,
    SoftmaxOp,
    CastOp,
    QuantizeOp,
    DequantizeOp,
    ReshapeOp,
    TransposeOp,
    SliceOp,
    ConcatOp,
    RotateHalfOp,
    GatherOp,
    EqualOp,
    LessOp,
    GreaterOp,
    LessEqualOp,
    GreaterEqualOp,
    NotOp,
    AndOp,
    OrOp,
    XorOp,
    ModOp,
    TakeOp,
    CumSumOp,
    ExpandOp,
    ArgMaxOp,
    ArgMinOp,
    ReduceMeanOp,
    ReduceSumOp,
    ReduceMaxOp,
    MaxPool2DOp,
    AvgPool2DOp,
)


AI = Dialect("ai", [*TENSOR_OPS, FusedOp, YieldOp], [])
