"""ONNX ``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` as ai ops.

Both take scores ``[N, C, d1, ..., dk]``, integer class labels ``[N, d1, ..., dk]``
(constants or values computed at run time), optional per-class weights ``[C]``, an
optional ``ignore_index`` and a ``reduction`` (``none``, ``sum``, ``mean``):

* the label of each position picks one class: ``onehot = (labels[:, None] == iota(C))``,
  an i1 tensor, and ``picked = reduce_sum(where(onehot, input, 0), axis=1)`` (a select,
  not a product, so a non-finite score of another class does not leak in);
* the weight of a position is ``weight[label]``, picked the same way (1 without weights),
  and 0 where the label is ``ignore_index``; the loss is ``-picked * weight`` there and
  0 at ignored positions;
* ``sum`` adds every position; ``mean`` divides that sum by the sum of the positions'
  weights (the number of positions not ignored, without weights), as ONNX's definition
  and PyTorch say;
* SoftmaxCrossEntropyLoss is the same on ``log_softmax(scores, axis=1)`` (its second,
  optional output).

A label outside ``[0, C)`` that is not ``ignore_index`` picks no class (a loss of 0);
ONNX leaves that case undefined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _reshape_to, converter
from fusec.frontend.onnx_reduce import log_softmax
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node

_REDUCTIONS = ("none", "sum", "mean")


@converter("NegativeLogLikelihoodLoss", attrs=("ignore_index", "reduction"))
def _nll_loss(imp: Importer, node: Node) -> list[SSAValue]:
    return [_loss(imp, node, imp.input(node, 0))]


@converter("SoftmaxCrossEntropyLoss", attrs=("ignore_index", "reduction"))
def _softmax_cross_entropy(imp: Importer, node: Node) -> list[SSAValue]:
    scores = imp.input(node, 0)
    if len(shape_of(scores)) < 2:
        raise imp.error(f"scores must be N x C x ..., got {scores.type}")
    log_prob = log_softmax(imp, scores, 1)
    return [_loss(imp, node, log_prob), log_prob]


def _loss(imp: Importer, node: Node, log_prob: SSAValue) -> SSAValue:
    """The loss of ``log_prob`` (``[N, C, ...]``) at the labels (input 1), reduced."""
    labels = imp.input(node, 1)
    _check_shapes(imp, log_prob, labels)
    reduction = node.attrs.get("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise imp.error(f"reduction '{reduction}' is not one of {', '.join(_REDUCTIONS)}")
    onehot = _one_hot(imp, labels, shape_of(log_prob)[1])
    picked = _pick_class(imp, onehot, log_prob)
    kept = _kept(imp, node, labels)
    weight = _weights(imp, node, onehot, kept, log_prob)
    zero = imp.scalar(0.0, picked)
    loss = imp.emit(ai.NegOp, picked)
    if weight is not None:
        loss = imp.emit(ai.MulOp, loss, weight)
    if kept is not None:
        loss = imp.emit(ai.WhereOp, kept, loss, zero)
    if reduction == "none":
        return loss
    total = imp.emit(ai.ReduceSumOp, loss, axes=(), keepdims=False)
    if reduction == "sum":
        return total
    return imp.emit(ai.DivOp, total, _mean_divisor(imp, loss, kept, weight))


def _check_shapes(imp: Importer, scores: SSAValue, labels: SSAValue) -> None:
    shape, label_shape = shape_of(scores), shape_of(labels)
    if len(shape) < 2:
        raise imp.error(f"the input must be N x C x ..., got {scores.type}")
    if label_shape != shape[:1] + shape[2:]:
        raise imp.error(f"the labels {labels.type} do not match the input {scores.type}")
    if dtype_of(labels) not in ("i64", "i32"):
        raise imp.error(f"the labels are {labels.type}: INT64 or INT32 expected", "dtype")


def _one_hot(imp: Importer, labels: SSAValue, classes: int) -> SSAValue:
    """``labels[:, None, ...] == c`` for each class c: an i1 tensor ``[N, C, ...]``."""
    shape = shape_of(labels)
    column = _reshape_to(imp, labels, shape[:1] + (1,) + shape[1:])
    iota = np.arange(classes).reshape((1, classes) + (1,) * (len(shape) - 1))
    return imp.emit(ai.EqualOp, column, imp.constant(iota, dtype_of(labels)))


def _pick_class(imp: Importer, onehot: SSAValue, values: SSAValue) -> SSAValue:
    """``values`` (broadcast against ``onehot``) at the class each position's label
    names, summed over the class axis (0 where it names none)."""
    chosen = imp.emit(ai.WhereOp, onehot, values, imp.scalar(0.0, values))
    return imp.emit(ai.ReduceSumOp, chosen, axes=(1,), keepdims=False)


def _kept(imp: Importer, node: Node, labels: SSAValue) -> SSAValue | None:
    """i1: the positions whose label is not ``ignore_index`` (None: no ignore_index)."""
    if "ignore_index" not in node.attrs:
        return None
    ignored = np.asarray(int(node.attrs["ignore_index"]))
    same = imp.emit(ai.EqualOp, labels, imp.constant(ignored, dtype_of(labels)))
    return imp.emit(ai.NotOp, same)


def _weights(
    imp: Importer, node: Node, onehot: SSAValue, kept: SSAValue | None, like: SSAValue
) -> SSAValue | None:
    """Each position's class weight (input 2), 0 where ignored; None without weights."""
    weight = imp.optional_input(node, 2)
    if weight is None:
        return None
    classes = shape_of(like)[1]
    if shape_of(weight) != (classes,) or dtype_of(weight) != dtype_of(like):
        raise imp.error(f"the weights {weight.type} must be {classes} values of the input's type")
    rank = len(shape_of(like))
    column = _reshape_to(imp, weight, (1, classes) + (1,) * (rank - 2))
    picked = _pick_class(imp, onehot, column)
    if kept is None:
        return picked
    return imp.emit(ai.WhereOp, kept, picked, imp.scalar(0.0, picked))


def _mean_divisor(
    imp: Importer, loss: SSAValue, kept: SSAValue | None, weight: SSAValue | None
) -> SSAValue:
    """What ``mean`` divides the summed loss by: the summed weights, the count of the
    positions kept, or the count of all positions."""
    if weight is not None:
        return imp.emit(ai.ReduceSumOp, weight, axes=(), keepdims=False)
    if kept is not None:
        counted = imp.emit(ai.CastOp, kept, dtype_of(loss))
        return imp.emit(ai.ReduceSumOp, counted, axes=(), keepdims=False)
    count = int(np.prod(shape_of(loss)))
    return imp.constant(np.asarray(float(count)), dtype_of(loss))
