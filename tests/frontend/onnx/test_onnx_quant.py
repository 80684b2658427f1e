"""ONNX QuantizeLinear / DequantizeLinear imported as ``ai.quantize`` / ``ai.dequantize``
(``fusec/frontend/onnx_quant.py``, issue 31) and run by the reference target: bit-exact
against onnx's reference evaluator (int8, uint8, float8 e4m3fn / e5m2 with and without
saturation; per tensor, per axis, per block), an fp8 QDQ MatMul graph against
onnxruntime and on the cpu target, and the located refusals (the cuda target, types fusec
has no tensors of)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import onnx
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_nets import run_onnxruntime
from w4_cases import w4a16_onnx

import fusec
from fusec.errors import FusecError
from fusec.frontend.onnx_import import UnsupportedOnnx

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
I8, U8, E4M3, E5M2, I4, U4 = (
    TensorProto.INT8,
    TensorProto.UINT8,
    TensorProto.FLOAT8E4M3FN,
    TensorProto.FLOAT8E5M2,
    TensorProto.INT4,
    TensorProto.UINT4,
)
NUMPY = {
    F32: np.float32,
    F16: np.float16,
    I8: np.int8,
    U8: np.uint8,
    E4M3: ml_dtypes.float8_e4m3fn,
    E5M2: ml_dtypes.float8_e5m2,
    I4: ml_dtypes.int4,
    U4: ml_dtypes.uint4,
}
RNG = np.random.default_rng(31)


def _onnxruntime_outputs(path, x: np.ndarray):
    """(level, output) of onnxruntime's CPU provider on the model at ``path`` fed ``x``:
    its float graph (``ORT_DISABLE_ALL``) always; its int8 kernels (``ORT_ENABLE_ALL``)
    only where the cpu has VNNI. Without VNNI, MLAS's u8s8 kernels add pairs of products
    in int16 (``vpmaddubsw``) and saturate, so onnxruntime's own int8 graph is off there
    (its quantization docs: "reduce_range" on AVX2 machines); measured on an AVX2 AMD
    EPYC: 93% of the codes of these graphs differ from its float graph's."""
    import onnxruntime

    from fusec.targets.cpu.host import target_features

    flags = set(target_features().split(","))
    vnni = bool({"+avx512vnni", "+avxvnni", "+avx512_vnni"} & flags)
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL") if vnni else ("ORT_DISABLE_ALL",):
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        yield level, session.run(None, {"x": x})[0]


def _model(op_type, x_type, out_type, shape, initializers, opset, **attrs) -> onnx.ModelProto:
    names = ["x"] + [t.name for t in initializers]
    node = helper.make_node(op_type, names, ["y"], name="q", **attrs)
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [helper.make_tensor_value_info("x", x_type, shape)],
        [helper.make_tensor_value_info("y", out_type, shape)],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _const(name: str, array: np.ndarray, kind: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=NUMPY[kind]), name)


def _run(model, x):
    """fusec's result on the reference target (output poisoned by the runtime), and onnx's."""
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    return np.asarray(got), np.asarray(want)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal codes; NaN where onnx has NaN (any NaN pattern), nowhere else."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    keep = ~np.isnan(w)
    np.testing.assert_array_equal(got.view(np.uint8)[keep], want.view(np.uint8)[keep])


def _input(shape, dtype=np.float32, spread=100.0, big=1e6) -> np.ndarray:
    """Random values over several binades, with ties and out-of-range values for saturation."""
    x = RNG.standard_normal(shape) * spread
    flat = x.reshape(-1)
    flat[:6] = [0.5, 1.5, 2.5, -0.5, big, -big]  # ties round to even; saturation
    return x.astype(dtype)


# (name, output type, scale shape, attrs): per tensor, per axis, per block
LAYOUTS = [
    ("tensor", (), {}),
    ("axis0", (4,), {"axis": 0}),
    ("block", (4, 2), {"axis": 1, "block_size": 4}),
    ("block_ragged", (4, 3), {"axis": 1, "block_size": 3}),
]


LAYOUT_IDS = [layout[0] for layout in LAYOUTS]


