"""The ONNX front end: an ONNX model -> a verified ``func.func`` of ``ai`` ops.

Each supported ONNX operator has one short converter in ``CONVERTERS`` that
builds ai ops with the dialect's builders, so result shapes come from (and are
checked by) the same shape functions as everywhere else. Initializers become
dense ``arith.constant`` ops in the model's element type (or trailing function
arguments with ``weights_as_args``). Every op built for a node is located at
``loc("node name"("model.onnx":0:0))`` so that a diagnostic, now or in a later
pass, says ``model.onnx: node "name": error: ...``.

Unsupported input (an operator, attribute value or element type fusec does not
have) raises ``UnsupportedOnnx``, a ``FusecError`` that also says which kind of
feature is missing; the conformance runner skips on it, never on other errors.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FileLineColLoc,
    IntAttr,
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
    broadcast_shapes,
    shape_problem,
)
from fusec.errors import FusecError, SourceLocation
from fusec.frontend import onnx_fold
from fusec.ir.constants import stored_bytes
from fusec.ir.diagnostics import named_location, verify_module
from fusec.ir.dtypes import element_type_of, is_float, numpy_dtype
from fusec.ir.memory import check_bytes

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


# ------------------------------------------------------------------ the importer


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
        file = FileLineColLoc(StringAttr(self.source), IntAttr(0), IntAttr(0))
        return NameLoc(StringAttr(node.label), file)

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
        data = np.asarray(array).astype(numpy_dtype(dtype), order="C")  # (0-d stays 0-d)
        if (problem := shape_problem(data.shape)) is not None:
            what = f"'{name}'" if name is not None else "a constant"
            raise self.error(f"{what} of shape {_dims_text(data.shape)} {problem}", "shape")
        ttype = tensor_type(TensorSpec(tuple(data.shape), dtype))
        dense = DenseIntOrFPElementsAttr(ttype, BytesAttr(stored_bytes(data)))
        value = self.append(arith.ConstantOp(dense, ttype))
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


# ------------------------------------------------------------------ helpers


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


def dtype_of(value: SSAValue) -> str:
    return spec_of(value.type).dtype


def shape_of(value: SSAValue) -> tuple[int, ...]:
    return spec_of(value.type).shape


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


# ------------------------------------------------------------------ converters


def _onnx_names(base: type[ai.AiOp]) -> dict[str, type[ai.AiOp]]:
    """ONNX operator -> op, from the ops' own facts (``FRONTEND.onnx``)."""
    return {n: op for op in ai.TENSOR_OPS if issubclass(op, base) for n in op.FRONTEND.onnx}


_UNARY = _onnx_names(ai.UnaryOp)
_BINARY = _onnx_names(ai.BinaryOp)


@converter(*_UNARY, attrs=("consumed_inputs",))
def _unary(imp: Importer, node: Node) -> list[SSAValue]:
    return [imp.emit(_UNARY[node.op_type], imp.input(node, 0))]


@converter(*_BINARY, attrs=("broadcast", "axis", "consumed_inputs"))
def _binary(imp: Importer, node: Node) -> list[SSAValue]:
    a, b = imp.input(node, 0), imp.input(node, 1)
    if node.attrs.get("broadcast", 0) and "axis" in node.attrs:
        # opset < 7: b is aligned with a at ``axis``; numpy's rule is the special
        # case axis = rank(a) - rank(b).
        rank_a, rank_b = len(shape_of(a)), len(shape_of(b))
        if node.attrs["axis"] % max(rank_a, 1) != rank_a - rank_b:
            raise imp.error(
                f"legacy broadcast with axis={node.attrs['axis']} (opset < 7) is not supported",
                "attribute",
            )
    return [imp.emit(_BINARY[node.op_type], a, b)]


@converter("Clip", attrs=("min", "max"))
def _clip(imp: Importer, node: Node) -> list[SSAValue]:
    """Bounds are attributes before opset 11, optional scalar inputs after: constant
    bounds become ai.clip, bounds computed at run time ai.maximum/ai.minimum."""
    x = imp.input(node, 0)
    bounds: dict[str, float] = {}
    runtime: list[tuple[type[ai.AiOp], SSAValue]] = []
    limits: tuple[tuple[int, str, type[ai.AiOp]], ...] = (
        (1, "min", ai.MaximumOp),
        (2, "max", ai.MinimumOp),
    )
    for index, key, op in limits:
        if key in node.attrs:
            bounds[key] = float(node.attrs[key])
        elif imp.optional_input_name(node, index) is not None:
            value = imp.array(node, index)
            if value is None:
                runtime.append((op, imp.input(node, index)))
                continue
            if value.size != 1:
                raise imp.error(f"input '{key}' must be a scalar, got shape {value.shape}")
            bounds[key] = float(value.reshape(()))
    y = imp.emit(ai.ClipOp, x, **bounds) if bounds or not runtime else x
    for op, bound in runtime:
        if shape_of(bound) not in ((), (1,)):
            raise imp.error(f"the bounds must be scalars, got {bound.type}")
        y = imp.emit(op, y, bound)
    return [y]


@converter("Pow")
def _pow(imp: Importer, node: Node) -> list[SSAValue]:
    """x ** y; a constant integer exponent becomes a float one of x's type."""
    x = imp.input(node, 0)
    exponent = imp.array(node, 1)
    if exponent is not None and exponent.dtype.kind in "iub":
        y = imp.constant(exponent.astype(np.float64), dtype_of(x))
    else:
        y = imp.input(node, 1)
    return [imp.emit(ai.PowOp, x, y)]


@converter("IsNaN")
def _isnan(imp: Importer, node: Node) -> list[SSAValue]:
    """A bool: ai.isnan (1/0 in x's float type) cast to i1."""
    return [imp.emit(ai.CastOp, imp.emit(ai.IsNanOp, imp.input(node, 0)), "i1")]


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def _isinf(imp: Importer, node: Node) -> list[SSAValue]:
    """A bool: x == +inf, x == -inf, or either (ai.equal with infinite constants)."""
    x = imp.input(node, 0)
    signs = [
        s for s, k in ((1.0, "detect_positive"), (-1.0, "detect_negative")) if node.attrs.get(k, 1)
    ]
    found = [imp.emit(ai.EqualOp, x, imp.scalar(sign * math.inf, x)) for sign in signs]
    if not found:  # neither sign: false everywhere
        return [imp.emit(ai.LessOp, x, imp.scalar(-math.inf, x))]  # nothing is below -inf
    return [found[0] if len(found) == 1 else imp.emit(ai.OrOp, *found)]


