"""ONNX ``Attention`` (opset 23) imported as ai ops (``fusec/frontend/onnx_attention.py``):
each form against onnx's reference evaluator on fresh random inputs, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import fusec  # noqa: E402
from fusec.errors import FusecError  # noqa: E402

F32 = TensorProto.FLOAT


def _model(inputs: list[tuple[str, int, tuple]], attrs: dict, outputs: int = 1, opset=23):
    names = [n for n, _, _ in inputs]
    outs = ["Y", "present_key", "present_value"][:outputs]
    node = helper.make_node("Attention", names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "attention",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, F32, None) for o in outs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _inputs(inputs, rng) -> list[np.ndarray]:
    arrays = []
    for _, kind, shape in inputs:
        if kind == TensorProto.BOOL:
            arrays.append(rng.random(shape) < 0.7)
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


B, H, S, D = 2, 4, 5, 8
Q4, K4 = ("Q", F32, (B, H, S, D)), ("K", F32, (B, H, 7, D))
V4 = ("V", F32, (B, H, 7, D))

CASES = {
    "4d": ([Q4, K4, V4], {}),
    "4d-scale-softcap": ([Q4, K4, V4], {"scale": 0.3, "softcap": 2.0}),
    "4d-causal": ([Q4, K4, V4], {"is_causal": 1}),
    "4d-bool-mask": ([Q4, K4, V4, ("attn_mask", TensorProto.BOOL, (S, 7))], {}),
    "4d-float-mask-short-causal": (
        [Q4, K4, V4, ("attn_mask", F32, (B, 1, S, 4))], {"is_causal": 1}
    ),
    "3d-gqa": (
        [("Q", F32, (B, S, 32)), ("K", F32, (B, 7, 16)), ("V", F32, (B, 7, 24))],
        {"q_num_heads": 4, "kv_num_heads": 2},
    ),
    "4d-past-causal": (
        [Q4, ("K", F32, (B, H, S, D)), ("V", F32, (B, H, S, D)), ("", F32, ()),
         ("past_key", F32, (B, H, 3, D)), ("past_value", F32, (B, H, 3, D))],
        {"is_causal": 1},
    ),
    "4d-f32-softmax-precision": ([Q4, K4, V4], {"softmax_precision": F32}),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_attention_matches_onnx_reference(name: str) -> None:
    spec, attrs = CASES[name]
    used = [i for i in spec if i[0]]
    outputs = 3 if any(n == "past_key" for n, _, _ in spec) else 1
    model = _model(
        [i if i[0] else ("", F32, ()) for i in spec], attrs, outputs
    )  # an empty name: the optional input left out
    model.graph.ClearField("input")
    model.graph.input.extend([helper.make_tensor_value_info(n, t, s) for n, t, s in used])
    rng = np.random.default_rng(7)
    arrays = _inputs(used, rng)
    feeds = dict(zip([n for n, _, _ in used], arrays, strict=True))
    want = ReferenceEvaluator(model).run(None, feeds)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


I64 = TensorProto.INT64
NONPAD = ("nonpad_kv_seqlen", I64, (B,))
#: Opset 25's sliding window and external-cache lengths: (inputs, attributes).
WINDOWS = {
    "left": ([Q4, K4, V4], {"left_window_size": 2}),
    "left-right": ([Q4, K4, V4], {"left_window_size": 1, "right_window_size": 2}),
    "causal-left": ([Q4, K4, V4], {"is_causal": 1, "left_window_size": 1}),
    "past-causal-left": (
        [Q4, ("K", F32, (B, H, S, D)), ("V", F32, (B, H, S, D)), ("attn_mask", F32, (S, 8)),
         ("past_key", F32, (B, H, 3, D)), ("past_value", F32, (B, H, 3, D))],
        {"is_causal": 1, "left_window_size": 2},
    ),
    "bool-mask-right": (
        [Q4, K4, V4, ("attn_mask", TensorProto.BOOL, (7,))], {"right_window_size": 0}
    ),
    "nonpad": ([Q4, K4, V4, ("", F32, ()), ("", F32, ()), ("", F32, ()), NONPAD], {}),
    "nonpad-causal-window": (
        [Q4, K4, V4, ("", F32, ()), ("", F32, ()), ("", F32, ()), NONPAD],
        {"is_causal": 1, "left_window_size": 3, "right_window_size": 1},
    ),
}  # fmt: skip


def _window_case(name: str, constant_nonpad: bool):
    """The model and its feeds; ``nonpad_kv_seqlen`` (4 and 7 of the 7 keys) as a graph
    input, or as an initializer with ``constant_nonpad``."""
    spec, attrs = WINDOWS[name]
    model = _model([i if i[0] else ("", F32, ()) for i in spec], attrs, opset=25)
    used = [i for i in spec if i[0]]
    model.graph.ClearField("input")
    rng = np.random.default_rng(11)
    feeds = dict(zip([n for n, _, _ in used], _inputs(used, rng), strict=True))
    if "nonpad_kv_seqlen" in feeds:
        feeds["nonpad_kv_seqlen"] = np.array([4, 7], dtype=np.int64)
        if constant_nonpad:
            lengths = feeds.pop("nonpad_kv_seqlen")
            model.graph.initializer.append(onnx.numpy_helper.from_array(lengths, NONPAD[0]))
    model.graph.input.extend(
        [helper.make_tensor_value_info(n, t, s) for n, t, s in used if n in feeds]
    )
    return model, feeds


WINDOW_RUNS = [(n, False) for n in WINDOWS] + [(n, True) for n in WINDOWS if "nonpad" in n]


@pytest.mark.parametrize(("name", "constant_nonpad"), WINDOW_RUNS)
def test_sliding_window_and_nonpad_lengths_match_onnx_reference(name, constant_nonpad):
    """Opset 25: the window aligned at the past length or at nonpad[b] - q_len, keys past
    nonpad[b] masked, combined with masks and the causal frontier; nonpad_kv_seqlen a
    run-time int64 input (ai comparisons) or a constant (one constant mask)."""
    model, feeds = _window_case(name, constant_nonpad)
    want = ReferenceEvaluator(model).run(None, feeds)
    module = fusec.from_onnx(model)
    compare_ops = {"ai.less", "ai.greater_equal", "ai.less_equal"} & {
        op.name for op in module.walk()
    }
    assert bool(compare_ops) == ("nonpad" in name and not constant_nonpad), compare_ops
    got = fusec.compile(module, target="reference")(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # kernel compiles
@pytest.mark.parametrize("name", ["nonpad-causal-window", "past-causal-left"])
def test_sliding_window_on_the_cpu_target(name):
    model, feeds = _window_case(name, constant_nonpad=False)
    (want, *_) = ReferenceEvaluator(model).run(None, feeds)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(*feeds.values())
    got = got[0] if isinstance(got, tuple) else got
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_fully_masked_row_is_zeros() -> None:
    mask = np.ones((S, 7), dtype=bool)
    mask[2] = False  # query 2 may see no key
    model = _model([Q4, K4, V4, ("attn_mask", TensorProto.BOOL, (S, 7))], {})
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for _, _, s in (Q4, K4, V4))
    y = fusec.compile(fusec.from_onnx(model), target="reference")(q, k, v, mask)
    assert not np.isnan(y).any() and not y[:, :, 2].any()


def _with_qk_output(model):
    model.graph.node[0].output.extend(["", "", "qk"])  # output 3, qk_matmul_output
    model.graph.output.append(helper.make_tensor_value_info("qk", F32, None))
    return model


@pytest.mark.parametrize(
    ("mode", "softcap"), [(0, 0.0), (1, 0.0), (1, 2.0), (2, 0.0), (2, 2.0), (3, 0.0), (3, 2.0)]
)  # mode 0 with a softcap is refused: test_unsupported_forms_are_refused
def test_the_qk_matmul_output_is_the_step_its_mode_names(mode: int, softcap: float) -> None:
    """0: Q @ K^T (scaled), 1: after softcap, 2: plus the bias, 3: the softmax, against
    onnx's reference (the node suite's numbering); a fully masked row among them."""
    mask = ("attn_mask", F32, (S, 7))
    model = _with_qk_output(
        _model([Q4, K4, V4, mask], {"qk_matmul_output_mode": mode, "softcap": softcap})
    )
    rng = np.random.default_rng(mode)
    arrays = _inputs([Q4, K4, V4, mask], rng)
    arrays[3][1] = -np.inf  # query 1 may see no key
    feeds = dict(zip(["Q", "K", "V", "attn_mask"], arrays, strict=True))
    want = ReferenceEvaluator(model).run(None, feeds)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(*arrays)
    assert len(got) == 2
    for g, w in zip(got, want, strict=True):
        assert not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_unsupported_forms_are_refused() -> None:
    model = _with_qk_output(_model([Q4, K4, V4], {"softcap": 2.0}))
    with pytest.raises(FusecError, match="qk_matmul_output_mode=0 with a softcap"):
        fusec.from_onnx(model)
    model = _model([("Q", F32, (B, S, 32)), ("K", F32, (B, 7, 32)), ("V", F32, (B, 7, 32))], {})
    with pytest.raises(FusecError, match="q_num_heads and kv_num_heads"):
        fusec.from_onnx(model)
    model, _ = _window_case("nonpad", constant_nonpad=False)
    model.graph.node[0].attribute.append(helper.make_attribute("left_window_size", -2))
    with pytest.raises(FusecError, match="window sizes -2, -1 must be -1 or nonnegative"):
        fusec.from_onnx(model)


@pytest.mark.parametrize("dtype", [F32, TensorProto.FLOAT16])
def test_a_softcap_without_a_bias_is_one_soft_capped_attention(dtype: int) -> None:
    """The decomposition's cap (``tanh(scores / softcap) * softcap``) is recognised as
    ``ai.attention``'s softcap: one attention kernel on the cpu target (f16 with the
    softmax in f32 included). (With a bias, the zeroed fully masked rows keep the ops
    as they do without a softcap.)"""
    spec = [(n, dtype, s) for n, _, s in (Q4, K4, V4)]
    attrs = {"scale": 0.3, "softcap": 2.0}
    if dtype != F32:
        attrs["softmax_precision"] = F32
    model = _model(spec, attrs)
    model.graph.output[0].type.tensor_type.elem_type = dtype
    rng = np.random.default_rng(5)
    np_dtype = np.float32 if dtype == F32 else np.float16
    arrays = [(3 * rng.standard_normal(s)).astype(np_dtype) for _, _, s in spec]
    (want,) = ReferenceEvaluator(model).run(None, dict(zip("QKV", arrays, strict=True)))
    program = fusec.compile(fusec.from_onnx(model), target="cpu")
    assert [k.kind for k in program.kernels] == ["attention"]
    (op,) = [o for o in program.module.walk() if o.name == "ai.attention"]
    # sqrt(scale) on Q and K moves after the product (rounded to f16 there)
    assert op.attr("softcap") == 2.0 and op.attr("scale") == pytest.approx(0.3, rel=1e-3)
    got = program(*arrays)
    tol = 1e-5 if dtype == F32 else 2e-2  # ONNX's reference rounds each step to f16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)
