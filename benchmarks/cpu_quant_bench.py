"""Quantization on the cpu target (issue 31), one process, alternating samples.

* ``ai.quantize`` f32 -> f8E4M3FN (per tensor, saturating) and ``ai.dequantize`` i8 -> f32
  (per channel) over ``--elements`` values: the fusec kernel against numpy's reference
  (``fusec.dialect.numpy_ops``, ml_dtypes' conversion), both checked equal bit for bit;
* a QDQ MLP (MatMul -> Add -> Relu -> Gemm, ``--rows`` x ``--width``) quantized by
  onnxruntime's ``quantize_static`` (uint8 activations, or int8 with ``--activation
  int8``; int8 per-channel weights): fusec (each layer one matmul kernel with the QDQ
  prologue and requantizing epilogue: its GEMM ``gemm_q8_packed`` on the codes where the
  cpu has AVX-512 VNNI, ``gemm_q8_packed_amx`` where it has AMX-INT8 too, and the same
  model compiled with AMX off: the VNNI tiles), fusec's float path as it was before
  (the weights dequantized at import, an f32 GEMM: ``onnx_fold.kept_quantized`` switched
  off while importing) and onnxruntime with its default optimisations (its QLinear int8
  kernels) and with none, outputs compared;
* with ``--model cnn``: a QDQ CNN the same way (a ResNet bottleneck's three convs without
  the residual, 1 x ``--channels`` x ``--size`` x ``--size``: 1x1, 3x3 padding 1, 1x1 to
  4x the channels, relus between), each conv on the int8 GEMM where the cpu has VNNI
  (``targets/cpu/conv/q8.py``); "f32 (before)" is the model with its weights folded to
  float at import, its convs by the float methods (im2col, Winograd, ...);
* with ``--onnx PATH``: a float ONNX model of one image input (a CNN such as the cached
  MobileNetV3 / EfficientNet-B0 / ResNet-50 exports of ``models_bench.py``) quantized the
  same way (two random calibration inputs), the same contenders.

Samples alternate between the contenders; a sample is the mean of ``--calls`` calls. Prints
the minimum and median per call in us and the load average before and after.

    python benchmarks/cpu_quant_bench.py [--samples 9] [--calls 20] [--threads 1]
        [--activation uint8|int8] [--skip-elementwise] [--model mlp|cnn] [--size 56]
        [--channels 64] [--onnx model.onnx]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()  # before numpy: OpenBLAS reads its settings when it loads

import ml_dtypes  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from bench_common import alternate  # noqa: E402  (beside this script)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fusec  # noqa: E402
from fusec.dialect import numpy_ops  # noqa: E402


def _timed(contenders: dict, samples: int, calls: int) -> dict[str, list[float]]:
    """Each contender's samples in us per call: ``bench_common.alternate`` (the runners'
    same-run timer: the contenders in turn, a sample the mean of ``calls`` calls), after
    one untimed call of each."""
    times = alternate(contenders, samples, calls, warmup=1)
    return {name: [ms * 1e3 for ms in values] for name, values in times.items()}


def _report(title: str, times: dict[str, list[float]]) -> None:
    print(title)
    for name, values in times.items():
        print(f"  {name:28s} min {min(values):10.1f} us  median {statistics.median(values):10.1f}")


def _quantize_cases(n: int, samples: int, calls: int) -> None:
    rng = np.random.default_rng(0)
    q_text = f"""func.func @f(%x: tensor<{n}xf32>, %s: tensor<f32>, %z: tensor<f8E4M3FN>)
    -> tensor<{n}xf8E4M3FN> {{
  %q = ai.quantize %x, %s, %z : tensor<{n}xf32> * tensor<f32> * tensor<f8E4M3FN>
  return %q : tensor<{n}xf8E4M3FN>
}}"""
    x = (rng.standard_normal(n) * 300).astype(np.float32)
    s, z = np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fn)
    quantize = fusec.compile(q_text, target="cpu")
    want = numpy_ops.quantize_linear(x, s, z, saturate=True)
    assert np.array_equal(np.asarray(quantize(x, s, z)).view(np.uint8), want.view(np.uint8))
    times = _timed(
        {
            "fusec cpu": lambda: quantize(x, s, z),
            "numpy reference": lambda: numpy_ops.quantize_linear(x, s, z, saturate=True),
        },
        samples,
        calls,
    )
    _report(f"quantize f32 -> f8E4M3FN, {n} elements, per tensor", times)

    rows, cols = 1024, n // 1024
    d_text = f"""func.func @f(%q: tensor<{rows}x{cols}xi8>, %s: tensor<{rows}xf32>,
    %z: tensor<{rows}xi8>) -> tensor<{rows}x{cols}xf32> {{
  %d = ai.dequantize %q, %s, %z {{axis = 0 : i64}}
      : tensor<{rows}x{cols}xi8> * tensor<{rows}xf32> * tensor<{rows}xi8>
  return %d : tensor<{rows}x{cols}xf32>
}}"""
    codes = rng.integers(-128, 128, (rows, cols)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, rows).astype(np.float32)
    zero = rng.integers(-5, 5, rows).astype(np.int8)
    dequantize = fusec.compile(d_text, target="cpu")

    def reference() -> np.ndarray:
        return numpy_ops.dequantize_linear(codes, scale[:, None], zero[:, None])

    assert np.array_equal(np.asarray(dequantize(codes, scale, zero)), reference())
    times = _timed(
        {"fusec cpu": lambda: dequantize(codes, scale, zero), "numpy reference": reference},
        samples,
        calls,
    )
    _report(f"dequantize i8 -> f32, {rows}x{cols}, per channel", times)


def _qdq_mlp(
    path: Path, rows: int, width: int, activation: str = "uint8"
) -> tuple[Path, np.ndarray]:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(1)
    weights = {
        "w1": rng.standard_normal((width, width)) * width**-0.5,
        "b1": rng.standard_normal(width) * 0.1,
        "w2": rng.standard_normal((width, width)) * width**-0.5,
        "b2": rng.standard_normal(width) * 0.1,
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
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path / "mlp.onnx")
    data = [{"x": rng.standard_normal((rows, width)).astype(np.float32)} for _ in range(4)]

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter(data)

        def get_next(self):
            return next(self.data, None)

    quantize_static(
        str(path / "mlp.onnx"),
        str(path / "qdq.onnx"),
        Calibration(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8 if activation == "uint8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return path / "qdq.onnx", rng.standard_normal((rows, width)).astype(np.float32)


def _qdq_cnn(
    path: Path, size: int, channels: int, activation: str = "uint8"
) -> tuple[Path, np.ndarray]:
    """A ResNet bottleneck's convs without the residual: 1x1 C -> C, relu, 3x3 C -> C
    (padding 1), relu, 1x1 C -> 4C, on a 1 x C x size x size input."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rng = np.random.default_rng(1)
    c = channels
    weights = {
        "w1": rng.standard_normal((c, c, 1, 1)) * c**-0.5,
        "b1": rng.standard_normal(c) * 0.1,
        "w2": rng.standard_normal((c, c, 3, 3)) * (9 * c) ** -0.5,
        "b2": rng.standard_normal(c) * 0.1,
        "w3": rng.standard_normal((4 * c, c, 1, 1)) * c**-0.5,
        "b3": rng.standard_normal(4 * c) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"]),
    ]
    shape = [1, c, size, size]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 * c, size, size])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path / "cnn.onnx")
    data = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter(data)

        def get_next(self):
            return next(self.data, None)

    quantize_static(
        str(path / "cnn.onnx"),
        str(path / "qdq.onnx"),
        Calibration(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8 if activation == "uint8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return path / "qdq.onnx", rng.standard_normal(shape).astype(np.float32)


def _qdq_model(path: Path, source: Path, activation: str = "uint8") -> tuple[Path, np.ndarray]:
    """The float model at ``source`` quantized by ``quantize_static`` (QDQ, per-channel int8
    weights, two random calibration inputs of its input's shape), and an input."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model = onnx.load(str(source))
    (given,) = [
        i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    ]
    shape = [d.dim_value for d in given.type.tensor_type.shape.dim]
    rng = np.random.default_rng(1)
    data = [{given.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(2)]

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter(data)

        def get_next(self):
            return next(self.data, None)

    quantize_static(
        str(source),
        str(path / "qdq.onnx"),
        Calibration(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8 if activation == "uint8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return path / "qdq.onnx", rng.standard_normal(shape).astype(np.float32)


def _onnx_case(source: Path, threads: int, samples: int, calls: int, activation: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path, x = _qdq_model(Path(folder), source, activation)
        title = f"QDQ {source.stem}, {activation} activations"
        _model_case(path, x, title, threads, samples, calls)


def _mlp_case(
    rows: int, width: int, threads: int, samples: int, calls: int, activation: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path, x = _qdq_mlp(Path(folder), rows, width, activation)
        title = f"QDQ MLP {rows}x{width} @ {width}x{width} twice, {activation} activations"
        _model_case(path, x, title, threads, samples, calls)


def _cnn_case(
    size: int, channels: int, threads: int, samples: int, calls: int, activation: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path, x = _qdq_cnn(Path(folder), size, channels, activation)
        c = channels
        title = (
            f"QDQ CNN 1x{c}x{size}x{size}: 1x1 {c} -> {c}, 3x3 {c} -> {c}, 1x1 {c} -> "
            f"{4 * c}, {activation} activations"
        )
        _model_case(path, x, title, threads, samples, calls)


def _model_case(
    path: Path, x: np.ndarray, title: str, threads: int, samples: int, calls: int
) -> None:
    from unittest import mock

    import onnxruntime as ort

    from fusec.frontend import onnx_fold
    from fusec.targets.cpu import gemm_int8

    compiled = fusec.compile(fusec.from_onnx(path), target="cpu")
    with mock.patch.object(gemm_int8, "_PERMITTED", False):  # no AMX: the VNNI tiles
        vnni = fusec.compile(fusec.from_onnx(path), target="cpu")
    with mock.patch.object(onnx_fold, "kept_quantized", lambda *_: False):
        folded = fusec.compile(fusec.from_onnx(path), target="cpu")
    sessions = {}
    for name, level in (
        ("onnxruntime (optimised)", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        ("onnxruntime (no opt)", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    ):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.intra_op_num_threads = threads
        sessions[name] = ort.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
    programs = {"fusec cpu": compiled, "fusec cpu, VNNI tiles": vnni}
    programs["fusec cpu, f32 GEMM (before)"] = folded
    for label, program in programs.items():
        got = np.asarray(program(x))
        heads = [line for k in program.kernels for line in k.source.splitlines()]
        gemms = sorted(
            {
                line.split(": prologue, ")[1].split(",")[0]
                if line.startswith("# matmul")
                else line.split(": ", 1)[1].split(", epilogue")[0]
                for line in heads
                if line.startswith(("# matmul", "# conv2d"))
            }
        )
        print(f"{label}: {', '.join(gemms)}")
        for name, session in sessions.items():
            want = session.run(None, {session.get_inputs()[0].name: x})[0]
            step = float(np.min(np.diff(np.unique(want))))
            print(
                f"  against {name}: {np.count_nonzero(got != want)} of {got.size} outputs "
                f"differ, by at most {np.abs(got - want).max() / step:.0f} code(s) "
                f"({np.abs(got - want).max():.4g}); argmax equal: "
                f"{bool(np.array_equal(got.argmax(-1), want.argmax(-1)))}"
            )
    contenders = {label: (lambda p=program: p(x)) for label, program in programs.items()}
    for name, session in sessions.items():
        feed = {session.get_inputs()[0].name: x}
        contenders[name] = lambda s=session, f=feed: s.run(None, f)
    kinds = ", ".join(k.kind for k in compiled.kernels)
    _report(f"{title} ({kinds})", _timed(contenders, samples, calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--elements", type=int, default=1 << 22)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--activation", choices=("uint8", "int8"), default="uint8")
    parser.add_argument("--skip-elementwise", action="store_true", help="the model only")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--size", type=int, default=56, help="the CNN's plane")
    parser.add_argument("--channels", type=int, default=64, help="the CNN's channels")
    parser.add_argument("--onnx", type=Path, help="quantize and run this float model")
    args = parser.parse_args()
    numba.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()}, {args.threads} thread(s)", file=sys.stderr)
    if not args.skip_elementwise:
        _quantize_cases(args.elements, args.samples, max(1, args.calls // 4))
    if args.onnx is not None:
        _onnx_case(args.onnx, args.threads, args.samples, args.calls, args.activation)
    elif args.model == "cnn":
        case = (args.size, args.channels, args.threads, args.samples, args.calls)
        _cnn_case(*case, args.activation)
    else:
        case = (args.rows, args.width, args.threads, args.samples, args.calls)
        _mlp_case(*case, args.activation)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
