"""ONNX models with dynamic batch and sequence dimensions (``dim_param``), written with
onnx.helper the way exporters write them (issue 29, dynamic shapes).

* ``mlp``: ``x: [batch, 16]`` through two linear layers.
* ``encoder``: a token-id encoder layer, ``input_ids`` and ``attention_mask``
  (int64, ``[batch, seq]``) in: the embedding lookup, position embeddings gathered at
  ``Range(0, Shape(input_ids)[1])``, heads split and merged by ``Reshape`` to shapes
  built by ``Shape -> Gather -> Unsqueeze -> Concat`` (what the exporters emit for a
  dynamic axis), a padding mask from ``attention_mask`` and a causal one from the
  length (``Range``, ``LessOrEqual``, ``Where``), softmax attention, a residual and a
  LayerNormalization.

Every size that depends on batch or sequence is computed from ``Shape`` in the graph,
so the models are right at every shape; the weights are seeded random.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx_nets import Weights, make_model, tensor

VOCAB, MAX_POSITIONS = 50, 64


def mlp(dim: int = 16, hidden: int = 32, out: int = 8, seed: int = 3) -> onnx.ModelProto:
    w = Weights(seed)
    nodes = [
        helper.make_node("MatMul", ["x", w.normal("w1", (dim, hidden), 0.3)], ["h"]),
        helper.make_node("Add", ["h", w.normal("b1", (hidden,), 0.3)], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", w.normal("w2", (hidden, out), 0.3)], ["y"]),
    ]
    return make_model(
        nodes, [tensor("x", ("batch", dim))], [tensor("y", ("batch", out))], w.items, "mlp"
    )


def scaled_softmax(dtype=np.float32, width: int = 24, seed: int = 7) -> onnx.ModelProto:
    """``softmax(x * w + b)`` over the last axis, ``x: [batch, seq, width]``: pointwise and
    row-reduction kernels only (what every target compiles without a GEMM library)."""
    w = Weights(seed, np.dtype(dtype))
    nodes = [
        helper.make_node("Mul", ["x", w.normal("w", (width,), 1.0)], ["xw"]),
        helper.make_node("Add", ["xw", w.normal("b", (width,), 0.5)], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"], axis=-1),
    ]
    dims = ("batch", "seq", width)
    return make_model(
        nodes, [tensor("x", dims, dtype)], [tensor("y", dims, dtype)], w.items, "scaled_softmax"
    )


def _ints(w: Weights, name: str, values) -> str:
    w.items.append(onnx.numpy_helper.from_array(np.asarray(values, np.int64), name))
    return name


def _floats(w: Weights, name: str, value: float) -> str:
    w.items.append(onnx.numpy_helper.from_array(np.asarray(value, w.dtype), name))
    return name


def _dims(nodes: list, w: Weights) -> tuple[str, str]:
    """batch and seq as 1-element int64 tensors: Shape -> Gather -> Unsqueeze."""
    nodes.append(helper.make_node("Shape", ["input_ids"], ["ids_shape"], name="shape"))
    names = []
    ax0 = _ints(w, "ax0", [0])
    for axis, name in enumerate(("batch", "seq")):
        index = _ints(w, f"axis{axis}", axis)
        nodes.append(helper.make_node("Gather", ["ids_shape", index], [name], axis=0))
        nodes.append(helper.make_node("Unsqueeze", [name, ax0], [f"{name}1"]))
        names.append(f"{name}1")
    return names[0], names[1]


def _embeddings(nodes: list, w: Weights, dim: int) -> str:
    """Word embeddings at input_ids + position embeddings at Range(0, seq)."""
    table = w.normal("wte", (VOCAB, dim), 0.5)
    positions = w.normal("wpe", (MAX_POSITIONS, dim), 0.5)
    zero, one = _ints(w, "zero", 0), _ints(w, "one", 1)
    nodes += [
        helper.make_node("Gather", [table, "input_ids"], ["word"], axis=0, name="word"),
        helper.make_node("Range", [zero, "seq", one], ["positions"], name="positions"),
        helper.make_node("Gather", [positions, "positions"], ["pos"], axis=0),
        helper.make_node("Add", ["word", "pos"], ["emb"]),
    ]
    return "emb"


def _mask(nodes: list, w: Weights) -> str:
    """Additive [batch, 1, seq, seq] mask: padding (attention_mask) and causal (seq)."""
    n = helper.make_node
    nodes += [
        n("Cast", ["attention_mask"], ["mask_f"], to=helper.np_dtype_to_tensor_dtype(w.dtype)),
        n("Sub", [_floats(w, "onef", 1.0), "mask_f"], ["pad"]),
        n("Mul", ["pad", _floats(w, "big", -1e4)], ["pad_bias"]),
        n("Unsqueeze", ["pad_bias", _ints(w, "ax12", [1, 2])], ["pad4"]),
        n("Range", ["zero", "seq", "one"], ["rows"]),
        n("Unsqueeze", ["rows", "ax0"], ["row"]),
        n("Unsqueeze", ["rows", _ints(w, "ax1", [1])], ["col"]),
        n("LessOrEqual", ["row", "col"], ["causal"]),
        n("Where", ["causal", _floats(w, "zerof", 0.0), "big"], ["causal_bias"]),
        n("Add", ["pad4", "causal_bias"], ["mask"]),
    ]
    return "mask"


def encoder(dim: int = 32, heads: int = 2, seed: int = 5, dtype=np.float32) -> onnx.ModelProto:
    """The encoder layer of the module docstring, its float values of ``dtype``."""
    w = Weights(seed, np.dtype(dtype))
    n = helper.make_node
    size = dim // heads
    nodes: list = []
    batch, seq = _dims(nodes, w)
    x = _embeddings(nodes, w, dim)
    split = _ints(w, "heads_size", [heads, size])
    nodes.append(n("Concat", [batch, seq, split], ["split_shape"], axis=0, name="split_shape"))
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            n("MatMul", [x, w.normal(f"w{p}", (dim, dim), 0.3)], [f"{p}0"]),
            n("Reshape", [f"{p}0", "split_shape"], [f"{p}1"], name=f"split_{p}"),
            n("Transpose", [f"{p}1"], [f"{p}2"], perm=perm),
        ]
    nodes += [
        n("MatMul", ["q2", "k2"], ["scores0"]),
        n("Div", ["scores0", _floats(w, "scale", np.sqrt(size))], ["scores1"]),
        n("Add", ["scores1", _mask(nodes, w)], ["scores"]),
        n("Softmax", ["scores"], ["probs"], axis=-1),
        n("MatMul", ["probs", "v2"], ["ctx0"]),
        n("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        n("Concat", [batch, seq, _ints(w, "dim", [dim])], ["merge_shape"], axis=0),
        n("Reshape", ["ctx1", "merge_shape"], ["ctx"], name="merge_heads"),
        n("MatMul", ["ctx", w.normal("wo", (dim, dim), 0.3)], ["attn"]),
        n("Add", ["attn", x], ["res"]),
        n(
            "LayerNormalization",
            ["res", w.add("gamma", w.rng.uniform(0.5, 1.5, dim)), w.normal("beta", (dim,), 0.2)],
            ["hidden"],
            axis=-1,
            epsilon=1e-5,
        ),
    ]
    inputs = [
        tensor("input_ids", ("batch", "seq"), np.int64),
        tensor("attention_mask", ("batch", "seq"), np.int64),
    ]
    output = tensor("hidden", ("batch", "seq", dim), dtype)
    return make_model(nodes, inputs, [output], w.items, "encoder")


def encoder_feeds(rng: np.random.Generator, batch: int, seq: int) -> dict[str, np.ndarray]:
    """Random token ids and a padding mask (each row keeps at least its first token)."""
    ids = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
    mask = (rng.random((batch, seq)) < 0.8).astype(np.int64)
    mask[:, 0] = 1
    return {"input_ids": ids, "attention_mask": mask}


if __name__ == "__main__":  # the FileCheck test's model: python dynamic_models.py OUT KIND
    import sys

    onnx.save({"mlp": mlp, "encoder": encoder}[sys.argv[2]](), sys.argv[1])
