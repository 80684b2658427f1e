"""The ``ai`` dialect: tensor ops of AI graphs, and ``ai.fused`` kernel groups.

Every op but ``ai.fused``/``ai.yield`` shares one custom syntax::

    %r = ai.NAME %a, %b {attr = value, ...} : T_a * T_b

(``ai.cast`` adds ``to T_result``). Result types are never written: they are
inferred by the op's shape function in ``shapes.py``, the same function the
builders and the verifier call. Attributes are IRDL properties declared once
with their constraint and default; those equal to their default are not printed.

Each op class is the single home of its facts (``fusec.dialect.facts``): its
fusion pattern, its scalar semantics for the code generators, its numpy
reference implementation and the names front ends map onto it. Adding an
elementwise op is one class here (plus its line in ``TENSOR_OPS``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AttrSetConstraint,
    IRDLOperation,
    OptPropertyDef,
    VerificationContext,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.pattern_rewriter import RewritePattern
from xdsl.printer import Printer
from xdsl.traits import (
    HasCanonicalizationPatternsTrait,
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    Pure,
)
from xdsl.utils.exceptions import VerifyException

from fusec.dialect import shapes
from fusec.dialect.facts import (
    FUSED_KINDS,
    NO_TARGETS,
    FrontendNames,
    Pattern,
    ScalarBuilder,
)
from fusec.dialect.shapes import ShapeError, TensorSpec
from fusec.ir.dtypes import (
    ALL_TYPES,
    FLOAT_TYPES,
    INT_TYPES,
    NUMERIC_TYPES,
    is_float,
    numpy_dtype,
)
from fusec.ir.tensors import element_type_name as element_type_name
from fusec.ir.tensors import spec_of as spec_of
from fusec.ir.tensors import tensor_type as tensor_type

if TYPE_CHECKING:
    import numpy as np

# --------------------------------------------------------------------------- types


# ``element_type_name``, ``spec_of``, ``tensor_type``: ``fusec.ir.tensors`` (below the
# dialect, so that ``fusec.ir.module`` checks entry functions without importing it).


# ----------------------------------------------------------- canonicalisation

#: The canonicalisation patterns of each op class with the ``Canonicalized`` trait,
#: registered by ``fusec.dialect.canonical`` (which the package imports with this
#: module): the ops name no pattern, the patterns match ops, and neither module imports
#: the other both ways (issue 27).
CANONICAL_PATTERNS: dict[type[Operation], tuple[RewritePattern, ...]] = {}


@dataclass(frozen=True)
class Canonicalized(HasCanonicalizationPatternsTrait):
    """The op has canonicalisation patterns: those ``CANONICAL_PATTERNS`` holds for its
    class (xDSL's ``canonicalize`` asks ``get_patterns`` with the op's class)."""

    def get_patterns(self, op: type[Operation]) -> tuple[RewritePattern, ...]:
        return CANONICAL_PATTERNS[op]

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        raise TypeError("Canonicalized patterns are per op class: get_patterns(op)")


# ------------------------------------------------------------------- attributes
#
# Each attribute is declared once, as an IRDL property with a typed constraint
# and a default value (``opt_prop_def(..., default_value=...)``): absent means
# the default, which is never stored by the builders nor printed. The Python
# value of a property (``op.attr(name)``) and its conversion back follow from
# the attribute's own type.


def int_array_prop(*default: int) -> Any:
    """An ``array<i64: ...>`` property (read as a tuple of ints)."""
    return opt_prop_def(DenseArrayBase.constr(i64), DenseArrayBase.from_list(i64, list(default)))


def int_prop(default: int) -> Any:
    """An ``N : i64`` property (read as an int)."""
    return opt_prop_def(IntegerAttr.constr(type=i64), IntegerAttr(default, i64))


def bool_prop(default: bool) -> Any:
    """A ``true``/``false`` property (read as a bool)."""
    return opt_prop_def(IntegerAttr.constr(type=i1), IntegerAttr(int(default), i1))


def float_prop(default: float) -> Any:
    """A float property, ``X : f32`` (any float width is accepted; read as a float)."""
    return opt_prop_def(FloatAttr, FloatAttr(default, f32))


def choice_prop(default: str, *choices: str) -> Any:
    """A string property restricted to ``choices`` (read as a str)."""
    return opt_prop_def(
        AttrSetConstraint.get(*(StringAttr(c) for c in choices)), StringAttr(default)
    )


def python_value(attr: Attribute) -> Any:
    """The Python value of a property of one of the kinds above."""
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    if isinstance(attr, IntegerAttr):
        return bool(attr.value.data) if attr.type == i1 else int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    raise ValueError(f"no Python value for {attr}")


def attribute_like(value: Any, default: Attribute) -> Attribute:
    """``value`` as an attribute of the kind of ``default``."""
    if isinstance(default, DenseArrayBase):
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    if isinstance(default, IntegerAttr):
        if default.type == i1:
            return IntegerAttr(int(bool(value)), i1)
        return IntegerAttr(int(value), i64)
    if isinstance(default, FloatAttr):
        return FloatAttr(float(value), f32)
    return StringAttr(str(value))


def describe(prop: OptPropertyDef) -> str:
    """What a property must be, for messages: ``array<i64: ...>``, ``true or false``..."""
    default = prop.default_value
    if isinstance(default, DenseArrayBase):
        return "array<i64: ...>"
    if isinstance(default, IntegerAttr):
        return "true or false" if default.type == i1 else "an integer (: i64)"
    if isinstance(default, FloatAttr):
        return "a float (: f32)"
    constr = prop.constr
    values = constr.values if isinstance(constr, AttrSetConstraint) else ()
    choices = sorted(v.data for v in values if isinstance(v, StringAttr))
    return " or ".join(f'"{c}"' for c in choices) if choices else "a string"


# ------------------------------------------------------------------- base class


class AiOp(IRDLOperation):
    """Common machinery of the ``ai`` tensor ops: syntax, builder, verifier, facts.

    Subclasses declare their operands, result and properties with IRDL, give
    ``infer`` (the op's shape function from ``shapes.py``) and their facts
    (see ``fusec.dialect.facts``): ``PATTERN`` or ``fusion_pattern``,
    ``reference``, ``scalar`` for elementwise ops, ``FRONTEND`` names and
    ``UNSUPPORTED`` targets.
    """

    #: ``ai.cast`` writes its result type: ``: T_from to T_to``.
    HAS_TO_TYPE: ClassVar[bool] = False
    #: The op's place in the fusion lattice (see ``fusion_pattern``).
    PATTERN: ClassVar[Pattern] = Pattern.OPAQUE
    #: Names front ends map one-to-one onto this op.
    FRONTEND: ClassVar[FrontendNames] = FrontendNames()
    #: Targets that cannot lower this op, each with the reason.
    UNSUPPORTED: ClassVar[Mapping[str, str]] = NO_TARGETS
    #: The element types each operand may have (``check_dtypes``); floats unless the
    #: op says otherwise, so a float-only op refuses an integer operand by name.
    DTYPES: ClassVar[tuple[str, ...]] = FLOAT_TYPES

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
    def declared_properties(cls) -> dict[str, OptPropertyDef]:
        """The op's attributes (IRDL properties), by name, in declaration order."""
        return _declared_properties(cls)

    @classmethod
    def operand_names(cls) -> tuple[str, ...]:
        return tuple(name for name, _ in cls.get_irdl_definition().operands)

    @classmethod
    def encode_attrs(cls, attrs: Mapping[str, Any]) -> dict[str, Attribute]:
        """Python values -> properties, dropping values equal to the default (as stored:
        ``epsilon=1e-5`` is the f32 default), so that one op has one representation."""
        declared = cls.declared_properties()
        props: dict[str, Attribute] = {}
        for key, value in attrs.items():
            if key not in declared:
                raise ShapeError(f"{cls.name}: unknown attribute '{key}'{cls._known_attrs()}")
            default = declared[key].default_value
            assert default is not None
            if value is None:
                continue
            attr = value if isinstance(value, Attribute) else attribute_like(value, default)
            if not _is_default(declared[key], attr):
                props[key] = attr
        return props

    @classmethod
    def _known_attrs(cls) -> str:
        declared = cls.declared_properties()
        if not declared:
            return f" ({cls.name} has no attributes)"
        return f" (expected one of: {', '.join(declared)})"

    # ------------------------------------------------------------- semantics
    def attr(self, key: str) -> Any:
        """The Python value of attribute ``key`` (its default when absent)."""
        prop = self.declared_properties()[key]
        value = self.properties.get(key, prop.default_value)
        assert value is not None
        return python_value(value)

    def attr_values(self) -> dict[str, Any]:
        return {key: self.attr(key) for key in self.declared_properties()}

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
        names = cls.operand_names()
        if len(operands) != len(names):
            raise ShapeError(
                f"{cls.name}: expects {len(names)} operand(s) "
                f"({', '.join(names)}), got {len(operands)}"
            )
        cls.check_dtypes(operands)
        values = {}
        for key, prop in cls.declared_properties().items():
            attr = properties.get(key)
            if attr is None:
                attr = prop.default_value
            elif (problem := _property_problem(key, prop, attr)) is not None:
                raise ShapeError(f"{cls.name}: {problem}")
            assert attr is not None
            values[key] = python_value(attr)
        if cls.HAS_TO_TYPE:
            assert to_type is not None
            values["to"] = to_type.dtype
        return cls.infer(operands, values)

    @classmethod
    def check_dtypes(cls, operands: Sequence[TensorSpec]) -> None:
        """A ShapeError naming the first operand whose element type is not in ``DTYPES``."""
        names = cls.operand_names()
        for index, spec in enumerate(operands):
            if spec.dtype not in cls.DTYPES:
                label = names[index] if len(names) == len(operands) else f"#{index}"
                raise shapes.DtypeError(
                    f"{cls.name}: operand '{label}' has element type {spec.dtype}; "
                    f"{cls.name} takes {', '.join(cls.DTYPES)}"
                )

    def typed(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``args`` with every integer or bool operand in its declared numpy dtype: the
        float64 reference holds integers as floats, and integer maths (division,
        remainders, sums) must run on integers."""
        import numpy as np

        out = []
        for value, arg in zip(self.operands, args, strict=True):
            dtype = spec_of(value.type).dtype
            array = np.asarray(arg)
            out.append(array if is_float(dtype) else array.astype(numpy_dtype(dtype)))
        return out

    def result_dtype(self) -> str:
        """The element type of the (first) result."""
        return spec_of(self.results[0].type).dtype

    # ------------------------------------------------------------------ facts
    def fusion_pattern(self) -> Pattern:
        """This op instance's place in the fusion lattice (``PATTERN`` unless it
        depends on the operands, as broadcasting does)."""
        return self.PATTERN

    @classmethod
    def has_scalar(cls) -> bool:
        """True when the op has scalar semantics (``scalar``): the code generators
        compute it per element inside any kernel."""
        return cls.scalar is not AiOp.scalar

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        """The float32 expression of one result element from operand elements ``args``."""
        raise NotImplementedError(f"{self.name} has no scalar semantics")

    def reference(self, *args: np.ndarray) -> np.ndarray:
        """The numpy implementation (``fusec.dialect.numpy_ops``) of the op."""
        raise NotImplementedError(f"{self.name} has no reference implementation")

    # ------------------------------------------------------------ verification
    def verify(self, verify_nested_ops: bool = True) -> None:
        # Attribute kinds before IRDL's property constraints, whose message for the
        # generic form (`<{axis = "x"}>`) would not name the attribute.
        for key, prop in self.declared_properties().items():
            if key in self.properties:
                problem = _property_problem(key, prop, self.properties[key])
                if problem is not None:
                    raise VerifyException(problem)
        super().verify(verify_nested_ops)

    def verify_(self) -> None:
        try:
            operand_specs = [spec_of(v.type) for v in self.operands]
            result_spec = spec_of(self.results[0].type)
            declared = self.declared_properties()
            for key in self.properties:
                if key not in declared:
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

        declared = cls.declared_properties()
        properties, attributes = {}, {}
        for key, value in attr_dict.items():
            if key in declared:
                if not _is_default(declared[key], value):  # as the builders: one representation
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
        declared = self.declared_properties()
        # In declaration order, whatever order the builder or the text gave them in,
        # so that one op prints one way (MLIR sorts attribute dictionaries too).
        order = {key: i for i, key in enumerate(declared)}
        shown = {
            key: value
            for key, value in sorted(
                self.properties.items(), key=lambda item: order.get(item[0], len(order))
            )
            if key not in declared or not _is_default(declared[key], value)
        }
        shown.update(self.attributes)
        printer.print_op_attributes(shown)
        printer.print_string(" : ")
        printer.print_list((v.type for v in self.operands), printer.print_attribute, " * ")
        if self.HAS_TO_TYPE:
            printer.print_string(" to ")
            printer.print_attribute(self.results[0].type)


@functools.cache
def _declared_properties(cls: type[AiOp]) -> dict[str, OptPropertyDef]:
    props = cls.get_irdl_definition().properties.items()
    return {name: prop for name, prop in props if isinstance(prop, OptPropertyDef)}


def _property_problem(key: str, prop: OptPropertyDef, attr: Attribute) -> str | None:
    try:
        prop.constr.verify(attr, VerificationContext())
    except VerifyException:
        return f"attribute '{key}' must be {describe(prop)}, got {attr}"
    return None


def _is_default(prop: OptPropertyDef, attr: Attribute) -> bool:
    if _property_problem("", prop, attr) is not None:
        return False
    assert prop.default_value is not None
    return python_value(attr) == python_value(prop.default_value)


def _strip_op_prefix(message: str, op_name: str) -> str:
    return message.removeprefix(f"{op_name}: ")


def operand() -> Any:
    return operand_def(TensorType)


def result() -> Any:
    return result_def(TensorType)


# ---------------------------------------------------------------- tensor ops


@irdl_op_definition
class Conv2DOp(AiOp):
    """2-D convolution, NCHW input and KCRS (out, in/groups, kh, kw) weight.

    ``padding`` has 2 values (symmetric per spatial dim) or 4 values
    (h_begin, w_begin, h_end, w_end).
    """

    name = "ai.conv2d"
    input = operand()
    weight = operand()
    output = result()
    strides = int_array_prop(1, 1)
    padding = int_array_prop(0, 0)
    dilations = int_array_prop(1, 1)
    groups = int_prop(1)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="conv2d")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.conv2d(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        x, w = args
        return K.conv2d(x, w, **self.attr_values())


@irdl_op_definition
class BiasAddOp(AiOp):
    """x + bias, the 1-D bias broadcast along dimension ``axis`` of x."""

    name = "ai.bias_add"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES  # ``ai.add`` of integers becomes one too
    input = operand()
    bias = operand()
    output = result()
    axis = int_prop(1)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="bias_add")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.bias_add(*operands, **attrs)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(args[0], "+", args[1])  # an add, once the bias is broadcast

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        x, bias = args
        return K.bias_add(x, bias, axis=self.attr("axis"))


class BinaryOp(AiOp):
    """Elementwise binary op with numpy broadcasting."""

    lhs = operand()
    rhs = operand()
    output = result()
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.elementwise_binary(cls.name, *operands)

    def fusion_pattern(self) -> Pattern:
        """Elementwise when both operands have one shape, else broadcast."""
        if (
            self.lhs.type == self.rhs.type
            or spec_of(self.lhs.type).shape == spec_of(self.rhs.type).shape
        ):
            return Pattern.ELEMENTWISE
        return Pattern.BROADCAST


@irdl_op_definition
class AddOp(BinaryOp):
    """Elementwise a + b (numpy broadcasting)."""

    name = "ai.add"
    traits = traits_def(Pure(), Canonicalized())
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("add", ufuncs=("add",), onnx=("Add",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(args[0], "+", args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.add(*args)


@irdl_op_definition
class SubOp(BinaryOp):
    """Elementwise a - b (numpy broadcasting)."""

    name = "ai.sub"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("sub", ufuncs=("subtract",), onnx=("Sub",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(args[0], "-", args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.sub(*args)


@irdl_op_definition
class MulOp(BinaryOp):
    """Elementwise a * b (numpy broadcasting)."""

    name = "ai.mul"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("mul", ufuncs=("multiply",), onnx=("Mul",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(args[0], "*", args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.mul(*args)


@irdl_op_definition
class DivOp(BinaryOp):
    """Elementwise a / b (numpy broadcasting); integers divide truncating toward zero (as
    C and ONNX), and an integer division by zero gives 0."""

    name = "ai.div"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "div", ufuncs=("divide", "true_divide"), onnx=("Div",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        if not is_float(self.result_dtype()):
            return s.int_divide(args[0], args[1])
        return s.arith(args[0], "/", args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        if not is_float(self.result_dtype()):
            return K.int_divide(*self.typed(args))
        return K.div(*args)


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise max(a, b) (numpy broadcasting); NaN propagates."""

    name = "ai.maximum"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("maximum", ufuncs=("maximum",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        # numpy's maximum: no min/max builtins, NaN propagates from either side, and a
        # tie (-0.0 vs 0.0) gives the second operand
        a, b = args
        return s.select(s.either(s.compare(a, ">", b), s.compare(a, "!=", a)), a, b)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.maximum(*args)


@irdl_op_definition
class MinimumOp(BinaryOp):
    """Elementwise min(a, b) (numpy broadcasting); NaN propagates."""

    name = "ai.minimum"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("minimum", ufuncs=("minimum",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        # numpy's minimum: no min/max builtins, NaN propagates from either side, and a
        # tie (-0.0 vs 0.0) gives the second operand
        a, b = args
        return s.select(s.either(s.compare(a, "<", b), s.compare(a, "!=", a)), a, b)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray(np.minimum(*args))


class UnaryOp(AiOp):
    """Elementwise unary op: result type equals operand type."""

    input = operand()
    output = result()
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.elementwise_unary(*operands)


@irdl_op_definition
class ReluOp(UnaryOp):
    """max(x, 0); NaN propagates."""

    name = "ai.relu"
    traits = traits_def(Pure(), Canonicalized())
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("relu", onnx=("Relu",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args  # maximum(a, 0): relu(NaN) is NaN, relu(-0.0) is 0.0, as numpy
        zero = s.literal(0.0)
        return s.select(s.either(s.compare(a, ">", zero), s.compare(a, "!=", a)), a, zero)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.relu(*args)


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """1 / (1 + exp(-x))."""

    name = "ai.sigmoid"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("sigmoid", onnx=("Sigmoid",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.logistic(s.literal(1.0), args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.sigmoid(*args)


@irdl_op_definition
class TanhOp(UnaryOp):
    """tanh(x)."""

    name = "ai.tanh"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("tanh", ufuncs=("tanh",), onnx=("Tanh",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call("tanh", args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.tanh(*args)


@irdl_op_definition
class ExpOp(UnaryOp):
    """exp(x)."""

    name = "ai.exp"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("exp", ufuncs=("exp",), onnx=("Exp",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.exp(args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.exp(*args)


@irdl_op_definition
class SqrtOp(UnaryOp):
    """sqrt(x) (NaN for x < 0): needed to normalise by a variance known only at run time."""

    name = "ai.sqrt"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("sqrt", ufuncs=("sqrt",), onnx=("Sqrt",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call("sqrt", args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.sqrt(*args)


@irdl_op_definition
class NegOp(UnaryOp):
    """-x."""

    name = "ai.neg"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("neg", ufuncs=("negative",), onnx=("Neg",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.neg(args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.negative(args[0])


@irdl_op_definition
class AbsOp(UnaryOp):
    """|x| (NaN stays NaN)."""

    name = "ai.abs"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("abs", ufuncs=("absolute",), onnx=("Abs",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call("fabs", args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.abs(args[0])


@irdl_op_definition
class SiluOp(UnaryOp):
    """x * sigmoid(x)."""

    name = "ai.silu"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("silu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return _minus_zero_at_minus_inf(s, a, s.logistic(a, a))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.silu(*args)


def _minus_zero_at_minus_inf(s: ScalarBuilder, x: str, value: str) -> str:
    """``x * f(x)`` activations tend to -0 as x -> -inf, where the formula gives
    -inf * 0 = NaN: the limit, as the reference computes it."""
    return s.select(s.compare(x, "==", s.literal(-math.inf)), s.literal(-0.0), value)


_SQRT1_2 = 0.7071067811865476
_GELU_TANH_2C = 2.0 * math.sqrt(2.0 / math.pi)  # 2 * sqrt(2/pi): the x*sigmoid(2u) form


@irdl_op_definition
class GeluOp(UnaryOp):
    """GELU: exact (erf) by default, or the tanh approximation."""

    name = "ai.gelu"
    approximate = choice_prop("none", "none", "tanh")
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("gelu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        if self.attr("approximate") == "tanh":
            # 0.5*x*(1 + tanh(u)) == x * sigmoid(2u): exact, and no cancellation
            cube = s.arith(s.arith(s.arith(s.literal(0.044715), "*", a), "*", a), "*", a)
            u2 = s.arith(s.literal(_GELU_TANH_2C), "*", s.arith(a, "+", cube))
            value = s.logistic(a, u2)
        else:
            # 0.5*x*(1 + erf(x/sqrt2)) == 0.5*x*erfc(-x/sqrt2): no cancellation for x < 0
            erfc = s.call("erfc", s.arith(s.neg(a), "*", s.literal(_SQRT1_2)))
            value = s.arith(s.arith(s.literal(0.5), "*", a), "*", erfc)
        return _minus_zero_at_minus_inf(s, a, value)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.gelu(args[0], approximate=self.attr("approximate"))


@irdl_op_definition
class ErfOp(UnaryOp):
    """The error function erf(x)."""

    name = "ai.erf"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("erf", onnx=("Erf",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call("erf", args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.erf(*args)


@irdl_op_definition
class IsNanOp(UnaryOp):
    """1 where x is NaN, else 0, in x's element type: a condition for ``ai.where``
    (the dialect's tensors are float; a boolean is 0 or 1)."""

    name = "ai.isnan"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("isnan")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return s.select(s.compare(a, "!=", a), s.literal(1.0), s.literal(0.0))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        x = np.asarray(args[0])
        return np.isnan(x).astype(x.dtype)


@irdl_op_definition
class ClipOp(UnaryOp):
    """``x`` clipped to [min, max], constant bounds (default: none), as ``numpy.clip``:
    a value within the bounds is kept as it is (``clip(-0.0, 0, 6)`` is -0.0, unlike
    ``maximum(-0.0, 0.0)``), NaN propagates."""

    name = "ai.clip"
    min = float_prop(-math.inf)
    max = float_prop(math.inf)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("clip")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        value = a
        if self.attr("max") != math.inf:
            high = s.literal(self.attr("max"))
            value = s.select(s.compare(value, ">", high), high, value)
            if self.attr("min") != -math.inf:
                value = s.bind(value)  # two selects in sequence, not nested
        if self.attr("min") != -math.inf:
            low = s.literal(self.attr("min"))
            value = s.select(s.compare(a, "<", low), low, value)
        return value

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        x = np.asarray(args[0])
        low, high = (x.dtype.type(self.attr(k)) for k in ("min", "max"))
        return np.clip(x, low, high).astype(x.dtype)


@irdl_op_definition
class PowOp(BinaryOp):
    """Elementwise a ** b (numpy broadcasting; C's powf: NaN for a negative base and a
    non-integer exponent)."""

    name = "ai.pow"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("pow", ufuncs=("power",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call("pow", *args)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        with np.errstate(all="ignore"):
            return np.asarray(np.power(*args))


# ------------------------------------------ more activations and unary maths


class MathOp(UnaryOp):
    """A function of C's math library, ``FUNCTION``, computed in float32 by every
    language (``math.FUNCTION``, ``FUNCTIONf``, ``torch.FUNCTION``); its reference is
    numpy's ufunc ``UFUNC``: NaN or inf outside the domain, as C gives."""

    FUNCTION: ClassVar[str] = ""
    UFUNC: ClassVar[str] = ""

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.call(self.FUNCTION, args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        from fusec.dialect import numpy_ops as K

        return K.unary_math(args[0], getattr(np, self.UFUNC))


def _math_names(function: str, ufunc: str, onnx: str) -> FrontendNames:
    return FrontendNames(function, ufuncs=(ufunc,), onnx=(onnx,))


@irdl_op_definition
class LogOp(MathOp):
    """The natural logarithm (-inf at 0, NaN below)."""

    name = "ai.log"
    FUNCTION: ClassVar[str] = "log"
    UFUNC: ClassVar[str] = "log"
    FRONTEND: ClassVar[FrontendNames] = _math_names("log", "log", "Log")


@irdl_op_definition
class SinOp(MathOp):
    """sin(x)."""

    name = "ai.sin"
    FUNCTION: ClassVar[str] = "sin"
    UFUNC: ClassVar[str] = "sin"
    FRONTEND: ClassVar[FrontendNames] = _math_names("sin", "sin", "Sin")


@irdl_op_definition
class CosOp(MathOp):
    """cos(x)."""

    name = "ai.cos"
    FUNCTION: ClassVar[str] = "cos"
    UFUNC: ClassVar[str] = "cos"
    FRONTEND: ClassVar[FrontendNames] = _math_names("cos", "cos", "Cos")


@irdl_op_definition
class TanOp(MathOp):
    """tan(x)."""

    name = "ai.tan"
    FUNCTION: ClassVar[str] = "tan"
    UFUNC: ClassVar[str] = "tan"
    FRONTEND: ClassVar[FrontendNames] = _math_names("tan", "tan", "Tan")


@irdl_op_definition
class AsinOp(MathOp):
    """arcsin(x) (NaN outside [-1, 1])."""

    name = "ai.asin"
    FUNCTION: ClassVar[str] = "asin"
    UFUNC: ClassVar[str] = "arcsin"
    FRONTEND: ClassVar[FrontendNames] = _math_names("asin", "arcsin", "Asin")


@irdl_op_definition
class AcosOp(MathOp):
    """arccos(x) (NaN outside [-1, 1])."""

    name = "ai.acos"
    FUNCTION: ClassVar[str] = "acos"
    UFUNC: ClassVar[str] = "arccos"
    FRONTEND: ClassVar[FrontendNames] = _math_names("acos", "arccos", "Acos")


@irdl_op_definition
class AtanOp(MathOp):
    """arctan(x)."""

    name = "ai.atan"
    FUNCTION: ClassVar[str] = "atan"
    UFUNC: ClassVar[str] = "arctan"
    FRONTEND: ClassVar[FrontendNames] = _math_names("atan", "arctan", "Atan")


@irdl_op_definition
class SinhOp(MathOp):
    """sinh(x)."""

    name = "ai.sinh"
    FUNCTION: ClassVar[str] = "sinh"
    UFUNC: ClassVar[str] = "sinh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("sinh", "sinh", "Sinh")


@irdl_op_definition
class CoshOp(MathOp):
    """cosh(x)."""

    name = "ai.cosh"
    FUNCTION: ClassVar[str] = "cosh"
    UFUNC: ClassVar[str] = "cosh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("cosh", "cosh", "Cosh")


@irdl_op_definition
class AsinhOp(MathOp):
    """arsinh(x)."""

    name = "ai.asinh"
    FUNCTION: ClassVar[str] = "asinh"
    UFUNC: ClassVar[str] = "arcsinh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("asinh", "arcsinh", "Asinh")


@irdl_op_definition
class AcoshOp(MathOp):
    """arcosh(x) (NaN below 1)."""

    name = "ai.acosh"
    FUNCTION: ClassVar[str] = "acosh"
    UFUNC: ClassVar[str] = "arccosh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("acosh", "arccosh", "Acosh")


@irdl_op_definition
class AtanhOp(MathOp):
    """artanh(x) (+-inf at +-1, NaN beyond)."""

    name = "ai.atanh"
    FUNCTION: ClassVar[str] = "atanh"
    UFUNC: ClassVar[str] = "arctanh"
    FRONTEND: ClassVar[FrontendNames] = _math_names("atanh", "arctanh", "Atanh")


_TWO_23 = 8388608.0  # 2**23: every float32 of this magnitude or more is an integer


def _to_integer(s: ScalarBuilder, x: str, direction: str) -> str:
    """``x`` rounded to an integer ("even": to nearest, ties to even; "floor"; "ceil") in
    float32 arithmetic every language renders alike (Numba's ``math.floor`` is an int).
    ``(|x| + 2**23) - 2**23`` rounds |x| < 2**23 to the nearest integer, ties to even;
    floor and ceil step back by one where that went past x; ``copysign`` gives -0.0
    where numpy does (rint(-0.4), ceil(-0.6)); larger magnitudes, inf and NaN are x."""
    magnitude = s.bind(s.call("fabs", x))
    big = s.literal(_TWO_23)
    nearest = s.bind(s.call("copysign", s.arith(s.arith(magnitude, "+", big), "-", big), x))
    rounded = nearest
    one = s.literal(1.0)
    if direction == "floor":
        stepped = s.select(s.compare(nearest, ">", x), s.arith(nearest, "-", one), nearest)
        rounded = s.call("copysign", s.bind(stepped), x)
    elif direction == "ceil":
        stepped = s.select(s.compare(nearest, "<", x), s.arith(nearest, "+", one), nearest)
        rounded = s.call("copysign", s.bind(stepped), x)
    return s.select(s.compare(magnitude, "<", big), rounded, x)


@irdl_op_definition
class FloorOp(UnaryOp):
    """The largest integer <= x (-0.0, inf and NaN stay)."""

    name = "ai.floor"
    FRONTEND: ClassVar[FrontendNames] = _math_names("floor", "floor", "Floor")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _to_integer(s, args[0], "floor")

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        from fusec.dialect import numpy_ops as K

        return K.unary_math(args[0], np.floor)


@irdl_op_definition
class CeilOp(UnaryOp):
    """The smallest integer >= x (ceil(-0.5) is -0.0; inf and NaN stay)."""

    name = "ai.ceil"
    FRONTEND: ClassVar[FrontendNames] = _math_names("ceil", "ceil", "Ceil")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _to_integer(s, args[0], "ceil")

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        from fusec.dialect import numpy_ops as K

        return K.unary_math(args[0], np.ceil)


@irdl_op_definition
class RoundOp(UnaryOp):
    """The nearest integer, halves to even (ONNX's Round, ``numpy.rint``)."""

    name = "ai.round"
    FRONTEND: ClassVar[FrontendNames] = _math_names("round", "rint", "Round")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _to_integer(s, args[0], "even")

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        from fusec.dialect import numpy_ops as K

        return K.unary_math(args[0], np.rint)


@irdl_op_definition
class SignOp(UnaryOp):
    """-1, 0 or 1 by the sign of x (0.0 for both zeros; NaN stays), as ``numpy.sign``."""

    name = "ai.sign"
    FRONTEND: ClassVar[FrontendNames] = _math_names("sign", "sign", "Sign")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        zero = s.literal(0.0)
        # x - x: 0.0 for both zeros, NaN for NaN
        rest = s.select(s.compare(a, "<", zero), s.literal(-1.0), s.arith(a, "-", a))
        return s.select(s.compare(a, ">", zero), s.literal(1.0), s.bind(rest))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.sign(args[0])


@irdl_op_definition
class ReciprocalOp(UnaryOp):
    """1 / x."""

    name = "ai.reciprocal"
    FRONTEND: ClassVar[FrontendNames] = _math_names("reciprocal", "reciprocal", "Reciprocal")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(s.literal(1.0), "/", args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.reciprocal(args[0])


def _clamp_unit(s: ScalarBuilder, y: str) -> str:
    """``y`` clipped to [0, 1], NaN propagating (two selects in sequence)."""
    one, zero = s.literal(1.0), s.literal(0.0)
    upper = s.bind(s.select(s.compare(y, ">", one), one, y))
    return s.select(s.compare(upper, "<", zero), zero, upper)


def _linear(s: ScalarBuilder, x: str, alpha: float, beta: float) -> str:
    return s.bind(s.arith(s.arith(s.literal(alpha), "*", x), "+", s.literal(beta)))


@irdl_op_definition
class HardSigmoidOp(UnaryOp):
    """max(0, min(1, alpha * x + beta)); NaN propagates."""

    name = "ai.hard_sigmoid"
    alpha = float_prop(0.2)
    beta = float_prop(0.5)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("hard_sigmoid")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _clamp_unit(s, _linear(s, args[0], self.attr("alpha"), self.attr("beta")))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.hard_sigmoid(args[0], self.attr("alpha"), self.attr("beta"))


@irdl_op_definition
class HardSwishOp(UnaryOp):
    """x * hard_sigmoid(x) with alpha 1/6, beta 1/2 (MobileNetV3's h-swish)."""

    name = "ai.hard_swish"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("hard_swish", onnx=("HardSwish",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        gate = s.bind(_clamp_unit(s, _linear(s, a, 1.0 / 6.0, 0.5)))
        return _minus_zero_at_minus_inf(s, a, s.arith(a, "*", gate))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.hard_swish(args[0])


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x where x >= 0, else alpha * x."""

    name = "ai.leaky_relu"
    alpha = float_prop(0.01)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("leaky_relu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        scaled = s.arith(s.literal(self.attr("alpha")), "*", a)
        return s.select(s.compare(a, "<", s.literal(0.0)), scaled, a)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.leaky_relu(args[0], self.attr("alpha"))


@irdl_op_definition
class PReluOp(BinaryOp):
    """x where x >= 0, else slope * x (the slope broadcast, numpy's rules)."""

    name = "ai.prelu"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("prelu", onnx=("PRelu",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        x, slope = args
        return s.select(s.compare(x, "<", s.literal(0.0)), s.arith(slope, "*", x), x)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.prelu(*args)


def _exponential_linear(s: ScalarBuilder, x: str, alpha: float, exponent: str) -> str:
    """x where x > 0, else alpha * expm1(exponent) (NaN propagates through expm1)."""
    negative = s.arith(s.literal(alpha), "*", s.call("expm1", exponent))
    return s.select(s.compare(x, ">", s.literal(0.0)), x, negative)


@irdl_op_definition
class EluOp(UnaryOp):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    name = "ai.elu"
    alpha = float_prop(1.0)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("elu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _exponential_linear(s, args[0], self.attr("alpha"), args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.elu(args[0], self.attr("alpha"))


_SELU_ALPHA = 1.67326319217681884765625  # ONNX's defaults, float32 values
_SELU_GAMMA = 1.05070102214813232421875


@irdl_op_definition
class SeluOp(UnaryOp):
    """gamma * (x where x > 0, else alpha * (exp(x) - 1))."""

    name = "ai.selu"
    alpha = float_prop(_SELU_ALPHA)
    gamma = float_prop(_SELU_GAMMA)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("selu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        inner = s.bind(_exponential_linear(s, args[0], self.attr("alpha"), args[0]))
        return s.arith(s.literal(self.attr("gamma")), "*", inner)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.elu(args[0], self.attr("alpha"), gamma=self.attr("gamma"))


@irdl_op_definition
class CeluOp(UnaryOp):
    """x where x > 0, else alpha * (exp(x / alpha) - 1)."""

    name = "ai.celu"
    alpha = float_prop(1.0)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("celu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        alpha = self.attr("alpha")
        return _exponential_linear(s, a, alpha, s.arith(a, "/", s.literal(alpha)))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.elu(args[0], self.attr("alpha"), scale_input=True)


def _softplus(s: ScalarBuilder, x: str) -> str:
    """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow, no cancellation."""
    zero = s.literal(0.0)
    positive = s.select(s.compare(x, ">", zero), x, zero)
    return s.arith(positive, "+", s.call("log1p", s.exp(s.neg(s.call("fabs", x)))))


@irdl_op_definition
class SoftplusOp(UnaryOp):
    """log(1 + exp(x)), computed without overflow."""

    name = "ai.softplus"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("softplus", onnx=("Softplus",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return _softplus(s, args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.softplus(args[0])


@irdl_op_definition
class SoftsignOp(UnaryOp):
    """x / (1 + |x|)."""

    name = "ai.softsign"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("softsign", onnx=("Softsign",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        return s.arith(a, "/", s.arith(s.literal(1.0), "+", s.call("fabs", a)))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.softsign(args[0])


@irdl_op_definition
class MishOp(UnaryOp):
    """x * tanh(softplus(x))."""

    name = "ai.mish"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("mish", onnx=("Mish",))

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        gate = s.bind(s.call("tanh", s.bind(_softplus(s, a))))
        return _minus_zero_at_minus_inf(s, a, s.arith(a, "*", gate))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.mish(args[0])


@irdl_op_definition
class ThresholdedReluOp(UnaryOp):
    """x where x > alpha, else 0; NaN propagates (as ``relu`` and PyTorch's threshold)."""

    name = "ai.thresholded_relu"
    alpha = float_prop(1.0)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("thresholded_relu")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        (a,) = args
        above = s.compare(a, ">", s.literal(self.attr("alpha")))
        return s.select(s.either(above, s.compare(a, "!=", a)), a, s.literal(0.0))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.thresholded_relu(args[0], self.attr("alpha"))


@irdl_op_definition
class WhereOp(AiOp):
    """``a`` where ``condition`` is non-zero, else ``b`` (numpy broadcasting of all three).

    The condition is i1 (a comparison's result, or a bool input) or of the
    values' element type (1/0, e.g. a constant mask or ``ai.isnan``); NaN
    counts as true, as it is non-zero. The values may be of any element type.
    """

    name = "ai.where"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    condition = operand()
    lhs = operand()
    rhs = operand()
    output = result()
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("where")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.where(*operands)

    def fusion_pattern(self) -> Pattern:
        """Elementwise when all operands have one shape, else broadcast."""
        if len({spec_of(v.type).shape for v in self.operands}) == 1:
            return Pattern.ELEMENTWISE
        return Pattern.BROADCAST

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        cond, a, b = args
        return s.select(s.compare(cond, "!=", s.literal(0.0)), a, b)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        cond, a, b = (np.asarray(x) for x in args)
        return np.asarray(np.where(cond != 0, a, b).astype(a.dtype))


# ------------------------------------------------ comparisons and logic (i1 results)


class CompareOp(BinaryOp):
    """A comparison of two tensors of one element type (broadcast); the result is i1."""

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    SYMBOL: ClassVar[str] = "=="

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.compare(cls.name, *operands)

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.compare(args[0], self.SYMBOL, args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        a, b = self.typed(args)
        return np.asarray(getattr(np, _COMPARE[self.SYMBOL])(a, b))


#: The numpy ufunc of each comparison, by name (numpy is imported when one runs).
_COMPARE = {
    "==": "equal", "<": "less", ">": "greater", "<=": "less_equal", ">=": "greater_equal",
}  # fmt: skip


@irdl_op_definition
class EqualOp(CompareOp):
    """a == b, elementwise (i1; NaN equals nothing)."""

    name = "ai.equal"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    SYMBOL: ClassVar[str] = "=="
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("equal", ufuncs=("equal",), onnx=("Equal",))


@irdl_op_definition
class LessOp(CompareOp):
    """a < b, elementwise (i1)."""

    name = "ai.less"
    SYMBOL: ClassVar[str] = "<"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("less", ufuncs=("less",), onnx=("Less",))


@irdl_op_definition
class GreaterOp(CompareOp):
    """a > b, elementwise (i1)."""

    name = "ai.greater"
    SYMBOL: ClassVar[str] = ">"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "greater", ufuncs=("greater",), onnx=("Greater",)
    )


@irdl_op_definition
class LessEqualOp(CompareOp):
    """a <= b, elementwise (i1)."""

    name = "ai.less_equal"
    SYMBOL: ClassVar[str] = "<="
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "less_equal", ufuncs=("less_equal",), onnx=("LessOrEqual",)
    )


@irdl_op_definition
class GreaterEqualOp(CompareOp):
    """a >= b, elementwise (i1)."""

    name = "ai.greater_equal"
    SYMBOL: ClassVar[str] = ">="
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "greater_equal", ufuncs=("greater_equal",), onnx=("GreaterOrEqual",)
    )


@irdl_op_definition
class NotOp(UnaryOp):
    """Logical not of an i1 tensor."""

    name = "ai.not"
    DTYPES: ClassVar[tuple[str, ...]] = ("i1",)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_not", ufuncs=("logical_not",), onnx=("Not",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.negate(args[0])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray(np.logical_not(*self.typed(args)))


@irdl_op_definition
class AndOp(BinaryOp):
    """Logical and of two i1 tensors (broadcast)."""

    name = "ai.and"
    DTYPES: ClassVar[tuple[str, ...]] = ("i1",)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_and", ufuncs=("logical_and",), onnx=("And",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        a, b = args  # not (not a or not b): the builder's conditions are either/negate
        return s.negate(s.either(s.negate(a), s.negate(b)))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray(np.logical_and(*self.typed(args)))


@irdl_op_definition
class OrOp(BinaryOp):
    """Logical or of two i1 tensors (broadcast)."""

    name = "ai.or"
    DTYPES: ClassVar[tuple[str, ...]] = ("i1",)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_or", ufuncs=("logical_or",), onnx=("Or",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.either(args[0], args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray(np.logical_or(*self.typed(args)))


@irdl_op_definition
class XorOp(BinaryOp):
    """Logical exclusive or of two i1 tensors (broadcast)."""

    name = "ai.xor"
    DTYPES: ClassVar[tuple[str, ...]] = ("i1",)
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(
        "logical_xor", ufuncs=("logical_xor",), onnx=("Xor",)
    )

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.compare(args[0], "!=", args[1])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.asarray(np.logical_xor(*self.typed(args)))


@irdl_op_definition
class ModOp(BinaryOp):
    """Integer remainder (broadcast): with the sign of b (Python's ``%``, ONNX ``fmod=0``),
    or of a with ``fmod`` (C's ``%``); 0 where b is 0."""

    name = "ai.mod"
    fmod = bool_prop(False)
    DTYPES: ClassVar[tuple[str, ...]] = INT_TYPES
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("mod")

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.int_remainder(args[0], args[1], floored=not self.attr("fmod"))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.int_remainder(*self.typed(args), floored=not self.attr("fmod"))


# ------------------------------------------- run-time indices, scans, broadcasts


@irdl_op_definition
class TakeOp(AiOp):
    """The slices of ``table`` along ``axis`` that the run-time ``indices`` (i64/i32, any
    shape; negative ones count from the end) name: an embedding lookup
    (``numpy.take``, ONNX ``Gather``). An index out of range is an error."""

    name = "ai.take"
    table = operand()
    indices = operand()
    output = result()
    axis = int_prop(0)
    traits = traits_def(Pure())

    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("take")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.take(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        table, indices = self.typed(args)
        return K.take(table, indices, axis=self.attr("axis"))


@irdl_op_definition
class CumSumOp(AiOp):
    """Running sums along ``axis`` (ONNX ``CumSum``): ``exclusive`` leaves each element
    out of its own sum, ``reverse`` sums from the end."""

    name = "ai.cumsum"
    input = operand()
    output = result()
    axis = int_prop(0)
    exclusive = bool_prop(False)
    reverse = bool_prop(False)
    traits = traits_def(Pure())

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("cumsum")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.cumsum(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        (x,) = self.typed(args)
        return K.cumsum(x, **self.attr_values())


@irdl_op_definition
class ExpandOp(AiOp):
    """``input`` broadcast to the static ``shape`` (ONNX ``Expand``, ``numpy.broadcast_to``):
    a broadcast op that kernels read through, no copy of its own."""

    name = "ai.expand"
    input = operand()
    output = result()
    shape = int_array_prop()
    traits = traits_def(Pure())

    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("expand")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.expand(*operands, **attrs)

    def fusion_pattern(self) -> Pattern:
        """Elementwise when the shape does not change, else broadcast."""
        same = spec_of(self.input.type).shape == spec_of(self.output.type).shape
        return Pattern.ELEMENTWISE if same else Pattern.BROADCAST

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return args[0]  # the template indexes the operand broadcast to the result

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.ascontiguousarray(np.broadcast_to(args[0], self.attr("shape")))


class ArgReduceOp(AiOp):
    """The i64 index of the extreme of ``input`` along ``axis`` (kept as a size-1 dim with
    ``keepdims``); the first one of equal extremes, or the last with
    ``select_last_index`` (ONNX ``ArgMax``/``ArgMin``); NaN counts as the extreme."""

    input = operand()
    output = result()
    axis = int_prop(0)
    keepdims = bool_prop(True)
    select_last_index = bool_prop(False)
    traits = traits_def(Pure())

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    KIND: ClassVar[str] = "max"

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.arg_reduce(
            cls.name, operands[0], axis=attrs["axis"], keepdims=attrs["keepdims"]
        )

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        (x,) = self.typed(args)
        return K.arg_reduce(x, self.KIND, **self.attr_values())


@irdl_op_definition
class ArgMaxOp(ArgReduceOp):
    """The i64 index of the maximum along ``axis`` (ONNX ``ArgMax``, ``numpy.argmax``)."""

    name = "ai.argmax"
    KIND: ClassVar[str] = "max"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("argmax")


@irdl_op_definition
class ArgMinOp(ArgReduceOp):
    """The i64 index of the minimum along ``axis`` (ONNX ``ArgMin``, ``numpy.argmin``)."""

    name = "ai.argmin"
    KIND: ClassVar[str] = "min"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("argmin")


@irdl_op_definition
class MatmulOp(AiOp):
    """(..., M, K) @ (..., K, N), leading (batch) dims broadcast.

    ``transpose_a``/``transpose_b`` swap the last two dims of an operand first.
    A 1-D operand follows numpy: its unit dim is added, then dropped from the result.
    """

    name = "ai.matmul"
    lhs = operand()
    rhs = operand()
    output = result()
    transpose_a = bool_prop(False)
    transpose_b = bool_prop(False)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="matmul")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.matmul(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        a, b = args
        return K.matmul(a, b, **self.attr_values())


@irdl_op_definition
class BatchNormOp(AiOp):
    """Inference batch normalisation over dim 1 (channels) of an N x C x ... input:
    (x - mean) / sqrt(var + epsilon) * scale + bias, each parameter of length C.

    No kernel computes it: ``canonicalize`` folds it into the conv2d feeding it
    (new constant weights and bias) or decomposes it into a per-channel
    multiply and ``ai.bias_add``, which fuse like any elementwise epilogue.
    """

    name = "ai.batch_norm"
    input = operand()
    scale = operand()
    bias = operand()
    mean = operand()
    var = operand()
    output = result()
    epsilon = float_prop(1e-5)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.OPAQUE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("batch_norm")
    UNSUPPORTED: ClassVar[Mapping[str, str]] = {
        target: "canonicalize rewrites it (folded into its conv2d, or a multiply and a "
        "bias_add): run canonicalize before fusion"
        for target in ("cpu", "cuda")
    }

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.batch_norm(*operands, epsilon=attrs["epsilon"])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        x, scale, bias, mean, var = args
        return K.batch_norm(x, scale, bias, mean, var, epsilon=self.attr("epsilon"))


@irdl_op_definition
class AttentionOp(AiOp):
    """Scaled dot-product attention: ``softmax(q @ key^T * scale + mask) @ v``, the softmax
    over the last axis; q (..., S, D), key (..., T, D) and v (..., T, E) as
    ``scaled_dot_product_attention`` and ONNX's Attention take them, the mask added to
    the (..., S, T) scores. With ``nan_to_zero`` a NaN probability (a row masked out
    entirely) is 0. ``recognize-patterns`` makes it of the chain matmul -> scale ->
    [mask] -> softmax -> matmul, written or exported; each target runs it as one kernel
    (cuda: the flash kernel where it applies)."""

    name = "ai.attention"
    query = operand()
    key = operand()
    value = operand()
    mask = operand()
    output = result()
    scale = float_prop(1.0)
    nan_to_zero = bool_prop(False)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="attention")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.attention(*operands)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        q, key, v, mask = args
        return K.attention(
            q, key, v, mask, scale=self.attr("scale"), nan_to_zero=self.attr("nan_to_zero")
        )


@irdl_op_definition
class LayerNormOp(AiOp):
    """Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta."""

    name = "ai.layernorm"
    input = operand()
    gamma = operand()
    beta = operand()
    output = result()
    epsilon = float_prop(1e-5)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="layernorm")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.layernorm(*operands, epsilon=attrs["epsilon"])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        x, gamma, beta = args
        return K.layernorm(x, gamma, beta, epsilon=self.attr("epsilon"))


@irdl_op_definition
class SoftmaxOp(AiOp):
    """Softmax along ``axis`` (default the last)."""

    name = "ai.softmax"
    input = operand()
    output = result()
    axis = int_prop(-1)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="softmax")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.softmax(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.softmax(args[0], axis=self.attr("axis"))


@irdl_op_definition
class CastOp(AiOp):
    """Element type conversion: ``ai.cast %x : T_from to T_to``, between any two of f16,
    bf16, f32, i64, i32 and i1: floats round to nearest-even, a float becomes an integer
    truncated toward zero (NaN and values out of range are undefined, as in ONNX), any
    value becomes i1 as ``x != 0``, and i1 becomes 1 or 0."""

    name = "ai.cast"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    input = operand()
    output = result()
    traits = traits_def(Pure(), Canonicalized())

    HAS_TO_TYPE: ClassVar[bool] = True
    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="cast")

    def __init__(self, value: SSAValue, to_dtype: str) -> None:
        self.check_dtypes([spec_of(value.type)])  # a quantized value: ai.dequantize reads it
        spec = shapes.cast(spec_of(value.type), to_dtype)
        super().__init__(value, result_type=tensor_type(spec))

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.cast(operands[0], attrs["to"])

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        # Kernels compute floats in float32: a cast to a 16-bit type rounds exactly as
        # numpy/ml_dtypes do, so mid-chain casts change values as the IR says.
        source, target = spec_of(self.input.type).dtype, self.result_dtype()
        if is_float(source) and is_float(target):
            return s.round_to(target, args[0])
        return s.convert(args[0], source, target)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        target = self.result_dtype()
        if is_float(target):
            return args[0]  # the executor stores each result in its declared dtype
        # An integer or bool is a value, not a precision: converted whatever the rounding.
        with np.errstate(invalid="ignore"):
            value = np.asarray(args[0])
            if target != "i1" and value.dtype.kind == "f":
                value = np.trunc(value)
            return value.astype(numpy_dtype(target))


# ------------------------------------------------------------- quantization
#
# ONNX QuantizeLinear / DequantizeLinear (opset 21) with the scale and zero point
# as operands (data, not attributes: per-channel and per-block scales are
# weights). The zero point is always given (zeros when the model has none): its
# element type is the quantized type, as in ONNX.

_QUANTIZED_ON_TARGETS = (
    "no cuda kernel template converts the quantized element types (float8, int8) yet "
    "(issue 31); run it on the cpu or reference target"
)


class QuantizationOp(AiOp):
    """What ``ai.quantize`` and ``ai.dequantize`` share: operands, attributes, checks."""

    input = operand()
    scale = operand()
    zero_point = operand()
    output = result()
    #: The quantized dimension (per-axis and per-block scales); ignored per tensor.
    axis = int_prop(1)
    #: Elements per block along ``axis`` (per-block scales); 0: per tensor or axis.
    block_size = int_prop(0)

    #: Computed per element (``scalar``): the scale and zero point are broadcast
    #: operands (per tensor, per index of ``axis``; per block of ``block_size`` indices,
    #: which only the cpu pointwise template indexes: ``codegen.expr.operand_shape``).
    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST
    UNSUPPORTED: ClassVar[Mapping[str, str]] = {"cuda": _QUANTIZED_ON_TARGETS}

    @classmethod
    def check_dtypes(cls, operands: Sequence[TensorSpec]) -> None:
        """Each operand has its own element types: the shape function checks them."""

    def blocks(self) -> tuple[int, int, int] | None:
        """(axis, block size, blocks) when the scale is per block with more than one
        block of more than one index (not a broadcast of numpy's rules), else None."""
        x = spec_of(self.input.type)
        block = self.attr("block_size")
        if block <= 1 or x.rank == 0:
            return None
        axis = self.attr("axis") % x.rank
        count = -(-x.shape[axis] // block)
        return (axis, block, count) if count > 1 else None

    def broadcast(self, array: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The scale or zero point ``array`` shaped to broadcast against ``x``."""
        from fusec.dialect import numpy_ops

        axis, block = self.attr("axis"), self.attr("block_size")
        extent = x.shape[axis % x.ndim] if x.ndim else 1
        return numpy_ops.quantization_broadcast(
            array, x.ndim, axis=axis, block_size=block, extent=extent
        )


@irdl_op_definition
class QuantizeOp(QuantizationOp):
    """``ai.quantize %x, %scale, %zero_point``: ``x / scale`` rounded half to even plus
    the zero point, saturated to the zero point's element type (i8, ui8) or converted
    to it (f8E4M3FN, f8E5M2; clamped to its largest finite value with ``saturate``)."""

    name = "ai.quantize"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="quantize")
    #: float8 results: values beyond the type's range become its largest finite value
    #: (ONNX's default), else NaN (e4m3fn) or inf (e5m2).
    saturate = bool_prop(True)
    traits = traits_def(Pure(), Canonicalized())

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.quantize(*operands, axis=attrs["axis"], block_size=attrs["block_size"])

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        x, scale, zero_point = args
        dtype = spec_of(self.zero_point.type).dtype
        return s.quantize_code(dtype, s.arith(x, "/", scale), zero_point, self.attr("saturate"))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops

        x, scale, zero_point = self.typed(args)
        return numpy_ops.quantize_linear(
            x,
            self.broadcast(scale, x),
            self.broadcast(zero_point, x),
            saturate=self.attr("saturate"),
        )


@irdl_op_definition
class DequantizeOp(QuantizationOp):
    """``ai.dequantize %q, %scale, %zero_point``: ``(q - zero_point) * scale`` in the
    scale's element type."""

    name = "ai.dequantize"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(function="dequantize")
    traits = traits_def(Pure(), Canonicalized())

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.dequantize(*operands, axis=attrs["axis"], block_size=attrs["block_size"])

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        code, scale, zero_point = args
        dtype = spec_of(self.input.type).dtype
        shifted = s.arith(s.quantized_value(dtype, code), "-", s.quantized_value(dtype, zero_point))
        return s.round_to(self.result_dtype(), s.arith(shifted, "*", scale))

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops

        x, scale, zero_point = self.typed(args)
        return numpy_ops.dequantize_linear(
            x, self.broadcast(scale, x), self.broadcast(zero_point, x)
        )


# ------------------------------------------------------------- layout ops
#
# Data movement without arithmetic (TVM's "injective" ops). A reshape is free
# (the same buffer under another shape); the others copy, unless a kernel
# reads its operand through them (a matmul's operand views).


@irdl_op_definition
class ReshapeOp(AiOp):
    """The same elements in row-major order under the static shape ``shape``."""

    name = "ai.reshape"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    input = operand()
    output = result()
    shape = int_array_prop()
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("reshape")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.reshape(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.reshape(args[0], self.attr("shape"))


@irdl_op_definition
class TransposeOp(AiOp):
    """Permuted dims: result dim i is input dim ``perm[i]``."""

    name = "ai.transpose"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    input = operand()
    output = result()
    perm = int_array_prop()
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("transpose")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.transpose(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.ascontiguousarray(np.transpose(args[0], self.attr("perm")))


@irdl_op_definition
class SliceOp(AiOp):
    """A strided sub-tensor: along dim d, elements ``offsets[d] + i * strides[d]`` for
    i < ``sizes[d]`` (as ``tensor.extract_slice``; a stride may be negative)."""

    name = "ai.slice"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    input = operand()
    output = result()
    offsets = int_array_prop()
    sizes = int_array_prop()
    strides = int_array_prop()
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("slice")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.slice_(*operands, **attrs)

    def index(self) -> tuple[slice, ...]:
        """The numpy index of the slice."""
        out = []
        for start, size, step in zip(
            self.attr("offsets"), self.attr("sizes"), self.attr("strides"), strict=True
        ):
            stop = start + size * step
            out.append(slice(start, None if stop < 0 else stop, step))
        return tuple(out)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.ascontiguousarray(np.asarray(args[0])[self.index()])


@irdl_op_definition
class ConcatOp(AiOp):
    """The operands joined along ``axis`` (their other dims agree)."""

    name = "ai.concat"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    inputs = var_operand_def(TensorType)
    output = result()
    axis = int_prop(0)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("concat")

    def __init__(self, *operands: SSAValue, **attrs: Any) -> None:
        properties = self.encode_attrs(attrs)
        specs = [spec_of(v.type) for v in operands]
        result_type = tensor_type(self.infer_spec(specs, properties, None))
        IRDLOperation.__init__(
            self, operands=[list(operands)], result_types=[result_type], properties=properties
        )

    @classmethod
    def infer_spec(cls, operands, properties, to_type):
        attr = properties.get("axis")
        prop = cls.declared_properties()["axis"]
        if attr is not None and (problem := _property_problem("axis", prop, attr)) is not None:
            raise ShapeError(f"{cls.name}: {problem}")
        axis = python_value(attr if attr is not None else prop.default_value)
        cls.check_dtypes(operands)
        return shapes.concat(operands, axis=axis)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.concatenate(args, axis=self.attr("axis"))


@irdl_op_definition
class GatherOp(AiOp):
    """The slices ``indices`` (constants) of dim ``axis``, in that order."""

    name = "ai.gather"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    input = operand()
    output = result()
    axis = int_prop(0)
    indices = int_array_prop()
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.INJECTIVE
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("gather")

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.gather(*operands, **attrs)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        return np.take(args[0], list(self.attr("indices")), axis=self.attr("axis"))


# ------------------------------------------------------ reductions over axes


class ReduceOp(AiOp):
    """A reduction over ``axes`` (all when empty), kept as size-1 dims with ``keepdims``."""

    input = operand()
    output = result()
    axes = int_array_prop()
    keepdims = bool_prop(False)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION
    KIND: ClassVar[str] = ""

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.reduce(cls.name, *operands, **attrs)

    def reduced_axes(self) -> tuple[int, ...]:
        rank = len(spec_of(self.input.type).shape)
        return shapes.reduce_axes(self.name, self.attr("axes"), rank)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.reduce(args[0], self.KIND, self.reduced_axes(), self.attr("keepdims"))


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """The mean over ``axes``."""

    name = "ai.reduce_mean"
    KIND: ClassVar[str] = "mean"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("reduce_mean")


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """The sum over ``axes``."""

    name = "ai.reduce_sum"
    KIND: ClassVar[str] = "sum"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("reduce_sum")


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """The maximum over ``axes`` (NaN propagates)."""

    name = "ai.reduce_max"
    KIND: ClassVar[str] = "max"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("reduce_max")


# ---------------------------------------------------------------- pooling


class Pool2DOp(AiOp):
    """2-D pooling of an NCHW input: one value per window of ``kernel`` (h, w).

    ``padding`` has 2 values (symmetric) or 4 (h_begin, w_begin, h_end, w_end),
    as ``ai.conv2d``; with ``ceil_mode`` the output size rounds up (the last
    window may overhang the padding, as in ONNX and PyTorch).
    """

    input = operand()
    output = result()
    kernel = int_array_prop(1, 1)
    strides = int_array_prop(1, 1)
    padding = int_array_prop(0, 0)
    dilations = int_array_prop(1, 1)
    ceil_mode = bool_prop(False)
    traits = traits_def(Pure())

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR
    KIND: ClassVar[str] = ""

    @classmethod
    def infer(cls, operands, attrs):
        window = {k: attrs[k] for k in ("kernel", "strides", "padding", "dilations", "ceil_mode")}
        return shapes.pool2d(cls.name, *operands, **window)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        attrs = self.attr_values()
        return K.pool2d(
            args[0],
            self.KIND,
            attrs["kernel"],
            attrs["strides"],
            attrs["padding"],
            attrs["dilations"],
            spec_of(self.output.type).shape[2:],
            attrs.get("count_include_pad", False),
        )


@irdl_op_definition
class MaxPool2DOp(Pool2DOp):
    """2-D max pooling (padding is -inf; NaN propagates)."""

    name = "ai.max_pool2d"
    KIND: ClassVar[str] = "max"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("max_pool2d")


@irdl_op_definition
class AvgPool2DOp(Pool2DOp):
    """2-D average pooling: the window's sum over the elements it covers inside the
    input, or with ``count_include_pad`` inside the padded input."""

    name = "ai.avg_pool2d"
    count_include_pad = bool_prop(False)
    KIND: ClassVar[str] = "avg"
    FRONTEND: ClassVar[FrontendNames] = FrontendNames("avg_pool2d")


# ----------------------------------------------------------- fusion groups


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
    BatchNormOp,
    LayerNormOp,
    SoftmaxOp,
    CastOp,
    QuantizeOp,
    DequantizeOp,
    ReshapeOp,
    TransposeOp,
    SliceOp,
    ConcatOp,
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
