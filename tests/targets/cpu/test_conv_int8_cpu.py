"""QDQ convolutions on the cpu int8 GEMM (issue 31, ``fusec/targets/cpu/conv/q8.py``):
a quantize -> dequantize of the input, an int8 weight dequantized per output channel, a
conv, a bias and the output quantized, against the reference executor with the outputs
poisoned, both launchers: padding (whose code is the activation's zero point, not 0),
strides, dilation, groups, 1x1 and k x k kernels, channels not a multiple of 4, K not
whole vectors, blocks of output rows and of output channels (ragged ones), codes at both
limits. The plan's choice is pinned by
``tests/passes/filecheck/fusion/quantized_conv_int8_cpu.mlir``; the onnxruntime-quantized CNN by
``tests/frontend/onnx/test_onnx_quant.py``. Each case compiles the GEMM's kernels
(seconds): slow."""

from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.api import run_pipeline
from fusec.runtime.launch import Program
from fusec.targets.cpu import gemm_int8

pytestmark = pytest.mark.slow


def _conv(shape, k, rs, stride, pad, codes, zero, rng, groups=1, dilation=1) -> str:
    """The QDQ conv's IR: weights random int8 codes (output channel 0 all -128, 1 all 127),
    scales per output channel."""
    n, c, h, w = shape
    c //= groups  # the weight's channels
    codes_w = rng.integers(-128, 128, (k, c, rs, rs)).astype(np.int8)
    codes_w[0], codes_w[1] = -128, 127
    scales = (rng.uniform(0.5, 2.0, k) / (c * rs * rs * 40)).astype(np.float32)
    span = (rs - 1) * dilation + 1
    oh, ow = (h + 2 * pad - span) // stride + 1, (w + 2 * pad - span) // stride + 1
    x_t, w_t = f"tensor<{n}x{c * groups}x{h}x{w}", f"tensor<{k}x{c}x{rs}x{rs}"
    y_t = f"tensor<{n}x{k}x{oh}x{ow}"
    attrs = (
        f"{{padding = array<i64: {pad}, {pad}>, strides = array<i64: {stride}, {stride}>, "
        f"dilations = array<i64: {dilation}, {dilation}>, groups = {groups} : i64}}"
    )
    return f"""func.func @f(%x: {x_t}xf32>, %bias: tensor<{k}xf32>) -> {y_t}x{codes}> {{
  %sx = arith.constant dense<0.05> : tensor<f32>
  %zx = arith.constant dense<{zero}> : tensor<{codes}>
  %wq = arith.constant dense<"0x{codes_w.tobytes().hex().upper()}"> : {w_t}xi8>
  %sw = arith.constant dense<"0x{scales.tobytes().hex().upper()}"> : tensor<{k}xf32>
  %zw = arith.constant dense<0> : tensor<{k}xi8>
  %so = arith.constant dense<0.1> : tensor<f32>
  %xq = ai.quantize %x, %sx, %zx : {x_t}xf32> * tensor<f32> * tensor<{codes}>
  %xd = ai.dequantize %xq, %sx, %zx : {x_t}x{codes}> * tensor<f32> * tensor<{codes}>
  %w = ai.dequantize %wq, %sw, %zw {{axis = 0 : i64}}
      : {w_t}xi8> * tensor<{k}xf32> * tensor<{k}xi8>
  %c = ai.conv2d %xd, %w {attrs} : {x_t}xf32> * {w_t}xf32>
  %b = ai.bias_add %c, %bias : {y_t}xf32> * tensor<{k}xf32>
  %y = ai.quantize %b, %so, %zx : {y_t}xf32> * tensor<f32> * tensor<{codes}>
  return %y : {y_t}x{codes}>
}}"""


