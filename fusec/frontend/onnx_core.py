"""What every ONNX operator converter builds with: the ``Importer`` (one graph ->
one ``func.func``: operands, constants, located diagnostics, folding at import), the
``Node`` being converted, the ``CONVERTERS`` registry and its ``converter`` decorator,
the element type tables, and the operand helpers converters share (constant integer
inputs, axes, reshapes).

The converters live in one module per operator family (``onnx_elementwise``,
``onnx_matmul``, ``onnx_conv``, ``onnx_normalize``, ``onnx_layout``, ``onnx_reduce``,
``onnx_attention``, ...) and register on import; ``onnx_import`` imports them all and
is the front end's entry point.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    LocationAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
    UnknownLoc,
)
from xdsl.ir import Block, Operation, Region, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of, tensor_type
from fusec.dialect.shapes import (
    DtypeError,
    ShapeError,
    TensorSpec,
    shape_problem,
)
from fusec.errors import FusecError, SourceLocation
from fusec.frontend import onnx_fold
from fusec.ir.constants import dense_constant
from fusec.ir.diagnostics import named_location, node_location, verify_module
from fusec.ir.dtypes import element_type_of
from fusec.ir.memory import check_bytes
from fusec.ir.tensors import dtype_of, shape_of

#: ONNX float element types fusec has, and their dialect names (weights are these).
ELEMENT_TYPES: dict[int, str] = {
    TensorProto.FLOAT: "f32",
    TensorProto.FLOAT16: "f16",
    TensorProto.BFLOAT16: "bf16",
}


#: Every ONNX element type a value computed at run time may have: the floats, and the
#: integers and bools of token ids and masks (issue 29).
DATA_TYPES: dict[int, str] = {
    **ELEMENT_TYPES,
    TensorProto.INT64: "i64",
    TensorProto.INT32: "i32",
    TensorProto.BOOL: "i1",
}


#: The ONNX element types of quantized values (issue 31): graph inputs and outputs, the
#: results of QuantizeLinear and the inputs of DequantizeLinear (``onnx_quant``).
QUANTIZED_TYPES: dict[int, str] = {
    TensorProto.INT8: "i8",
    TensorProto.UINT8: "ui8",
    TensorProto.FLOAT8E4M3FN: "f8E4M3FN",
    TensorProto.FLOAT8E5M2: "f8E5M2",
    TensorProto.INT4: "i4",  # two a byte in ONNX; numpy_helper unpacks them
    TensorProto.UINT4: "ui4",
}


_DOMAINS = ("", "ai.onnx")


class UnsupportedOnnx(FusecError):
    """Valid ONNX that fusec cannot import: ``feature`` is "operator",
    "attribute" or "dtype" (an element or value type)."""

    def __init__(self, message: str, location: SourceLocation | None, feature: str) -> None:
        super().__init__(message, location)
        self.feature = feature


@dataclass
class Node:
    """One ONNX node being converted: its proto, position and decoded attributes."""

    proto: onnx.NodeProto
    index: int
    attrs: dict[str, Any]

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def label(self) -> str:
        """The node's name, or ``#index`` for an unnamed node."""
        return self.proto.name or f"#{self.index}"


@dataclass(frozen=True)
class Converter:
    """How one ONNX operator becomes ai ops: the function and the attributes it reads."""

    convert: Callable[[Importer, Node], Sequence[SSAValue | None]]
    attrs: frozenset[str]


CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str, attrs: Sequence[str] = ()):
    """Register the decorated function as the converter of ``op_types``."""

    def register(fn: Callable[[Importer, Node], Sequence[SSAValue | None]]):
        for op_type in op_types:
            CONVERTERS[op_type] = Converter(fn, frozenset(attrs))
        return fn

    return register


#: Operators fusec never compiles but always evaluates at import (they have no
#: inputs); every other operator is evaluated at import too when its inputs are
#: constants (``onnx_fold``), whether or not it has a converter.
ALWAYS_FOLDED = ("Constant",)


def supported_operators() -> list[str]:
    return sorted({*CONVERTERS, *ALWAYS_FOLDED})


