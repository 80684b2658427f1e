"""The ``ai`` dialect: tensor ops of AI graphs, and ``ai.fused`` kernel groups.

Every op but ``ai.fused``/``ai.yield`` shares one custom syntax::

    %r = ai.NAME %a, %b {attr = value, ...} : T_a * T_b

(``ai.cast`` adds ``to T_result``). Result types are never written: they are
inferred by the op's shape function in ``shapes.py``, the same function the
builders and the verifier call. Attributes are stored as properties; those
equal to their default are not printed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    IntegerType,
    NoneAttr,
    StringAttr,
    TensorType,
    bf16,
    f16,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl import operand_def as _operand_def
from xdsl.irdl import result_def as _result_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from fusec.dialect import shapes
from fusec.dialect.canonical import (
    AddCanonicalization,
    BiasAddCanonicalization,
    CastCanonicalization,
    Conv2DCanonicalization,
    ReluCanonicalization,
)
from fusec.dialect.shapes import ShapeError, TensorSpec

# --------------------------------------------------------------------------- types

_ELEMENT_TYPES: dict[str, AnyFloat] = {"f16": f16, "bf16": bf16, "f32": f32}


def element_type_name(t: Attribute) -> str:
    """'f16' | 'bf16' | 'f32' for a supported element type, else raise ShapeError."""
    if isinstance(t, Float16Type):
        return "f16"
    if isinstance(t, BFloat16Type):
        return "bf16"
    if isinstance(t, Float32Type):
        return "f32"
    raise ShapeError(f"unsupported element type {t}: expected one of f16, bf16, f32")


def spec_of(t: Attribute) -> TensorSpec:
    """The TensorSpec of a static ranked tensor type of f16/bf16/f32."""
    if isinstance(t, TensorType):
        return _tensor_spec(t)
    raise ShapeError(f"expected a tensor type, got {t}")


@functools.lru_cache(maxsize=4096)
def _tensor_spec(t: TensorType) -> TensorSpec:
    # Memoised: passes ask for the same few types hundreds of thousands of times
    # on large graphs; attributes are immutable and hashable. Errors are not cached.
    if not isinstance(t, TensorType):
        raise ShapeError(f"expected a tensor type, got {t}")
    shape = tuple(t.get_shape())
    if any(d < 0 for d in shape):
        raise ShapeError(f"dynamic shapes are not supported: {t}")
    if not isinstance(t.encoding, NoneAttr):
        raise ShapeError(f"tensor encodings are not supported: {t}")
    if (problem := shapes.shape_problem(shape)) is not None:
        raise ShapeError(f"{t} {problem}")
    return TensorSpec(shape, element_type_name(t.get_element_type()))


def tensor_type(spec: TensorSpec) -> TensorType:
    return TensorType(_ELEMENT_TYPES[spec.dtype], spec.shape)


# ---------------------------------------------------------------- attribute kinds


@dataclass(frozen=True)
class AttrKind:
    """How one op attribute is stored (an xDSL attribute) and read (a Python value)."""

    default: Any
    to_python: Callable[[Attribute], Any]
    from_python: Callable[[Any], Attribute]
    describe: str

    def read(self, attr: Attribute | None) -> Any:
        return self.default if attr is None else self.to_python(attr)


def _read_int_array(attr: Attribute) -> tuple[int, ...]:
    if isinstance(attr, DenseArrayBase) and isinstance(attr.elt_type, IntegerType):
        return tuple(int(v) for v in attr.get_values())
    raise ValueError


def _read_int(attr: Attribute) -> int:
    if isinstance(attr, IntegerAttr) and attr.type != i1:
        return int(attr.value.data)
    raise ValueError


def _read_bool(attr: Attribute) -> bool:
    if isinstance(attr, IntegerAttr) and attr.type == i1:
        return bool(attr.value.data)
    raise ValueError


def _read_float(attr: Attribute) -> float:
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    raise ValueError


def _read_string(attr: Attribute) -> str:
    if isinstance(attr, StringAttr):
        return attr.data
    raise ValueError


def int_array(default: tuple[int, ...]) -> AttrKind:
    return AttrKind(
        default,
        _read_int_array,
        lambda v: DenseArrayBase.from_list(i64, list(v)),
        "array<i64: ...>",
    )


def int_attr(default: int) -> AttrKind:
    return AttrKind(default, _read_int, lambda v: IntegerAttr(int(v), i64), "an integer (: i64)")


def bool_attr(default: bool) -> AttrKind:
    return AttrKind(default, _read_bool, lambda v: IntegerAttr(int(bool(v)), i1), "true or false")


def f32_attr(default: float) -> AttrKind:
    return AttrKind(default, _read_float, lambda v: FloatAttr(float(v), f32), "a float (: f32)")


def string_attr(default: str, choices: tuple[str, ...] | None = None) -> AttrKind:
    def read(attr: Attribute) -> str:
        value = _read_string(attr)
        if choices is not None and value not in choices:
            raise ValueError
        return value

    describe = " or ".join(f'"{c}"' for c in choices) if choices else "a string"
    return AttrKind(default, read, StringAttr, describe)


# ------------------------------------------------------------------- base class


class AiOp(IRDLOperation):
    """Common machinery of the ``ai`` tensor ops: syntax, builder, verifier.

    Subclasses declare ``OPERANDS`` (operand names in order), ``ATTRS`` (name ->
    AttrKind) and ``infer`` (the op's shape function from ``shapes.py``).
    """

    OPERANDS: ClassVar[tuple[str, ...]] = ()
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {}
    HAS_TO_TYPE: ClassVar[bool] = False

    # ---------------------------------------------------------------- builder
    def __init__(
        self,
        *operands: SSAValue,
        result_type: Attribute | None = None,
        attributes: Mapping[str, Attribute] | None = None,
        **attrs: Any,
    ) -> None:
        properties = self.encode_attrs(attrs)
        if result_type is None:
            specs = [spec_of(v.type) for v in operands]
            result_type = tensor_type(self.infer_spec(specs, properties, None))
        super().__init__(
            operands=list(operands),
            result_types=[result_type],
            properties=properties,
            attributes=dict(attributes or {}),
        )

    @classmethod
    def encode_attrs(cls, attrs: Mapping[str, Any]) -> dict[str, Attribute]:
        """Python values -> properties, dropping values equal to the default."""
        props: dict[str, Attribute] = {}
        for key, value in attrs.items():
            if key not in cls.ATTRS:
                raise ShapeError(f"{cls.name}: unknown attribute '{key}'{cls._known_attrs()}")
            kind = cls.ATTRS[key]
            if isinstance(value, Attribute):
                props[key] = value
            elif value != kind.default and value is not None:
                props[key] = kind.from_python(value)
        return props

    @classmethod
    def _known_attrs(cls) -> str:
        if not cls.ATTRS:
            return f" ({cls.name} has no attributes)"
        return f" (expected one of: {', '.join(cls.ATTRS)})"

    # ------------------------------------------------------------- semantics
    def attr(self, key: str) -> Any:
        """The Python value of attribute ``key`` (its default when absent)."""
        return self.ATTRS[key].read(self.properties.get(key))

    def attr_values(self) -> dict[str, Any]:
        return {key: self.attr(key) for key in self.ATTRS}

    @classmethod
    def infer(cls, operands: Sequence[TensorSpec], attrs: Mapping[str, Any]) -> TensorSpec:
        """Result type of the op from operand types and attribute values."""
        raise NotImplementedError

    @classmethod
    def infer_spec(
        cls,
        operands: Sequence[TensorSpec],
        properties: Mapping[str, Attribute],
        to_type: TensorSpec | None,
    ) -> TensorSpec:
        if len(operands) != len(cls.OPERANDS):
            raise ShapeError(
                f"{cls.name}: expects {len(cls.OPERANDS)} operand(s) "
                f"({', '.join(cls.OPERANDS)}), got {len(operands)}"
            )
        values = {}
        for key, kind in cls.ATTRS.items():
            try:
                values[key] = kind.read(properties.get(key))
            except ValueError:
                raise ShapeError(
                    f"{cls.name}: attribute '{key}' must be {kind.describe}, got {properties[key]}"
                ) from None
        if cls.HAS_TO_TYPE:
            assert to_type is not None
            values["to"] = to_type.dtype
        return cls.infer(operands, values)

    def verify(self, verify_nested_ops: bool = True) -> None:
        # Attribute kinds before IRDL's property constraints, whose message for the
        # generic form (`<{axis = "x"}>`) would not name the attribute.
        for key, kind in self.ATTRS.items():
            if key in self.properties:
                try:
                    kind.read(self.properties[key])
                except ValueError:
                    raise VerifyException(
                        f"attribute '{key}' must be {kind.describe}, got {self.properties[key]}"
                    ) from None
        super().verify(verify_nested_ops)

    def verify_(self) -> None:
        try:
            operand_specs = [spec_of(v.type) for v in self.operands]
            result_spec = spec_of(self.results[0].type)
            for key in self.properties:
                if key not in self.ATTRS:
                    raise ShapeError(f"unknown attribute '{key}'{self._known_attrs()}")
            for key in self.attributes:
                # Undotted names are inherent attributes: the custom syntax would
                # read one back as a property, so the text would not round-trip.
                if "." not in key:
                    raise ShapeError(f"unknown attribute '{key}'{self._known_attrs()}")
            expected = self.infer_spec(operand_specs, self.properties, result_spec)
        except ShapeError as err:
            raise VerifyException(_strip_op_prefix(str(err), self.name)) from None
        if expected != result_spec:
            raise VerifyException(
                f"result type {result_spec} does not match the inferred type {expected}"
            )

    # ----------------------------------------------------------------- syntax
    @classmethod
    def parse(cls, parser: Parser) -> AiOp:
        op_span = getattr(parser, "current_op_span", None)
        unresolved = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand
        )
        attr_start = parser.pos
        attr_dict = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = [parser.parse_type()]
        while parser.parse_optional_punctuation("*"):
            types.append(parser.parse_type())
        to_type = None
        if cls.HAS_TO_TYPE:
            parser.parse_keyword("to")
            to_type = parser.parse_type()
        if len(types) != len(unresolved):
            parser.raise_error(
                f"'{cls.name}' op has {len(unresolved)} operand(s) but {len(types)} type(s) "
                "after ':'",
                at_position=op_span,
            )
        operands = parser.resolve_operands(unresolved, types, parser.pos)

        properties, attributes = {}, {}
        for key, value in attr_dict.items():
            if key in cls.ATTRS:
                properties[key] = value
            elif "." in key:  # dialect-prefixed discardable attribute
                attributes[key] = value
            else:
                parser.raise_error(
                    f"'{cls.name}' op unknown attribute '{key}'{cls._known_attrs()}", attr_start
                )
        try:
            specs = [spec_of(t) for t in types]
            to_spec = spec_of(to_type) if to_type is not None else None
            result = cls.infer_spec(specs, properties, to_spec)
            if to_spec is not None and to_spec != result:
                raise ShapeError(
                    f"'to' type {to_spec} must be {result}: "
                    f"{cls.name} changes only the element type"
                )
            if (problem := shapes.shape_problem(result.shape)) is not None:
                raise ShapeError(f"result {result} {problem}")
        except ShapeError as err:
            message = _strip_op_prefix(str(err), cls.name)
            parser.raise_error(f"'{cls.name}' op {message}", at_position=op_span)
        return cls.create(
            operands=operands,
            result_types=[tensor_type(result)],
            properties=properties,
            attributes=attributes,
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        # In declaration order, whatever order the builder or the text gave them in,
        # so that one op prints one way (MLIR sorts attribute dictionaries too).
        order = {key: i for i, key in enumerate(self.ATTRS)}
        shown = {
            key: value
            for key, value in sorted(
                self.properties.items(), key=lambda item: order.get(item[0], len(order))
            )
            if key not in self.ATTRS
            or _safe_read(self.ATTRS[key], value) != self.ATTRS[key].default
        }
        shown.update(self.attributes)
        printer.print_op_attributes(shown)
        printer.print_string(" : ")
        printer.print_list((v.type for v in self.operands), printer.print_attribute, " * ")
        if self.HAS_TO_TYPE:
            printer.print_string(" to ")
            printer.print_attribute(self.results[0].type)


def _safe_read(kind: AttrKind, attr: Attribute) -> Any:
    try:
        return kind.to_python(attr)
    except ValueError:
        return attr


def _strip_op_prefix(message: str, op_name: str) -> str:
    return message.removeprefix(f"{op_name}: ")


def operand(name: str):  # noqa: ARG001 - the name documents the field
    return _operand_def(TensorType)


def result():
    return _result_def(TensorType)


# ---------------------------------------------------------------- tensor ops


@irdl_op_definition
class Conv2DOp(AiOp):
    """2-D convolution, NCHW input and KCRS (out, in/groups, kh, kw) weight.

    ``padding`` has 2 values (symmetric per spatial dim) or 4 values
    (h_begin, w_begin, h_end, w_end).
    """

    name = "ai.conv2d"
    input = operand("input")
    weight = operand("weight")
    output = result()
    strides = opt_prop_def(DenseArrayBase)
    padding = opt_prop_def(DenseArrayBase)
    dilations = opt_prop_def(DenseArrayBase)
    groups = opt_prop_def(IntegerAttr)
    traits = traits_def(Pure(), Conv2DCanonicalization())

    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "weight")
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {
        "strides": int_array((1, 1)),
        "padding": int_array((0, 0)),
        "dilations": int_array((1, 1)),
        "groups": int_attr(1),
    }

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.conv2d(*operands, **attrs)


@irdl_op_definition
class BiasAddOp(AiOp):
    """x + bias, the 1-D bias broadcast along dimension ``axis`` of x."""

    name = "ai.bias_add"
    input = operand("input")
    bias = operand("bias")
    output = result()
    axis = opt_prop_def(IntegerAttr)
    traits = traits_def(Pure(), BiasAddCanonicalization())

    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "bias")
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {"axis": int_attr(1)}

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.bias_add(*operands, **attrs)


class BinaryOp(AiOp):
    """Elementwise binary op with numpy broadcasting."""

    lhs = operand("lhs")
    rhs = operand("rhs")
    output = result()
    traits = traits_def(Pure())
    OPERANDS: ClassVar[tuple[str, ...]] = ("lhs", "rhs")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.elementwise_binary(cls.name, *operands)


@irdl_op_definition
class AddOp(BinaryOp):
    """Elementwise a + b (numpy broadcasting)."""

    name = "ai.add"
    traits = traits_def(Pure(), AddCanonicalization())


@irdl_op_definition
class SubOp(BinaryOp):
    """Elementwise a - b (numpy broadcasting)."""

    name = "ai.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """Elementwise a * b (numpy broadcasting)."""

    name = "ai.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """Elementwise a / b (numpy broadcasting)."""

    name = "ai.div"


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise max(a, b) (numpy broadcasting)."""

    name = "ai.maximum"


class UnaryOp(AiOp):
    """Elementwise unary op: result type equals operand type."""

    input = operand("input")
    output = result()
    traits = traits_def(Pure())
    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.elementwise_unary(*operands)


@irdl_op_definition
class ReluOp(UnaryOp):
    """max(x, 0)."""

    name = "ai.relu"
    traits = traits_def(Pure(), ReluCanonicalization())


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """1 / (1 + exp(-x))."""

    name = "ai.sigmoid"


@irdl_op_definition
class TanhOp(UnaryOp):
    """tanh(x)."""

    name = "ai.tanh"


@irdl_op_definition
class ExpOp(UnaryOp):
    """exp(x)."""

    name = "ai.exp"


@irdl_op_definition
class SqrtOp(UnaryOp):
    """sqrt(x) (NaN for x < 0): needed to normalise by a variance known only at run time."""

    name = "ai.sqrt"


@irdl_op_definition
class SiluOp(UnaryOp):
    """x * sigmoid(x)."""

    name = "ai.silu"


@irdl_op_definition
class GeluOp(UnaryOp):
    """GELU: exact (erf) by default, or the tanh approximation."""

    name = "ai.gelu"
    approximate = opt_prop_def(StringAttr)
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {"approximate": string_attr("none", ("none", "tanh"))}


@irdl_op_definition
class MatmulOp(AiOp):
    """(..., M, K) @ (..., K, N), leading (batch) dims broadcast.

    ``transpose_a``/``transpose_b`` swap the last two dims of an operand first.
    A 1-D operand follows numpy: its unit dim is added, then dropped from the result.
    """

    name = "ai.matmul"
    lhs = operand("lhs")
    rhs = operand("rhs")
    output = result()
    transpose_a = opt_prop_def(IntegerAttr)
    transpose_b = opt_prop_def(IntegerAttr)
    traits = traits_def(Pure())

    OPERANDS: ClassVar[tuple[str, ...]] = ("lhs", "rhs")
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {
        "transpose_a": bool_attr(False),
        "transpose_b": bool_attr(False),
    }

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.matmul(*operands, **attrs)


@irdl_op_definition
class LayerNormOp(AiOp):
    """Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta."""

    name = "ai.layernorm"
    input = operand("input")
    gamma = operand("gamma")
    beta = operand("beta")
    output = result()
    epsilon = opt_prop_def(FloatAttr)
    traits = traits_def(Pure())

    OPERANDS: ClassVar[tuple[str, ...]] = ("input", "gamma", "beta")
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {"epsilon": f32_attr(1e-5)}

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.layernorm(*operands, epsilon=attrs["epsilon"])


@irdl_op_definition
class SoftmaxOp(AiOp):
    """Softmax along ``axis`` (default the last)."""

    name = "ai.softmax"
    input = operand("input")
    output = result()
    axis = opt_prop_def(IntegerAttr)
    traits = traits_def(Pure())

    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    ATTRS: ClassVar[Mapping[str, AttrKind]] = {"axis": int_attr(-1)}

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.softmax(*operands, **attrs)


@irdl_op_definition
class CastOp(AiOp):
    """Element type conversion: ``ai.cast %x : T_from to T_to``."""

    name = "ai.cast"
    input = operand("input")
    output = result()
    traits = traits_def(Pure(), CastCanonicalization())

    OPERANDS: ClassVar[tuple[str, ...]] = ("input",)
    HAS_TO_TYPE: ClassVar[bool] = True

    def __init__(self, value: SSAValue, to_dtype: str) -> None:
        spec = shapes.cast(spec_of(value.type), to_dtype)
        super().__init__(value, result_type=tensor_type(spec))

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.cast(operands[0], attrs["to"])


# ----------------------------------------------------------- fusion groups


@irdl_op_definition
class FusedOp(IRDLOperation):
    """One fusion group, run as one kernel.

    ``%r = ai.fused "KIND" (%a, %b) : (T_a, T_b) -> T_r {``
    ``^bb0(%x: T_a, %y: T_b): ... ai.yield %v : T_r }``

    The operands are the group's inputs and become the body's block arguments;
    ``ai.yield`` gives the results. ``kind`` names the kernel template.
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
    ReluOp,
    SigmoidOp,
    TanhOp,
    ExpOp,
    SqrtOp,
    SiluOp,
    GeluOp,
    MatmulOp,
    LayerNormOp,
    SoftmaxOp,
    CastOp,
)

AI = Dialect("ai", [*TENSOR_OPS, FusedOp, YieldOp], [])