def _filled(shape, dtype, byte: int) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` whose every byte is ``byte``."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.full(size, byte, np.uint8).view(dtype).reshape(shape)


def _run_poisoned(text: str, inputs: list[np.ndarray]) -> np.ndarray:
    """The cpu result on outputs pre-filled with two poisons (equal bytes both times),
    and the compiled launcher's the same; the conv on the int8 GEMM where the cpu has
    VNNI."""
    module = fusec.parse(text)
    run_pipeline(module, target="cpu")
    program = Program(module, target="cpu")
    runs = []
    for fill in (0x5A, 0xA5):
        (out,) = program(inputs, alloc=lambda shape, dtype, f=fill: _filled(shape, dtype, f))
        runs.append(np.array(out))
    assert runs[0].tobytes() == runs[1].tobytes(), "the result depends on the output's old contents"
    compiled = fusec.compile(text, target="cpu")
    assert np.asarray(compiled(*inputs)).tobytes() == runs[0].tobytes()
    heads = [line for k in compiled.kernels for line in k.source.splitlines()]
    q8 = [line for line in heads if line.startswith("# conv2d") and "gemm_q8_" in line]
    assert len(q8) == int(gemm_int8.available())
    return runs[0]


@pytest.mark.parametrize(
    "codes, zero, shape, k, rs, stride, pad, groups, dilation",
    [
        # small planes of one image: blocks of output channels (Q8_SPLIT_ROWS_PIXELS)
        ("ui8", 131, (1, 8, 5, 11), 48, 3, 1, 1, 1, 1),  # padding's code 131; K 48
        ("i8", -7, (2, 5, 6, 6), 16, 1, 1, 0, 1, 1),  # 1x1, C*R*S = 5 (not whole quads)
        ("ui8", 200, (1, 16, 15, 13), 80, 3, 2, 1, 1, 1),  # stride 2, a strip and a vector
        # blocks of output rows, groups, K not whole vectors
        ("i8", 9, (1, 3, 12, 12), 32, 5, 1, 2, 1, 1),  # 5x5, padding 2, int8 codes + 128
        ("ui8", 131, (1, 8, 17, 19), 48, 3, 1, 1, 1, 1),  # row blocks of 9 and 8 rows
        ("i8", -7, (2, 5, 8, 8), 16, 1, 1, 0, 1, 1),  # 1x1 codes as bytes, C 5, batch 2
        ("ui8", 3, (1, 16, 20, 21), 24, 3, 2, 1, 4, 1),  # 4 groups of 4 -> 6, stride 2
        ("ui8", 77, (2, 12, 9, 10), 9, 1, 1, 0, 3, 1),  # 1x1, 3 groups of 4 -> 3
        # C*R*S 1152, 81 pixels: the pixel rows on AMX tiles and a transpose, where granted
        ("ui8", 140, (1, 128, 9, 9), 32, 3, 1, 1, 1, 1),
        ("i8", 0, (1, 6, 11, 12), 13, 3, 1, 2, 1, 2),  # dilation 2, K 13, C 6 (a tap's
        # quads padded), bias rows 13
    ],
)
def test_a_qdq_conv_equals_the_reference(codes, zero, shape, k, rs, stride, pad, groups, dilation):
    """Activations spread so that many saturate (codes at both limits, the first image
    row and plane at +-1e6), weights of output channels 0 and 1 at -128 and 127: the
    codes equal the reference's (which convolves the dequantized floats; exact here,
    every partial sum below 2**24) where the conv runs on the int8 GEMM, and are at most
    one code from them in one of a thousand where it runs on floats (no VNNI)."""
    rng = np.random.default_rng(sum(shape) * k)
    text = _conv(shape, k, rs, stride, pad, codes, zero, rng, groups, dilation)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x[0, 0], x[0, -1, 0] = 1e6, -1e6
    bias = rng.standard_normal(k).astype(np.float32)
    got = _run_poisoned(text, [x, bias])
    want = np.asarray(fusec.compile(text, target="reference")(x, bias))
    assert got.dtype == want.dtype
    if gemm_int8.available():  # the int8 GEMM's integer sums: exact
        np.testing.assert_array_equal(got, want)
    else:  # the float conv sums the dequantized products in another order than the
        # reference: a sum within an ulp of a rounding tie may quantize one code apart
        apart = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert int(apart.max()) <= 1 and np.count_nonzero(apart) <= got.size // 1000
    limits = (0, 255) if codes == "ui8" else (-128, 127)
    assert len(np.unique(got)) > 16 and limits[0] <= int(got.min()) <= int(got.max()) <= limits[1]
