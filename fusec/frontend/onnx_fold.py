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

import warnings
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import AttributeProto
from onnx.reference.op_run import OpRun

#: Operators whose results differ from run to run: never evaluated at import.
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
     "Bernoulli", "Dropout"}
)  # fmt: skip

#: Operators whose result depends only on the shape of their (first) input.
SHAPE_ONLY = frozenset({"Shape", "Size"})

_SUBGRAPH_ATTRS = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


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


def evaluate_shape_op(node: onnx.NodeProto, shape: Sequence[int], attrs: dict) -> np.ndarray:
    """``Shape`` (with opset 15's ``start``/``end``, Python slice semantics) or ``Size``."""
    if node.op_type == "Size":
        return np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start, end = attrs.get("start", 0), attrs.get("end")
    return np.asarray(list(shape)[start:end], dtype=np.int64)
