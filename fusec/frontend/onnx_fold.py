"""Constant folding at ONNX import: nodes whose inputs are all known are evaluated.

Exported models compute much of their bookkeeping at run time: shapes
(``Shape`` -> ``Gather`` -> ``Concat`` -> ``Reshape``), position ids
(``Range``), attention masks (``ConstantOfShape`` -> ``Expand`` -> ``Where``),
in int64 and bool. Once the input shapes are fixed, all of it is constant.
The importer asks ``fold`` about every node before converting it: a node whose
inputs are all constants (initializers, ``Constant`` nodes, earlier folded
results) is evaluated here with ``onnx.reference`` whatever its element types,
and ``Shape``/``Size`` of any value with a static shape are constants too.
What reaches the ai dialect is the model's float data path only.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.shape_inference
from onnx import AttributeProto, helper, numpy_helper
from onnx.reference.op_run import OpRun

#: Operators whose results differ from run to run: never evaluated at import.
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
     "Bernoulli", "Dropout"}
)  # fmt: skip

#: Operators whose result depends only on the shape of their (first) input.
SHAPE_ONLY = frozenset({"Shape", "Size"})

_SUBGRAPH_ATTRS = (AttributeProto.GRAPH, AttributeProto.GRAPHS)

#: Inputs up to this many elements are passed to shape inference by value (shapes,
#: repeats, Range bounds); larger ones by type only, so predicting stays cheap.
_PROPAGATED_ELEMENTS = 1 << 16


def kept_quantized(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None]) -> bool:
    """Whether ``node`` is a ``DequantizeLinear`` of constant INT8, UINT8, INT4, UINT4 or
    float8 codes (a quantized weight), imported as ``ai.dequantize`` although its inputs
    are known (issue 31): ``recognize-patterns`` then moves its scales after the matmul
    that reads it and the codes reach the kernels (the cpu int8 GEMM,
    ``targets/cpu/gemm_int8``; the cuda float8 GEMM, ``targets/cuda/gemm/fp8_weights``;
    4-bit codes on cuda, dequantized each call); ``canonicalize`` folds it where it
    stays constant (``FoldConstantDequantize``; 4-bit codes: ``fold-quantized-weights``),
    into the float constant the import folded before."""
    if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
        return False
    codes = inputs[0] if inputs else None
    if codes is None:
        return False
    return codes.dtype in (np.int8, np.uint8) or codes.dtype.name.startswith(
        ("float8", "int4", "uint4")
    )


class FoldError(Exception):
    """The node could not be evaluated (the message says why)."""


def foldable(node: onnx.NodeProto) -> bool:
    """Whether ``node`` may be evaluated at import when its inputs are known.

    Control flow (subgraph attributes) and random operators are not; nor are
    operators of other domains, which ``onnx.reference`` does not implement.
    """
    if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC:
        return False
    return not any(attr.type in _SUBGRAPH_ATTRS for attr in node.attribute)


class GatherElements(OpRun):
    """``onnx.reference``'s GatherElements is wrong when the indices are shorter than
    the data along ``axis`` and there are more than 64 choices (onnx 1.23); numpy's
    ``take_along_axis`` is the operator's definition."""

    op_domain = ""

    def _run(self, data: np.ndarray, indices: np.ndarray, axis: int = 0):
        axis = axis % data.ndim
        indices = np.where(indices < 0, indices + data.shape[axis], indices)
        return (np.take_along_axis(data, indices, axis=axis),)


#: Implementations that replace onnx.reference's own.
_OVERRIDES: list[type[OpRun]] = [GatherElements]


def evaluate(
    node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], opset: int
) -> list[np.ndarray]:
    """The outputs of ``node`` on ``inputs`` (None for an omitted optional input)."""
    from onnx.reference import ReferenceEvaluator

    feeds = {name: value for name, value in zip(node.input, inputs, strict=True) if name}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            evaluator = ReferenceEvaluator(node, opsets={"": opset}, new_ops=_OVERRIDES)
            outputs = evaluator.run(None, feeds)
    except Exception as err:  # onnx.reference raises anything from ValueError to IndexError
        raise FoldError(f"{type(err).__name__}: {err}") from None
    return [np.asarray(o) for o in outputs]


def output_bytes(
    node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], opset: int
) -> int | None:
    """Bytes of ``node``'s outputs on ``inputs``, predicted without evaluating it.

    A small model can ask for a huge constant (``ConstantOfShape``, ``Expand``,
    ``Tile``, ``Range`` or a broadcast of a few initializer bytes to 40 GB), so the
    size is checked before ``evaluate`` allocates it. ONNX's own shape inference
    with the inputs' values (data propagation) predicts it; None when it cannot
    say (an unknown dimension, an operator without a schema, an inference error:
    ``evaluate`` then reports what is wrong).
    """
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        types, data = {}, {}
        for name, value in zip(node.input, inputs, strict=True):
            if name and value is not None:
                elem = helper.np_dtype_to_tensor_dtype(value.dtype)
                types[name] = helper.make_tensor_type_proto(elem, value.shape)
                if value.size <= _PROPAGATED_ELEMENTS:  # shapes, indices, scalars
                    data[name] = numpy_helper.from_array(value, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=[helper.make_opsetid("", opset)]
            )
    except Exception:  # SchemaError, InferenceError, an unsupported dtype: no prediction
        return None
    total = 0
    for name in node.output:
        tensor = outputs[name].tensor_type if name in outputs else None
        if tensor is None or not tensor.HasField("shape"):
            return None
        if not all(dim.HasField("dim_value") for dim in tensor.shape.dim):
            return None
        try:
            itemsize = helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
        except Exception:  # a string or an unknown element type
            itemsize = 8
        total += math.prod(dim.dim_value for dim in tensor.shape.dim) * max(itemsize, 1)
    return total


def evaluate_shape_op(node: onnx.NodeProto, shape: Sequence[int], attrs: dict) -> np.ndarray:
    """``Shape`` (with opset 15's ``start``/``end``, Python slice semantics) or ``Size``."""
    if node.op_type == "Size":
        return np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start, end = attrs.get("start", 0), attrs.get("end")
    return np.asarray(list(shape)[start:end], dtype=np.int64)
