"""The cpu int8 GEMM (issue 31): ``gemm_q8_packed`` (uint8 x int8 -> int32, the weight
packed once) against the exact integer product, its codes at the int8 limits, ragged
shapes and column tiles, C poisoned; the portable tile (no VNNI) alike; the QDQ linear
layer that runs on it against the reference executor, both launchers, outputs poisoned.
The plan's choice is pinned by ``tests/passes/filecheck/fusion/quantized_matmul_int8_cpu.mlir``
and the onnxruntime-quantized MLP by ``tests/frontend/onnx/test_onnx_quant.py``."""

from __future__ import annotations

import re

import numba
import numpy as np
import pytest

import fusec
from fusec.api import run_pipeline
from fusec.runtime.launch import Program
from fusec.targets.cpu import gemm_int8
from fusec.targets.cpu.host import STRIP

RNG = np.random.default_rng(3131)


def _operands(m: int, k: int, n: int, zero: int, extremes: bool):
    """A (codes less ``zero``, as float32) and B (int8 codes as float32); with
    ``extremes`` A's first rows are all 0 and all 255 codes and B's first columns all
    -128 and all 127 (the largest products of both signs)."""
    a = (RNG.integers(0, 256, (m, k)) - zero).astype(np.float32)
    b = RNG.integers(-128, 128, (k, n)).astype(np.float32)
    if extremes:
        a[0], a[min(1, m - 1)] = -zero, 255 - zero
        b[:, 0], b[:, min(1, n - 1)] = -128, 127
    return a, b


#: The int8 GEMM's tiles are 512-bit vectors of 16 int32 lanes (AVX-512, with or without
#: VNNI: the templates name them only with VNNI, ``gemm_int8.available``); on a narrower
#: target a call runs past its strips, so the tests that call them directly skip there.
needs_512 = pytest.mark.skipif(
    gemm_int8.W != gemm_int8.LANES, reason="the int8 GEMM's tiles need AVX-512 (16 lanes)"
)

#: The int8 GEMMs this host runs: VNNI, and AMX where the process may use it.
GEMMS = ["gemm_q8_packed"] + (["gemm_q8_packed_amx"] if gemm_int8.amx_available() else [])


def _gemm(a, b, zero, c0=0, cols=None, transposed=False, gemm="gemm_q8_packed"):
    m, k = a.shape
    n = b.shape[1]
    cols = n - c0 if cols is None else cols
    packed = gemm_int8.pack_q8(b.T.copy() if transposed else b, transposed=transposed)
    q8 = np.full(gemm_int8.scratch_floats(m, k) + 7, np.nan, np.float32)
    c = np.full((m, cols), np.nan, np.float32)
    a_args, c_args = (a.reshape(-1), 0, k), (c.reshape(-1), 0, cols)
    getattr(gemm_int8, gemm)(m, cols, k, *a_args, zero, q8, packed, n, c0, *c_args)
    return c


@needs_512
@pytest.mark.parametrize(
    "m, k, n, c0, cols",
    [
        (1, 1, 16, 0, 16),  # one row, K shorter than a quad
        (6, 64, STRIP, 0, STRIP),  # one whole tile
        (13, 37, 80, 0, 80),  # ragged rows and K, a strip and one vector
        (7, 9, 144, STRIP, 80),  # a column tile from the second strip to B's end
        (20, 101, 3 * STRIP, STRIP, STRIP),  # a middle column tile
        (50, 500, 2 * STRIP + 48, 0, 2 * STRIP + 48),
        (33, 130, 2 * STRIP + 16, STRIP, STRIP + 16),  # AMX: a 1-row block, 16-column pair
    ],
)
@pytest.mark.parametrize("gemm", GEMMS)
def test_gemm_q8_packed_is_the_exact_integer_product(m, k, n, c0, cols, gemm):
    """(AMX: 16 rows or more in 32-row blocks, the last one ragged; fewer in VNNI tiles.)"""
    for zero, extremes in ((0, True), (128, True), (131, False), (255, True)):
        a, b = _operands(m, k, n, zero, extremes)
        want = (a.astype(np.int64) @ b.astype(np.int64)[:, c0 : c0 + cols]).astype(np.float32)
        got = _gemm(a, b, zero, c0, cols, gemm=gemm)
        np.testing.assert_array_equal(got, want, err_msg=f"zero {zero}")


