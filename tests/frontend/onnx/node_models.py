"""Small one-node ONNX models the FileCheck import tests read (``tests/passes/filecheck/import``):
``python node_models.py OUT NAME`` writes model NAME to OUT."""

from __future__ import annotations

import sys
from collections.abc import Callable

import onnx
from onnx import TensorProto, helper

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(node: onnx.NodeProto, inputs, outputs, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        node.op_type.lower(),
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def sce_loss() -> onnx.ModelProto:
    """SoftmaxCrossEntropyLoss with weights and an ignore_index, both outputs."""
    node = helper.make_node(
        "SoftmaxCrossEntropyLoss",
        ["scores", "labels", "weights"],
        ["loss", "log_prob"],
        name="sce",
        ignore_index=1,
        reduction="mean",
    )
    inputs = [("scores", F32, (2, 3, 4)), ("labels", I64, (2, 4)), ("weights", F32, (3,))]
    outputs = [("loss", F32, ()), ("log_prob", F32, (2, 3, 4))]
    return _model(node, inputs, outputs, 13)


def gather_elements() -> onnx.ModelProto:
    """GatherElements along axis 1 at int64 indices given at run time."""
    node = helper.make_node("GatherElements", ["data", "indices"], ["y"], name="ge", axis=1)
    inputs = [("data", F32, (2, 5, 3)), ("indices", I64, (2, 2, 3))]
    return _model(node, inputs, [("y", F32, (2, 2, 3))], 13)


def hardmax() -> onnx.ModelProto:
    node = helper.make_node("Hardmax", ["x"], ["y"], name="hardmax", axis=1)
    return _model(node, [("x", F32, (2, 4, 3))], [("y", F32, (2, 4, 3))], 13)


def resize_linear() -> onnx.ModelProto:
    """Resize, linear, of H (x2) and W (x1.5) with constant scales."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="linear")
    model = _model(node, [("x", F32, (1, 2, 3, 4))], [("y", F32, (1, 2, 6, 6))], 19)
    scales = helper.make_tensor("scales", F32, (4,), [1.0, 1.0, 2.0, 1.5])
    model.graph.initializer.append(scales)
    return model


def rotary_embedding() -> onnx.ModelProto:
    """RotaryEmbedding of a 4-D input, interleaved, at int64 position ids given at run time."""
    node = helper.make_node(
        "RotaryEmbedding", ["x", "cos", "sin", "ids"], ["y"], name="rope", interleaved=1
    )
    inputs = [
        ("x", F32, (1, 2, 3, 4)), ("cos", F32, (8, 2)), ("sin", F32, (8, 2)), ("ids", I64, (1, 3)),
    ]  # fmt: skip
    return _model(node, inputs, [("y", F32, (1, 2, 3, 4))], 23)


def einsum() -> onnx.ModelProto:
    """Einsum of attention scores: one batch letter pair, one contracted letter."""
    node = helper.make_node("Einsum", ["q", "k"], ["y"], name="einsum", equation="bqd,bkd->bqk")
    inputs = [("q", F32, (2, 3, 4)), ("k", F32, (2, 5, 4))]
    return _model(node, inputs, [("y", F32, (2, 3, 5))], 12)


def one_hot() -> onnx.ModelProto:
    """OneHot of run-time int64 indices, depth 4 and run-time [off, on] values."""
    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], name="oh", axis=1)
    model = _model(
        node, [("indices", I64, (2, 3)), ("values", F32, (2,))], [("y", F32, (2, 4, 3))], 11
    )
    model.graph.initializer.append(helper.make_tensor("depth", F32, (), [4.0]))
    return model


def lp_pool_1d() -> onnx.ModelProto:
    """LpPool (p 3) over a 1-D signal, padded."""
    node = helper.make_node("LpPool", ["x"], ["y"], name="lp", kernel_shape=[3], pads=[1, 1], p=3)
    return _model(node, [("x", F32, (1, 2, 8))], [("y", F32, (1, 2, 8))], 18)


def lrn() -> onnx.ModelProto:
    """LRN over 4 channels, a window of 3."""
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn", size=3, alpha=0.01, beta=0.5)
    return _model(node, [("x", F32, (1, 4, 2, 3))], [("y", F32, (1, 4, 2, 3))], 13)


def dft() -> onnx.ModelProto:
    """A one-sided DFT (opset 17) of 4 real samples along axis 1 of a [1, 4, 3, 1] input."""
    node = helper.make_node("DFT", ["x"], ["y"], name="dft", axis=1, onesided=1)
    return _model(node, [("x", F32, (1, 4, 3, 1))], [("y", F32, (1, 3, 3, 2))], 17)


def scatter_nd() -> onnx.ModelProto:
    """ScatterND adding two rows into run-time data at constant indices, one repeated."""
    node = helper.make_node(
        "ScatterND", ["data", "indices", "updates"], ["y"], name="scatter", reduction="add"
    )
    inputs = [("data", F32, (3, 2)), ("updates", F32, (3, 2))]
    model = _model(node, inputs, [("y", F32, (3, 2))], 18)
    model.graph.initializer.append(helper.make_tensor("indices", I64, (3, 1), [2, 0, 2]))
    return model


def affine_grid() -> onnx.ModelProto:
    """AffineGrid of a run-time theta over a 2 x 3 image."""
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="ag")
    model = _model(node, [("theta", F32, (1, 2, 3))], [("grid", F32, (1, 2, 3, 2))], 20)
    model.graph.initializer.append(helper.make_tensor("size", I64, (4,), [1, 1, 2, 3]))
    return model


def conv_transpose() -> onnx.ModelProto:
    """ConvTranspose, stride 2 along H, pads 1, 2 groups, run-time weight and bias."""
    node = helper.make_node(
        "ConvTranspose", ["x", "w", "b"], ["y"], name="deconv", group=2, strides=[2, 1],
        pads=[1, 0, 1, 0],
    )  # fmt: skip
    inputs = [("x", F32, (1, 4, 3, 3)), ("w", F32, (4, 1, 3, 2)), ("b", F32, (2,))]
    return _model(node, inputs, [("y", F32, (1, 2, 5, 4))], 22)


def reduce_prod() -> onnx.ModelProto:
    """ReduceProd over axis 1 (5 elements, so one odd round), keepdims=0."""
    node = helper.make_node("ReduceProd", ["x", "axes"], ["y"], name="prod", keepdims=0)
    model = _model(node, [("x", F32, (2, 5, 3))], [("y", F32, (2, 3))], 18)
    model.graph.initializer.append(helper.make_tensor("axes", I64, (1,), [1]))
    return model


def top_k() -> onnx.ModelProto:
    """TopK, the 2 largest along the last axis of a [2, 5] input (K a constant)."""
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], name="topk")
    outputs = [("values", F32, (2, 2)), ("indices", I64, (2, 2))]
    model = _model(node, [("x", F32, (2, 5))], outputs, 11)
    model.graph.initializer.append(helper.make_tensor("k", I64, (1,), [2]))
    return model


def reverse_sequence() -> onnx.ModelProto:
    """ReverseSequence of a [4, 2, 3] (time, batch, feature) input, lengths 3 and 1."""
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], name="rev")
    model = _model(node, [("x", F32, (4, 2, 3))], [("y", F32, (4, 2, 3))], 10)
    model.graph.initializer.append(helper.make_tensor("lens", I64, (2,), [3, 1]))
    return model


def max_pool_3d() -> onnx.ModelProto:
    """MaxPool over a [1, 2, 4, 5, 6] volume, a 2 x 3 x 3 window, depth stride 2."""
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], name="pool3d", kernel_shape=[2, 3, 3], strides=[2, 1, 1]
    )
    return _model(node, [("x", F32, (1, 2, 4, 5, 6))], [("y", F32, (1, 2, 2, 3, 4))], 18)


def linear_attention() -> onnx.ModelProto:
    """LinearAttention, the linear rule, one head of d_k 2 and d_v 3, two steps, no past."""
    node = helper.make_node(
        "LinearAttention", ["q", "k", "v"], ["y", "state"], name="lin",
        update_rule="linear", q_num_heads=1, kv_num_heads=1,
    )  # fmt: skip
    inputs = [("q", F32, (1, 2, 2)), ("k", F32, (1, 2, 2)), ("v", F32, (1, 2, 3))]
    return _model(node, inputs, [("y", F32, (1, 2, 3)), ("state", F32, (1, 1, 2, 3))], 27)


def grid_sample() -> onnx.ModelProto:
    """GridSample, nearest, border padding, of a [1, 2, 3, 4] image at a [1, 2, 2] grid."""
    node = helper.make_node(
        "GridSample", ["x", "grid"], ["y"], name="gs", mode="nearest", padding_mode="border"
    )
    inputs = [("x", F32, (1, 2, 3, 4)), ("grid", F32, (1, 2, 2, 2))]
    return _model(node, inputs, [("y", F32, (1, 2, 2, 2))], 22)


def col2im() -> onnx.ModelProto:
    """Col2Im of 2 channels' 2 x 1 blocks onto a 3 x 2 image, stride 2 along H, pads 1."""
    node = helper.make_node(
        "Col2Im", ["x", "image", "block"], ["y"], name="c2i", strides=[2, 1], pads=[1, 0, 0, 0]
    )
    model = _model(node, [("x", F32, (1, 4, 4))], [("y", F32, (1, 2, 3, 2))], 18)
    model.graph.initializer.extend([
        helper.make_tensor("image", I64, (2,), [3, 2]),
        helper.make_tensor("block", I64, (2,), [2, 1]),
    ])  # fmt: skip
    return model


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "col2im": col2im,
    "grid_sample": grid_sample,
    "linear_attention": linear_attention,
    "max_pool_3d": max_pool_3d,
    "reverse_sequence": reverse_sequence,
    "top_k": top_k,
    "conv_transpose": conv_transpose,
    "reduce_prod": reduce_prod,
    "affine_grid": affine_grid,
    "scatter_nd": scatter_nd,
    "dft": dft,
    "lrn": lrn,
    "lp_pool_1d": lp_pool_1d,
    "one_hot": one_hot,
    "einsum": einsum,
    "rotary_embedding": rotary_embedding,
    "resize_linear": resize_linear,
    "sce_loss": sce_loss,
    "gather_elements": gather_elements,
    "hardmax": hardmax,
}

if __name__ == "__main__":
    onnx.save(MODELS[sys.argv[2]](), sys.argv[1])