class Importer:
    """Builds one ``func.func`` from one ONNX graph (see ``import_model``)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        source: str,
        weights_as_args: bool,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        self.graph = model.graph
        self.source = source
        self.weights_as_args = weights_as_args
        self.input_shapes = dict(input_shapes or {})
        self.opset = _default_opset(model, source)
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.values: dict[str, SSAValue] = {}
        self.arrays: dict[str, np.ndarray] = {}  # values known at import time
        self.computed: set[str] = set()  # names of arrays computed at import (not initializers)
        # Graph inputs of element types fusec has no tensors of (int8, double...): (shape,
        # ONNX type name). Their shapes are known; their data exists only at run time.
        self.other_inputs: dict[str, tuple[tuple[int, ...], str]] = {}
        self.evaluated: Counter[str] = Counter()  # op type -> nodes evaluated at import
        self.block = Block()
        self.node: Node | None = None
        self.location: LocationAttr = UnknownLoc()
        self.uses = Counter(n for node in self.graph.node for n in node.input if n)
        self.uses.update(o.name for o in self.graph.output)
        self.created: set[Operation] = set()  # ops built for the current node

    # ------------------------------------------------------------ diagnostics
    def error(self, message: str, feature: str | None = None) -> FusecError:
        """A FusecError at the current node (or the whole model between nodes)."""
        if self.node is None:
            location = SourceLocation(self.source, 0, 0)
            text = message
        else:
            location = named_location(self.source, self.node.label)
            text = f"{self.node.op_type}: {message}"
        if feature is None:
            return FusecError(text, location)
        return UnsupportedOnnx(text, location, feature)

    def node_location(self, node: Node) -> NameLoc:
        return node_location(node.label, SourceLocation(self.source, 0, 0))

    # ------------------------------------------------------------ building
    def emit(self, op_type: type[Operation], *args: Any, **attrs: Any) -> SSAValue:
        """Build ``op_type(*args, **attrs)`` at the current node and return its result."""
        try:
            op = op_type(*args, **attrs)
        except DtypeError as err:  # valid ONNX (an integer Softmax...) fusec does not compute
            raise self.error(str(err), "dtype") from None
        except ShapeError as err:
            raise self.error(str(err)) from None
        return self.append(op)

    def append(self, op: Operation) -> SSAValue:
        op.location = self.location
        self.block.add_op(op)
        self.created.add(op)
        return op.results[0]

    def constant(self, array: np.ndarray, dtype: str, name: str | None = None) -> SSAValue:
        """A dense ``arith.constant`` holding ``array`` converted to ``dtype``."""
        data = np.asarray(array)
        if (problem := shape_problem(data.shape)) is not None:
            what = f"'{name}'" if name is not None else "a constant"
            raise self.error(f"{what} of shape {_dims_text(data.shape)} {problem}", "shape")
        value = self.append(dense_constant(data, dtype))
        if name is not None:
            value.name_hint = value_name(name)
        return value

    def scalar(self, number: float, like: SSAValue) -> SSAValue:
        """A rank-0 constant of ``like``'s element type."""
        return self.constant(np.asarray(number, dtype=np.float64), dtype_of(like))

    # ------------------------------------------------------------ operands
    def input(self, node: Node, index: int) -> SSAValue:
        value = self.optional_input(node, index)
        if value is None:
            raise self.error(f"input #{index} is required")
        return value

    def optional_input(self, node: Node, index: int) -> SSAValue | None:
        name = self.optional_input_name(node, index)
        return None if name is None else self.value(name)

    def optional_input_name(self, node: Node, index: int) -> str | None:
        names = node.proto.input
        return names[index] if index < len(names) and names[index] else None

    def value(self, name: str) -> SSAValue:
        if name in self.values:
            return self.values[name]
        if name in self.arrays:
            array = self.arrays[name]
            self.values[name] = self.constant(array, self.dtype_of_array(name, array), name)
            return self.values[name]
        if name in self.other_inputs:
            raise self.error(
                f"input '{name}' is {self.other_inputs[name][1]} data known only at run time: "
                "fusec computes FLOAT, FLOAT16, BFLOAT16, INT64, INT32 and BOOL tensors; "
                "values of other types must be constants (initializers, Constant nodes, or "
                "computed from shapes)",
                "dtype",
            )
        raise self.error(
            f"value '{name}' is used before it is defined (not a graph input, an "
            "initializer or the output of an earlier node)"
        )

    def array(self, node: Node, index: int) -> np.ndarray | None:
        """The value of input ``index`` if it is known at import time (a constant)."""
        names = node.proto.input
        if index >= len(names) or not names[index]:
            return None
        return self.arrays.get(names[index])

    def dtype_of_array(self, name: str, array: np.ndarray) -> str:
        dtype = element_type_of(array.dtype, floats_only=False)
        if dtype is not None:
            return dtype
        if name in self.computed:
            raise self.error(
                f"value '{name}' is a {array.dtype} constant (computed at import) used as data: "
                "fusec's tensors are float, float16, bfloat16, int64, int32 or bool",
                "dtype",
            )
        raise self.error(
            f"initializer '{name}' has element type {array.dtype}: "
            "fusec supports float, float16, bfloat16, int64, int32 and bool",
            "dtype",
        )

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of value ``name`` if it is known (every value's is, once defined)."""
        if name in self.arrays:
            return tuple(self.arrays[name].shape)
        if name in self.values:
            return shape_of(self.values[name])
        if name in self.other_inputs:
            return self.other_inputs[name][0]
        return None

    # ------------------------------------------------------------ the graph
    def run(self) -> ModuleOp:
        self.load_initializers()
        inputs = self.declare_inputs()
        for index, proto in enumerate(self.graph.node):
            self.convert(Node(proto, index, {}))
        self.node, self.location = None, UnknownLoc()
        results = [self.graph_output(o) for o in self.graph.output]
        self.block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp(
            function_name(self.graph.name),
            ([a.type for a in self.block.args], [r.type for r in results]),
            Region(self.block),
            arg_attrs=ArrayAttr([_name_attr(n) for n in inputs]),
            res_attrs=ArrayAttr([_name_attr(o.name) for o in self.graph.output]),
        )
        module = ModuleOp([fn])
        verify_module(module)
        return module

    def load_initializers(self) -> None:
        """Initializers are constants; with ``weights_as_args`` only the non-float ones
        (shapes, indices, masks), which are not weights and which fusec folds."""
        for name, tensor in self.initializers.items():
            if not (self.weights_as_args and tensor.data_type in ELEMENT_TYPES):
                self.arrays[name] = self.tensor_array(f"initializer '{name}'", tensor)

    def tensor_array(self, what: str, tensor: onnx.TensorProto) -> np.ndarray:
        """The value of a tensor proto, or an error naming it when its data is malformed."""
        self.check_dims(what, tensor)
        try:
            return numpy_helper.to_array(tensor)
        except Exception as err:  # data that does not fit the dims, bad raw bytes, ...
            raise self.error(f"{what} is malformed: {err}") from None

    def declare_inputs(self) -> list[str]:
        """Function arguments: graph inputs, then (with weights_as_args) used initializers."""
        inputs = [i.name for i in self.graph.input if i.name not in self.initializers]
        unknown = set(self.input_shapes) - {info.name for info in self.graph.input}
        if unknown:
            raise self.error(
                f"input shapes given for {', '.join(repr(n) for n in sorted(unknown))}, which "
                f"{'is not a graph input' if len(unknown) == 1 else 'are not graph inputs'} "
                f"(inputs: {', '.join(inputs) or 'none'})"
            )
        names: list[str] = []
        for info in self.graph.input:
            if info.name in self.initializers:
                continue  # IR < 4 lists initializers as inputs too: they stay constants
            shape, elem_type = self.value_info_shape(info)
            # Quantized inputs (int8, uint8, float8) are arguments too; only
            # ai.dequantize takes them (any other op refuses them by name).
            dtype = DATA_TYPES.get(elem_type) or QUANTIZED_TYPES.get(elem_type)
            if dtype is not None and 0 not in shape:
                names.append(info.name)
                self.add_argument(info.name, TensorSpec(shape, dtype))
            else:
                self.element_type(elem_type, f"input '{info.name}'", known_only=True)
                self.other_inputs[info.name] = (shape, TensorProto.DataType.Name(elem_type))
                if 0 in shape:  # an empty tensor: its (lack of) data is known
                    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
                    self.arrays[info.name] = np.empty(shape, dtype=dtype)
        if self.weights_as_args:
            for name, tensor in self.initializers.items():
                if self.uses[name] and name not in self.arrays:
                    names.append(name)
                    self.add_argument(name, self.tensor_spec(name, tensor))
        return names

    def add_argument(self, name: str, spec: TensorSpec) -> None:
        arg = self.block.insert_arg(tensor_type(spec), len(self.block.args))
        arg.name_hint = value_name(name)
        self.values[name] = arg

    def value_info_shape(self, info: onnx.ValueInfoProto) -> tuple[tuple[int, ...], int]:
        """(static shape, ONNX element type) of a graph input, its dynamic dimensions
        fixed by ``input_shapes``."""
        kind = info.type.WhichOneof("value")
        if kind != "tensor_type":
            what = (kind or "no type").removesuffix("_type")
            raise self.error(
                f"input '{info.name}' is a {what}: only tensors are supported", "dtype"
            )
        ttype = info.type.tensor_type
        given = self.input_shapes.get(info.name)
        if not ttype.HasField("shape"):
            if given is None:
                raise self.error(
                    f"input '{info.name}' has no shape: fusec needs static shapes "
                    f"(give one: --input-shape {info.name}=2x3x...)"
                )
            return tuple(given), ttype.elem_type
        declared = ttype.shape.dim
        if given is not None and len(given) != len(declared):
            raise self.error(
                f"input '{info.name}' has rank {len(declared)}, but the shape given for it "
                f"({_dims_text(given)}) has rank {len(given)}"
            )
        dims = []
        for axis, dim in enumerate(declared):
            fixed = dim.dim_value if dim.HasField("dim_value") else None
            if given is not None:
                if fixed is not None and given[axis] != fixed:
                    raise self.error(
                        f"input '{info.name}' has dimension {fixed} at axis {axis}, but the "
                        f"shape given for it is {_dims_text(given)}"
                    )
                dims.append(int(given[axis]))
            elif fixed is None:
                what = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
                example = "x".join(str(d.dim_value) if d.dim_value else "N" for d in declared)
                raise self.error(
                    f"input '{info.name}' has a dynamic dimension ({what}): fusec needs static "
                    f"shapes (give them: --input-shape {info.name}={example}, or "
                    "input_shapes= in Python)"
                )
            else:
                dims.append(fixed)
        problem = shape_problem(tuple(dims))
        if problem is not None and (ttype.elem_type in ELEMENT_TYPES or 0 not in dims):
            raise self.error(f"input '{info.name}' of shape {_dims_text(dims)} {problem}", "shape")
        return tuple(dims), ttype.elem_type

    def check_dims(self, what: str, tensor: onnx.TensorProto) -> None:
        """An error when a tensor proto has a negative dimension (numpy would read -1 as
        "whatever fits the data"). Empty tensors are fine until they reach the ai IR
        (a Resize's empty roi, say): ``constant`` refuses them there."""
        dims = tuple(tensor.dims)
        if any(d < 0 for d in dims):
            raise self.error(f"{what} of shape {_dims_text(dims)} has a negative dimension")

    def tensor_spec(self, name: str, tensor: onnx.TensorProto) -> TensorSpec:
        self.check_dims(f"initializer '{name}'", tensor)
        dtype = self.element_type(tensor.data_type, f"initializer '{name}'")
        return TensorSpec(tuple(tensor.dims), dtype)

    def element_type(self, onnx_type: int, what: str, known_only: bool = False) -> str:
        """The dialect's name of an ONNX element type; with ``known_only``, only check
        that the code is a valid ONNX type (and return "")."""
        if onnx_type in DATA_TYPES:
            return DATA_TYPES[onnx_type]
        if onnx_type not in TensorProto.DataType.values() or onnx_type == TensorProto.UNDEFINED:
            raise self.error(f"{what} has an unknown element type code {onnx_type}")
        if known_only:
            return ""
        type_name = TensorProto.DataType.Name(onnx_type) if onnx_type else "UNDEFINED"
        raise self.error(
            f"{what} has element type {type_name}: fusec supports FLOAT, FLOAT16, BFLOAT16, "
            "INT64, INT32 and BOOL",
            "dtype",
        )

    def graph_output(self, info: onnx.ValueInfoProto) -> SSAValue:
        value = self.value(info.name)
        if info.type.WhichOneof("value") != "tensor_type":
            return value
        ttype = info.type.tensor_type
        spec = spec_of(value.type)
        declared = DATA_TYPES.get(ttype.elem_type) or QUANTIZED_TYPES.get(ttype.elem_type)
        if ttype.elem_type and declared != spec.dtype:
            self.element_type(ttype.elem_type, f"output '{info.name}'")
            raise self.error(f"output '{info.name}' is declared {declared} but computes {spec}")
        if ttype.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]
            if len(dims) != spec.rank or any(
                d is not None and d != s for d, s in zip(dims, spec.shape, strict=False)
            ):
                shown = "x".join("?" if d is None else str(d) for d in dims) or "scalar"
                raise self.error(f"output '{info.name}' is declared {shown} but computes {spec}")
        return value

    # ------------------------------------------------------------ nodes
    def convert(self, node: Node) -> None:
        self.node = node
        self.location = self.node_location(node)
        self.created = set()
        for name in node.proto.output:
            if name and (name in self.values or name in self.arrays):  # ONNX is SSA
                raise self.error(f"output '{name}' is already defined (a value is assigned once)")
        if self.fold(node):
            return
        if node.proto.domain not in _DOMAINS or node.op_type not in CONVERTERS:
            raise self.unsupported(node)
        spec = CONVERTERS[node.op_type]
        self.check_arity(node)
        node.attrs = self.read_attributes(node, spec)
        outputs = spec.convert(self, node)
        for name, value in zip(node.proto.output, outputs, strict=False):
            if not name or (value is None and name in self.arrays):
                continue  # (an empty result is a constant the converter recorded)
            if value is None:
                raise self.error(f"output '{name}' is not supported", "attribute")
            self.bind(name, value)
        for name in node.proto.output[len(outputs) :]:
            if name and self.uses[name]:
                raise self.error(f"output '{name}' is not supported", "attribute")

    def fold(self, node: Node) -> bool:
        """Evaluate ``node`` now if its inputs are all known (its outputs become
        constants); False if they are not, or if it must not be evaluated."""
        proto = node.proto
        if not onnx_fold.foldable(proto):
            return False
        if proto.op_type in onnx_fold.SHAPE_ONLY and proto.input and proto.input[0]:
            shape = self.static_shape(proto.input[0])
            if shape is None:
                return False
            node.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
            outputs = [onnx_fold.evaluate_shape_op(proto, shape, node.attrs)]
        else:
            if any(name and name not in self.arrays for name in proto.input):
                return False
            inputs = [self.arrays[name] if name else None for name in proto.input]
            if onnx_fold.kept_quantized(proto, inputs):
                return False
            self.check_fold_size(proto, inputs)
            try:
                outputs = onnx_fold.evaluate(proto, inputs, self.opset)
            except onnx_fold.FoldError as err:
                message = f"cannot evaluate at import (its inputs are constants): {err}"
                raise self.error(message) from None
        for name, array in zip(proto.output, outputs, strict=False):
            if name:
                self.arrays[name] = array
                self.computed.add(name)
        self.evaluated[proto.op_type] += 1
        return True

    def check_fold_size(self, proto: onnx.NodeProto, inputs: list[np.ndarray | None]) -> None:
        """A located error when evaluating ``proto`` at import would allocate more than
        the memory limit (checked before the allocation: see ``onnx_fold.output_bytes``)."""
        needed = onnx_fold.output_bytes(proto, inputs, self.opset)
        if needed is None:
            return
        try:
            check_bytes(needed, "evaluating it at import (its inputs are constants)")
        except FusecError as err:
            raise self.error(err.message) from None

    def unsupported(self, node: Node) -> FusecError:
        """The error for a node fusec can neither convert nor evaluate at import."""
        proto = node.proto
        if proto.domain not in _DOMAINS:
            message = f"unsupported operator of domain '{proto.domain}'"
        elif onnx_fold.foldable(proto) and onnx.defs.has(proto.op_type):
            runtime = [n for n in proto.input if n and n not in self.arrays]
            message = (
                f"unsupported operator on values computed at run time (input '{runtime[0]}'); "
                "fusec evaluates any operator at import when all its inputs are constants, "
                "and compiles"
            )
        else:
            message = "unsupported operator; fusec supports"
        return self.error(f"{message}: {', '.join(supported_operators())}", "operator")

    def bind(self, name: str, value: SSAValue) -> None:
        """Make ONNX value ``name`` refer to ``value``, naming it if built for this node."""
        self.values[name] = value
        if value.owner in self.created:
            value.name_hint = value_name(name)

    def check_arity(self, node: Node) -> None:
        """A located error when ``node`` has fewer or more inputs or outputs than its
        operator's ONNX schema allows (the converters index them)."""
        schema = _schema(node.proto, self.opset)
        if schema is None:
            return
        for what, count, low, high in (
            ("inputs", len(node.proto.input), schema.min_input, schema.max_input),
            ("outputs", len(node.proto.output), schema.min_output, schema.max_output),
        ):
            if not low <= count <= high:
                allowed = f"{low}" if low == high else f"{low} to {high}"
                if high >= 2**31 - 1:
                    allowed = f"at least {low}"
                raise self.error(f"has {count} {what}; the operator takes {allowed}")

    def read_attributes(self, node: Node, spec: Converter) -> dict[str, Any]:
        attrs = {}
        declared = _schema_attribute_types(node.proto, self.opset)
        for attr in node.proto.attribute:
            if attr.name not in spec.attrs:
                raise self.error(f"unsupported attribute '{attr.name}'", "attribute")
            expected = declared.get(attr.name)
            if expected is not None and attr.type != expected:
                raise self.error(
                    f"attribute '{attr.name}' is {_attribute_type_name(attr.type)}, the "
                    f"operator's schema says {_attribute_type_name(expected)}"
                )
            value = helper.get_attribute_value(attr)
            if isinstance(value, bytes):  # STRING attributes are bytes in the protobuf
                try:
                    value = value.decode()
                except UnicodeDecodeError:
                    raise self.error(f"attribute '{attr.name}' is not UTF-8 text") from None
            attrs[attr.name] = value
        return attrs


