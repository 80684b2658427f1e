"""The ``ai`` ops' common ground: tensor types (re-exported from ``fusec.ir.tensors``), the
canonicalisation trait, attribute helpers and ``AiOp``, the base class with the one
custom syntax and the facts every op declares."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    AttrSetConstraint,
    IRDLOperation,
    OptPropertyDef,
    VerificationContext,
    operand_def,
    opt_prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.pattern_rewriter import RewritePattern
from xdsl.printer import Printer
from xdsl.traits import HasCanonicalizationPatternsTrait, Pure
from xdsl.utils.exceptions import VerifyException

from fusec.dialect import shapes
from fusec.dialect.facts import NO_TARGETS, FrontendNames, Pattern, ScalarBuilder
from fusec.dialect.shapes import ShapeError, TensorSpec
from fusec.ir.dtypes import FLOAT_TYPES, is_float, numpy_dtype
from fusec.ir.tensors import element_type_name as element_type_name
from fusec.ir.tensors import spec_of as spec_of
from fusec.ir.tensors import tensor_type as tensor_type

if TYPE_CHECKING:
    import numpy as np


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


class AiOp(IRDLOperation):
    """Common machinery of the ``ai`` tensor ops: syntax, builder, verifier, facts.

    Subclasses declare their operands, result and properties with IRDL, give
    their shape function from ``shapes.py`` (``SHAPE_FUNCTION`` or ``infer``) and their facts
    (see ``fusec.dialect.facts``): ``PATTERN`` or ``fusion_pattern``,
    ``REFERENCE`` or ``reference``, ``scalar`` for elementwise ops, ``FRONTEND`` names
    and ``UNSUPPORTED`` targets.
    """

    #: Every ai op is pure: tensor values in, one tensor value out. (An op with
    #: canonicalisation patterns declares ``traits_def(Pure(), Canonicalized())``.)
    traits = traits_def(Pure())

    #: ``ai.cast`` writes its result type: ``: T_from to T_to``.
    HAS_TO_TYPE: ClassVar[bool] = False
    #: The op's place in the fusion lattice (see ``fusion_pattern``).
    PATTERN: ClassVar[Pattern] = Pattern.OPAQUE
    #: A broadcast op with no per-element scalar: an element of its result is its operand
    #: at another index (``ai.rotate_half``), which the pointwise templates read in place.
    INDEX_MAPPED: ClassVar[bool] = False
    #: Names front ends map one-to-one onto this op (its ``fusec.ops`` function is named
    #: as the op unless this names another: ``function_name``).
    FRONTEND: ClassVar[FrontendNames] = FrontendNames()
    #: Targets that cannot lower this op, each with the reason.
    UNSUPPORTED: ClassVar[Mapping[str, str]] = NO_TARGETS
    #: The element types each operand may have (``check_dtypes``); floats unless the
    #: op says otherwise, so a float-only op refuses an integer operand by name.
    DTYPES: ClassVar[tuple[str, ...]] = FLOAT_TYPES
    #: The op's numpy reference, declared: the ``fusec.dialect.numpy_ops`` function that
    #: computes it from the operands, every attribute of the op passed by name. Unset,
    #: it is the function named as the op where ``numpy_ops`` has one (``ai.relu``:
    #: ``numpy_ops.relu``; see ``reference_name``). An op whose reference is more than
    #: that call overrides ``reference``.
    REFERENCE: ClassVar[str] = ""
    #: The op's shape function, declared: the ``fusec.dialect.shapes`` function that gives
    #: the result type from the operand types, every attribute passed by name. Read
    #: through the class (an instance would bind it as a method). An op whose shape
    #: function takes other arguments overrides ``infer``.
    SHAPE_FUNCTION: ClassVar[Callable[..., TensorSpec] | None] = None

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
    def short_name(cls) -> str:
        """The op's name without the dialect's prefix (``ai.relu``: ``relu``), which its
        facts default to: its ``fusec.ops`` function, its numpy reference."""
        return cls.name.removeprefix("ai.")

    @classmethod
    def function_name(cls) -> str:
        """The op's ``fusec.ops`` function: ``FRONTEND.function``, else named as the op."""
        return cls.FRONTEND.function or cls.short_name()

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
        if cls.SHAPE_FUNCTION is None:
            raise NotImplementedError(f"{cls.name} declares no shape function")
        return cls.SHAPE_FUNCTION(*operands, **attrs)

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

    @classmethod
    def has_reference(cls) -> bool:
        """True when the op has a numpy reference (``reference_name`` or ``reference``)."""
        return bool(cls.reference_name()) or cls.reference is not AiOp.reference

    @classmethod
    def reference_name(cls) -> str:
        """The ``numpy_ops`` function of the op's declared reference: ``REFERENCE``, else
        the one named as the op if there is one, else ""."""
        if cls.REFERENCE:
            return cls.REFERENCE
        from fusec.dialect import numpy_ops as K

        return cls.short_name() if callable(getattr(K, cls.short_name(), None)) else ""

    def reference(self, *args: np.ndarray) -> np.ndarray:
        """The numpy implementation (``fusec.dialect.numpy_ops``) of the op."""
        function = self.reference_name()
        if not function:
            raise NotImplementedError(f"{self.name} has no reference implementation")
        from fusec.dialect import numpy_ops as K

        return getattr(K, function)(*args, **self.attr_values())

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


class OneInputOp(AiOp):
    """An op of one tensor, ``input``, into one, ``output``: elementwise unary ops, layout
    ops, reductions, pooling, scans, casts."""

    input = operand()
    output = result()
