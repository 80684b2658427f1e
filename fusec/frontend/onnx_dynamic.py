"""ONNX models with symbolic (dynamic) input dimensions: read once, imported per shape.

``fusec.from_onnx`` returns a ``DynamicModel`` instead of a module when a graph
input has a dimension without a fixed size (an ONNX ``dim_param`` such as
``"batch"``, or no size at all) that ``input_shapes`` does not fix. It keeps the
ONNX model (the ``ModelProto``, read once) and its symbolic signature: each
argument's dimensions as sizes and names, where two dimensions with the same
name are one size. ``specialize`` imports the model for one set of concrete
input shapes; ``fusec.runtime.specialize`` compiles and caches one module per
set it is called with.

**Why the model is imported again per shape, not once with ``?`` dimensions.**
The importer evaluates every node whose inputs are constants, and an input's
*shape* is a constant once the input's shape is static: the Shape -> Gather ->
Concat -> Reshape chains that exporters write for a dynamic batch or sequence
fold to plain ``ai.reshape`` ops, and masks or position ids built from
``Range``/``Where`` over a length fold to constants. Every op's shape function,
every pass and both code generators plan with static shapes. Carrying ``?``
through all of them is a far larger change, and the kernels would lose what
static shapes buy (tiles, vector widths and loop bounds chosen per shape). Importing
per shape reuses all of it unchanged, and the generated kernels stay static, so
the kernel cache (keyed on their text) serves a shape seen in an earlier process
without compiling. The cost is one import and one pipeline run per new shape,
which the bound on specializations limits.

The symbolic signature is shown as IR (``module``, what ``fusec import`` prints):
a body-less ``func.func`` whose argument types have ``?`` for each dynamic size,
with ``ai.dims`` naming every argument's dimensions (``"?"``: an unnamed one, tied
to no other) and ``ai.result_dims`` the graph outputs' as the model declares them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    Attribute,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnrankedTensorType,
    i64,
)
from xdsl.ir import Region

from fusec.dialect.shapes import shape_problem
from fusec.errors import FusecError, SourceLocation
from fusec.ir.diagnostics import file_location
from fusec.ir.dtypes import element_type

#: The name of a dynamic dimension that has none in the model (tied to no other).
UNNAMED = "?"

#: A dimension: its size (static) or its name (dynamic).
Dim = int | str


@dataclass(frozen=True)
class SymbolicTensor:
    """One graph input or output of a dynamic model: its ONNX name, element type
    (``f32``, ``i64``, ...) and dimensions; ``dims`` is None when the model gives no
    shape (any rank)."""

    name: str
    dtype: str
    dims: tuple[Dim, ...] | None

    def describe(self) -> str:
        """``x: batch x 16 (f32)``."""
        if self.dims is None:
            return f"{self.name}: any shape ({self.dtype})"
        return f"{self.name}: {' x '.join(str(d) for d in self.dims) or 'scalar'} ({self.dtype})"

    def tensor_type(self) -> Attribute:
        """The IR type: ``tensor<?x16xf32>`` (``tensor<*xf32>`` for an unknown rank)."""
        element = element_type(self.dtype).xdsl
        if self.dims is None:
            return UnrankedTensorType(element)
        sizes = [d if isinstance(d, int) else DYNAMIC_INDEX for d in self.dims]
        return TensorType(element, sizes)

    def dims_attr(self) -> Attribute:
        if self.dims is None:
            return StringAttr("*")
        return ArrayAttr(
            [IntegerAttr(d, i64) if isinstance(d, int) else StringAttr(d) for d in self.dims]
        )


class DynamicModel:
    """An ONNX model with symbolic input dimensions (see the module docstring).

    ``inputs`` are the function's data arguments in order (graph inputs that are
    not initializers); ``weights`` the float initializers that follow them as
    arguments of static shape with ``weights_as_args`` (else none). ``fixed`` holds
    the ``input_shapes`` the model was read with: every specialization keeps them.
    """

    def __init__(
        self,
        model: Any,
        source: str,
        *,
        weights_as_args: bool,
        inputs: Sequence[SymbolicTensor],
        weights: Sequence[SymbolicTensor] = (),
        outputs: Sequence[SymbolicTensor],
        fixed: Mapping[str, tuple[int, ...]],
        name: str,
    ) -> None:
        self.model = model
        self.source = source
        self.weights_as_args = weights_as_args
        self.inputs = tuple(inputs)
        self.weights = tuple(weights)
        self.outputs = tuple(outputs)
        self.fixed = dict(fixed)
        self.name = name
        #: What the CLI's ``import`` reports for a static import; nothing is folded here.
        self.evaluated: Counter[str] = Counter()
        self.recognized: Counter[str] = Counter()

    # ------------------------------------------------------------ the signature
    @property
    def symbols(self) -> list[str]:
        """The named dynamic dimensions, in the order the inputs first use them."""
        seen: dict[str, None] = {}
        for tensor in self.inputs:
            for dim in tensor.dims or ():
                if isinstance(dim, str) and dim != UNNAMED:
                    seen.setdefault(dim, None)
        return list(seen)

    @property
    def module(self) -> ModuleOp:
        """The symbolic signature as IR: a declaration (the body is imported per shape)."""
        arguments = self.inputs + self.weights
        fn = func.FuncOp(
            self.name,
            ([t.tensor_type() for t in arguments], [t.tensor_type() for t in self.outputs]),
            Region(),
            visibility="private",
        )
        fn.attributes["ai.dims"] = DictionaryAttr({t.name: t.dims_attr() for t in arguments})
        fn.attributes["ai.result_dims"] = DictionaryAttr(
            {t.name: t.dims_attr() for t in self.outputs}
        )
        module = ModuleOp([fn])
        module.attributes["ai.onnx_source"] = StringAttr(self.source)
        where = file_location(SourceLocation(self.source, 0, 0))
        fn.location = module.location = where
        return module

    def summary(self) -> str:
        """One line: the dynamic dimensions, where they are used, what that means."""
        return (
            f"{self.dynamic_dims()}: the body is imported for each set of input shapes a "
            "compiled module is called with (--input-shape shows one)"
        )

    def dynamic_dims(self) -> str:
        """``dynamic dimensions 'batch' (x[0], mask[0]), 'seq' (x[1]), unnamed ones (y[0])``
        (an unnamed dimension is tied to no other)."""
        uses: dict[str, list[str]] = {}
        for tensor in self.inputs:
            if tensor.dims is None:
                uses.setdefault(f"every dimension of '{tensor.name}'", [])
            for axis, dim in enumerate(tensor.dims or ()):
                if isinstance(dim, str):
                    label = f"'{dim}'" if dim != UNNAMED else "unnamed ones"
                    uses.setdefault(label, []).append(f"{tensor.name}[{axis}]")
        listed = ", ".join(f"{k} ({', '.join(v)})" if v else k for k, v in uses.items())
        return f"dynamic dimensions {listed}"

    @property
    def argument_names(self) -> list[str]:
        """The inputs' names as the IR's arguments have them (``fusec run --inputs`` keys)."""
        from fusec.frontend.onnx_core import value_name

        return [value_name(t.name) for t in self.inputs + self.weights]

    def __str__(self) -> str:
        return str(self.module) + "\n"

    def __repr__(self) -> str:
        inputs = "; ".join(t.describe() for t in self.inputs)
        return f"DynamicModel(@{self.name}: {inputs})"

    # ------------------------------------------------------------ binding
    def bind(self, shapes: Sequence[tuple[int, ...]]) -> tuple[dict[str, int], dict[str, tuple]]:
        """The sizes of the named dimensions and each input's shape, for the argument
        shapes of one call; a FusecError names the first argument that does not fit."""
        arguments = self.inputs + self.weights
        if len(shapes) != len(arguments):
            names = ", ".join(t.name for t in arguments)
            raise FusecError(
                f"@{self.name} takes {len(arguments)} arguments ({names}), got {len(shapes)}"
            )
        sizes: dict[str, int] = {}
        where: dict[str, str] = {}
        by_name: dict[str, tuple[int, ...]] = {}
        for index, (tensor, shape) in enumerate(zip(arguments, shapes, strict=True)):
            label = f"@{self.name}: argument #{index} '{tensor.name}'"
            if (problem := shape_problem(shape)) is not None:
                raise FusecError(f"{label} of shape {_text(shape)} {problem}")
            for axis, dim in enumerate(_declared(tensor, shape, label)):
                size = shape[axis]
                if isinstance(dim, int):
                    if size != dim:
                        raise FusecError(
                            f"{label} has shape {_text(shape)}: size {size} at axis {axis}, "
                            f"expected {dim} ({tensor.describe()})"
                        )
                elif dim != UNNAMED:
                    if dim in sizes and sizes[dim] != size:
                        raise FusecError(
                            f"{label} has shape {_text(shape)}: dimension '{dim}' is {size} "
                            f"at axis {axis} but {sizes[dim]} in {where[dim]}"
                        )
                    sizes.setdefault(dim, size)
                    where.setdefault(dim, f"'{tensor.name}' (axis {axis})")
            if index < len(self.inputs):
                by_name[tensor.name] = tuple(shape)
        return sizes, by_name

    def specialize(self, input_shapes: Mapping[str, Sequence[int]]) -> ModuleOp:
        """The model imported for these concrete input shapes (by input name)."""
        from fusec.frontend.onnx_import import import_onnx

        shapes = {**self.fixed, **{k: tuple(v) for k, v in input_shapes.items()}}
        result = import_onnx(
            self.model,
            weights_as_args=self.weights_as_args,
            input_shapes=shapes,
            source=self.source,
        )
        return result.module


def _declared(tensor: SymbolicTensor, shape: tuple[int, ...], label: str) -> tuple[Dim, ...]:
    """The input's declared dims (any of ``shape``'s rank when it has none)."""
    if tensor.dims is None:
        return (UNNAMED,) * len(shape)
    if len(shape) != len(tensor.dims):
        raise FusecError(
            f"{label} has shape {_text(shape)} of rank {len(shape)}, expected rank "
            f"{len(tensor.dims)} ({tensor.describe()})"
        )
    return tensor.dims


def _text(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


# ------------------------------------------------------------------ reading a model


def dynamic_model(
    model_or_path: Any,
    *,
    weights_as_args: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> ReadModel:
    """The model read once: a ``DynamicModel`` when an argument keeps a dynamic
    dimension after ``input_shapes`` (and the dimensions tied to them by name), else
    none, and the shapes to import it with (``input_shapes`` and the inputs whose
    dimensions they fix by name): the caller imports it as usual, and the importer
    reports anything else wrong with it."""
    from fusec.frontend.onnx_import import DATA_TYPES, _non_text_field, function_name, load_model

    model, source = load_model(model_or_path)
    try:
        given: dict[str, tuple[int, ...]] = {
            name: tuple(int(d) for d in shape) for name, shape in (input_shapes or {}).items()
        }
    except (TypeError, ValueError):
        raise FusecError(
            f"input_shapes must map input names to sequences of ints, got {input_shapes!r}",
            SourceLocation(source, 0, 0),
        ) from None
    if _non_text_field(model) is not None:  # the importer says which field
        return ReadModel(model, source, None, given)
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    declared = [_tensor(info) for info in graph.input if info.name not in initializers]
    if any(t is None for t in declared):  # not a tensor: the importer says so
        return ReadModel(model, source, None, given)
    tensors = [t for t in declared if t is not None]
    if set(given) - {t.name for t in tensors}:  # the importer names the unknown ones
        return ReadModel(model, source, None, given)
    tensors = _fix(tensors, given, source)
    tied = {t.name: t.dims for t in tensors if t.dims is not None and _static(t.dims)}
    arguments = [
        t for t in tensors if t.dtype in DATA_TYPES and (t.dims is None or 0 not in t.dims)
    ]
    if len(tied) == len(tensors):
        return ReadModel(model, source, None, {**tied, **given})
    for tensor in tensors:
        if tensor not in arguments:  # folded at import: its shape must be known then
            raise FusecError(
                f"input '{tensor.name}' has dynamic dimensions but is not an argument fusec "
                f"computes ({tensor.describe()}): give its shape (--input-shape "
                f"{tensor.name}=..., or input_shapes= in Python)",
                SourceLocation(source, 0, 0),
            )
    typed = [SymbolicTensor(t.name, DATA_TYPES[t.dtype], t.dims) for t in arguments]
    outputs = [_tensor(info) for info in graph.output]
    results = [
        SymbolicTensor(t.name, DATA_TYPES.get(t.dtype, "f32"), t.dims)
        for t in outputs
        if t is not None and t.dtype in DATA_TYPES
    ]
    dynamic = DynamicModel(
        model,
        source,
        weights_as_args=weights_as_args,
        inputs=typed,
        weights=_weights(graph) if weights_as_args else (),
        outputs=results,
        fixed=given,
        name=function_name(graph.name),
    )
    return ReadModel(model, source, dynamic, given)


def _weights(graph: Any) -> list[SymbolicTensor]:
    """The arguments ``weights_as_args`` adds: the float initializers a node or output
    uses, in the order of the initializers (as the importer adds them)."""
    from fusec.frontend.onnx_core import ELEMENT_TYPES

    used = {n for node in graph.node for n in node.input} | {o.name for o in graph.output}
    return [
        SymbolicTensor(t.name, ELEMENT_TYPES[t.data_type], tuple(int(d) for d in t.dims))
        for t in graph.initializer
        if t.data_type in ELEMENT_TYPES and t.name in used
    ]


@dataclass(frozen=True)
class ReadModel:
    """An ONNX model as ``dynamic_model`` read it."""

    model: Any
    source: str
    #: None when every input's shape is known.
    dynamic: DynamicModel | None
    #: What to import a static model with: the shapes given and those they fix.
    input_shapes: dict[str, tuple[int, ...]]


def _static(dims: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in dims)


@dataclass(frozen=True)
class _Declared:
    """A graph input or output as declared: ONNX element type number and dims."""

    name: str
    dtype: int
    dims: tuple[Dim, ...] | None

    def describe(self) -> str:
        if self.dims is None:
            return "no shape"
        return "x".join(str(d) for d in self.dims) or "scalar"


def _tensor(info: Any) -> Any:
    """A value info's ``_Declared`` (None when it is not a tensor)."""
    if info.type.WhichOneof("value") != "tensor_type":
        return None
    ttype = info.type.tensor_type
    if not ttype.HasField("shape"):
        return _Declared(info.name, ttype.elem_type, None)
    dims: list[Dim] = []
    for dim in ttype.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or UNNAMED)
    return _Declared(info.name, ttype.elem_type, tuple(dims))


