"""Token-id transformers written with onnx.helper the way PyTorch's exporters write them.

No torch here: these graphs reproduce, node for node, what the exporters emit at the
front of Hugging Face models exported with ``input_ids`` (int64) and
``attention_mask`` inputs (issue 29), around one attention layer:

* the embedding lookup ``Gather(word_embeddings, input_ids)``, position embeddings
  gathered at constant ``position_ids`` (a buffer sliced to the sequence), or at
  position ids computed from the mask (``CumSum(mask) * mask``, RoBERTa's and
  left-padded GPT-2's), and the token-type embeddings of constant zeros;
* BERT's extended mask, ``(1 - Cast(Unsqueeze(attention_mask), FLOAT)) * finfo.min``
  added to the scores (the TorchScript exporter's form);
* GPT-2's SDPA mask, ``Where(And(causal, Expand(Cast(mask, BOOL))), 0, -inf)`` with
  the NaN guard ``Where(IsNaN(p), 0, p)`` after the softmax (the dynamo exporter's form),
  its K/V heads repeated by ``Expand`` as a grouped-query (Llama-style) model does.

Every weight is random (seeded); the models are small enough to run in a test.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx_nets import Weights, make_model, tensor

FINFO_MIN = float(np.finfo(np.float32).min)


def _linear(w: Weights, nodes: list, x: str, name: str, k: int, n: int) -> str:
    nodes.append(
        helper.make_node("MatMul", [x, w.normal(f"{name}.w", (k, n), k**-0.5)], [f"{name}.mm"])
    )
    nodes.append(helper.make_node("Add", [f"{name}.mm", w.normal(f"{name}.b", (n,), 0.1)], [name]))
    return name


def _layer_norm(w: Weights, nodes: list, x: str, name: str, dim: int) -> str:
    gamma = w.add(f"{name}.g", w.rng.uniform(0.5, 1.5, dim))
    beta = w.add(f"{name}.b", w.rng.normal(0.0, 0.1, dim))
    nodes.append(
        helper.make_node("LayerNormalization", [x, gamma, beta], [name], epsilon=1e-5, axis=-1)
    )
    return name


def _heads(nodes: list, x: str, name: str, batch: int, seq: int, heads: int, size: int) -> str:
    """[B, S, H*D] -> [B, H, S, D]."""
    shape = _ints(nodes, f"{name}.shape", [batch, seq, heads, size])
    nodes.append(helper.make_node("Reshape", [x, shape], [f"{name}.r"]))
    nodes.append(helper.make_node("Transpose", [f"{name}.r"], [name], perm=[0, 2, 1, 3]))
    return name


def _ints(nodes: list, name: str, values) -> str:
    nodes.append(
        helper.make_node(
            "Constant",
            [],
            [name],
            value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values),
        )
    )
    return name


def _scalar(nodes: list, name: str, value: float, elem=TensorProto.FLOAT) -> str:
    nodes.append(
        helper.make_node("Constant", [], [name], value=helper.make_tensor(name, elem, [], [value]))
    )
    return name


def _embeddings(
    w: Weights, nodes: list, batch: int, seq: int, vocab: int, dim: int, positions: str
) -> str:
    """word + position (+ token type) embeddings of ``input_ids``, layer-normed."""
    nodes.append(
        helper.make_node(
            "Gather",
            [w.normal("wte", (vocab, dim), 0.5), "input_ids"],
            ["word"],
            name="embeddings/word",
        )
    )
    wpe = w.normal("wpe", (64, dim), 0.5)
    if positions == "buffer":  # BERT: a registered arange buffer, sliced to the sequence
        buffer = np.arange(64, dtype=np.int64).reshape(1, 64)
        w.items.append(onnx.numpy_helper.from_array(buffer, "position_ids"))
        nodes.append(
            helper.make_node(
                "Slice",
                [
                    "position_ids",
                    _ints(nodes, "p0", [0]),
                    _ints(nodes, "p1", [seq]),
                    _ints(nodes, "p2", [1]),
                ],
                ["pos_ids"],
            )
        )
    else:  # RoBERTa / left padding: cumsum(mask) * mask - 1 (+ 1 for the pad offset: 0)
        nodes.append(
            helper.make_node("CumSum", ["attention_mask", _ints(nodes, "axis1", [1])], ["cum"])
        )
        nodes.append(helper.make_node("Mul", ["cum", "attention_mask"], ["pos_ids"]))
    nodes.append(helper.make_node("Gather", [wpe, "pos_ids"], ["pos"], name="embeddings/position"))
    zeros = onnx.numpy_helper.from_array(np.zeros((batch, seq), np.int64), "token_type_ids")
    w.items.append(zeros)
    nodes.append(
        helper.make_node("Gather", [w.normal("wtt", (2, dim), 0.5), "token_type_ids"], ["tok"])
    )
    nodes.append(helper.make_node("Add", ["word", "pos"], ["wp"]))
    nodes.append(helper.make_node("Add", ["wp", "tok"], ["emb"]))
    return _layer_norm(w, nodes, "emb", "emb.ln", dim)


def _bert_mask(nodes: list) -> str:
    """(1 - float(mask[:, None, None, :])) * finfo.min: [B, 1, 1, S]."""
    nodes.append(
        helper.make_node("Unsqueeze", ["attention_mask", _ints(nodes, "ax12", [1, 2])], ["m4"])
    )
    nodes.append(helper.make_node("Cast", ["m4"], ["mf"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Sub", [_scalar(nodes, "one", 1.0), "mf"], ["inv"]))
    nodes.append(helper.make_node("Mul", ["inv", _scalar(nodes, "fmin", FINFO_MIN)], ["mask"]))
    return "mask"


def _sdpa_mask(nodes: list, batch: int, seq: int) -> str:
    """Where(causal & key padding, 0, -inf): [B, 1, S, S] (the dynamo exporter's SDPA mask)."""
    causal = np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq)
    nodes.append(
        helper.make_node(
            "Constant", [], ["causal"], value=onnx.numpy_helper.from_array(causal, "causal")
        )
    )
    nodes.append(helper.make_node("Cast", ["attention_mask"], ["mb"], to=TensorProto.BOOL))
    nodes.append(helper.make_node("Unsqueeze", ["mb", _ints(nodes, "ax12", [1, 2])], ["mb4"]))
    shape = _ints(nodes, "mshape", [batch, 1, seq, seq])
    nodes.append(helper.make_node("Expand", ["mb4", shape], ["mbe"]))
    nodes.append(helper.make_node("And", ["causal", "mbe"], ["allowed"]))
    zero, neg = _scalar(nodes, "zero", 0.0), _scalar(nodes, "ninf", -np.inf)
    nodes.append(helper.make_node("Where", ["allowed", zero, neg], ["mask"]))
    return "mask"