@converter("Where")
def _where(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.where on a constant condition (folded away when it picks one side whole) or a
    bool computed at run time (an attention mask, IsNaN)."""
    a, b = imp.input(node, 1), imp.input(node, 2)
    known = imp.array(node, 0)
    if known is not None:
        out_shape = np.broadcast_shapes(known.shape, shape_of(a), shape_of(b))
        if known.all() and shape_of(a) == out_shape:
            return [a]
        if not known.any() and shape_of(b) == out_shape:
            return [b]
        condition = imp.constant(known.astype(bool).astype(np.float64), dtype_of(a))
    else:
        condition = imp.input(node, 0)
        if dtype_of(condition) != "i1":
            raise imp.error(f"the condition is {condition.type}, expected a BOOL tensor", "dtype")
    return [imp.emit(ai.WhereOp, condition, a, b)]


@converter("Identity")
def _identity(imp: Importer, node: Node) -> list[SSAValue]:
    return [imp.input(node, 0)]


@converter("Max", "Min", attrs=("consumed_inputs",))
def _max_min(imp: Importer, node: Node) -> list[SSAValue]:
    values = [imp.value(name) for name in node.proto.input if name]
    if not values:
        raise imp.error("needs at least one input")
    op = ai.MaximumOp if node.op_type == "Max" else ai.MinimumOp
    result = values[0]
    for other in values[1:]:
        result = imp.emit(op, result, other)
    return [result]


@converter("Sum", "Mean", attrs=("consumed_inputs",))
def _sum_mean(imp: Importer, node: Node) -> list[SSAValue]:
    """A chain of ai.add (the inputs broadcast together); Mean divides by their count."""
    values = [imp.value(name) for name in node.proto.input if name]
    if not values:
        raise imp.error("needs at least one input")
    result = values[0]
    for other in values[1:]:
        result = imp.emit(ai.AddOp, result, other)
    if node.op_type == "Mean" and len(values) > 1:
        result = imp.emit(ai.DivOp, result, imp.scalar(len(values), result))
    return [result]


#: Activations whose ONNX attributes are the op's own (same names and defaults).
_ACTIVATIONS: dict[str, type[ai.AiOp]] = {
    "LeakyRelu": ai.LeakyReluOp,
    "Elu": ai.EluOp,
    "Selu": ai.SeluOp,
    "Celu": ai.CeluOp,
    "HardSigmoid": ai.HardSigmoidOp,
    "ThresholdedRelu": ai.ThresholdedReluOp,
}


@converter(*_ACTIVATIONS, attrs=("alpha", "beta", "gamma", "consumed_inputs"))
def _activation(imp: Importer, node: Node) -> list[SSAValue]:
    op = _ACTIVATIONS[node.op_type]
    declared = op.declared_properties()
    attrs = {k: float(v) for k, v in node.attrs.items() if k != "consumed_inputs"}
    for key in attrs:
        if key not in declared:
            raise imp.error(f"unsupported attribute '{key}'", "attribute")
    return [imp.emit(op, imp.input(node, 0), **attrs)]


@converter("Swish", attrs=("alpha",))
def _swish(imp: Importer, node: Node) -> list[SSAValue]:
    return [swish(imp, imp.input(node, 0), float(node.attrs.get("alpha", 1.0)))]


def swish(imp: Importer, x: SSAValue, alpha: float) -> SSAValue:
    """x * sigmoid(alpha * x): ai.silu when alpha is 1 (Swish, and SwiGLU's gate)."""
    if alpha == 1.0:
        return imp.emit(ai.SiluOp, x)
    gate = imp.emit(ai.SigmoidOp, imp.emit(ai.MulOp, x, imp.scalar(alpha, x)))
    return imp.emit(ai.MulOp, x, gate)


@converter("Shrink", attrs=("bias", "lambd"))
def _shrink(imp: Importer, node: Node) -> list[SSAValue]:
    """x + bias below -lambd, x - bias above lambd, else 0 (NaN too, as ONNX's reference)."""
    x = imp.input(node, 0)
    bias, lambd = float(node.attrs.get("bias", 0.0)), float(node.attrs.get("lambd", 0.5))
    low = imp.emit(ai.LessOp, x, imp.scalar(-lambd, x))
    high = imp.emit(ai.GreaterOp, x, imp.scalar(lambd, x))
    above = imp.emit(
        ai.WhereOp, high, imp.emit(ai.SubOp, x, imp.scalar(bias, x)), imp.scalar(0.0, x)
    )
    return [imp.emit(ai.WhereOp, low, imp.emit(ai.AddOp, x, imp.scalar(bias, x)), above)]


@converter("Dropout", attrs=("ratio", "seed", "is_test", "consumed_inputs"))
def _dropout(imp: Importer, node: Node) -> list[SSAValue | None]:
    """Inference, or training with a ratio of 0: the identity, and a mask output of
    true everywhere (a constant). Training mode that drops (a true ``training_mode``
    input and a ratio above 0, or ``is_test=0`` before opset 7) is refused: random."""
    training = imp.array(node, 2)
    if imp.optional_input_name(node, 2) is not None and training is None:
        raise imp.error(
            "training_mode is computed at run time: fusec compiles inference only", "attribute"
        )
    ratio = imp.array(node, 1)
    drops = float(node.attrs.get("ratio", 0.5) if ratio is None else np.asarray(ratio).item())
    if training is not None and bool(np.asarray(training).item()) and drops != 0.0:
        raise imp.error(
            f"training_mode=1 with a ratio of {drops} is not supported (random drops; "
            "inference only)",
            "attribute",
        )
    if imp.opset < 7 and node.attrs.get("is_test", 0) == 0:
        raise imp.error("is_test=0 (opset < 7) is training mode: not supported", "attribute")
    x = imp.input(node, 0)
    mask = node.proto.output[1] if len(node.proto.output) > 1 else ""
    if mask and imp.uses[mask]:
        return [x, imp.constant(np.ones(shape_of(x), dtype=bool), "i1")]
    return [x]


@converter("Gelu", attrs=("approximate",))
def _gelu(imp: Importer, node: Node) -> list[SSAValue]:
    approximate = node.attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise imp.error(f"approximate='{approximate}' is not supported", "attribute")
    return [imp.emit(ai.GeluOp, imp.input(node, 0), approximate=approximate)]


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    if "to" not in node.attrs:
        raise imp.error("attribute 'to' is required")
    to = imp.element_type(node.attrs["to"], "the cast target")
    return [x if dtype_of(x) == to else imp.emit(ai.CastOp, x, to)]


@converter("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(imp: Importer, node: Node) -> list[SSAValue]:
    """Cast to the element type of the second input (a value or a constant)."""
    x = imp.input(node, 0)
    like = imp.array(node, 1)
    if like is not None:
        to = imp.dtype_of_array(node.proto.input[1], like)
    else:
        to = dtype_of(imp.input(node, 1))
    return [x if dtype_of(x) == to else imp.emit(ai.CastOp, x, to)]


@converter("MatMul")
def _matmul(imp: Importer, node: Node) -> list[SSAValue]:
    return [imp.emit(ai.MatmulOp, imp.input(node, 0), imp.input(node, 1))]


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def _gemm(imp: Importer, node: Node) -> list[SSAValue]:
    a, b = imp.input(node, 0), imp.input(node, 1)
    for name, value in (("A", a), ("B", b)):
        if len(shape_of(value)) != 2:
            raise imp.error(f"input {name} must be 2-D, got {value.type}")
    alpha, beta = node.attrs.get("alpha", 1.0), node.attrs.get("beta", 1.0)
    y = imp.emit(
        ai.MatmulOp,
        a,
        b,
        transpose_a=bool(node.attrs.get("transA", 0)),
        transpose_b=bool(node.attrs.get("transB", 0)),
    )
    if alpha != 1.0:
        y = imp.emit(ai.MulOp, y, imp.scalar(alpha, y))
    if imp.optional_input(node, 2) is not None and beta != 0.0:
        y = _add_gemm_bias(imp, node, y, beta)
    return [y]


def _add_gemm_bias(imp: Importer, node: Node, y: SSAValue, beta: float) -> SSAValue:
    """y + beta * C: a 1-D (or 1 x N) C becomes ai.bias_add, other shapes broadcast."""
    n = shape_of(y)[1]
    known = imp.array(node, 2)
    if known is not None:
        c_dtype = imp.dtype_of_array(node.proto.input[2], known)
        scaled = known.astype(np.float64) * beta if beta != 1.0 else known
        if scaled.shape in ((n,), (1, n)):
            return imp.emit(ai.BiasAddOp, y, imp.constant(scaled.reshape(n), c_dtype), axis=1)
        c = imp.constant(scaled, c_dtype) if beta != 1.0 else imp.input(node, 2)
    else:
        c = imp.input(node, 2)
        if beta != 1.0:
            c = imp.emit(ai.MulOp, c, imp.scalar(beta, c))
    try:
        out = broadcast_shapes("Gemm", shape_of(y), shape_of(c))
    except ShapeError:
        out = None
    if out != shape_of(y):
        raise imp.error(f"C ({c.type}) does not broadcast to the result {y.type}")
    if shape_of(c) == (n,):
        return imp.emit(ai.BiasAddOp, y, c, axis=1)
    return imp.emit(ai.AddOp, y, c)


@converter("Softmax", attrs=("axis",))
def _softmax(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    return [imp.emit(ai.SoftmaxOp, x, axis=_softmax_axis(imp, node, x) - len(shape_of(x)))]


def _softmax_axis(imp: Importer, node: Node, x: SSAValue) -> int:
    """The one axis a Softmax or LogSoftmax normalises over (in [0, rank))."""
    shape = shape_of(x)
    rank = len(shape)
    axis = node.attrs.get("axis", -1 if imp.opset >= 13 else 1)
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if imp.opset < 13:
        # Before opset 13, Softmax flattens dims [axis:] into one: that is a
        # softmax over one dim only when the others are all 1.
        big = [d for d in range(axis, rank) if shape[d] != 1]
        if len(big) > 1:
            raise imp.error(
                f"opset {imp.opset} {node.op_type} with axis={axis} normalises over the flattened "
                f"dims {list(shape[axis:])}, which ai.softmax cannot express (opset >= 13 "
                "normalises over one axis)",
                "attribute",
            )
        axis = big[0] if big else rank - 1
    return axis


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(imp: Importer, node: Node) -> list[SSAValue | None]:
    """Normalisation over dims [axis:] (ONNX flattens them into one): ai.layernorm over
    the last axis of a reshaped view when there are several. Scale and bias of another
    float type than the input (the TorchScript exporter's f16 parameters after an f32
    attention, issue 28) are taken in the input's type: a constant converted, a value
    cast."""
    x, scale = imp.input(node, 0), imp.input(node, 1)
    bias = imp.optional_input(node, 2)
    shape = shape_of(x)
    rank = len(shape)
    axis = node.attrs.get("axis", -1)
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if node.attrs.get("stash_type", 1) != 1:
        raise imp.error(f"stash_type={node.attrs['stash_type']} is not supported", "attribute")
    normalised = shape[axis:]
    d = math.prod(normalised)
    rows = imp.emit(ai.ReshapeOp, x, shape=shape[:axis] + (d,)) if axis < rank - 1 else x
    scale = _as_type_of(imp, scale, x)
    bias = None if bias is None else _as_type_of(imp, bias, x)
    gamma = _flat_parameter(imp, node, 1, scale, normalised)
    beta = None if bias is None else _flat_parameter(imp, node, 2, bias, normalised)
    if gamma is not None and (bias is None or beta is not None):
        y = _normalise_last_axis(imp, rows, gamma, beta, epsilon)
        y = imp.emit(ai.ReshapeOp, y, shape=shape) if rows is not x else y
    else:  # parameters that broadcast over part of the normalised dims: applied after
        plain = _normalise_last_axis(imp, rows, None, None, epsilon)
        y = imp.emit(ai.ReshapeOp, plain, shape=shape) if rows is not x else plain
        y = _broadcast_into(imp, ai.MulOp, y, scale)
        y = _broadcast_into(imp, ai.AddOp, y, bias) if bias is not None else y
    outputs: list[SSAValue | None] = [y]
    wanted = [i for i in (1, 2) if i < len(node.proto.output) and node.proto.output[i]]
    if wanted:
        outputs += _layer_norm_stats(imp, x, axis, epsilon)[: max(wanted)]
    return outputs


def _as_type_of(imp: Importer, value: SSAValue, x: SSAValue) -> SSAValue:
    """``value`` in ``x``'s element type: itself, or cast when both are float types."""
    have, want = dtype_of(value), dtype_of(x)
    if have == want or not (is_float(have) and is_float(want)):
        return value
    return imp.emit(ai.CastOp, value, want)


def _flat_parameter(
    imp: Importer, node: Node, index: int, value: SSAValue, normalised: tuple[int, ...]
) -> SSAValue | None:
    """Scale or bias as a 1-D vector over the flattened normalised dims: a constant
    broadcast to them, or a value of exactly their shape; None when neither."""
    d = math.prod(normalised)
    known = imp.array(node, index)
    if known is not None:
        try:
            full = np.broadcast_to(known, normalised)
        except ValueError:
            raise imp.error(
                f"input #{index} of shape {known.shape} does not broadcast to the normalised "
                f"dims {list(normalised)}"
            ) from None
        if full.shape == normalised:
            return imp.constant(full.reshape(d), dtype_of(value))
    if shape_of(value) == normalised:
        return value if len(normalised) == 1 else imp.emit(ai.ReshapeOp, value, shape=(d,))
    return None


def _normalise_last_axis(
    imp: Importer, x: SSAValue, gamma: SSAValue | None, beta: SSAValue | None, epsilon: float
) -> SSAValue:
    """ai.layernorm over the last axis with 1-D gamma/beta (ones/zeros when absent)."""
    d = shape_of(x)[-1]
    dtype = dtype_of(x)
    gamma = gamma if gamma is not None else imp.constant(np.ones(d), dtype)
    beta = beta if beta is not None else imp.constant(np.zeros(d), dtype)
    return imp.emit(ai.LayerNormOp, x, gamma, beta, epsilon=epsilon)


def _broadcast_into(imp: Importer, op: type[ai.AiOp], x: SSAValue, other: SSAValue) -> SSAValue:
    result = imp.emit(op, x, other)
    if shape_of(result) != shape_of(x):
        raise imp.error(f"{other.type} does not broadcast to the input's shape {x.type}")
    return result


def _layer_norm_stats(imp: Importer, x: SSAValue, axis: int, epsilon: float) -> list[SSAValue]:
    """Mean and InvStdDev over dims [axis:] (in f32, the stash type), kept as size-1 dims."""
    xs = x if dtype_of(x) == "f32" else imp.emit(ai.CastOp, x, "f32")
    axes = tuple(range(axis, len(shape_of(x))))
    mean = imp.emit(ai.ReduceMeanOp, xs, axes=axes, keepdims=True)
    centred = imp.emit(ai.SubOp, xs, mean)
    square = imp.emit(ai.MulOp, centred, centred)
    var = imp.emit(ai.ReduceMeanOp, square, axes=axes, keepdims=True)
    std = imp.emit(ai.SqrtOp, imp.emit(ai.AddOp, var, imp.scalar(epsilon, var)))
    return [mean, imp.emit(ai.DivOp, imp.scalar(1.0, std), std)]


@converter("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def _rms_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """x / sqrt(mean(x^2 over dims [axis:]) + epsilon) * scale, the statistics in f32
    (the stash type) as LayerNormalization's."""
    x, scale = imp.input(node, 0), imp.input(node, 1)
    rank = len(shape_of(x))
    axis = int(node.attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    if node.attrs.get("stash_type", 1) != 1:
        raise imp.error(f"stash_type={node.attrs['stash_type']} is not supported", "attribute")
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    xs = x if dtype_of(x) == "f32" else imp.emit(ai.CastOp, x, "f32")
    axes = tuple(range(axis % rank, rank))
    mean_square = imp.emit(ai.ReduceMeanOp, _square(imp, xs), axes=axes, keepdims=True)
    rms = imp.emit(ai.SqrtOp, imp.emit(ai.AddOp, mean_square, imp.scalar(epsilon, mean_square)))
    y = imp.emit(ai.DivOp, xs, rms)
    y = y if dtype_of(x) == "f32" else imp.emit(ai.CastOp, y, dtype_of(x))
    return [_broadcast_into(imp, ai.MulOp, y, scale)]


def _normalise_rows(imp: Importer, x: SSAValue, rows: tuple[int, ...], epsilon: float) -> SSAValue:
    """``x`` viewed as ``rows`` (its last dim the normalised elements), each row
    normalised by ai.layernorm (scale 1, bias 0)."""
    return _normalise_last_axis(imp, _reshape_to(imp, x, rows), None, None, epsilon)


def _per_channel(imp: Importer, node: Node, index: int, channels: int, rank: int) -> SSAValue:
    """Input ``index`` (C values) shaped (C, 1, ..., 1) to broadcast over an N x C x ...
    tensor of ``rank``."""
    value = imp.input(node, index)
    if math.prod(shape_of(value)) != channels:
        raise imp.error(f"input #{index} must have {channels} values, got {value.type}")
    return _reshape_to(imp, value, (channels,) + (1,) * (rank - 2))


@converter("InstanceNormalization", attrs=("epsilon",))
def _instance_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """Each (n, c) plane normalised (ai.layernorm over its elements), then scale and bias
    per channel."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) < 3:
        raise imp.error(f"input must be N x C x spatial dims, got {x.type}")
    n, c, rank = shape[0], shape[1], len(shape)
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    planes = _normalise_rows(imp, x, (n, c, math.prod(shape[2:])), epsilon)
    y = _reshape_to(imp, planes, shape)
    y = imp.emit(ai.MulOp, y, _per_channel(imp, node, 1, c, rank))
    return [imp.emit(ai.AddOp, y, _per_channel(imp, node, 2, c, rank))]


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def _group_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """The channels split into ``num_groups`` groups, each (n, group) normalised over its
    channels and spatial elements (ai.layernorm), then scale and bias: per channel
    (opset 21), or per group (opset 18, parameters of G values)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) < 3:
        raise imp.error(f"input must be N x C x spatial dims, got {x.type}")
    if node.attrs.get("stash_type", 1) != 1:
        raise imp.error(f"stash_type={node.attrs['stash_type']} is not supported", "attribute")
    if "num_groups" not in node.attrs:
        raise imp.error("attribute 'num_groups' is required")
    groups = int(node.attrs["num_groups"])
    n, c, rank = shape[0], shape[1], len(shape)
    if groups <= 0 or c % groups:
        raise imp.error(f"num_groups={groups} does not divide the {c} channels")
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    grouped = _normalise_rows(imp, x, (n, groups, math.prod(shape[1:]) // groups), epsilon)
    params = [imp.input(node, i) for i in (1, 2)]
    if all(math.prod(shape_of(p)) == c for p in params):
        y = _reshape_to(imp, grouped, shape)
        y = imp.emit(ai.MulOp, y, _per_channel(imp, node, 1, c, rank))
        return [imp.emit(ai.AddOp, y, _per_channel(imp, node, 2, c, rank))]
    if all(math.prod(shape_of(p)) == groups for p in params):
        scale, bias = (_reshape_to(imp, p, (groups, 1)) for p in params)
        y = imp.emit(ai.AddOp, imp.emit(ai.MulOp, grouped, scale), bias)
        return [_reshape_to(imp, y, shape)]
    raise imp.error(f"scale and bias must have {c} (or {groups}) values each")


_BN_ATTRS = ("epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs")


@converter("BatchNormalization", attrs=_BN_ATTRS)
def _batch_norm(imp: Importer, node: Node) -> list[SSAValue]:
    """``ai.batch_norm``: canonicalize folds it into a conv2d feeding it or decomposes it
    (the importer builds IR and stops; ``.mlir`` and traced graphs get the same)."""
    if node.attrs.get("training_mode", 0):
        raise imp.error("training_mode=1 is not supported (inference only)", "attribute")
    if node.attrs.get("spatial", 1) != 1:
        raise imp.error("spatial=0 (opset < 9) is not supported", "attribute")
    x = imp.input(node, 0)
    params = [imp.input(node, i) for i in range(1, 5)]
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    return [imp.emit(ai.BatchNormOp, x, *params, epsilon=epsilon)]


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(imp: Importer, node: Node) -> list[SSAValue]:
    """2-D convolution, and 1-D convolution as 2-D convolution of height-1 views."""
    x, w, kernel = conv_operands(imp, node, "convolution")
    flat = len(kernel) == 1
    dims = 1 if flat else 2
    strides = tuple(int(v) for v in node.attrs.get("strides", (1,) * dims))
    dilations = tuple(int(v) for v in node.attrs.get("dilations", (1,) * dims))
    if flat:
        x, w = (_reshape_to(imp, v, (*shape_of(v)[:2], 1, shape_of(v)[2])) for v in (x, w))
        kernel, strides, dilations = ((1, *v) for v in (kernel, strides, dilations))
    view = _height_one(imp, node) if flat else node
    padding = _conv_padding(imp, view, shape_of(x)[2:], kernel, strides, dilations)
    bias = imp.optional_input(node, 2)
    y = imp.emit(
        ai.Conv2DOp,
        x,
        w,
        strides=strides,
        padding=padding,
        dilations=dilations,
        groups=int(node.attrs.get("group", 1)),
    )
    if bias is not None:
        y = imp.emit(ai.BiasAddOp, y, bias, axis=1)
    return [_reshape_to(imp, y, shape_of(y)[:2] + shape_of(y)[3:]) if flat else y]


def conv_operands(
    imp: Importer, node: Node, what: str
) -> tuple[SSAValue, SSAValue, tuple[int, ...]]:
    """(input, weight, kernel) of a 1-D or 2-D Conv or ConvTranspose node: 3-D or 4-D both,
    ``kernel_shape`` (if given) the weight's."""
    x, w = imp.input(node, 0), imp.input(node, 1)
    if (len(shape_of(x)), len(shape_of(w))) not in ((3, 3), (4, 4)):
        raise imp.error(
            f"only 1-D and 2-D {what} are supported (3-D or 4-D input and weight), got "
            f"{x.type} and {w.type}",
            "attribute",
        )
    kernel = shape_of(w)[2:]
    if "kernel_shape" in node.attrs and tuple(node.attrs["kernel_shape"]) != kernel:
        raise imp.error(
            f"kernel_shape {list(node.attrs['kernel_shape'])} does not match the weight {w.type}"
        )
    return x, w, kernel


def _height_one(imp: Importer, node: Node) -> Node:
    """A 1-D conv or pool node seen as 2-D over a height-1 view: its 2 pads lifted to 4."""
    pads = node.attrs.get("pads")
    if pads is None:
        return node
    if len(pads) != 2:
        raise imp.error(f"pads must have 2 values, got {list(pads)}")
    return Node(node.proto, node.index, {**node.attrs, "pads": (0, pads[0], 0, pads[1])})


def _conv_padding(
    imp: Importer,
    node: Node,
    size: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[int, ...]:
    """ai.conv2d padding (h_begin, w_begin, h_end, w_end), or 2 values when symmetric."""
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if len(strides) != 2 or len(dilations) != 2 or min(*strides, *dilations) < 1:
        raise imp.error(
            f"strides {list(strides)} and dilations {list(dilations)} must be 2 "
            "positive values each"
        )
    if auto_pad in ("NOTSET", ""):
        pads = tuple(node.attrs.get("pads", (0, 0, 0, 0)))
        if len(pads) != 4:
            raise imp.error(f"pads must have 4 values, got {list(pads)}")
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if "pads" in node.attrs:
            raise imp.error("pads cannot be given together with auto_pad")
        begin, end = [], []
        for n, k, s, d in zip(size, kernel, strides, dilations, strict=True):
            total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        pads = (*begin, *end)
    else:
        raise imp.error(f"auto_pad='{auto_pad}' is not supported", "attribute")
    return pads[:2] if pads[:2] == pads[2:] else pads


# ------------------------------------------------------------------ layout


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


@converter("Reshape", attrs=("allowzero",))
def _reshape(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    target = _constant_ints(imp, node, 1, "input 'shape'")
    if target is None:
        raise imp.error("input 'shape' is required")
    source = shape_of(x)
    dims = []
    for i, d in enumerate(target):
        if d == 0 and not node.attrs.get("allowzero", 0):
            if i >= len(source):
                raise imp.error(f"shape {target}: 0 at {i} copies a dim the input lacks")
            d = source[i]
        dims.append(d)
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise imp.error(f"shape {target} is not a valid target shape")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        total = math.prod(source)
        if known == 0 or total % known:
            raise imp.error(f"cannot reshape {x.type} to {target}")
        dims[dims.index(-1)] = total // known
    return [_reshape_to(imp, x, dims)]


@converter("Flatten", attrs=("axis",))
def _flatten(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = node.attrs.get("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise imp.error(f"axis {axis} is out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return [_reshape_to(imp, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@converter("Squeeze", attrs=("axes",))
def _squeeze(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    axes = _axes(imp, node, 1)
    chosen = set(_normalised(imp, axes, len(shape)) if axes else range(len(shape)))
    if axes and any(shape[a] != 1 for a in chosen):
        raise imp.error(f"cannot squeeze axes {axes} of {x.type}: not all of size 1")
    kept = [d for i, d in enumerate(shape) if not (i in chosen and d == 1)]
    return [_reshape_to(imp, x, kept)]


@converter("Unsqueeze", attrs=("axes",))
def _unsqueeze(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    axes = _axes(imp, node, 1)
    if not axes:
        raise imp.error("needs axes")
    rank = len(shape_of(x)) + len(axes)
    chosen = set(_normalised(imp, axes, rank))
    dims = iter(shape_of(x))
    return [_reshape_to(imp, x, [1 if i in chosen else next(dims) for i in range(rank)])]


@converter("Transpose", attrs=("perm",))
def _transpose(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    perm = tuple(int(p) for p in node.attrs.get("perm", range(rank - 1, -1, -1)))
    if perm == tuple(range(rank)):
        return [x]
    return [imp.emit(ai.TransposeOp, x, perm=perm)]


def _slice_of(imp: Importer, x: SSAValue, starts, ends, axes, steps) -> SSAValue:
    """ONNX Slice semantics (negative indices count from the end, clamping) as ai.slice."""
    shape = shape_of(x)
    rank = len(shape)
    axes = _normalised(imp, axes if axes is not None else range(len(starts)), rank)
    steps = steps if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise imp.error("starts, ends, axes and steps must have the same length")
    offsets, sizes, strides = [0] * rank, list(shape), [1] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        dim = shape[axis]
        if step == 0:
            raise imp.error("a step is 0")
        start, end = (v + dim if v < 0 else v for v in (start, end))
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        count = max(0, -(-(end - start) // step))
        if count == 0:
            raise imp.error(
                f"slicing axis {axis} gives an empty tensor: fusec does not support empty tensors",
                "attribute",
            )
        offsets[axis], sizes[axis], strides[axis] = start, count, step
    if tuple(sizes) == shape and all(s == 1 for s in strides):
        return x
    return imp.emit(ai.SliceOp, x, offsets=offsets, sizes=sizes, strides=strides)


@converter("Slice", attrs=("starts", "ends", "axes"))
def _slice(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    if "starts" in node.attrs:  # opset < 10
        starts: list[int] | None = list(node.attrs["starts"])
        ends: list[int] | None = list(node.attrs.get("ends", []))
        axes, steps = node.attrs.get("axes"), None
    else:
        starts = _constant_ints(imp, node, 1, "input 'starts'")
        ends = _constant_ints(imp, node, 2, "input 'ends'")
        axes = _constant_ints(imp, node, 3, "input 'axes'")
        steps = _constant_ints(imp, node, 4, "input 'steps'")
    if starts is None or ends is None:
        raise imp.error("starts and ends are required")
    big = 2**62  # INT64_MAX and friends mean "to the end"
    clip = [max(min(v, big), -big) for v in ends]
    return [_slice_of(imp, x, list(starts), clip, axes, steps)]


@converter("Split", attrs=("axis", "split", "num_outputs"))
def _split(imp: Importer, node: Node) -> list[SSAValue | None]:
    """Slices along the axis; a part of size 0 is an empty constant (RoPE graphs split
    off the values not rotated, none when all are): Concat leaves it out, and any
    other use of it is a located error."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = _normalised(imp, [node.attrs.get("axis", 0)], len(shape))[0]
    outputs = len(node.proto.output)
    parts = node.attrs.get("split") or _constant_ints(imp, node, 1, "input 'split'")
    if not parts:
        count = node.attrs.get("num_outputs", outputs)
        chunk = -(-shape[axis] // count)
        parts = [min(chunk, shape[axis] - i * chunk) for i in range(count)]
    if sum(parts) != shape[axis] or len(parts) != outputs or min(parts) < 0:
        raise imp.error(f"split {list(parts)} does not divide axis {axis} of {x.type}")
    results: list[SSAValue | None] = []
    start = 0
    for name, size in zip(node.proto.output, parts, strict=True):
        if size == 0:
            empty = shape[:axis] + (0,) + shape[axis + 1 :]
            imp.arrays[name] = np.empty(empty, dtype=numpy_dtype(dtype_of(x)))
            results.append(None)
            continue
        results.append(_slice_of(imp, x, [start], [start + size], [axis], [1]))
        start += size
    return results


@converter("Concat", attrs=("axis",))
def _concat(imp: Importer, node: Node) -> list[SSAValue]:
    names = [n for n in node.proto.input if n]
    empty = {n for n in names if n in imp.arrays and imp.arrays[n].size == 0}
    values = [imp.value(n) for n in names if n not in empty]  # empty tensors add nothing
    if not values:
        raise imp.error("all inputs are empty: fusec does not support empty tensors")
    if "axis" not in node.attrs:
        raise imp.error("attribute 'axis' is required")
    if len(values) == 1:
        return values
    return [imp.emit(ai.ConcatOp, *values, axis=int(node.attrs["axis"]))]


@converter("Gather", attrs=("axis",))
def _gather(imp: Importer, node: Node) -> list[SSAValue]:
    """Constant indices (any rank): ai.gather of the flat indices, reshaped."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    axis = _normalised(imp, [node.attrs.get("axis", 0)], len(shape))[0]
    name = node.proto.input[1]
    indices = imp.arrays.get(name)
    if indices is None:  # an embedding lookup: ai.take at the run-time indices
        return [imp.emit(ai.TakeOp, x, imp.input(node, 1), axis=axis)]
    flat = [int(i) + shape[axis] if i < 0 else int(i) for i in np.asarray(indices).reshape(-1)]
    if any(not 0 <= i < shape[axis] for i in flat):
        raise imp.error(f"an index is out of range for axis {axis} of {x.type}")
    out_shape = shape[:axis] + tuple(np.shape(indices)) + shape[axis + 1 :]
    if flat == list(range(shape[axis])):
        picked = x
    elif len(flat) == 1 or flat == list(range(flat[0], flat[0] + len(flat))):
        picked = _slice_of(imp, x, [flat[0]], [flat[0] + len(flat)], [axis], [1])
    else:
        picked = imp.emit(ai.GatherOp, x, axis=axis, indices=flat)
    return [_reshape_to(imp, picked, out_shape)]


@converter("Mod", attrs=("fmod",))
def _mod(imp: Importer, node: Node) -> list[SSAValue]:
    """Integer remainders (ai.mod); float ones are refused."""
    a, b = imp.input(node, 0), imp.input(node, 1)
    fmod = bool(node.attrs.get("fmod", 0))
    if dtype_of(a) in ("i64", "i32"):
        return [imp.emit(ai.ModOp, a, b, fmod=fmod)]
    raise imp.error(f"Mod of {dtype_of(a)} values is not supported (integers only)", "dtype")


@converter("CumSum", attrs=("exclusive", "reverse"))
def _cumsum(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.cumsum along the constant axis input (position ids from a mask)."""
    x = imp.input(node, 0)
    axis = _constant_ints(imp, node, 1, "input 'axis'")
    if axis is None or len(axis) != 1:
        raise imp.error("input 'axis' must be one integer")
    attrs = {k: bool(node.attrs.get(k, 0)) for k in ("exclusive", "reverse")}
    axis = _normalised(imp, axis, len(shape_of(x)))
    return [imp.emit(ai.CumSumOp, x, axis=axis[0], **attrs)]


@converter("Expand")
def _expand(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.expand to the broadcast of x's shape and the constant shape input (a GQA K/V
    head repeat, a mask over the batch)."""
    x = imp.input(node, 0)
    target = _constant_ints(imp, node, 1, "input 'shape'")
    if target is None:
        raise imp.error("input 'shape' is required")
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(shape_of(x), tuple(target)))
    except ValueError:
        raise imp.error(f"{x.type} does not broadcast to {_dims_text(target)}") from None
    return [x if shape == shape_of(x) else imp.emit(ai.ExpandOp, x, shape=shape)]


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _arg_reduce(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    op = ai.ArgMaxOp if node.op_type == "ArgMax" else ai.ArgMinOp
    axis = _normalised(imp, [int(node.attrs.get("axis", 0))], len(shape_of(x)))[0]
    flags = {k: bool(node.attrs.get(k, d)) for k, d in (("keepdims", 1), ("select_last_index", 0))}
    return [imp.emit(op, x, axis=axis, **flags)]


@converter("Tile")
def _tile(imp: Importer, node: Node) -> list[SSAValue]:
    """``x`` repeated ``repeats[d]`` times along each dim d: each dim split into
    (1, n), expanded to (r, n) and merged again (a reshape, an ai.expand, a reshape)."""
    x = imp.input(node, 0)
    repeats = _constant_ints(imp, node, 1, "input 'repeats'")
    shape = shape_of(x)
    if repeats is None or len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise imp.error(f"input 'repeats' must be {len(shape)} non-negative integers")
    if all(r == 1 for r in repeats):
        return [x]
    split = _reshape_to(imp, x, [d for n in shape for d in (1, n)])
    wide = tuple(d for r, n in zip(repeats, shape, strict=True) for d in (r, n))
    expanded = imp.emit(ai.ExpandOp, split, shape=wide)
    return [_reshape_to(imp, expanded, [r * n for r, n in zip(repeats, shape, strict=True)])]


def _pick(imp: Importer, x: SSAValue, axis: int, indices: Sequence[int]) -> SSAValue:
    """The slices ``indices`` of ``axis`` (in [0, dim)): x itself, a slice or ai.gather."""
    flat = [int(i) for i in indices]
    if flat == list(range(shape_of(x)[axis])):
        return x
    if flat == list(range(flat[0], flat[0] + len(flat))):
        return _slice_of(imp, x, [flat[0]], [flat[0] + len(flat)], [axis], [1])
    return imp.emit(ai.GatherOp, x, axis=axis, indices=flat)


@converter("DepthToSpace", "SpaceToDepth", attrs=("blocksize", "mode"))
def _depth_space(imp: Importer, node: Node) -> list[SSAValue]:
    """A reshape, a transpose and a reshape (DCR or CRD order of the channel blocks)."""
    x = imp.input(node, 0)
    if len(shape_of(x)) != 4:
        raise imp.error(f"input must be N x C x H x W, got {x.type}")
    n, c, h, w = shape_of(x)
    if "blocksize" not in node.attrs:
        raise imp.error("attribute 'blocksize' is required")
    b = int(node.attrs["blocksize"])
    mode = node.attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise imp.error(f"mode '{mode}' is not DCR or CRD")
    if node.op_type == "SpaceToDepth":
        if b <= 0 or h % b or w % b:
            raise imp.error(f"blocksize {b} does not divide the spatial dims {h}x{w}")
        blocks = _reshape_to(imp, x, (n, c, h // b, b, w // b, b))
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
        moved = imp.emit(ai.TransposeOp, blocks, perm=perm)
        return [_reshape_to(imp, moved, (n, c * b * b, h // b, w // b))]
    if b <= 0 or c % (b * b):
        raise imp.error(f"blocksize {b} squared does not divide the {c} channels")
    depth = c // (b * b)
    if mode == "DCR":
        blocks = _reshape_to(imp, x, (n, b, b, depth, h, w))
        perm = (0, 3, 4, 1, 5, 2)
    else:
        blocks = _reshape_to(imp, x, (n, depth, b, b, h, w))
        perm = (0, 1, 4, 2, 5, 3)
    moved = imp.emit(ai.TransposeOp, blocks, perm=perm)
    return [_reshape_to(imp, moved, (n, depth, h * b, w * b))]


@converter("Trilu", attrs=("upper",))
def _trilu(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.where of a constant triangular mask over the last two dims (a constant input is
    evaluated at import instead)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) < 2:
        raise imp.error(f"input must have at least 2 dims, got {x.type}")
    k = _constant_ints(imp, node, 1, "input 'k'")
    offset = k[0] if k else 0
    rows, cols = shape[-2:]
    upper = bool(node.attrs.get("upper", 1))
    mask = (
        np.triu(np.ones((rows, cols)), offset) if upper else np.tril(np.ones((rows, cols)), offset)
    )
    if mask.all():
        return [x]
    zero = imp.scalar(0.0, x)
    return [imp.emit(ai.WhereOp, imp.constant(mask, dtype_of(x)), x, zero)]


@converter("Pad", attrs=("mode", "pads", "value"))
def _pad(imp: Importer, node: Node) -> list[SSAValue]:
    """Per padded axis: constant mode concatenates blocks of the value (negative pads
    slice); edge, reflect and wrap are one ai.gather of the indices they repeat."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    rank = len(shape)
    pads = node.attrs.get("pads")
    pads = (
        [int(p) for p in pads] if pads is not None else _constant_ints(imp, node, 1, "input 'pads'")
    )
    if pads is None:
        raise imp.error("the pads are required")
    axes = _constant_ints(imp, node, 3, "input 'axes'") if imp.opset >= 18 else None
    axes = _normalised(imp, axes if axes is not None else range(rank), rank)
    if len(pads) != 2 * len(axes):
        raise imp.error(f"{len(pads)} pads for {len(axes)} axes (two per axis)")
    mode = node.attrs.get("mode", "constant")
    value: float | SSAValue = float(node.attrs.get("value", 0.0))
    known = imp.array(node, 2)
    if imp.optional_input_name(node, 2) is not None:
        if known is not None:
            value = float(np.asarray(known).reshape(-1)[0]) if known.size else 0.0
        elif mode == "constant":  # computed at run time: broadcast into the pad blocks
            value = _reshape_to(imp, imp.input(node, 2), ())
    y = x
    for axis, begin, end in zip(axes, pads[: len(axes)], pads[len(axes) :], strict=True):
        if begin or end:
            y = _pad_axis(imp, y, axis, begin, end, mode, value)
    return [y]


@converter("CenterCropPad", attrs=("axes",))
def _center_crop_pad(imp: Importer, node: Node) -> list[SSAValue]:
    """Each axis cropped (a slice) or zero-padded (concatenated zero blocks) to the
    constant shape, centred (the odd element at the end)."""
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    target = _constant_ints(imp, node, 1, "input 'shape'")
    axes = _normalised(imp, [int(a) for a in node.attrs.get("axes", range(rank))], rank)
    if target is None or len(target) != len(axes) or min(target) < 1:
        raise imp.error(f"input 'shape' must be {len(axes)} positive sizes")
    y = x
    for axis, size in zip(axes, target, strict=True):
        dim = shape_of(y)[axis]
        if size < dim:
            start = (dim - size) // 2
            y = _slice_of(imp, y, [start], [start + size], [axis], [1])
        elif size > dim:
            begin = (size - dim) // 2
            y = _pad_axis(imp, y, axis, begin, size - dim - begin, "constant", 0.0)
    return [y]


def _pad_axis(
    imp: Importer,
    x: SSAValue,
    axis: int,
    begin: int,
    end: int,
    mode: str,
    value: float | SSAValue,
) -> SSAValue:
    """``x`` padded along ``axis`` (``value``: the constant, or a rank-0 value computed
    at run time, of constant mode)."""
    dim = shape_of(x)[axis]
    if mode == "constant":
        kept = _slice_of(imp, x, [max(-begin, 0)], [dim - max(-end, 0)], [axis], [1])
        parts = []
        for count in (begin, None, end):
            if count is None:
                parts.append(kept)
            elif count > 0:
                block = list(shape_of(x))
                block[axis] = count
                parts.append(
                    imp.constant(np.full(block, value), dtype_of(x))
                    if isinstance(value, float)
                    else imp.emit(ai.ExpandOp, value, shape=block)
                )
        return parts[0] if len(parts) == 1 else imp.emit(ai.ConcatOp, *parts, axis=axis)
    if min(begin, end) < 0:
        raise imp.error(f"negative pads in mode '{mode}' are not supported", "attribute")
    positions = range(-begin, dim + end)
    if mode == "edge":
        indices = [min(max(i, 0), dim - 1) for i in positions]
    elif mode == "wrap":
        indices = [i % dim for i in positions]
    elif mode == "reflect":
        if dim < 2 or max(begin, end) >= dim:
            raise imp.error(f"reflect pads of {max(begin, end)} need a dim above it, got {dim}")
        indices = [-i if i < 0 else 2 * (dim - 1) - i if i >= dim else i for i in positions]
    else:
        raise imp.error(f"mode '{mode}' is not supported", "attribute")
    return _pick(imp, x, axis, indices)


# ------------------------------------------------------------------ reductions, pooling

_REDUCTIONS = {
    "ReduceMean": ai.ReduceMeanOp,
    "ReduceSum": ai.ReduceSumOp,
    "ReduceMax": ai.ReduceMaxOp,
}


@converter(*_REDUCTIONS, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def _reduce(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    axes = _axes(imp, node, 1) or []
    keep = bool(node.attrs.get("keepdims", 1))
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return [x]
    axes = sorted(_normalised(imp, axes, len(shape_of(x)))) if axes else []
    return [imp.emit(_REDUCTIONS[node.op_type], x, axes=axes, keepdims=keep)]


def _reduction_axes(imp: Importer, node: Node, x: SSAValue) -> list[int] | None:
    """The sorted axes a Reduce* node reduces (all of them: []), or None when it is the
    identity (no axes and ``noop_with_empty_axes``)."""
    axes = _axes(imp, node, 1) or []
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return None
    return sorted(_normalised(imp, axes, len(shape_of(x)))) if axes else []


def _reduce_with(
    imp: Importer, op: type[ai.AiOp], x: SSAValue, axes: Sequence[int], keep: bool
) -> SSAValue:
    return imp.emit(op, x, axes=axes, keepdims=keep)


def _log_sum_exp(imp: Importer, x: SSAValue, axes: Sequence[int], keep: bool) -> SSAValue:
    """log(sum(exp(x - m))) + m with m the maximum clipped to the type's finite range: no
    overflow, and an infinite maximum still gives +-inf (not inf - inf = NaN)."""
    m = _finite_max(imp, x, axes)
    shifted = imp.emit(ai.SubOp, x, m)
    total = _reduce_with(imp, ai.ReduceSumOp, imp.emit(ai.ExpOp, shifted), axes, True)
    y = imp.emit(ai.AddOp, imp.emit(ai.LogOp, total), m)
    return y if keep else _reshape_to(imp, y, _reduced_shape(shape_of(x), axes))


def _finite_max(imp: Importer, x: SSAValue, axes: Sequence[int]) -> SSAValue:
    """The maximum over ``axes`` (kept as size-1 dims), clipped to the largest finite
    value of x's element type."""
    largest = float(np.finfo(np.float16).max) if dtype_of(x) == "f16" else 3.3e38
    m = _reduce_with(imp, ai.ReduceMaxOp, x, axes, True)
    return imp.emit(ai.ClipOp, m, min=-largest, max=largest)


def _product(imp: Importer, x: SSAValue, axes: Sequence[int], keep: bool) -> SSAValue:
    """The product over ``axes`` (all when empty) as ``ai.mul`` of slices: each axis
    halved until it has one element, its first half times its second (an odd middle
    element carried over), so ceil(log2 n) multiplies per axis of n, and every target
    computes it with the ops it has (pairwise, as accurate as a sequential product)."""
    shape = shape_of(x)
    y = x
    for axis in axes or range(len(shape)):
        while (size := shape_of(y)[axis]) > 1:
            half = size // 2
            first, second = (
                _slice_of(imp, y, [start], [start + half], [axis], [1]) for start in (0, half)
            )
            product = imp.emit(ai.MulOp, first, second)
            if size % 2:  # the last element, not multiplied yet, joins the next round
                last = _slice_of(imp, y, [size - 1], [size], [axis], [1])
                product = imp.emit(ai.ConcatOp, product, last, axis=axis)
            y = product
    return y if keep else _reshape_to(imp, y, _reduced_shape(shape, axes))


def _reduced_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    every = set(axes) if axes else set(range(len(shape)))
    return tuple(d for i, d in enumerate(shape) if i not in every)


def _square(imp: Importer, x: SSAValue) -> SSAValue:
    return imp.emit(ai.MulOp, x, x)


@converter(
    "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", attrs=("axes", "keepdims", "noop_with_empty_axes"),
)  # fmt: skip
def _composite_reduce(imp: Importer, node: Node) -> list[SSAValue]:
    """The other reductions, written with ReduceMax/ReduceSum and elementwise ops:
    min = -max(-x), L1 = sum |x|, L2 = sqrt(sum x^2), log-sum and a stable log-sum-exp;
    the product as halves multiplied pairwise (``_product``).
    With no axes and ``noop_with_empty_axes`` each is its elementwise part alone, as the
    ONNX reference computes it."""
    x = imp.input(node, 0)
    keep = bool(node.attrs.get("keepdims", 1))
    axes = _reduction_axes(imp, node, x)
    kind = node.op_type
    if axes is None:
        elementwise: dict[str, Callable[[], SSAValue]] = {
            "ReduceMin": lambda: x,
            "ReduceL1": lambda: imp.emit(ai.AbsOp, x),
            "ReduceL2": lambda: imp.emit(ai.AbsOp, x),
            "ReduceSumSquare": lambda: _square(imp, x),
            "ReduceLogSum": lambda: imp.emit(ai.LogOp, x),
            "ReduceLogSumExp": lambda: x,
            "ReduceProd": lambda: x,
        }
        return [elementwise[kind]()]
    if kind == "ReduceProd":
        return [_product(imp, x, axes, keep)]
    if kind == "ReduceMin":
        largest = _reduce_with(imp, ai.ReduceMaxOp, imp.emit(ai.NegOp, x), axes, keep)
        return [imp.emit(ai.NegOp, largest)]
    if kind == "ReduceLogSumExp":
        return [_log_sum_exp(imp, x, axes, keep)]
    summand = {
        "ReduceL1": lambda: imp.emit(ai.AbsOp, x),
        "ReduceL2": lambda: _square(imp, x),
        "ReduceSumSquare": lambda: _square(imp, x),
        "ReduceLogSum": lambda: x,
    }[kind]()
    total = _reduce_with(imp, ai.ReduceSumOp, summand, axes, keep)
    if kind == "ReduceL2":
        return [imp.emit(ai.SqrtOp, total)]
    if kind == "ReduceLogSum":
        return [imp.emit(ai.LogOp, total)]
    return [total]


@converter("LogSoftmax", attrs=("axis",))
def _log_softmax(imp: Importer, node: Node) -> list[SSAValue]:
    """x - m - log(sum(exp(x - m))) over the axis (m its clipped maximum): no overflow,
    and no log of an underflowed probability."""
    x = imp.input(node, 0)
    return [log_softmax(imp, x, _softmax_axis(imp, node, x))]


def log_softmax(imp: Importer, x: SSAValue, axis: int) -> SSAValue:
    """``x - m - log(sum(exp(x - m)))`` over ``axis`` (in [0, rank); m the clipped
    maximum), as ai ops: LogSoftmax, and SoftmaxCrossEntropyLoss's log-probabilities."""
    shifted = imp.emit(ai.SubOp, x, _finite_max(imp, x, [axis]))
    total = _reduce_with(imp, ai.ReduceSumOp, imp.emit(ai.ExpOp, shifted), [axis], True)
    return imp.emit(ai.SubOp, shifted, imp.emit(ai.LogOp, total))


@converter("LpNormalization", attrs=("axis", "p"))
def _lp_normalization(imp: Importer, node: Node) -> list[SSAValue]:
    """x / ||x||_p along the axis, p 1 or 2."""
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    axis = int(node.attrs.get("axis", -1))
    p = int(node.attrs.get("p", 2))
    if not -rank <= axis < rank:
        raise imp.error(f"axis {axis} is out of range for rank {rank}")
    if p not in (1, 2):
        raise imp.error(f"p={p} is not supported (1 or 2)", "attribute")
    summand = imp.emit(ai.AbsOp, x) if p == 1 else _square(imp, x)
    norm = _reduce_with(imp, ai.ReduceSumOp, summand, [axis % rank], True)
    norm = norm if p == 1 else imp.emit(ai.SqrtOp, norm)
    # ONNX gives 0 for a zero vector: divided by the smallest positive value instead
    # of 0/0; any other norm is at least that value, and NaN propagates
    divisor = imp.emit(ai.MaximumOp, norm, imp.scalar(_SMALLEST_SUBNORMAL[dtype_of(x)], norm))
    return [imp.emit(ai.DivOp, x, divisor)]


_SMALLEST_SUBNORMAL = {"f32": 2.0**-149, "f16": 2.0**-24, "bf16": 2.0**-133}


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    rank = len(shape_of(x))
    if rank < 3:
        raise imp.error(f"input must be N x C x spatial dims, got {x.type}")
    op = ai.ReduceMeanOp if node.op_type == "GlobalAveragePool" else ai.ReduceMaxOp
    return [imp.emit(op, x, axes=tuple(range(2, rank)), keepdims=True)]


_POOL_ATTRS = (
    "auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
    "storage_order", "strides",
)  # fmt: skip


@converter("MaxPool", "AveragePool", "LpPool", attrs=(*_POOL_ATTRS, "p"))
def _pool(imp: Importer, node: Node) -> list[SSAValue]:
    """2-D pooling, 1-D pooling as 2-D pooling of a height-1 view, and 3-D pooling as
    two 2-D ones (``_pool_3d``)."""
    x = imp.input(node, 0)
    shape = shape_of(x)
    if len(shape) not in (3, 4, 5):
        raise imp.error(
            f"only 1-D, 2-D and 3-D pooling are supported (a 3-D to 5-D input), got {x.type}",
            "attribute",
        )
    if len(node.proto.output) > 1 and node.proto.output[1]:
        raise imp.error("the Indices output is not supported", "attribute")
    if node.attrs.get("storage_order", 0):
        raise imp.error("storage_order=1 is not supported", "attribute")
    if len(shape) == 5:
        return [_pool_3d(imp, node, x)]
    flat = len(shape) == 3
    rows = _reshape_to(imp, x, (shape[0], shape[1], 1, shape[2])) if flat else x
    attrs = _pool_attributes(imp, node, shape_of(rows), flat)
    if node.op_type == "LpPool":
        y = _lp_pool(imp, node, rows, lambda v: _pool_2d(imp, node, v, attrs), attrs)
    else:
        y = _pool_2d(imp, node, rows, attrs)
    return [_reshape_to(imp, y, shape_of(y)[:2] + shape_of(y)[3:]) if flat else y]


def _pool_2d(imp: Importer, node: Node, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    """ai.max_pool2d, or ai.avg_pool2d (LpPool's: counting the padding)."""
    if node.op_type == "MaxPool":
        return imp.emit(ai.MaxPool2DOp, x, **attrs)
    include = node.op_type == "LpPool" or bool(node.attrs.get("count_include_pad", 0))
    return imp.emit(ai.AvgPool2DOp, x, count_include_pad=include, **attrs)


def _pool_3d(imp: Importer, node: Node, x: SSAValue) -> SSAValue:
    """3-D pooling as two 2-D ones: a window is a box, so its maximum is the maximum over
    depth of the (H, W) maxima, and its average (ONNX's counts, of the input or the
    padded input, are per dim, so a box's count is their product) the average over depth
    of the (H, W) averages. First (H, W) of the (N, C * D, H, W) view, then depth of the
    (N, C, D, OH * OW) view with a (kd, 1) window."""
    n, c, d, h, w = shape_of(x)
    kernel, strides, dilations, pads = (
        node.attrs.get(name) for name in ("kernel_shape", "strides", "dilations", "pads")
    )
    if kernel is None or len(kernel) != 3:
        raise imp.error(f"kernel_shape must have 3 values, got {kernel}", "attribute")
    strides, dilations = (list(v) if v is not None else [1, 1, 1] for v in (strides, dilations))
    pads = list(pads) if pads is not None else None
    if pads is not None and len(pads) != 6:
        raise imp.error(f"pads must have 6 values, got {pads}")

    def view(axes: tuple[int, ...], unit: bool) -> Node:
        pick = lambda v: [*(v[a] for a in axes), *([1] if unit else [])]  # noqa: E731
        attrs = {**node.attrs, "kernel_shape": pick(kernel), "strides": pick(strides),
                 "dilations": pick(dilations)}  # fmt: skip
        if pads is not None:
            begin, end = pads[:3], pads[3:]
            attrs["pads"] = [*pick(begin), *pick(end)] if not unit else [begin[0], 0, end[0], 0]
        return Node(node.proto, node.index, attrs)

    def pooled(v: SSAValue) -> SSAValue:
        planes = _reshape_to(imp, v, (n, c * d, h, w))
        plane = view((1, 2), False)
        y = _pool_2d(imp, plane, planes, _pool_attributes(imp, plane, (n, c * d, h, w), False))
        oh, ow = shape_of(y)[2:]
        depth = _reshape_to(imp, y, (n, c, d, oh * ow))
        column = view((0,), True)
        attrs = _pool_attributes(imp, column, shape_of(depth), False)
        z = _pool_2d(imp, column, depth, attrs)
        return _reshape_to(imp, z, (n, c, shape_of(z)[2], oh, ow))

    if node.op_type != "LpPool":
        return pooled(x)
    return _lp_pool(
        imp, node, x, pooled, {"kernel": kernel, "ceil_mode": node.attrs.get("ceil_mode", 0)}
    )


def _pool_attributes(
    imp: Importer, node: Node, shape: tuple[int, ...], flat: bool
) -> dict[str, Any]:
    """ai.max_pool2d/avg_pool2d attributes; a 1-D pool's with a height-1 window."""
    if "kernel_shape" not in node.attrs:
        raise imp.error("attribute 'kernel_shape' is required")
    dims = 1 if flat else 2
    kernel = tuple(int(k) for k in node.attrs["kernel_shape"])
    strides = tuple(int(v) for v in node.attrs.get("strides", (1,) * dims))
    dilations = tuple(int(v) for v in node.attrs.get("dilations", (1,) * dims))
    if len(kernel) != dims:
        raise imp.error(f"kernel_shape must have {dims} values, got {list(kernel)}", "attribute")
    view = node
    if flat:
        kernel, strides, dilations = ((1, *v) for v in (kernel, strides, dilations))
        view = _height_one(imp, node)
    return {
        "kernel": kernel,
        "strides": strides,
        "padding": _conv_padding(imp, view, shape[2:], kernel, strides, dilations),
        "dilations": dilations,
        "ceil_mode": bool(node.attrs.get("ceil_mode", 0)),
    }


def _lp_pool(
    imp: Importer,
    node: Node,
    x: SSAValue,
    average: Callable[[SSAValue], SSAValue],
    attrs: dict[str, Any],
) -> SSAValue:
    """(sum of |x|^p over the window)^(1/p): the window's mean of |x|^p (``average``,
    padding counted as zeros) times its size."""
    p = int(node.attrs.get("p", 2))
    if p < 1:
        raise imp.error(f"p={p} must be a positive integer")
    if attrs["ceil_mode"]:  # a window past the padding: its mean is not over the kernel
        raise imp.error("LpPool with ceil_mode=1 is not supported", "attribute")
    powered = imp.emit(ai.PowOp, imp.emit(ai.AbsOp, x), imp.scalar(p, x))
    mean = average(powered)
    total = imp.emit(ai.MulOp, mean, imp.scalar(math.prod(attrs["kernel"]), mean))
    return imp.emit(ai.PowOp, total, imp.scalar(1.0 / p, total))


# ------------------------------------------------------------------ entry points


def load_model(model_or_path: onnx.ModelProto | str | Path) -> tuple[onnx.ModelProto, str]:
    """(model, source name): a ModelProto is used as is, a path is read."""
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path, "<onnx>"
    if not isinstance(model_or_path, str | Path) or "\n" in str(model_or_path):
        what = "text" if isinstance(model_or_path, str) else type(model_or_path).__name__
        raise FusecError(f"expected an onnx.ModelProto or the path of an .onnx file, got {what}")
    path = str(model_or_path)
    if Path(path).is_dir():
        raise FusecError("is a directory, not an ONNX model file", SourceLocation(path, 0, 0))
    if not Path(path).is_file():
        raise FusecError("no such file", SourceLocation(path, 0, 0))
    try:
        return onnx.load(path), path
    except Exception as err:  # protobuf DecodeError, OSError, external data errors
        raise FusecError(f"cannot read the ONNX model: {err}", SourceLocation(path, 0, 0)) from None


@dataclass
class ImportResult:
    """An imported model: the verified module, and what the importer evaluated."""

    module: ModuleOp
    #: op type -> number of nodes evaluated at import (constant folding)
    evaluated: Counter[str]
    #: the nodes of the model
    nodes: int
    #: rewrite name -> count: what ``recognize-patterns`` makes of the module (filled
    #: by ``fusec.api.import_onnx``; the front end does not run passes)
    recognized: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        """One line: how many nodes were folded at import, by operator."""
        total = sum(self.evaluated.values())
        if not total:
            return f"{self.nodes} nodes, none evaluated at import"
        by_op = ", ".join(f"{op} {n}" for op, n in sorted(self.evaluated.items()))
        return f"{self.nodes} nodes, {total} evaluated at import (constant folding): {by_op}"


def import_onnx(
    model_or_path: onnx.ModelProto | str | Path,
    *,
    weights_as_args: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    source: str | None = None,
) -> ImportResult:
    """Import an ONNX model (a ModelProto or a path): the module and what was folded.

    ``input_shapes`` fixes the shapes of inputs by name (needed for dynamic
    dimensions such as a batch size). ``source`` names the model in locations
    (default: its path, or ``<onnx>`` for a ModelProto): a model read once and
    imported again per input shape (``onnx_dynamic``) keeps its file's name.
    """
    model, loaded_from = load_model(model_or_path)
    source = loaded_from if source is None else source
    if (where := _non_text_field(model)) is not None:
        raise FusecError(
            f"the model's {where} is not UTF-8 text (a damaged or hostile file)",
            SourceLocation(source, 0, 0),
        )
    importer = Importer(model, source, weights_as_args, input_shapes)
    module = importer.run()
    return ImportResult(module, importer.evaluated, len(model.graph.node))


def _non_text_field(message: Any, path: str = "") -> str | None:
    """The path of the first string field of ``message`` (recursively) that is not
    valid UTF-8, else None. ONNX's .proto is proto2, whose strings protobuf does not
    validate: Python's upb protobuf hands such a value over as ``bytes``, which no
    name-handling code expects."""
    for field_desc, value in message.ListFields():
        name = f"{path}.{field_desc.name}" if path else field_desc.name
        repeated = (  # protobuf 7 has only is_repeated, older ones only label
            field_desc.is_repeated
            if hasattr(field_desc, "is_repeated")
            else field_desc.label == field_desc.LABEL_REPEATED
        )
        values = list(value) if repeated else [value]
        if field_desc.type == field_desc.TYPE_STRING:
            for i, item in enumerate(values):
                if not isinstance(item, str):
                    return f"{name}[{i}]" if repeated else name
        elif field_desc.type == field_desc.TYPE_MESSAGE:
            for i, item in enumerate(values):
                if found := _non_text_field(item, f"{name}[{i}]" if repeated else name):
                    return found
    return None


def import_model(
    model_or_path: onnx.ModelProto | str | Path,
    *,
    weights_as_args: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> ModuleOp:
    """Import an ONNX model (a ModelProto or a path) as a verified ai module."""
    return import_onnx(
        model_or_path, weights_as_args=weights_as_args, input_shapes=input_shapes
    ).module


# Converters kept in modules of their own register on import (after everything above).
from fusec.frontend import (  # noqa: E402, F401
    onnx_attention,
    onnx_conv_transpose,
    onnx_dft,
    onnx_einsum,
    onnx_grid_sample,
    onnx_indexing,
    onnx_linear_attention,
    onnx_llm,
    onnx_loss,
    onnx_normalize,
    onnx_quant,
    onnx_resize,
)
