"""``ai.quantize`` / ``ai.dequantize`` on the cpu target (issue 31; f8E4M3FN, f8E5M2, i8, ui8,
i4, ui4): the scalar helpers
(``fusec/codegen/quant.py``) bit for bit against ml_dtypes and numpy, and the kernels
against the reference executor on inputs with every edge (NaN, infinities, values at and
beyond the float8 ranges, subnormals, ties), outputs poisoned: the codes equal bit for
bit, the dequantized values exactly. Per tensor, per axis and per block (a ragged last
block too) in one pointwise kernel with their neighbours; a per-block op stays out of a
matmul group (only the pointwise loop indexes blocks); a matmul epilogue quantizes."""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest

import fusec
from fusec.api import run_pipeline
from fusec.codegen import quant
from fusec.codegen.expr import helper_source
from fusec.dialect import ops as ai
from fusec.runtime.launch import Program

FLOAT8 = {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2}
INTS = {"i8": np.int8, "ui8": np.uint8, "i4": ml_dtypes.int4, "ui4": ml_dtypes.uint4}
NUMPY = {**FLOAT8, **INTS}


def _edges() -> np.ndarray:
    """Every float8 value, the midpoints between neighbours and the floats next to them
    (ties and the rounding boundaries, 464 and 61440 among them), subnormals of both
    types, zeros, infinities, NaNs of both signs and huge values."""
    values = [np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e30, -1e30, 1e-40], "f4")]
    for t in FLOAT8.values():
        grid = np.arange(256, dtype=np.uint8).view(t).astype(np.float32)
        grid = np.unique(grid[np.isfinite(grid)])
        mids = ((grid[1:].astype(np.float64) + grid[:-1]) / 2).astype(np.float32)
        values += [grid, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]
    return np.concatenate(values)