def _schema_attribute_types(node: onnx.NodeProto, opset: int) -> dict[str, int]:
    """Attribute name -> ``AttributeProto`` type code, as the ONNX schema of ``node``'s
    operator at ``opset`` declares them (empty when there is no schema)."""
    schema = _schema(node, opset)
    if schema is None:
        return {}
    return {name: int(a.type) for name, a in schema.attributes.items()}


def _schema(node: onnx.NodeProto, opset: int) -> onnx.defs.OpSchema | None:
    """The ONNX schema of ``node``'s operator at ``opset``; the newest one when the
    operator is younger than the model's opset (a model fusec still reads: its
    attribute types and input counts are checked against the newest definition);
    None for an operator ONNX does not define."""
    for version in (opset, None):
        try:
            if version is None:
                return onnx.defs.get_schema(node.op_type, node.domain)
            return onnx.defs.get_schema(node.op_type, version, node.domain)
        except Exception:  # onnx.defs.SchemaError
            continue
    return None


def _attribute_type_name(code: int) -> str:
    try:
        return onnx.AttributeProto.AttributeType.Name(code)
    except ValueError:
        return f"of unknown type {code}"


def value_name(name: str) -> str:
    """An SSA name hint from an ONNX value name (only [A-Za-z0-9_$.-], never a digit first)."""
    clean = re.sub(r"[^A-Za-z0-9_$.-]", "_", name)
    if not clean or clean[0].isdigit() or clean[0] == "-":
        clean = f"v{clean}"
    return clean


