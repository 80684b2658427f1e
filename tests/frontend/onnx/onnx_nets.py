"""Small real networks built with ``onnx.helper``, shared by the ONNX tests.

Weights are random (seeded) and never zero; BatchNormalization statistics are
non-trivial (mean != 0, var != 1) so that folding mistakes show.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization needs 17, Gelu 20
_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.int8): TensorProto.INT8,
}


def make_model(nodes, inputs, outputs, initializers, name="net", opset=OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9  # onnxruntime from PyPI may lag behind onnx's newest IR version
    onnx.checker.check_model(model)
    return model


def tensor(name: str, shape, dtype=np.float32):
    return helper.make_tensor_value_info(name, _TYPES[np.dtype(dtype)], list(shape))


class Weights:
    """Seeded random initializers of one dtype."""

    def __init__(self, seed: int, dtype=np.float32) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.items: list[onnx.TensorProto] = []

    def add(self, name: str, array: np.ndarray) -> str:
        self.items.append(numpy_helper.from_array(array.astype(self.dtype), name))
        return name

    def normal(self, name: str, shape, scale: float) -> str:
        return self.add(name, self.rng.normal(0.0, scale, size=shape))

    def batch_norm(self, prefix: str, channels: int) -> list[str]:
        """scale, bias, mean, var of a BatchNormalization."""
        return [
            self.add(f"{prefix}.weight", self.rng.uniform(0.5, 1.5, channels)),
            self.add(f"{prefix}.bias", self.rng.normal(0.0, 0.2, channels)),
            self.add(f"{prefix}.running_mean", self.rng.normal(0.0, 0.3, channels)),
            self.add(f"{prefix}.running_var", self.rng.uniform(0.5, 2.0, channels)),
        ]


def resnet_basic_block(channels=8, size=12, batch=2, seed=0, downsample=False):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN, + shortcut, ReLU.

    With ``downsample`` the first conv has stride 2 and the shortcut is a
    strided 1x1 conv + BN (2*channels output channels).
    """
    w = Weights(seed)
    out_ch = 2 * channels if downsample else channels
    stride = 2 if downsample else 1
    scale = (2.0 / (9 * channels)) ** 0.5
    nodes = [
        helper.make_node(
            "Conv",
            ["x", w.normal("conv1.weight", (out_ch, channels, 3, 3), scale)],
            ["c1"],
            name="conv1",
            pads=[1, 1, 1, 1],
            strides=[stride, stride],
        ),
        helper.make_node(
            "BatchNormalization",
            ["c1", *w.batch_norm("bn1", out_ch)],
            ["b1"],
            name="bn1",
            epsilon=1e-5,
        ),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node(
            "Conv",
            ["r1", w.normal("conv2.weight", (out_ch, out_ch, 3, 3), scale)],
            ["c2"],
            name="conv2",
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "BatchNormalization", ["c2", *w.batch_norm("bn2", out_ch)], ["b2"], name="bn2"
        ),
    ]
    shortcut = "x"
    if downsample:
        nodes += [
            helper.make_node(
                "Conv",
                ["x", w.normal("down.weight", (out_ch, channels, 1, 1), 0.3)],
                ["d"],
                name="down.conv",
                strides=[2, 2],
            ),
            helper.make_node(
                "BatchNormalization",
                ["d", *w.batch_norm("down.bn", out_ch)],
                ["db"],
                name="down.bn",
            ),
        ]
        shortcut = "db"
    nodes += [
        helper.make_node("Add", ["b2", shortcut], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    out = size // stride
    return make_model(
        nodes,
        [tensor("x", (batch, channels, size, size))],
        [tensor("y", (batch, out_ch, out, out))],
        w.items,
        name="resnet_block",
    )


def transformer_mlp(
    batch=2, tokens=8, dim=32, hidden=128, seed=1, dtype=np.float32, approximate="none"
):
    """Pre-norm transformer MLP: y = x + W2 @ gelu(W1 @ layernorm(x) + b1) + b2."""
    w = Weights(seed, dtype)
    nodes = [
        helper.make_node(
            "LayerNormalization",
            [
                "x",
                w.add("ln.weight", w.rng.uniform(0.5, 1.5, dim)),
                w.add("ln.bias", w.rng.normal(0.0, 0.1, dim)),
            ],
            ["h"],
            name="ln",
            epsilon=1e-5,
        ),
        helper.make_node(
            "MatMul", ["h", w.normal("fc1.weight", (dim, hidden), dim**-0.5)], ["f1"], name="fc1"
        ),
        helper.make_node(
            "Add", ["f1", w.normal("fc1.bias", (hidden,), 0.1)], ["f1b"], name="fc1.bias_add"
        ),
        helper.make_node("Gelu", ["f1b"], ["g"], name="gelu", approximate=approximate),
        helper.make_node(
            "MatMul", ["g", w.normal("fc2.weight", (hidden, dim), hidden**-0.5)], ["f2"], name="fc2"
        ),
        helper.make_node(
            "Add", ["f2", w.normal("fc2.bias", (dim,), 0.1)], ["f2b"], name="fc2.bias_add"
        ),
        helper.make_node("Add", ["x", "f2b"], ["y"], name="residual"),
    ]
    return make_model(
        nodes,
        [tensor("x", (batch, tokens, dim), dtype)],
        [tensor("y", (batch, tokens, dim), dtype)],
        w.items,
        name="mlp_block",
        opset=20,  # Gelu
    )


# ------------------------------------------------------------------ single nodes


def node_model(
    op_type: str,
    inputs: dict[str, np.ndarray],
    *,
    weights: dict[str, np.ndarray] | None = None,
    outputs: tuple[str, ...] = ("y",),
    opset: int = OPSET,
    name: str = "node0",
    out_dtype=None,
    **attrs,
) -> onnx.ModelProto:
    """A one-node model: ``inputs`` are graph inputs (their arrays give shape and dtype),
    ``weights`` initializers; input order is the dict order, inputs first."""
    weights = weights or {}
    node = helper.make_node(op_type, [*inputs, *weights], list(outputs), name=name, **attrs)
    graph_inputs = [tensor(k, v.shape, v.dtype) for k, v in inputs.items()]
    first = next(iter({**inputs, **weights}.values()))
    elem = _TYPES[np.dtype(out_dtype or first.dtype)]
    graph_outputs = [helper.make_tensor_value_info(o, elem, None) for o in outputs]
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    graph = helper.make_graph([node], "node_test", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def random(rng: np.random.Generator, *shape: int, dtype=np.float32, low=None) -> np.ndarray:
    """Fresh random values, never zero (``low``: uniform in [low, low + 1) instead)."""
    if low is not None:
        return rng.uniform(low, low + 1.0, size=shape).astype(dtype)
    values = rng.normal(0.0, 1.0, size=shape)
    values[np.abs(values) < 1e-3] = 0.5
    return values.astype(dtype)