def _floats(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` float32 values: random bit patterns (every exponent, NaN payloads) and the
    edges, shuffled."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = _edges()
    bits[: edges.size] = edges
    return rng.permutation(bits)


def _reference_codes(y: np.ndarray, dtype: str, saturate: bool) -> np.ndarray:
    """numpy_ops.quantize_linear's conversion of ``q + zp`` (already added) to codes."""
    with np.errstate(all="ignore"):
        if dtype in INTS:
            info = ml_dtypes.iinfo(INTS[dtype])
            return np.clip(np.nan_to_num(np.rint(y)), info.min, info.max).astype(INTS[dtype])
        if saturate:
            largest = float(ml_dtypes.finfo(FLOAT8[dtype]).max)
            y = np.clip(y, -largest, largest)
        return y.astype(FLOAT8[dtype]).view(np.uint8)


def _helpers() -> dict:
    source = "import numpy as np\nfrom numpy import float32 as f32\nimport math\n"
    source += helper_source(quant.HELPERS, '@numba.njit(fastmath=False, error_model="numpy")')
    namespace: dict = {"numba": numba}
    exec(compile(source, "<quant helpers>", "exec"), namespace)
    return namespace


@numba.njit
def _encode_all(fn, q, zp, out):
    for i in range(q.size):
        out[i] = fn(q[i], zp)


@numba.njit
def _decode_all(fn, codes, out):
    for i in range(codes.size):
        out[i] = fn(codes[i])


@pytest.mark.slow  # ~6 s of Numba compiles (one per helper)
def test_helpers_match_ml_dtypes_bit_for_bit():
    """Each encoder over 1M float32 values and the edges, with zero points; each decoder
    over its 256 codes (NaN: a NaN of the same sign)."""
    helpers, rng = _helpers(), np.random.default_rng(31)
    q = _floats(rng, 1 << 20)
    for dtype, t in FLOAT8.items():
        codes = np.arange(256, dtype=np.uint8)
        got = np.empty(256, np.float32)
        _decode_all(helpers[quant.value_helper(dtype)], codes, got)
        want = codes.view(t).astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan) and np.array_equal(
            np.signbit(got[nan]), np.signbit(want[nan])
        )
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
        for saturate in (False, True):
            for zp in (0x00, 0x38, 0xB8):  # 0, +-1 (e4m3fn) or +-0.5 (e5m2)
                out = np.empty(q.size, np.uint8)
                _encode_all(helpers[quant.quantize_helper(dtype, saturate)], q, np.uint8(zp), out)
                with np.errstate(invalid="ignore"):
                    y = q + np.array([zp], np.uint8).view(t).astype(np.float32)
                want_codes = _reference_codes(y, dtype, saturate)
                bad = np.flatnonzero(out != want_codes)
                assert bad.size == 0, (dtype, saturate, zp, q[bad[:4]], out[bad[:4]])
    for dtype, t in INTS.items():
        for zp in (0, 3, int(ml_dtypes.iinfo(t).max) - 5):
            out = np.empty(q.size, np.int32)
            storage = np.int8 if ml_dtypes.iinfo(t).min < 0 else np.uint8  # as cpu holds it
            _encode_all(helpers[quant.quantize_helper(dtype, True)], q, storage(zp), out)
            with np.errstate(invalid="ignore"):
                want_codes = _reference_codes(np.rint(q) + np.float32(zp), dtype, True)
            bad = np.flatnonzero(out != want_codes.astype(np.int32))
            assert bad.size == 0, (dtype, zp, q[bad[:4]], out[bad[:4]])


# ------------------------------------------------------------------------ kernels


def _graph(dtype: str) -> str:
    """Per-tensor, per-axis (axis 0) and ragged per-block (blocks of 4 along axis 1 of
    10) quantization of one input, each dequantized again; the dequantization of given
    codes; a neg before and adds after (one pointwise group); float8 also unsaturated."""
    t, q = "tensor<6x10xf32>", f"tensor<6x10x{dtype}>"
    layouts = [
        ("t", "tensor<f32>", f"tensor<{dtype}>", ""),
        ("a", "tensor<6xf32>", f"tensor<6x{dtype}>", " {axis = 0 : i64}"),
        ("b", "tensor<6x3xf32>", f"tensor<6x3x{dtype}>", " {axis = 1 : i64, block_size = 4 : i64}"),
    ]
    args = [f"%x: {t}", f"%c: {q}"]
    body = [f"  %r = ai.neg %x : {t}"]
    results: list[tuple[str, str]] = []
    for name, s, z, attrs in layouts:
        args += [f"%s{name}: {s}", f"%z{name}: {z}"]
        types = f"{t} * {s} * {z}"
        qtypes = f"{q} * {s} * {z}"
        body += [
            f"  %q{name} = ai.quantize %r, %s{name}, %z{name}{attrs} : {types}",
            f"  %d{name} = ai.dequantize %q{name}, %s{name}, %z{name}{attrs} : {qtypes}",
            f"  %e{name} = ai.add %d{name}, %x : {t} * {t}",
            f"  %g{name} = ai.dequantize %c, %s{name}, %z{name}{attrs} : {qtypes}",
            f"  %h{name} = ai.add %e{name}, %g{name} : {t} * {t}",
        ]
        results += [(f"%q{name}", q), (f"%e{name}", t), (f"%g{name}", t), (f"%h{name}", t)]
        if dtype in FLOAT8:
            unsaturated = (
                attrs.rstrip("}") + ", saturate = false}" if attrs else " {saturate = false}"
            )
            body.append(f"  %u{name} = ai.quantize %r, %s{name}, %z{name}{unsaturated} : {types}")
            results.append((f"%u{name}", q))
    names = ", ".join(n for n, _ in results)
    types = ", ".join(ty for _, ty in results)
    return (
        f"func.func @f({', '.join(args)}) -> ({types}) {{\n"
        + "\n".join(body)
        + f"\n  return {names} : {types}\n}}\n"
    )


def _inputs(module, dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
    """x: edges and random values over the type's range, scaled by the scales below so
    that x / scale lands on the edges; codes: every code; scales: powers of two (so the
    quotients are the edges exactly) and others; zero points: small codes."""
    x = rng.standard_normal(60).astype(np.float32) * 100
    edges = _edges()
    x[:30] = rng.choice(edges, 30)
    codes = rng.integers(0, 256, 60).astype(np.uint8)
    codes[:8] = [0x7F, 0xFF, 0x7E, 0x80, 0x00, 0x01, 0x7C, 0xFC]
    given = codes.view(NUMPY[dtype])
    if dtype in ("i4", "ui4"):  # every value of the type, each in its own byte
        info = ml_dtypes.iinfo(INTS[dtype])
        given = rng.integers(info.min, info.max, 60, endpoint=True).astype(INTS[dtype])
    arrays = [x.reshape(6, 10), given.reshape(6, 10)]
    for shape in ((), (6,), (6, 3)):
        scale = rng.choice([1.0, 0.5, 2.0, 0.37, 3.1], size=shape).astype(np.float32)
        zero = rng.integers(0, 3, size=shape) if dtype in INTS else np.zeros(shape)
        arrays += [scale, np.asarray(zero).astype(NUMPY[dtype])]
    return arrays


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal bits (codes, or float32 values), NaN where the reference has NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), what
        np.testing.assert_array_equal(got[~nan], want[~nan], err_msg=what)
        return
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=what)


def _run_poisoned(text: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The cpu kernels' results, run twice on outputs pre-filled with two different
    poisons (NaN or byte 0x5A, then -1 or 0xA5): an element a kernel leaves unwritten
    differs between the runs, so it cannot equal the reference in both. The compiled
    launcher (``CpuProgram``, quantized values held as bytes in its arena; graphs with
    16-bit floats take its Python loop) must give the same bytes."""
    module = fusec.parse(text)
    run_pipeline(module, target="cpu")
    program = Program(module, target="cpu")

    def poison(fill: int):
        def alloc(shape, dtype):
            dtype = np.dtype(dtype)
            if dtype.kind == "f":
                return np.full(shape, np.nan if fill == 0x5A else -1.0, dtype)
            return np.full(shape, fill, np.uint8).view(dtype)

        return alloc

    first = [np.array(r) for r in program(inputs, alloc=poison(0x5A))]
    second = [np.array(r) for r in program(inputs, alloc=poison(0xA5))]
    for k, (a, b) in enumerate(zip(first, second, strict=True)):
        assert a.tobytes() == b.tobytes(), f"result #{k} depends on the output's old contents"
    # the compiled launcher (CpuProgram: arena, segments) gives the same bytes
    compiled = fusec.compile(text, target="cpu")
    reason = compiled._runner.compiled_reason
    assert reason is None or "16-bit floats" in reason, reason
    results = compiled(*inputs)
    results = results if isinstance(results, tuple) else (results,)
    for k, (a, c) in enumerate(zip(first, results, strict=True)):
        c = np.asarray(c)
        assert a.dtype == c.dtype and a.tobytes() == c.tobytes(), f"compiled result #{k}"
    return first


@pytest.mark.parametrize("dtype", ["f8E4M3FN", "f8E5M2", "i8", "ui8", "i4", "ui4"])
def test_quantization_kernels_match_the_reference_bit_for_bit(dtype):
    text = _graph(dtype)
    compiled = fusec.compile(text, target="cpu")
    kinds = [k.kind for k in compiled.kernels]
    assert kinds == ["pointwise"], kinds  # every op in one loop, blocks and all
    reference = fusec.compile(text, target="reference")
    rng = np.random.default_rng(310 + len(dtype))
    for _ in range(2):
        inputs = _inputs(compiled.ir, dtype, rng)
        got = _run_poisoned(text, inputs)
        want = reference(*inputs)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, np.asarray(w), f"{dtype} result #{k}")


def test_f16_scales_and_inputs():
    """An f16 input quantized with an f16 scale, and codes dequantized to f16 (rounded
    once from the float32 product, as the reference stores it)."""
    text = """
func.func @f(%x: tensor<4x16xf16>, %s: tensor<16xf16>, %z: tensor<16xf8E4M3FN>,
             %c: tensor<4x16xi8>, %s8: tensor<f16>, %z8: tensor<i8>)
    -> (tensor<4x16xf8E4M3FN>, tensor<4x16xf16>) {
  %q = ai.quantize %x, %s, %z {axis = 1 : i64}
      : tensor<4x16xf16> * tensor<16xf16> * tensor<16xf8E4M3FN>
  %d = ai.dequantize %c, %s8, %z8 : tensor<4x16xi8> * tensor<f16> * tensor<i8>
  return %q, %d : tensor<4x16xf8E4M3FN>, tensor<4x16xf16>
}
"""
    rng = np.random.default_rng(7)
    inputs = [
        (rng.standard_normal((4, 16)) * 300).astype(np.float16),
        rng.uniform(0.01, 2, 16).astype(np.float16),
        np.zeros(16, ml_dtypes.float8_e4m3fn),
        rng.integers(-128, 128, (4, 16)).astype(np.int8),
        np.float16(0.0137),
        np.int8(-3),
    ]
    got = _run_poisoned(text, inputs)
    want = fusec.compile(text, target="reference")(*inputs)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _assert_same(g, np.asarray(w), f"result #{k}")


MATMUL_QUANTIZE = """
func.func @f(%a: tensor<32x48xf32>, %w: tensor<48x24xf32>, %bias: tensor<24xf32>,
             %s: tensor<24xf32>, %z: tensor<24xi8>, %sb: tensor<32x6xf32>, %zb: tensor<32x6xi8>)
    -> (tensor<32x24xi8>, tensor<32x24xi8>) {
  %m = ai.matmul %a, %w : tensor<32x48xf32> * tensor<48x24xf32>
  %b = ai.bias_add %m, %bias {axis = 1 : i64} : tensor<32x24xf32> * tensor<24xf32>
  %r = ai.relu %b : tensor<32x24xf32>
  %q = ai.quantize %r, %s, %z {axis = 1 : i64} : tensor<32x24xf32> * tensor<24xf32> * tensor<24xi8>
  %qb = ai.quantize %r, %sb, %zb {axis = 1 : i64, block_size = 4 : i64}
      : tensor<32x24xf32> * tensor<32x6xf32> * tensor<32x6xi8>
  return %q, %qb : tensor<32x24xi8>, tensor<32x24xi8>
}
"""


def test_matmul_epilogue_quantizes_per_channel_and_leaves_blocks_to_pointwise():
    """bias -> relu -> per-column i8 quantize in the matmul's epilogue; the per-block
    quantize of the same value is a pointwise kernel of its own (remark says why). The
    codes are the reference's except where the float32 product's last bits move a value
    across a rounding tie: at most one code, rarely."""
    compiled = fusec.compile(MATMUL_QUANTIZE, target="cpu")
    groups = [op for op in fusec.parse(compiled.ir).walk() if isinstance(op, ai.FusedOp)]
    kinds = {
        g.kind_name: [op.name for op in g.block.ops if not isinstance(op, ai.YieldOp)]
        for g in groups
    }
    assert kinds["matmul"] == ["ai.matmul", "ai.bias_add", "ai.relu", "ai.quantize"]
    assert kinds["pointwise"] == ["ai.quantize"]
    reasons = [remark.reason for remark in compiled.remarks()]
    assert any("only the cpu pointwise template reads them" in r for r in reasons), reasons
    rng = np.random.default_rng(11)
    inputs = [
        rng.standard_normal((32, 48)).astype(np.float32),
        rng.standard_normal((48, 24)).astype(np.float32),
        rng.standard_normal(24).astype(np.float32),
        rng.uniform(0.01, 0.1, 24).astype(np.float32),
        rng.integers(-5, 5, 24).astype(np.int8),
        rng.uniform(0.01, 0.1, (32, 6)).astype(np.float32),
        rng.integers(-5, 5, (32, 6)).astype(np.int8),
    ]
    got = _run_poisoned(MATMUL_QUANTIZE, inputs)
    want = fusec.compile(MATMUL_QUANTIZE, target="reference")(*inputs)
    for g, w in zip(got, want, strict=True):
        diff = np.abs(g.astype(np.int32) - np.asarray(w, np.int32))
        assert diff.max() <= 1 and np.count_nonzero(diff) <= 4, diff


# ------------------------------------------------------------- quantized GEMMs

FP8_LINEAR = """
func.func @f(%x: tensor<16x64xf32>, %wq: tensor<64x32xf8E4M3FN>, %sw: tensor<32xf32>,
             %bias: tensor<32xf32>) -> tensor<16x32xf8E4M3FN> {
  %sx = arith.constant dense<0.02> : tensor<f32>
  %zx = arith.constant dense<0.0> : tensor<f8E4M3FN>
  %zw = arith.constant dense<0.0> : tensor<32xf8E4M3FN>
  %so = arith.constant dense<0.05> : tensor<f32>
  %xq = ai.quantize %x, %sx, %zx : tensor<16x64xf32> * tensor<f32> * tensor<f8E4M3FN>
  %xd = ai.dequantize %xq, %sx, %zx : tensor<16x64xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %w = ai.dequantize %wq, %sw, %zw {axis = 1 : i64}
      : tensor<64x32xf8E4M3FN> * tensor<32xf32> * tensor<32xf8E4M3FN>
  %m = ai.matmul %xd, %w : tensor<16x64xf32> * tensor<64x32xf32>
  %b = ai.bias_add %m, %bias : tensor<16x32xf32> * tensor<32xf32>
  %r = ai.relu %b : tensor<16x32xf32>
  %y = ai.quantize %r, %so, %zx : tensor<16x32xf32> * tensor<f32> * tensor<f8E4M3FN>
  return %y : tensor<16x32xf8E4M3FN>
}
"""


def _one_step(got: np.ndarray, want: np.ndarray, most: int) -> None:
    """Codes equal but for at most ``most`` elements one step apart (a float32 product
    summed in another order crossing a rounding tie)."""
    g, w = got.view(np.uint8).astype(np.int32), want.view(np.uint8).astype(np.int32)
    diff = np.abs(g - w)
    assert diff.max() <= 1 and np.count_nonzero(diff) <= most, diff


def test_fp8_linear_is_one_matmul_kernel_with_the_reference_codes():
    """Quantized activations and weights, bias, relu and an fp8 output: one matmul kernel
    (the scales moved after the product, in its epilogue), whose codes are the reference's
    of the same IR bit for bit, and within one code of the IR as written."""
    compiled = fusec.compile(FP8_LINEAR, target="cpu")
    assert [k.kind for k in compiled.kernels] == ["matmul"]
    rng = np.random.default_rng(5)
    inputs = [
        rng.standard_normal((16, 64)).astype(np.float32) * 2,
        (rng.standard_normal((64, 32)) * 3).astype(ml_dtypes.float8_e4m3fn),
        rng.uniform(0.05, 0.2, 32).astype(np.float32),
        rng.standard_normal(32).astype(np.float32),
    ]
    (got,) = _run_poisoned(FP8_LINEAR, inputs)
    want = np.asarray(fusec.compile(FP8_LINEAR, target="reference")(*inputs))
    _assert_same(got, want, "fp8 linear")
    written = fusec.compile(FP8_LINEAR, target="reference", pipeline="infer-shapes,fuse")
    _one_step(got, np.asarray(written(*inputs)), most=5)
    assert len(np.unique(got.view(np.uint8))) > 20


W4A16 = """
func.func @f(%x: tensor<4x128xf32>, %wq: tensor<128x64xi4>, %s: tensor<4x64xf32>,
             %z: tensor<4x64xi4>) -> tensor<4x64xf16> {
  %w = ai.dequantize %wq, %s, %z {axis = 0 : i64, block_size = 32 : i64}
      : tensor<128x64xi4> * tensor<4x64xf32> * tensor<4x64xi4>
  %m = ai.matmul %x, %w : tensor<4x128xf32> * tensor<128x64xf32>
  %c = ai.clip %m {min = -6.0 : f32, max = 6.0 : f32} : tensor<4x64xf32>
  %h = ai.cast %c : tensor<4x64xf32> to tensor<4x64xf16>
  return %h : tensor<4x64xf16>
}
"""


def _w4a16_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    return [
        rng.standard_normal((4, 128)).astype(np.float32),
        rng.integers(-8, 8, (128, 64)).astype(ml_dtypes.int4),
        rng.uniform(0.01, 0.1, (4, 64)).astype(np.float32),
        rng.integers(-2, 3, (4, 64)).astype(ml_dtypes.int4),
    ]


def test_w4a16_dequantizes_the_weight_blocks_in_the_matmul_group():
    """int4 weights given at run time, per-block scales and zero points along K: the
    matmul group's B prologue dequantizes them (a pointwise stage reading block
    index // 32), clip and the f16 cast in the epilogue; f16 tolerance of the reference."""
    compiled = fusec.compile(W4A16, target="cpu")
    assert [k.kind for k in compiled.kernels] == ["matmul"]
    inputs = _w4a16_inputs(np.random.default_rng(6))
    (got,) = _run_poisoned(W4A16, inputs)
    want = np.asarray(fusec.compile(W4A16, target="reference")(*inputs))
    assert got.dtype == np.float16 and not np.isnan(got).any()
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2
    )


def test_a_constant_int4_weight_is_dequantized_once_at_compile_time():
    """The same graph with the codes, scales and zero points as constants: canonicalize
    folds the dequantize (FoldConstantDequantize), so a call runs only the matmul on the
    float weight (packed once by the program where the GEMM is wide enough)."""
    rng = np.random.default_rng(7)
    x, wq, s, z = _w4a16_inputs(rng)

    def dense(array: np.ndarray, dtype: str) -> str:
        """A dense constant in MLIR's hex form: the bytes as MLIR stores them (an i4
        element a byte, sign-extended)."""
        raw = np.asarray(array, np.int8 if dtype == "i4" else np.float32).tobytes().hex()
        return f'dense<"0x{raw.upper()}"> : tensor<{"x".join(map(str, array.shape))}x{dtype}>'

    text = W4A16.replace(
        "func.func @f(%x: tensor<4x128xf32>, %wq: tensor<128x64xi4>, %s: tensor<4x64xf32>,\n"
        "             %z: tensor<4x64xi4>) -> tensor<4x64xf16> {",
        "func.func @f(%x: tensor<4x128xf32>) -> tensor<4x64xf16> {\n"
        f"  %wq = arith.constant {dense(wq.astype(np.int8), 'i4')}\n"
        f"  %s = arith.constant {dense(s, 'f32')}\n"
        f"  %z = arith.constant {dense(z.astype(np.int8), 'i4')}",
    )
    assert "arith.constant" in text
    compiled = fusec.compile(text, target="cpu")
    assert "ai.dequantize" not in compiled.ir
    assert [k.kind for k in compiled.kernels] == ["matmul"]
    got = np.asarray(compiled(x))
    want = np.asarray(fusec.compile(W4A16, target="reference")(x, wq, s, z))
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2
    )


# ---------------------------------------------------------- every cpu template

#: A quantize in the epilogue of each cpu template's group (per tensor or per axis), and a
#: dequantize in a row-reduce prologue: (graph, the group kind it makes).
TEMPLATES = {
    "layernorm": (
        """func.func @f(%x: tensor<8x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>,
    %s: tensor<f32>, %z: tensor<i8>) -> tensor<8x64xi8> {
  %l = ai.layernorm %x, %g, %b : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
  %q = ai.quantize %l, %s, %z : tensor<8x64xf32> * tensor<f32> * tensor<i8>
  return %q : tensor<8x64xi8>
}""",
        "row_reduce",
    ),
    "softmax": (
        """func.func @f(%x: tensor<8x64xf32>, %s: tensor<f32>, %z: tensor<f8E5M2>)
    -> tensor<8x64xf8E5M2> {
  %l = ai.softmax %x : tensor<8x64xf32>
  %q = ai.quantize %l, %s, %z : tensor<8x64xf32> * tensor<f32> * tensor<f8E5M2>
  return %q : tensor<8x64xf8E5M2>
}""",
        "row_reduce",
    ),
    "reduce": (
        """func.func @f(%x: tensor<8x64xf32>, %s: tensor<8xf32>, %z: tensor<8xui8>)
    -> tensor<8x1xui8> {
  %r = ai.reduce_mean %x {axes = array<i64: 1>, keepdims = true} : tensor<8x64xf32>
  %q = ai.quantize %r, %s, %z {axis = 0 : i64} : tensor<8x1xf32> * tensor<8xf32> * tensor<8xui8>
  return %q : tensor<8x1xui8>
}""",
        "reduce",
    ),
    "conv": (
        """func.func @f(%x: tensor<1x4x10x10xf32>, %w: tensor<8x4x3x3xf32>, %s: tensor<8xf32>,
    %z: tensor<8xf8E4M3FN>) -> tensor<1x8x8x8xf8E4M3FN> {
  %c = ai.conv2d %x, %w : tensor<1x4x10x10xf32> * tensor<8x4x3x3xf32>
  %q = ai.quantize %c, %s, %z {axis = 1 : i64}
      : tensor<1x8x8x8xf32> * tensor<8xf32> * tensor<8xf8E4M3FN>
  return %q : tensor<1x8x8x8xf8E4M3FN>
}""",
        "conv",
    ),
    "pool": (
        """func.func @f(%x: tensor<1x4x8x8xf32>, %s: tensor<f32>, %z: tensor<i4>)
    -> tensor<1x4x4x4xi4> {
  %p = ai.max_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
      : tensor<1x4x8x8xf32>
  %q = ai.quantize %p, %s, %z : tensor<1x4x4x4xf32> * tensor<f32> * tensor<i4>
  return %q : tensor<1x4x4x4xi4>
}""",
        "pool",
    ),
    "attention": (
        """func.func @f(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>,
    %m: tensor<8xf32>, %s: tensor<f32>, %z: tensor<i8>) -> tensor<2x8x16xi8> {
  %a = ai.attention %q, %k, %v, %m {scale = 0.25 : f32}
      : tensor<2x8x16xf32> * tensor<2x8x16xf32> * tensor<2x8x16xf32> * tensor<8xf32>
  %y = ai.quantize %a, %s, %z : tensor<2x8x16xf32> * tensor<f32> * tensor<i8>
  return %y : tensor<2x8x16xi8>
}""",
        "attention",
    ),
    "dequantize_layernorm": (
        """func.func @f(%c: tensor<8x64xi8>, %s: tensor<64xf32>, %z: tensor<64xi8>,
    %g: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<8x64xf32> {
  %d = ai.dequantize %c, %s, %z : tensor<8x64xi8> * tensor<64xf32> * tensor<64xi8>
  %l = ai.layernorm %d, %g, %b : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
  return %l : tensor<8x64xf32>
}""",
        "row_reduce",
    ),
}


@pytest.mark.parametrize("case", list(TEMPLATES))
def test_every_cpu_template_takes_the_quantization_ops(case):
    """One group of the template's kind; quantized results within one code of the
    reference in at most two elements (a float32 reduction in another order may cross a
    tie), float results at float32 tolerance; both launchers alike, outputs poisoned."""
    from fusec.ir.module import entry_function
    from fusec.tools import runner

    text, kind = TEMPLATES[case]
    assert [k.kind for k in fusec.compile(text, target="cpu").kernels] == [kind]
    inputs = runner.random_inputs(entry_function(fusec.parse(text)), 3)
    (got,) = _run_poisoned(text, inputs)
    want = np.asarray(fusec.compile(text, target="reference")(*inputs))
    if got.dtype.itemsize == 1:
        assert got.dtype == want.dtype
        g = got.view(np.int8 if want.dtype.name in ("int8", "int4") else np.uint8)
        w = want.view(g.dtype)
        diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
        assert diff.max() <= 1 and np.count_nonzero(diff) <= 2, diff
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
