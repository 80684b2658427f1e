"""The Tensor Core GEMM's int4 B (issue 31's W4A16 past 16 rows) without a GPU.

The producer warpgroup dequantizes the weight's codes into each B stage
(``include/fusec/gemm_w4.cuh``): the codes packed at load so that a masked shift of a word
gives two codes in K order (``constant_layouts.pack_int4_gemm``), turned into 16-bit
floats by an OR into a magic number, a subtract and a multiply. Here: the packing, the
arithmetic against the reference's rounding (bit for bit), which groups take the route,
what the spec refuses, and the kernel built for sm_90a. The GPU runs are in
``test_w4a16_gpu.py``.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from test_gemm_build import clean_sass, needs_toolchain
from w4_cases import w4a16_onnx

from fusec.dialect import numpy_ops
from fusec.targets.cuda.constant_layouts import int4_gemm_layout, pack_int4_gemm, pack_int4_rs
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import TileConfig

_FLOAT = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
#: the gemm_w4.cuh magic numbers: 128.0 in bf16, 1024.0 in f16 (a unit last place)
_MAGIC = {"bf16": 0x4300, "f16": 0x6400}


@pytest.mark.parametrize("order", ["kn", "nk"])
def test_a_masked_shift_of_a_word_gives_two_codes_in_k_order(order, rng) -> None:
    k, n = 64, 24
    codes = rng.integers(-8, 8, (k, n) if order == "kn" else (n, k)).astype(np.int8)
    words = pack_int4_gemm(f"w4gemm:{order}:i4", codes).view(np.uint32)
    assert words.shape == (n, k // 8)
    rows = codes.T if order == "kn" else codes  # N x K
    for i in range(4):
        pairs = (words >> np.uint32(4 * i)) & np.uint32(0x000F000F)
        assert np.array_equal((pairs & 15).astype(int) - 8, rows[:, 2 * i :: 8])
        assert np.array_equal((pairs >> 16).astype(int) - 8, rows[:, 2 * i + 1 :: 8])


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_magic_subtract_multiply_is_the_reference_rounding(dtype, rng) -> None:
    """Every nibble against every zero point, times fresh scales: ``(MAGIC | q) - (MAGIC |
    z')`` is ``q - z'`` exactly, and its product with the scale rounded once is the
    reference's dequantized weight bit for bit (``numpy_ops.dequantize_linear``: the
    product in f32, rounded to the 16-bit type)."""
    float16 = _FLOAT[dtype]
    q, z = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    scale = rng.uniform(1e-3, 4.0, q.shape).astype(np.float32).astype(float16)
    as_float = lambda bits: (np.uint16(_MAGIC[dtype]) | bits.astype(np.uint16)).view(float16)  # noqa: E731
    shifted = (as_float(q).astype(np.float32) - as_float(z).astype(np.float32)).astype(float16)
    assert np.array_equal(shifted.astype(np.float32), (q - z).astype(np.float32))
    got = (shifted.astype(np.float32) * scale.astype(np.float32)).astype(float16)
    # i4 codes and zero points are stored + 8: the difference is the same
    want = numpy_ops.dequantize_linear(q - 8, scale, z - 8)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def _compiled(m: int, block: int, transposed: bool = False, scales: str = "block"):
    import fusec

    model, _ = w4a16_onnx(m, 512, 192, block, "bf16", 3, transposed, scales)
    return fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)


@pytest.fixture
def producer_route(monkeypatch):
    """``$FUSEC_W4_GEMM=producer``: fusion gives the GEMM the dequantize (not the default)."""
    from fusec.targets.cuda.gemm import w4

    monkeypatch.setenv(w4.GEMM_ROUTE_ENV, "producer")


@pytest.mark.parametrize(
    "rows, route", [(17, "producer"), (64, "producer"), (65, "consumer"), (4096, "consumer")]
)
def test_the_route_by_rows_of_activations(rows, route) -> None:
    """By default (``$FUSEC_W4_GEMM`` unset: "auto") the GEMM dequantizes its B itself: its
    producer up to ``PRODUCER_MAX_ROWS`` rows, its consumers into wgmma's A registers past
    them (each faster there by gemm-w4-routes.md); the codes packed for the one that reads
    them."""
    compiled = _compiled(rows, 128)
    (gemm,) = compiled.kernels
    (spec,) = gemm.specs
    assert spec.w4 is not None and spec.w4.in_registers == (route == "consumer")
    layout = "w4rs" if route == "consumer" else "w4gemm"
    assert gemm.prepared_inputs[0][1].startswith(layout + ":")
    assert gemm.remark is None


@pytest.mark.parametrize(
    "route, rows, kinds", [("separate", 17, 2), ("producer", 600, 1), ("consumer", 17, 1)]
)
def test_the_switch_forces_each_route(route, rows, kinds, monkeypatch) -> None:
    from fusec.errors import FusecError
    from fusec.targets.cuda.gemm import w4

    monkeypatch.setenv(w4.GEMM_ROUTE_ENV, route)
    compiled = _compiled(rows, 128)
    assert len(compiled.kernels) == kinds
    if route == "separate":
        assert f"${w4.GEMM_ROUTE_ENV}=separate" in str(compiled.remarks())
    else:
        assert compiled.kernels[-1].specs[0].w4.in_registers == (route == "consumer")
    monkeypatch.setenv(w4.GEMM_ROUTE_ENV, "fused")
    with pytest.raises(FusecError, match="FUSEC_W4_GEMM"):
        _compiled(17, 128)


@pytest.mark.parametrize(
    "transposed, scales, index",
    [
        (False, "block", "blk * N + n"),
        (True, "block", "n * 4 + blk"),
        (False, "column", "n"),
        (False, "tensor", "0"),
    ],
)
def test_many_rows_are_one_gemm_that_dequantizes_its_b(
    transposed, scales, index, producer_route
) -> None:
    """Past 16 rows (``$FUSEC_W4_GEMM=producer``) a layer whose blocks step whole K steps
    is one GEMM group: its spec
    reads an int4 B (the codes packed at load for it, K-major), no pointwise kernel writes
    the 16-bit weight, and B is not loaded before the grid dependency wait (the
    producer's threads read it)."""
    compiled = _compiled(17, 128, transposed, scales)
    (gemm,) = compiled.kernels
    (spec,) = gemm.specs
    assert spec.w4 == cpp.W4B(128 if scales == "block" else 512, True, index)
    assert (spec.b_major, spec.early_b) == ("k", False)
    assert gemm.prepared_inputs == ((0, int4_gemm_layout(transposed, True)),)
    assert "dequantized into each B stage by the producer warpgroup" in gemm.source
    assert gemm.remark is None
    namespace: dict = {}  # the module's text names everything it builds (the ABI's names)
    exec(compile(gemm.source, gemm.name, "exec"), namespace)
    assert namespace["GEMM"].spec == spec and namespace["GEMM"].w4 == (1, 2)


def test_up_to_16_rows_keep_the_w4a16_route() -> None:
    (kernel,) = _compiled(16, 128).kernels
    assert kernel.prepared_inputs[0][1].startswith("w4mma")
    assert not kernel.specs


def test_blocks_smaller_than_a_k_step_dequantize_in_a_kernel_of_their_own(
    producer_route,
) -> None:
    compiled = _compiled(17, 32)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    remarks = str(compiled.remarks())
    assert "17 rows of activations" in remarks and "not multiples of 64" in remarks


def _spec(**changes) -> cpp.GemmSpec:
    fields = dict(
        config=TileConfig(128, 256, 64, 4, 2, 8), dtype="bf16", out_dtype="bf16", b_major="k",
        w4=cpp.W4B(128, True, "blk * N + n"),
    )  # fmt: skip
    return cpp.GemmSpec(**{**fields, **changes})


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"b_major": "n"}, "B K-major"),
        ({"dtype": "f32", "config": TileConfig(128, 256, 32, 4, 2, 8)}, "f32 activations"),
        ({"early_b": True}, "early B"),
        ({"config": TileConfig(128, 192, 64, 4, 2, 8)}, None),
        ({"batch_b": True}, "not batched"),
    ],
)
def test_an_int4_b_spec_refuses_what_its_producer_cannot_fill(changes, problem) -> None:
    if problem is None:
        assert _spec(**changes).w4 is not None
        return
    with pytest.raises(ValueError, match=problem):
        _spec(**changes)