@needs_512
@pytest.mark.parametrize("m, k, n", [(5, 37, 48), (33, 576, 80), (40, 64, 2 * STRIP)])
@pytest.mark.parametrize("gemm", ["gemm_q8_bytes"] + ["gemm_q8_bytes_amx"] * (len(GEMMS) > 1))
def test_gemm_q8_bytes_is_the_exact_integer_product(m, k, n, gemm):
    """A's codes given as bytes (a quantized conv's im2row), rows of ``padded_k(k)``: the
    bytes past K and the rows past M (up to AMX's 32) hold poison (0xA5) and do not count."""
    zero = 131
    a, b = _operands(m, k, n, zero, True)
    kp = gemm_int8.padded_k(k)
    q8 = np.full(gemm_int8.scratch_floats(m, k), np.nan, np.float32)
    rows = q8[: -(-m // 32) * 32 * kp // 4].view(np.uint8).reshape(-1, kp)
    rows[:] = 0xA5
    rows[:m, :k] = (a + zero).astype(np.uint8)
    c = np.full((m, n), np.nan, np.float32)
    packed = gemm_int8.pack_q8(b.T.copy(), transposed=True)
    getattr(gemm_int8, gemm)(m, n, k, q8, np.int32(zero), packed, n, 0, c.reshape(-1), 0, n)
    np.testing.assert_array_equal(c, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


def _packed_columns(x: np.ndarray, poison: int = 0xA5) -> np.ndarray:
    """``x`` (``k x n`` uint8 codes, ``n`` whole vectors of 16) as ``gemm_q8_rows``' X:
    strips of ``STRIP`` columns (the last one narrower), quad rows of 4 bytes a column;
    the bytes past ``k`` hold ``poison``."""
    k, n = x.shape
    kq = -(-k // 4)
    padded = np.full((4 * kq, n), poison, np.uint8)
    padded[:k] = x
    quads = padded.reshape(kq, 4, n).transpose(0, 2, 1)
    pieces = [quads[:, c0 : c0 + STRIP, :].reshape(-1) for c0 in range(0, n, STRIP)]
    return np.concatenate(pieces).view(np.float32)


@needs_512
@pytest.mark.parametrize(
    "m, k, n",
    [
        (1, 1, 16),  # one row, K shorter than a quad
        (7, 37, 80),  # ragged rows (6 + 1) and K, a strip and one vector
        (13, 64, 3 * STRIP),  # three strips, 6 + 6 + 1 rows
        (20, 576, STRIP + 48),  # a 3x3 conv's K, a strip and three vectors
    ],
)
def test_gemm_q8_rows_is_the_exact_integer_product(m, k, n):
    """``gemm_q8_rows``: W's int8 rows (codes at -128 and 127 in rows 0 and 1) by X's
    uint8 codes (0 and 255 in columns 0 and 1) less the zero point, into rows ``ldc``
    apart at an offset; X's bytes past K hold poison (W's packing has zeros there), C's
    columns around the result NaN that stays."""
    zero = 131
    a, b = _operands(n, k, m, zero, True)  # a: X^T's codes less zero, b: W^T
    w, x = b.T.copy(), (a.T + zero).astype(np.uint8)
    packed = gemm_int8.pack_q8_rows(w)
    kq = -(-k // 4)
    c = np.full((m, n + 5), np.nan, np.float32)
    gemm_int8.gemm_q8_rows(
        m, n, kq, packed, m * kq, np.int32(zero), _packed_columns(x), c.reshape(-1), 2, n + 5
    )
    want = w.astype(np.int64) @ (x.astype(np.int64) - zero)
    np.testing.assert_array_equal(c[:, 2 : n + 2], want.astype(np.float32))
    assert np.isnan(c[:, :2]).all() and np.isnan(c[:, n + 2 :]).all()


def test_pack_q8_rows_pads_quads_with_zeros_and_appends_row_sums():
    w = np.array([[1, -2, 3, 4, 5], [-128, 127, 0, 0, 1]], np.float32)
    data = gemm_int8.pack_q8_rows(w).view(np.int8)
    np.testing.assert_array_equal(data[:16].reshape(2, 8)[:, 5:], 0)
    np.testing.assert_array_equal(data[16:].view(np.int32), [11, 0])
    with pytest.raises(ValueError, match="integers in -128..127"):
        gemm_int8.pack_q8_rows(np.array([[0.5, 1.0]], np.float32))


@needs_512
@pytest.mark.parametrize("gemm", GEMMS)
def test_a_transposed_weight_packs_alike(gemm):
    a, b = _operands(40, 70, 48, 7, True)
    np.testing.assert_array_equal(
        _gemm(a, b, 7, transposed=True, gemm=gemm), _gemm(a, b, 7, gemm=gemm)
    )


def test_pack_q8_takes_only_int8_codes():
    with pytest.raises(ValueError, match="integers in -128..127"):
        gemm_int8.pack_q8(np.array([[0.5, 1.0]], np.float32))
    with pytest.raises(ValueError, match="integers in -128..127"):
        gemm_int8.pack_q8(np.array([[128.0, 1.0]], np.float32))


@needs_512
def test_the_portable_tile_gives_the_same_sums():
    """The tile without VNNI (widened products added in fours) on a 6 x 64 block, the
    largest products of both signs included: the exact sums less the zero point's share."""
    tile = gemm_int8._tile(6, 4, vnni=False)

    @numba.njit
    def run(a, b, c, kq, sums, zero):
        tile(a, 0, 4 * kq, b, 0, 4 * STRIP, c, 0, STRIP, kq, b, sums, zero)

    k, zero = 40, 131
    a, b = _operands(6, k, STRIP, zero, True)
    packed = gemm_int8.pack_q8(b)
    codes = (a + zero).astype(np.uint8)  # A's bytes as gemm_q8_packed lays them out
    c = np.full((6, STRIP), np.nan, np.float32)
    sums = gemm_int8.padded_k(k) * STRIP // 4  # after the strip's quad rows (K padded)
    run(codes.view(np.float32).reshape(-1), packed, c.reshape(-1), k // 4, sums, zero)
    np.testing.assert_array_equal(c, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


@needs_512
def test_the_portable_rows_tile_gives_the_same_sums():
    """``gemm_q8_rows``' tile without VNNI (A the signed operand, B the unsigned one) on
    6 rows by 64 columns: the exact sums less the zero point times each row's sum."""
    tile = gemm_int8._tile(6, 4, vnni=False, signed_a=True)

    @numba.njit
    def run(w, x, c, kq, sums, zero):
        tile(w, 0, 4 * kq, x, 0, 4 * STRIP, c, 0, STRIP, kq, w, sums, zero)

    k, zero = 40, 131
    a, b = _operands(STRIP, k, 6, zero, True)
    w, x = b.T.copy(), (a.T + zero).astype(np.uint8)
    c = np.full((6, STRIP), np.nan, np.float32)
    run(gemm_int8.pack_q8_rows(w), _packed_columns(x), c.reshape(-1), k // 4, 6 * k // 4, zero)
    want = w.astype(np.int64) @ (x.astype(np.int64) - zero)
    np.testing.assert_array_equal(c, want.astype(np.float32))


@pytest.mark.skipif(not gemm_int8.available(), reason="the target has no AVX-512 VNNI")
def test_the_tiles_are_vnni_dot_products():
    """With AVX-512 VNNI the strip's tiles compile to ``vpdpbusd`` on zmm registers."""
    f32, i64 = numba.float32[::1], numba.int64
    for dispatch in (gemm_int8._strip, gemm_int8._rows_strip):  # A unsigned, A signed
        strip = numba.njit(dispatch.py_func)  # compiled here: no cached code
        strip.compile((i64, f32, i64, f32, i64, i64, f32, i64, i64, i64, f32, i64, numba.int32))
        asm = "".join(strip.inspect_asm().values())
        assert re.search(r"vpdpbusd\s+[^\n]*zmm", asm), "no vpdpbusd on zmm registers"


@pytest.mark.skipif(not gemm_int8.amx_available(), reason="the target has no AMX-INT8")
def test_the_amx_blocks_are_tile_dot_products():
    """On AMX the 32 x 32 blocks compile to ``tileloadd`` and ``tdpbusd``."""
    block = numba.njit(gemm_int8._gemm_amx.py_func)  # compiled here: no cached code
    f32, i64, ro = numba.float32[::1], numba.int64, numba.int32[::1]
    block.compile((i64, i64, i64, f32, i64, f32, ro, i64, i64, numba.int32, f32, i64, i64))
    asm = "".join(block.inspect_asm().values())
    assert "tdpbusd" in asm and "tileloadd" in asm and "ldtilecfg" in asm


# ------------------------------------------------------------- a QDQ linear layer


def _linear(m: int, k: int, n: int, codes: str, rng: np.random.Generator) -> str:
    """An int8 linear layer: ``codes`` (ui8 or i8) activations quantized and dequantized,
    a constant int8 weight at the limits (rows of -128 and 127) dequantized per column, a
    bias, a relu and the output quantized to ``codes``."""
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[0], w[1] = -128, 127
    hexed = w.tobytes().hex().upper()
    scales = rng.uniform(0.001, 0.01, n).astype(np.float32).tobytes().hex().upper()
    zero = 121 if codes == "ui8" else -7
    return f"""func.func @f(%x: tensor<{m}x{k}xf32>, %bias: tensor<{n}xf32>)
    -> tensor<{m}x{n}x{codes}> {{
  %sx = arith.constant dense<0.05> : tensor<f32>
  %zx = arith.constant dense<{zero}> : tensor<{codes}>
  %wq = arith.constant dense<"0x{hexed}"> : tensor<{k}x{n}xi8>
  %sw = arith.constant dense<"0x{scales}"> : tensor<{n}xf32>
  %zw = arith.constant dense<0> : tensor<{n}xi8>
  %so = arith.constant dense<0.2> : tensor<f32>
  %xq = ai.quantize %x, %sx, %zx : tensor<{m}x{k}xf32> * tensor<f32> * tensor<{codes}>
  %xd = ai.dequantize %xq, %sx, %zx : tensor<{m}x{k}x{codes}> * tensor<f32> * tensor<{codes}>
  %w = ai.dequantize %wq, %sw, %zw {{axis = 1 : i64}}
      : tensor<{k}x{n}xi8> * tensor<{n}xf32> * tensor<{n}xi8>
  %mm = ai.matmul %xd, %w : tensor<{m}x{k}xf32> * tensor<{k}x{n}xf32>
  %b = ai.bias_add %mm, %bias : tensor<{m}x{n}xf32> * tensor<{n}xf32>
  %r = ai.relu %b : tensor<{m}x{n}xf32>
  %y = ai.quantize %r, %so, %zx : tensor<{m}x{n}xf32> * tensor<f32> * tensor<{codes}>
  return %y : tensor<{m}x{n}x{codes}>
}}"""


def _run_poisoned(text: str, inputs: list[np.ndarray]) -> np.ndarray:
    """The cpu result on outputs pre-filled with two poisons (equal bytes both times),
    and the compiled launcher's the same."""
    module = fusec.parse(text)
    run_pipeline(module, target="cpu")
    program = Program(module, target="cpu")
    runs = []
    for fill in (0x5A, 0xA5):
        (out,) = program(
            inputs, alloc=lambda shape, dtype, f=fill: np.full(shape, f, np.uint8).view(dtype)
        )
        runs.append(np.array(out))
    assert runs[0].tobytes() == runs[1].tobytes(), "the result depends on the output's old contents"
    compiled = fusec.compile(text, target="cpu")
    assert compiled._runner.compiled_reason is None
    assert np.asarray(compiled(*inputs)).tobytes() == runs[0].tobytes()
    kernels = "".join(k.source for k in compiled.kernels)
    assert bool(re.search(r"gemm_q8_packed(_amx)?\(", kernels)) == gemm_int8.available()
    return runs[0]


@pytest.mark.parametrize(
    "codes, m, k, n",
    [pytest.param("ui8", 37, 301, 80, marks=pytest.mark.slow), ("i8", 5, 64, 2 * STRIP)],
)
def test_a_qdq_linear_layer_equals_the_reference(codes, m, k, n):
    """Activations spread so that a quarter of them saturate (codes at both limits), the
    weight's rows at -128 and 127: the codes equal the reference's (which multiplies the
    dequantized floats; exact here, every partial sum below 2**24)."""
    rng = np.random.default_rng(m * k)
    text = _linear(m, k, n, codes, rng)
    x = (rng.standard_normal((m, k)) * 8).astype(np.float32)
    x[0], x[-1] = 1e6, -1e6
    bias = rng.standard_normal(n).astype(np.float32)
    got = _run_poisoned(text, [x, bias])
    want = np.asarray(fusec.compile(text, target="reference")(x, bias))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    limits = (0, 255) if codes == "ui8" else (-128, 127)
    assert {int(got.min()), int(got.max())} <= set(range(limits[0], limits[1] + 1))


@pytest.mark.slow
def test_a_streaming_weight_in_column_tiles_equals_the_reference():
    """A weight of more than 1 MiB of codes for few rows: the blocks split B's columns
    (each tile from its own strips, the last one ragged), two threads' worth."""
    rng = np.random.default_rng(5)
    m, k, n = 6, 512, 36 * STRIP + 16
    text = _linear(m, k, n, "ui8", rng)
    x = (rng.standard_normal((m, k)) * 4).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    compiled = fusec.compile(text, target="cpu")
    if gemm_int8.available():
        assert any("columns" in k.source and "gemm_q8_packed" in k.source for k in compiled.kernels)
    got = _run_poisoned(text, [x, bias])
    want = np.asarray(fusec.compile(text, target="reference")(x, bias))
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_a_cached_program_runs_its_int8_gemm_in_a_fresh_process(tmp_path):
    """``compile_onnx`` of a QDQ model compiled before (the program cache: no code
    generation in the second process) runs its int8 GEMM, AMX tiles included: the
    process asks for the tile state when the kernel layer is imported."""
    import subprocess
    import sys

    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    k, n = 64, 32
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "sx"),
        numpy_helper.from_array(np.array(128, np.uint8), "zx"),
        numpy_helper.from_array(w, "wq"),
        numpy_helper.from_array(rng.uniform(0.01, 0.02, n).astype(np.float32), "sw"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [40, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, tmp_path / "q.onnx")
    x = rng.standard_normal((40, k)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (
        "import numpy as np, fusec\n"
        f"c = fusec.compile_onnx({str(tmp_path / 'q.onnx')!r}, target='cpu')\n"
        f"y = np.asarray(c(np.load({str(tmp_path / 'x.npy')!r})))\n"
        "print(sum(1 for k in c.kernels if 'gemm_q8_packed' in k.source))\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, y)\n"
    )
    env = {**__import__("os").environ, "FUSEC_CACHE_DIR": str(tmp_path / "cache")}
    outputs = []
    for _ in range(2):  # the first compiles and stores the program, the second loads it
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == [str(int(gemm_int8.available()))]
        outputs.append(np.load(tmp_path / "y.npy"))
    np.testing.assert_array_equal(outputs[0], outputs[1])
    reference = fusec.compile(fusec.from_onnx(tmp_path / "q.onnx"), target="reference")
    want = np.asarray(reference(x))
    np.testing.assert_array_equal(outputs[1], want)