def _scale(shape, dtype=np.float32) -> np.ndarray:
    return (RNG.uniform(0.05, 4.0, size=shape)).astype(dtype)


@pytest.mark.parametrize("kind", [I8, U8, I4, U4])
@pytest.mark.parametrize(("layout", "scale_shape", "attrs"), LAYOUTS, ids=LAYOUT_IDS)
def test_quantize_integers_match_onnx(kind, layout, scale_shape, attrs):
    scale = _scale(scale_shape)
    info = ml_dtypes.iinfo(NUMPY[kind])
    zero = RNG.integers(info.min // 2, info.max // 2, size=scale_shape, endpoint=True)
    inits = [_const("s", scale, F32), _const("z", zero, kind)]
    model = _model("QuantizeLinear", F32, kind, [4, 8], inits, 21, **attrs)
    got, want = _run(model, _input((4, 8)))
    _same_bits(got, want)
    assert len(np.unique(got)) > (8 if info.bits == 8 else 2)  # codes, saturated ends too
    assert got.min() == info.min and got.max() == info.max


@pytest.mark.parametrize("kind", [E4M3, E5M2])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize(("layout", "scale_shape", "attrs"), LAYOUTS, ids=LAYOUT_IDS)
def test_quantize_float8_matches_onnx(kind, saturate, layout, scale_shape, attrs):
    scale = _scale(scale_shape)
    inits = [_const("s", scale, F32), _const("z", np.zeros(scale_shape), kind)]
    model = _model("QuantizeLinear", F32, kind, [4, 8], inits, 21, saturate=saturate, **attrs)
    x = _input((4, 8), spread=300.0)
    x.reshape(-1)[6:9] = [np.inf, -np.inf, np.nan]
    got, want = _run(model, x)
    _same_bits(got, want)
    largest = float(ml_dtypes.finfo(NUMPY[kind]).max)
    values = got.astype(np.float64)
    if saturate:  # +-1e6 and +-inf clamped; only the NaN stays NaN
        assert (np.abs(values) == largest).sum() >= 4 and np.isnan(values).sum() == 1
    else:  # NaN (e4m3fn) or inf (e5m2) instead
        assert (~np.isfinite(values)).sum() >= 5


def test_quantize_float16_input_and_default_uint8_matches_onnxruntime():
    """No zero point: UINT8 with zero point 0 (opset 19, an f16 input and scale). Against
    onnxruntime, which divides in float32 as fusec does (onnx's evaluator divides in
    float16, where 6e4 / 0.125 overflows to inf and the uint8 code is undefined)."""
    inits = [_const("s", np.float16(0.125), F16)]
    model = _model("QuantizeLinear", F16, U8, [3, 5], inits, 19)
    x = _input((3, 5), np.float16, spread=10.0, big=6e4)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    _same_bits(np.asarray(got), run_onnxruntime(model, {"x": x})[0])


@pytest.mark.parametrize("kind", [I8, U8, E4M3, E5M2, I4, U4])
@pytest.mark.parametrize(("layout", "scale_shape", "attrs"), LAYOUTS, ids=LAYOUT_IDS)
def test_dequantize_matches_onnx(kind, layout, scale_shape, attrs):
    if kind in (I8, U8, I4, U4):
        info = ml_dtypes.iinfo(NUMPY[kind])
        x = RNG.integers(info.min, info.max, size=(4, 8), endpoint=True).astype(NUMPY[kind])
        zero = RNG.integers(info.min, info.max, size=scale_shape, endpoint=True)
    else:
        x = (RNG.standard_normal((4, 8)) * 50).astype(NUMPY[kind])
        zero = np.zeros(scale_shape)
    inits = [_const("s", _scale(scale_shape), F32), _const("z", zero, kind)]
    model = _model("DequantizeLinear", kind, F32, [4, 8], inits, 21, **attrs)
    got, want = _run(model, x)
    assert got.dtype == np.float32 and not np.isnan(got).any()
    np.testing.assert_array_equal(got, want)  # one rounding of an exact product


# ------------------------------------------------------------- an fp8 QDQ MatMul


def _qdq_matmul(m=16, k=64, n=32) -> tuple[onnx.ModelProto, np.ndarray]:
    """Activations Q->DQ per tensor (e4m3fn), a float8 weight DQ per output column, MatMul:
    what exporters write for an fp8 linear layer (opset 21)."""
    w = (RNG.standard_normal((k, n)) * 2).astype(ml_dtypes.float8_e4m3fn)
    inits = [
        numpy_helper.from_array(w, "w_q"),
        _const("w_s", _scale((n,)) / 8, F32),
        _const("w_z", np.zeros(n), E4M3),
        _const("x_s", np.float32(0.02), F32),
        _const("x_z", np.float32(0), E4M3),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"], name="dequant_x"),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"], name="dq_w", axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes,
        "fp8_linear",
        [helper.make_tensor_value_info("x", F32, [m, k])],
        [helper.make_tensor_value_info("y", F32, [m, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model, RNG.standard_normal((m, k)).astype(np.float32) * 3


def test_fp8_qdq_matmul_matches_onnxruntime():
    model, x = _qdq_matmul()
    module = fusec.from_onnx(model)
    text = str(module)
    assert "ai.quantize" in text and "tensor<16x64xf8E4M3FN>" in text
    got = fusec.compile(module, target="reference")(x)
    want = run_onnxruntime(model, {"x": x})[0]
    assert not np.isnan(got).any()
    assert_close(got, want, tol=1e-5)
    # The quantization matters: the unquantized product is far from it.
    w = ReferenceEvaluator(model).run(["wd"], {"x": x})[0]
    assert np.linalg.norm(x @ w - want) / np.linalg.norm(want) > 1e-3


def test_fp8_qdq_matmul_runs_on_cpu_as_the_reference():
    """The cpu target computes the QDQ graph (issue 31): the activations' codes are the
    reference's bit for bit, so the product agrees to float32 rounding."""
    model, x = _qdq_matmul()
    module = fusec.from_onnx(model)
    got = fusec.compile(module, target="cpu")(x)
    want = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    assert not np.isnan(got).any()
    assert_close(got, want, tol=1e-5)


def test_fp8_qdq_matmul_is_the_float8_gemm_on_cuda():
    """On cuda the activations' quantize is one pointwise kernel (the Numba helpers the cpu
    kernels use, ``test_quant_cuda.py``) and the product the float8 GEMM: the weight's
    codes (stored K x N by the model) are read N x K (``fp8-constant-weights``), both
    scales in the epilogue, no fallback."""
    model, _ = _qdq_matmul()
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    assert "quantize_f8e4m3fn_sat(" in compiled.kernels[0].source
    gemm = compiled.kernels[1]
    assert gemm.remark is None and gemm.specs[0].dtype == "f8E4M3FN"
    assert "ai.mul -> ai.mul" in gemm.specs[0].epilogue.name


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_int4_weight_only_matmul_matches_onnx(target):
    """The int4 weight stays codes at import (``onnx_fold.kept_quantized``) and under
    ``canonicalize``; the cpu pipeline folds it once, at compile
    (``fold-quantized-weights``), the reference target dequantizes it each call. The
    product equals onnx's reference evaluator's to float32 rounding on both targets."""
    model, x = w4a16_onnx(8, 64, 32, 16, "f32", seed=5)
    module = fusec.from_onnx(model)
    assert "tensor<64x32xi4>" in str(module) and "ai.dequantize" in str(module)
    compiled = fusec.compile(module, target=target)
    if target == "cpu":
        assert "ai.dequantize" not in compiled.ir
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert_close(compiled(x), want, tol=1e-5)


def test_int4_weight_only_f16_matmul_on_cuda_reads_the_codes():
    """On cuda a W4A16 layer keeps its weight as int4 codes: past 16 rows of activations
    one pointwise kernel dequantizes them each call (per-block scales along K) and the
    Tensor Core GEMM (no fallback) multiplies (up to 16: tests/targets/cuda/test_w4a16.py);
    the f16 weight is never a constant of the program."""
    model, _ = w4a16_onnx(32, 128, 64, 32, "f16", seed=6)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    assert compiled.kernels[1].remark is None
    assert re.search(r"arith\.constant [^\n]*: tensor<128x64xi4>", compiled.ir)
    assert not re.search(r"arith\.constant [^\n]*: tensor<128x64xf16>", compiled.ir)


# ------------------------------------------------------------------- refusals


def test_int2_output_is_refused_by_name():
    inits = [_const("s", np.float32(0.5), F32)]
    code = TensorProto.INT2
    model = _model("QuantizeLinear", F32, code, [4], inits, 25, output_dtype=code)
    with pytest.raises(UnsupportedOnnx, match="element type INT2: fusec quantizes to") as err:
        fusec.from_onnx(model)
    assert err.value.feature == "dtype" and 'node "q"' in err.value.format()


def test_a_bad_scale_shape_is_located():
    inits = [_const("s", _scale((3,)), F32), _const("z", np.zeros(3), I8)]
    model = _model("QuantizeLinear", F32, I8, [4, 8], inits, 21, axis=0)
    with pytest.raises(FusecError, match=r"operand 'scale' must be a scalar, or 1-D of 4 values"):
        fusec.from_onnx(model)


def test_weight_only_dequantize_is_folded_at_compile_and_runs_on_cpu():
    """DequantizeLinear of a constant float8 weight (no quantized activations) is kept at
    import, as one of int8 codes (``onnx_fold.kept_quantized``: the cuda float8 GEMM reads
    such codes), and folded by ``canonicalize`` where nothing reads it as codes: the cpu
    target runs the graph with the dequantized f32 weight, equal to onnxruntime's result."""
    model, x = _qdq_matmul()
    graph = model.graph
    keep = [n for n in graph.node if n.name in ("dq_w", "matmul")]
    keep[1].input[0] = "x"
    del graph.node[:]
    graph.node.extend(keep)
    module = fusec.from_onnx(model)
    assert "ai.dequantize" in str(module) and "ai.matmul" in str(module)
    compiled = fusec.compile(module, target="cpu")
    assert "ai.dequantize" not in compiled.ir
    assert_close(compiled(x), run_onnxruntime(model, {"x": x})[0], tol=1e-4)


# --------------------------------------- a model from onnxruntime's quantization tool


def test_onnxruntime_static_qdq_model_runs_on_cpu_as_onnxruntime(tmp_path):
    """An MLP (MatMul, Add, Relu, Gemm) quantized by onnxruntime's quantize_static in the
    QDQ format (uint8 activations, int8 weights per channel, int32 biases): fusec imports
    it (the weights' and biases' DequantizeLinear folded at import), and each layer is one
    cpu matmul kernel (activations quantized and dequantized in its prologue, the scale,
    bias and requantization in its epilogue) and, with AVX-512 VNNI, multiplies the
    uint8 codes by the int8 weight codes (``gemm_q8_packed``: the weights' DequantizeLinear
    is kept at import so that their scales move after the product). Its outputs are
    dequantized uint8 codes: equal to onnxruntime's, unoptimised (its float graph) and
    optimised (its int8 kernels), but for a code a float32 rounding may move across a
    tie."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    d, h, o = 64, 128, 32
    weights = {
        "w1": RNG.standard_normal((d, h)) * 0.2,
        "b1": RNG.standard_normal(h) * 0.1,
        "w2": RNG.standard_normal((h, o)) * 0.2,
        "b2": RNG.standard_normal(o) * 0.1,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Gemm", ["r1", "w2", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", F32, [8, d])],
        [helper.make_tensor_value_info("y", F32, [8, o])],
        [_const(name, value, F32) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "mlp.onnx")

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter([{"x": RNG.standard_normal((8, d)).astype(np.float32)}] * 4)

        def get_next(self):
            return next(self.data, None)

    quantization.quantize_static(
        str(tmp_path / "mlp.onnx"),
        str(tmp_path / "qdq.onnx"),
        Calibration(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
    )
    qdq = onnx.load(tmp_path / "qdq.onnx")
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in qdq.graph.node}
    compiled = fusec.compile(fusec.from_onnx(qdq), target="cpu")
    assert [k.kind for k in compiled.kernels] == ["matmul", "matmul"]
    from fusec.targets.cpu import gemm_int8

    # the weights' codes reach the kernels: each layer an int8 GEMM where the cpu has VNNI
    int8 = ["gemm_q8_packed" in k.source for k in compiled.kernels]
    assert int8 == [gemm_int8.available()] * 2
    x = RNG.standard_normal((8, d)).astype(np.float32)
    x[0] *= 100  # codes at both limits
    got = np.asarray(compiled(x))
    for level, want in _onnxruntime_outputs(tmp_path / "qdq.onnx", x):
        assert not np.isnan(got).any()
        step = float(np.min(np.diff(np.unique(want))))  # the output's scale: one code
        assert np.count_nonzero(got != want) <= 2 and np.abs(got - want).max() <= step, level


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
def test_onnxruntime_static_qdq_cnn_runs_on_the_int8_gemm_as_onnxruntime(tmp_path, activation):
    """A CNN quantized by onnxruntime's quantize_static in the QDQ format (per-channel
    int8 weights): a 1x1 conv, a 3x3 conv with padding 1 whose input's zero point is not
    0 (no relu before it: the padding's code is that zero point) and whose input the
    residual add reads too (one DequantizeLinear for both), a relu and a 3x3 conv of
    stride 2. Each conv is one cpu kernel on the int8 GEMM where the cpu has VNNI (conv
    method "q8": the scales moved after the conv, the codes' exact sums, the scales, bias
    and requantization in the epilogue); its outputs equal onnxruntime's float graph and
    its int8 (QLinearConv) graph, codes at both limits included."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(310)
    c, k = 8, 32
    weights = {
        "w1": rng.standard_normal((k, c, 1, 1)) * c**-0.5,
        "b1": rng.standard_normal(k) * 0.1,
        "w2": rng.standard_normal((k, k, 3, 3)) * (9 * k) ** -0.5,
        "b2": rng.standard_normal(k) * 0.1,
        "w3": rng.standard_normal((2 * k, k, 3, 3)) * (9 * k) ** -0.5,
        "b3": rng.standard_normal(2 * k) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "c1"], ["s2"]),
        helper.make_node("Relu", ["s2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", F32, [1, c, 14, 14])],
        [helper.make_tensor_value_info("y", F32, [1, 2 * k, 7, 7])],
        [_const(name, value, F32) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "cnn.onnx")
    data = [{"x": rng.standard_normal((1, c, 14, 14)).astype(np.float32)} for _ in range(4)]

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter(data)

        def get_next(self):
            return next(self.data, None)

    quantization.quantize_static(
        str(tmp_path / "cnn.onnx"),
        str(tmp_path / "qdq.onnx"),
        Calibration(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=getattr(quantization.QuantType, activation),
        weight_type=quantization.QuantType.QInt8,
    )
    compiled = fusec.compile(fusec.from_onnx(tmp_path / "qdq.onnx"), target="cpu")
    from fusec.targets.cpu import gemm_int8

    heads = [line for k in compiled.kernels for line in k.source.splitlines()]
    convs = [line for line in heads if line.startswith("# conv2d")]
    assert len(convs) == 3
    assert ["gemm_q8_rows" in line for line in convs] == [gemm_int8.available()] * 3
    x = rng.standard_normal((1, c, 14, 14)).astype(np.float32)
    x[0, 0] *= 100  # codes at both limits
    got = np.asarray(compiled(x))
    assert not np.isnan(got).any()
    for level, want in _onnxruntime_outputs(tmp_path / "qdq.onnx", x):
        np.testing.assert_array_equal(got, want, err_msg=level)


@pytest.mark.slow
def test_onnxruntime_static_qdq_grouped_and_depthwise_convs_as_onnxruntime(tmp_path):
    """A MobileNet-like block quantized by quantize_static (QDQ, uint8 activations,
    per-channel int8 weights): a 1x1 expansion 8 -> 24 (K not whole vectors of 16), a
    3x3 depthwise conv (24 groups), a grouped 3x3 conv of stride 2 (3 groups of 8 -> 4),
    a 1x1 projection 12 -> 8. The dense and grouped convs run on ``gemm_q8_rows`` (the
    weight's rows by the codes, channel rows out), the depthwise one on the float codes
    (exact sums); the outputs equal onnxruntime's float and int8 graphs."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(311)
    weights = {
        "w1": rng.standard_normal((24, 8, 1, 1)) * 8**-0.5,
        "b1": rng.standard_normal(24) * 0.1,
        "w2": rng.standard_normal((24, 1, 3, 3)) / 3,
        "b2": rng.standard_normal(24) * 0.1,
        "w3": rng.standard_normal((12, 8, 3, 3)) * 72**-0.5,
        "b3": rng.standard_normal(12) * 0.1,
        "w4": rng.standard_normal((8, 12, 1, 1)) * 12**-0.5,
        "b4": rng.standard_normal(8) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=24),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node(
            "Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2], group=3
        ),
        helper.make_node("Conv", ["c3", "w4", "b4"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mobile",
        [helper.make_tensor_value_info("x", F32, [1, 8, 20, 20])],
        [helper.make_tensor_value_info("y", F32, [1, 8, 10, 10])],
        [_const(name, value, F32) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "mobile.onnx")
    data = [{"x": rng.standard_normal((1, 8, 20, 20)).astype(np.float32)} for _ in range(4)]

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter(data)

        def get_next(self):
            return next(self.data, None)

    quantization.quantize_static(
        str(tmp_path / "mobile.onnx"),
        str(tmp_path / "qdq.onnx"),
        Calibration(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
    )
    compiled = fusec.compile(fusec.from_onnx(tmp_path / "qdq.onnx"), target="cpu")
    from fusec.targets.cpu import gemm_int8

    heads = [line for k in compiled.kernels for line in k.source.splitlines()]
    convs = [line for line in heads if line.startswith("# conv2d")]
    assert len(convs) == 4
    on = gemm_int8.available()
    assert ["gemm_q8_rows" in line for line in convs] == [on, False, on, on]
    assert "(groups 3)" in convs[2] and "depthwise" in convs[1]
    x = rng.standard_normal((1, 8, 20, 20)).astype(np.float32)
    x[0, 0] *= 100  # codes at both limits
    got = np.asarray(compiled(x))
    assert not np.isnan(got).any()
    for level, want in _onnxruntime_outputs(tmp_path / "qdq.onnx", x):
        np.testing.assert_array_equal(got, want, err_msg=level)


def test_int4_constants_print_their_values_and_parse_back():
    """An INT4 initializer (two a byte in the model) becomes an i4 constant whose text is
    its values (-8..7, not the low nibbles ml_dtypes keeps), and the printed IR runs as the
    imported one (issue 31)."""
    zero = np.array([-2, 1, -8, 7], np.int8).astype(ml_dtypes.int4)
    inits = [_const("s", np.ones(4), F32), numpy_helper.from_array(zero, "z")]
    model = _model("DequantizeLinear", I4, F32, [4, 2], inits, 21, axis=0)
    module = fusec.from_onnx(model)
    assert "dense<[-2, 1, -8, 7]> : tensor<4xi4>" in str(module)
    x = np.array([[1, 2], [3, 4], [-5, -6], [7, 0]], np.int8).astype(ml_dtypes.int4)
    want = (x.astype(np.float32) - zero.astype(np.float32)[:, None]).astype(np.float32)
    for source in (module, fusec.parse(str(module))):
        np.testing.assert_array_equal(fusec.compile(source, target="reference")(x), want)


@pytest.mark.parametrize("target", ["reference", "cpu"])
@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zeros"])
def test_dynamic_quantize_linear_matches_onnx(target, kind):
    """DynamicQuantizeLinear: uint8 codes, the scale and the zero point computed at run
    time from the input's range, each equal to onnx's reference evaluator's (all zeros: a
    range of 1, as the operator defines it)."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"], name="q")
    graph = helper.make_graph(
        [node],
        "dynamic",
        [helper.make_tensor_value_info("x", F32, [3, 16])],
        [
            helper.make_tensor_value_info("y", U8, [3, 16]),
            helper.make_tensor_value_info("s", F32, []),
            helper.make_tensor_value_info("z", U8, []),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    x = _input((3, 16), spread=20.0, big=50.0)
    x = {"mixed": x, "positive": np.abs(x), "negative": -np.abs(x), "zeros": 0 * x}[kind]
    got = fusec.compile(fusec.from_onnx(model), target=target)(x)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
