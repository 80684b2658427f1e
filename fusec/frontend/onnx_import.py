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

This module is the entry point (``import_onnx``, ``import_model``): the ``Importer`` and
what converters share are in ``onnx_core``, the converters in one module per operator
family, each registering its operators when this module imports it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from xdsl.dialects.builtin import (
    ModuleOp,
)

from fusec.errors import FusecError, SourceLocation

# The operator families: importing each registers its converters in ``CONVERTERS``.
from fusec.frontend import (  # noqa: F401
    onnx_attention,
    onnx_conv,
    onnx_conv_transpose,
    onnx_dft,
    onnx_einsum,
    onnx_elementwise,
    onnx_grid_sample,
    onnx_indexing,
    onnx_layout,
    onnx_linear_attention,
    onnx_llm,
    onnx_loss,
    onnx_matmul,
    onnx_normalize,
    onnx_quant,
    onnx_reduce,
    onnx_resize,
)
from fusec.frontend.onnx_core import (
    ALWAYS_FOLDED,
    CONVERTERS,
    DATA_TYPES,
    ELEMENT_TYPES,
    QUANTIZED_TYPES,
    Converter,
    Importer,
    Node,
    UnsupportedOnnx,
    converter,
    function_name,
    supported_operators,
    value_name,
)
from fusec.ir.tensors import dtype_of, shape_of

__all__ = [
    "ALWAYS_FOLDED",
    "CONVERTERS",
    "Converter",
    "DATA_TYPES",
    "ELEMENT_TYPES",
    "ImportResult",
    "Importer",
    "Node",
    "QUANTIZED_TYPES",
    "UnsupportedOnnx",
    "converter",
    "dtype_of",
    "function_name",
    "import_model",
    "import_onnx",
    "load_model",
    "shape_of",
    "supported_operators",
    "value_name",
]


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