def function_name(graph_name: str) -> str:
    return graph_name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", graph_name) else "main"


def _dims_text(dims: Sequence[int]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def _name_attr(name: str) -> DictionaryAttr:
    return DictionaryAttr({"onnx.name": StringAttr(name)})


def _default_opset(model: onnx.ModelProto, source: str) -> int:
    for opset in model.opset_import:
        if opset.domain in _DOMAINS:
            return opset.version
    if model.opset_import:
        return 1
    raise FusecError("the model has no opset_import", SourceLocation(source, 0, 0))


def _constant_ints(imp: Importer, node: Node, index: int, what: str) -> list[int] | None:
    """An optional integer input that must be a constant (shapes, axes, indices)."""
    name = imp.optional_input_name(node, index)
    if name is None:
        return None
    known = imp.arrays.get(name)
    if known is None:
        raise imp.error(
            f"{what} ('{name}') is computed at run time: fusec needs it constant (static shapes)",
            "attribute",
        )
    return [int(v) for v in np.asarray(known).reshape(-1)]


def _axes(imp: Importer, node: Node, index: int) -> list[int] | None:
    """Axes from the ``axes`` attribute (older opsets) or input ``index`` (newer)."""
    if "axes" in node.attrs:
        return [int(a) for a in node.attrs["axes"]]
    return _constant_ints(imp, node, index, "input 'axes'")


def _normalised(imp: Importer, axes: Sequence[int], rank: int) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise imp.error(f"axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise imp.error(f"axes {list(axes)} repeat a dim")
    return out


def _reshape_to(imp: Importer, x: SSAValue, shape: Sequence[int]) -> SSAValue:
    shape = tuple(int(d) for d in shape)
    return x if shape == shape_of(x) else imp.emit(ai.ReshapeOp, x, shape=shape)