def token_model(
    kind: str = "bert",
    *,
    batch: int = 2,
    seq: int = 8,
    vocab: int = 30,
    dim: int = 32,
    heads: int = 4,
    kv_heads: int | None = None,
    positions: str = "buffer",
    seed: int = 0,
) -> onnx.ModelProto:
    """One embedding + attention layer of a token-id model: ``kind`` "bert" (the
    extended mask, no NaN guard) or "gpt2" (causal SDPA mask with padding and the NaN
    guard); ``kv_heads`` < ``heads`` repeats the K/V heads by Expand (grouped-query
    attention, as Llama exports); ``positions`` "buffer" (constant ids) or "cumsum"
    (computed from the mask)."""
    w = Weights(seed)
    nodes: list = []
    size = dim // heads
    kv_heads = kv_heads or heads
    x = _embeddings(w, nodes, batch, seq, vocab, dim, positions)
    q = _heads(nodes, _linear(w, nodes, x, "q", dim, dim), "qh", batch, seq, heads, size)
    k = _heads(
        nodes, _linear(w, nodes, x, "k", dim, kv_heads * size), "kh", batch, seq, kv_heads, size
    )
    v = _heads(
        nodes, _linear(w, nodes, x, "v", dim, kv_heads * size), "vh", batch, seq, kv_heads, size
    )
    if kv_heads != heads:  # repeat_kv: [B, KV, S, D] -> [B, KV, H/KV, S, D] -> [B, H, S, D]
        group = heads // kv_heads
        for name in ("kh", "vh"):
            nodes.append(
                helper.make_node(
                    "Unsqueeze", [name, _ints(nodes, f"{name}.ax", [2])], [f"{name}.u"]
                )
            )
            wide = _ints(nodes, f"{name}.wide", [batch, kv_heads, group, seq, size])
            nodes.append(helper.make_node("Expand", [f"{name}.u", wide], [f"{name}.e"]))
            full = _ints(nodes, f"{name}.full", [batch, heads, seq, size])
            nodes.append(helper.make_node("Reshape", [f"{name}.e", full], [f"{name}.rep"]))
        k, v = "kh.rep", "vh.rep"
    nodes.append(helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("MatMul", [q, "kt"], ["qk"]))
    nodes.append(helper.make_node("Mul", ["qk", _scalar(nodes, "scale", size**-0.5)], ["scores"]))
    mask = _bert_mask(nodes) if kind == "bert" else _sdpa_mask(nodes, batch, seq)
    nodes.append(helper.make_node("Add", ["scores", mask], ["masked"]))
    nodes.append(helper.make_node("Softmax", ["masked"], ["p"], axis=-1))
    probs = "p"
    if kind != "bert":
        nodes.append(helper.make_node("IsNaN", ["p"], ["pnan"]))
        nodes.append(helper.make_node("Where", ["pnan", _scalar(nodes, "z0", 0.0), "p"], ["pg"]))
        probs = "pg"
    nodes.append(helper.make_node("MatMul", [probs, v], ["ctx"]))
    nodes.append(helper.make_node("Transpose", ["ctx"], ["ctx.t"], perm=[0, 2, 1, 3]))
    merged = _ints(nodes, "merged", [batch, seq, dim])
    nodes.append(helper.make_node("Reshape", ["ctx.t", merged], ["ctx.m"]))
    out = _linear(w, nodes, "ctx.m", "o", dim, dim)
    nodes.append(helper.make_node("Add", [x, out], ["res"]))
    y = _layer_norm(w, nodes, "res", "out.ln", dim)
    nodes.append(helper.make_node("Identity", [y], ["last_hidden_state"]))
    return make_model(
        nodes,
        [
            tensor("input_ids", (batch, seq), np.int64),
            tensor("attention_mask", (batch, seq), np.int64),
        ],
        [tensor("last_hidden_state", (batch, seq, dim))],
        w.items,
        name=f"{kind}_tokens",
        opset=18,
    )


def token_feeds(model: onnx.ModelProto, seed: int = 0, vocab: int = 30) -> dict[str, np.ndarray]:
    """Random ids (some negative: from the end) and a mask padded on the right of row 0
    and on the left of the last row (so some rows see padding only with a causal mask)."""
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    ids = rng.integers(-vocab, vocab, shape)
    mask = np.ones(shape, np.int64)
    mask[0, shape[1] // 2 :] = 0
    mask[-1, : shape[1] // 3] = 0
    return {"input_ids": ids, "attention_mask": mask}


if __name__ == "__main__":  # the FileCheck test's model: python token_models.py OUT KIND POSITIONS
    import sys

    kind, positions = sys.argv[2], sys.argv[3]
    onnx.save(token_model(kind, positions=positions, batch=1, seq=4, dim=8, heads=2), sys.argv[1])