@pytest.mark.parametrize("block, index", [(32, "n"), (128, "n; x"), (128, "__import__")])
def test_the_int4_facts_are_integers_and_known_names_only(block, index) -> None:
    with pytest.raises(ValueError, match="int4 B"):
        cpp.W4B(block, True, index)


def test_the_int4_b_kernel_takes_its_scales_and_zero_points() -> None:
    spec = _spec()
    plain = cpp.kernel_arg_count(cpp.GemmSpec(spec.config, "bf16", "bf16"))
    assert cpp.kernel_arg_count(spec) == (plain[0] + 2, plain[1])
    source = cpp.generate(spec)
    assert "W4_BLOCK = 128" in source and "return blk * N + n;" in source
    assert "PRODUCER_REGISTERS = 72" in source and "CONSUMER_REGISTERS = 216" in source


@needs_toolchain
@pytest.mark.parametrize(
    "spec",
    [
        _spec(),
        _spec(
            dtype="f16",
            out_dtype="f16",
            config=TileConfig(64, 64, 64, 8, 1, 8),
            w4=cpp.W4B(512, False, "n"),
        ),  # fmt: skip
    ],
    ids=["128x256-bf16-i4-blocks", "64x64-f16-ui4-columns"],
)
def test_the_int4_b_gemm_builds_for_sm_90a_without_spills(spec, tmp_path) -> None:
    """The linked kernel: one function, no local memory, the producer's dequantize (two
    codes a LOP3, a 16-bit pair subtract and multiply) and shared stores, no B tensor map
    loads (A's alone: UTMALDG)."""
    sass = clean_sass(spec, tmp_path)
    pairs = 4 * 4 * (spec.config.bn // 64)  # a thread's chunks of a step x 4 pairs
    assert len(re.findall(r"\bHADD2\b", sass)) >= pairs
    assert len(re.findall(r"\bHMUL2\b", sass)) >= pairs
    assert "UTMALDG" in sass


# ------------------------------------------------ the consumers' registers (gemm_w4_rs.cuh)


@pytest.mark.parametrize("order", ["kn", "nk"])
def test_a_lanes_rs_word_is_its_wgmma_a_fragment(order, rng) -> None:
    """``pack_int4_rs`` against the m64k16 A fragment as PTX defines it (per warp, an
    m16n8k16 A fragment): register i of lane 4 g + t holds rows g + 8 (i % 2) and K 2t,
    2t + 1 (+ 8 for i >= 2) in its low and high halves, and a word's register i is nibbles
    (i, i + 4) after a shift by 4 i. N ragged (padded to 128 with code 0)."""
    k, n = 128, 200
    codes = rng.integers(-8, 8, (k, n) if order == "kn" else (n, k)).astype(np.int8)
    words = pack_int4_rs(f"w4rs:{order}:i4", codes).view(np.uint32)
    rows = codes.T if order == "kn" else codes  # N x K
    tiles, steps = 2, k // 64
    assert words.shape == (tiles * steps * 1024,)
    chunks = words.reshape(tiles, steps, 2, 4, 32, 4)  # [T][step][cw][warp][lane][kk]
    got = np.full((tiles * 128, k), 99)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(4):
            half = (chunks[..., lane, :] >> np.uint32(4 * i)) & np.uint32(0x000F000F)
            for e, value in enumerate((half & 15, half >> 16)):  # [T][step][cw][warp][kk]
                col = 2 * t + e + 8 * (i // 2)
                for cw, warp, kk in np.ndindex(2, 4, 4):
                    row = np.arange(tiles)[:, None] * 128 + 64 * cw + 16 * warp + g + 8 * (i % 2)
                    kcol = np.arange(steps)[None, :] * 64 + 16 * kk + col
                    got[row, kcol] = value[:, :, cw, warp, kk].astype(int) - 8
    assert np.array_equal(got[:n], rows) and np.all(got[n:] == -8)


def _rs_spec(**changes) -> cpp.GemmSpec:
    fields = dict(
        config=TileConfig(256, 128, 64, 4, 2, 8),
        w4=cpp.W4B(128, True, "blk * N + n", in_registers=True),
    )
    return _spec(**{**fields, **changes})


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"config": TileConfig(128, 256, 64, 4, 2, 8)}, "64 weight columns a consumer"),
        ({"config": TileConfig(128, 128, 64, 4, 2, 8, schedule="pingpong")}, "cooperative"),
        ({"config": TileConfig(128, 128, 64, 4, 2, 8, epilogue="smem")}, "the direct epilogue"),
        ({"a_major": "m"}, "activations K-major"),
        ({"batch_a": True}, "one batch"),
    ],
)
def test_the_registers_spec_refuses_what_its_consumers_cannot_read(changes, problem) -> None:
    with pytest.raises(ValueError, match=problem):
        _rs_spec(**changes)