def _fix(tensors: list[Any], given: Mapping[str, tuple[int, ...]], source: str) -> list[Any]:
    """The inputs with the shapes ``given`` substituted, and every dimension that shares
    a name with a dimension so fixed set to its size."""
    where = SourceLocation(source, 0, 0)
    sizes: dict[str, int] = {}
    fixed: list[Any] = []
    for tensor in tensors:
        shape = given.get(tensor.name)
        if shape is None:
            fixed.append(tensor)
            continue
        if tensor.dims is not None and len(tensor.dims) != len(shape):
            raise FusecError(
                f"input '{tensor.name}' has rank {len(tensor.dims)}, but the shape given for "
                f"it ({_text(shape)}) has rank {len(shape)}",
                where,
            )
        for axis, dim in enumerate(tensor.dims or ()):
            if isinstance(dim, int) and dim != shape[axis]:
                raise FusecError(
                    f"input '{tensor.name}' has dimension {dim} at axis {axis}, but the shape "
                    f"given for it is {_text(shape)}",
                    where,
                )
            if isinstance(dim, str) and dim != UNNAMED:
                if sizes.setdefault(dim, shape[axis]) != shape[axis]:
                    raise FusecError(
                        f"the shapes given make dimension '{dim}' both {sizes[dim]} and "
                        f"{shape[axis]} (input '{tensor.name}', axis {axis})",
                        where,
                    )
        fixed.append(_Declared(tensor.name, tensor.dtype, tuple(shape)))
    return [_tie(t, sizes) for t in fixed]


def _tie(tensor: Any, sizes: Mapping[str, int]) -> Any:
    """``tensor`` with its dimensions named in ``sizes`` set to those sizes."""
    if tensor.dims is None:
        return tensor
    dims = tuple(sizes.get(d, d) if isinstance(d, str) else d for d in tensor.dims)
    return _Declared(tensor.name, tensor.dtype, dims)