def test_the_consumer_route_keeps_the_producer_for_a_transposed_a(monkeypatch) -> None:
    """The consumers read plain K-major activations: a group whose A is transposed takes the
    producer's way under ``$FUSEC_W4_GEMM=consumer`` (both exact; no refusal)."""
    import fusec
    from fusec.targets.cuda.gemm import w4

    monkeypatch.setenv(w4.GEMM_ROUTE_ENV, "consumer")
    ir = """
func.func @f(%x: tensor<512x300xbf16>, %s: tensor<4x192xbf16>, %z: tensor<4x192xi4>)
    -> tensor<300x192xbf16> {
  %q = arith.constant dense<3> : tensor<512x192xi4>
  %w = ai.dequantize %q, %s, %z {axis = 0 : i64, block_size = 128 : i64}
    : tensor<512x192xi4> * tensor<4x192xbf16> * tensor<4x192xi4>
  %y = ai.matmul %x, %w {transpose_a = true} : tensor<512x300xbf16> * tensor<512x192xbf16>
  return %y : tensor<300x192xbf16>
}
"""
    (gemm,) = fusec.compile(ir, target="cuda", executable=False).kernels
    assert gemm.specs[0].w4 is not None and not gemm.specs[0].w4.in_registers


@needs_toolchain
@pytest.mark.parametrize("split", [1, 3])
def test_the_registers_gemm_builds_for_sm_90a_without_spills(split, tmp_path) -> None:
    """The linked kernel: no local memory, A's fragments from registers into wgmma (the
    HGMMA's second operand a register, not a descriptor), a 16-byte shared read of a
    step's codes, the dequantize (a 16-bit pair subtract and multiply a register, 16 a
    step), the codes by one bulk copy (UBLKCP) beside X's TMA load (UTMALDG); split K
    too (split_k.cuh's reduction of the thread's sums)."""
    rows = 256 if split == 1 else 128  # (split-K: at most 64 accumulators a thread)
    sass = clean_sass(_rs_spec(config=TileConfig(rows, 128, 64, 4, 2, 8, split_k=split)), tmp_path)
    assert re.search(rf"HGMMA\.64x{rows}x16\.F32\.BF16 R\d+, R\d+, gdesc", sass)
    assert len(re.findall(r"\bHADD2\.BF16", sass)) >= 16
    assert len(re.findall(r"\bHMUL2\.BF16", sass)) >= 16
    assert "LDS.128" in sass and "UBLKCP" in sass and "UTMALDG" in sass


@pytest.mark.parametrize(
    "options, problem",
    [
        ('tile="128x256x64 s4 c2 g8"', "64 weight columns a consumer"),
        ("epilogue=smem", "the direct epilogue"),
        ("schedule=pingpong", "the cooperative schedule"),
    ],
)
def test_a_forced_tile_the_consumers_cannot_run_is_an_error(options, problem) -> None:
    """``tile-gemm`` options that the int4 consumers' kernel cannot run say so (a
    FusecError naming the reason, not a failed spec at code generation); tuning records,
    which hold the plain GEMM's tiles, are not applied to it."""
    import fusec
    from fusec.errors import FusecError

    model, _ = w4a16_onnx(300, 512, 192, 128, "bf16", 3)
    with pytest.raises(FusecError, match=f"consumers. registers: .*{problem}"):
        fusec.compile(
            fusec.from_onnx(model),
            target="cuda",
            pipeline=f"fusec-cuda,tile-gemm{{{options}}}",
            executable=False,
        )
