"""The weight-only int4 route of the cuda matmul template (W4A16, issue 31) without a
GPU: the packing of the codes, which road each layer takes, and the kernel's sums under
Numba's CUDA simulator (a subprocess: ``w4_sim.py``) against the reference executor.
On the GPU: test_w4a16_gpu.py."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from sim_client import run_simulator
from w4_cases import w4a16_ir, w4a16_onnx

from fusec.targets.cuda import constant_layouts
from fusec.targets.cuda.env import simulator_enabled

pytestmark = pytest.mark.requires_target("cuda")

HERE = Path(__file__).parent


@pytest.mark.parametrize("layout", ["w4:kn:i4", "w4:nk:i4", "w4:kn:ui4", "w4:nk:ui4"])
def test_int4_layout_puts_code_k_of_row_n_in_nibble_k_mod_8_of_word_k_div_8(layout: str) -> None:
    rng = np.random.default_rng(4)
    signed = layout.endswith(":i4")
    low, high = (-8, 8) if signed else (0, 16)
    rows = rng.integers(low, high, (5, 48))  # N x K
    codes = rows if ":nk:" in layout else rows.T
    codes = codes.astype(ml_dtypes.int4 if signed else ml_dtypes.uint4)
    words = constant_layouts.prepare(layout, codes)
    assert words.dtype == np.int32 and words.shape == (5, 6) and words.flags.c_contiguous
    unpacked = (words.view(np.uint32)[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 15
    assert np.array_equal(unpacked.reshape(5, 48).astype(np.int64), rows + (8 if signed else 0))


@pytest.mark.parametrize(
    "m, transposed, block, layout",
    [(1, False, 128, "w4mma:kn:i4:8"), (16, True, 64, "w4mma:nk:i4:4"), (3, False, 32, "w4:kn:i4")],
)
def test_decode_layers_take_the_w4a16_route(m: int, transposed: bool, block: int, layout) -> None:
    """Up to 16 rows a layer is one kernel reading the packed codes (a prepared input of
    its layout), the bias and Relu in its epilogue: the Tensor Core kernel where K and the
    scale blocks are whole chunks of 64 (128: 8 words a lane), else the CUDA-core one."""
    import fusec

    model, _ = w4a16_onnx(m, 512, 64, block, "bf16", seed=1, transposed=transposed)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    (kernel,) = compiled.kernels
    assert kernel.kind == "matmul" and kernel.remark is None
    assert kernel.prepared_inputs == ((0, layout),)
    assert "weight-only int4 route" in kernel.source
    assert ("mma.sync fragments" in kernel.source) == layout.startswith("w4mma")
    assert "epilogue: ai.bias_add -> ai.relu" in kernel.source
    assert "int32[::1]" in kernel.source  # the codes arrive as packed words


def test_the_cuda_core_kernel_can_be_chosen(monkeypatch) -> None:
    """``FUSEC_W4_KERNEL=cuda-cores`` (the benchmark's A/B) keeps the CUDA-core kernel."""
    import fusec
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, "cuda-cores")
    model, _ = w4a16_onnx(1, 512, 64, 128, "bf16", seed=1)
    (kernel,) = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False).kernels
    assert kernel.prepared_inputs == ((0, "w4:kn:i4"),)


def test_a_kernel_choice_of_none_of_the_kernels_is_a_clear_error(monkeypatch) -> None:
    import fusec
    from fusec.errors import FusecError
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, "warp-ring")  # (a variant measured slower and removed)
    model, _ = w4a16_onnx(1, 512, 64, 128, "bf16", seed=1)
    with pytest.raises(FusecError, match=r"FUSEC_W4_KERNEL: 'warp-ring', expected .*'ring'"):
        fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)


@pytest.mark.parametrize("sms, loop", [(2, "ring"), (3, "registers"), (132, "registers")])
def test_tile_gemm_gives_the_ring_to_blocks_that_walk_several_tiles(sms: int, loop: str) -> None:
    """N = 272 is 17 tiles of 16 columns: 2 SMs run 16 blocks (8 a multiprocessor), so
    blocks walk several tiles and take the block ring, which fetches across them; 3 SMs (24
    blocks) or 132 give each block one tile: the register sets (``choose_loop``). The
    attribute is on the IR and the kernel follows it."""
    import fusec
    from fusec.dialect import ops as ai
    from fusec.targets.cuda.gemm.w4_mma import LOOP_ATTR

    model, _ = w4a16_onnx(1, 512, 272, 128, "bf16", seed=1)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False, sms=sms)
    (group,) = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    assert group.attributes[LOOP_ATTR].data == loop
    (kernel,) = compiled.kernels
    assert ("bulk_load(" in kernel.source) == (loop == "ring")
    assert ("words1" in kernel.source) == (loop == "registers")


def test_the_kernel_choice_overrides_the_loop_on_the_ir(monkeypatch) -> None:
    """``FUSEC_W4_KERNEL=registers`` runs the register sets where the IR names the ring."""
    import fusec
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, "registers")
    model, _ = w4a16_onnx(1, 512, 272, 128, "bf16", seed=1)
    (kernel,) = fusec.compile(
        fusec.from_onnx(model), target="cuda", executable=False, sms=2
    ).kernels
    assert "bulk_load(" not in kernel.source and "words1" in kernel.source


def test_a_bad_loop_attribute_is_a_diagnostic_at_the_group(tmp_path) -> None:
    """A hand-written ``fusec.w4_loop`` naming no loop: file:line:col, the attribute, what
    was expected; exit code 1."""
    import re

    import fusec
    from fusec.cli import main

    model, _ = w4a16_onnx(1, 512, 64, 128, "bf16", seed=1)
    text = str(fusec.compile(fusec.from_onnx(model), target="cuda", executable=False).module)
    text = re.sub(r'fusec.w4_loop = "registers"', 'fusec.w4_loop = "rings"', text)
    path = tmp_path / "w4.mlir"
    path.write_text(text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["compile", str(path), "--target", "cuda", "--pipeline", "", "--emit", "cuda"])
    assert code == 1
    assert re.search(rf"{re.escape(str(path))}:\d+:\d+", err.getvalue()), err.getvalue()
    assert "fusec.w4_loop" in err.getvalue() and '"ring"' in err.getvalue()


@pytest.mark.parametrize("layout", ["w4mma:kn:i4:8", "w4mma:nk:ui4:4"])
def test_mma_layout_puts_each_code_in_its_lanes_fragment(layout: str) -> None:
    """Word s of lane 4 g + t in chunk c of tile T holds, in nibble MMA_NIBBLE[h, j], the
    code of output column 16 T + 8 h + g at K = 16 CW c + 4 CW t + 4 s + j; columns past N
    (20, padded to 32) are zero nibbles."""
    rng = np.random.default_rng(6)
    signed, cw = ":i4:" in layout, int(layout.split(":")[-1])
    rows = rng.integers(-8, 8, (20, 256)) if signed else rng.integers(0, 16, (20, 256))
    codes = rows if ":nk:" in layout else rows.T
    codes = codes.astype(ml_dtypes.int4 if signed else ml_dtypes.uint4)
    words = constant_layouts.prepare(layout, codes).view(np.uint32)
    chunks = 256 // (16 * cw)
    assert words.shape == (2 * chunks * 32 * cw,)
    stored = rows + (8 if signed else 0)
    for _ in range(200):
        tile, c, g, t, s = (int(rng.integers(0, b)) for b in (2, chunks, 8, 4, cw))
        word = words[((tile * chunks + c) * 32 + 4 * g + t) * cw + s]
        for (h, j), nibble in constant_layouts.MMA_NIBBLE.items():
            n, k = 16 * tile + 8 * h + g, 16 * cw * c + 4 * cw * t + 4 * s + j
            want = stored[n, k] if n < 20 else 0
            assert (word >> (4 * nibble)) & 15 == want, (tile, c, g, t, s, h, j)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_mma_fragments_are_magic_plus_the_codes_exactly(fmt: str) -> None:
    """``w4_mma_device.sim_fragment`` (the GPU helper's fields, bit for bit: a pair of
    nibbles shifted to bits 0-3 / 16-19, ORed into a 16-bit float whose ulp is 1) holds
    ``MAGIC + q`` for each code, in the fragment's order of nibbles (0, 4, 1, 5, 2, 6, 3, 7),
    and ``MAGIC + z`` is exact too: the kernel's ``tmp - (MAGIC + z) sx`` is ``(q - z) x``."""
    from fusec.targets.cuda import w4_mma_device as dev

    magic = {"f16": 1024.0, "bf16": 128.0}[fmt]
    rng = np.random.default_rng(7)
    for word in [0, 0xFFFFFFFF, 0x76543210, *rng.integers(0, 2**32, 40).tolist()]:
        nibbles = [(word >> (4 * i)) & 15 for i in range(8)]
        got = dev.sim_fragment(fmt, word)
        assert got == [magic + nibbles[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]


def test_more_rows_and_run_time_codes_dequantize_then_multiply() -> None:
    """With codes that are no constant, or blocks that do not step whole K steps, one
    pointwise kernel dequantizes the codes and the Tensor Core GEMM multiplies (past 16
    rows the GEMM dequantizes constant codes itself where it can, ``test_gemm_w4.py``);
    the remark says why."""
    import fusec

    model, _ = w4a16_onnx(600, 512, 64, 32, "f16", seed=2)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    remarks = str(compiled.remarks())
    assert "600 rows of activations" in remarks and "not multiples of 64" in remarks
    compiled = fusec.compile(w4a16_ir(4, 256, 64, 32, "f16", True), target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    assert "the codes are no constant" in str(compiled.remarks())


#: (M, K, N, block, type, transposed, scales): N not a multiple of a block's columns, K's
#: words not a multiple of a warp's step (136 words: the K split's last step partly
#: outside), loads of 1, 2 and 4 words, a warp taking one step of K and several, codes
#: stored N x K, scales per column and per tensor, a ragged last scale block, UINT4 codes
#: (the optional eighth field). Past M = 16 the Tensor Core
#: GEMM, which the simulator cannot run (test_w4a16_gpu.py).
SIM_LAYERS = [
    (2, 256, 40, 32, "bf16", False, "block"),
    (3, 128, 20, 16, "f16", True, "block"),
    (1, 1088, 8, 64, "bf16", False, "block"),
    (16, 64, 9, 8, "f16", False, "block"),
    (2, 128, 24, 0, "f16", False, "column"),
    (1, 64, 16, 0, "bf16", True, "column"),
    (4, 64, 16, 0, "f16", True, "tensor"),
    (8, 2048, 12, 128, "bf16", False, "block"),  # two steps of K a warp of the split
    # 9 tiles on the simulator's 8 blocks: block 0's ring runs on into its second tile
    (1, 2048, 136, 128, "bf16", False, "block"),
    (16, 1024, 10, 64, "f16", True, "block"),
    (2, 96, 12, 64, "f16", True, "block"),  # a ragged last block of K (96 = 64 + 32)
    (3, 256, 20, 32, "bf16", False, "block", True),  # UINT4 codes and zero points
    (2, 64, 12, 128, "f16", True, "block"),  # one block covering K: per column
    (2, 128, 12, 32, "bf16", "matmul", "block"),  # x @ W.T as Transpose -> MatMul
    # the Tensor Core kernel (K and blocks in chunks of 64) past the ones above: UINT4
    # codes, two B fragments in bf16, 8 words a lane with a tile past N
    (12, 256, 24, 128, "bf16", False, "block", True),
    (9, 128, 20, 64, "bf16", True, "block"),
]


@pytest.mark.parametrize("layer", SIM_LAYERS, ids=str)
def test_w4a16_kernel_under_the_simulator_matches_the_reference(layer, sim_results) -> None:
    record = sim_results[str(layer)]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


#: Layers of the Tensor Core kernel through its ring variant (``FUSEC_W4_KERNEL=ring``).
RING_SIM_LAYERS = [
    (1, 2048, 136, 128, "bf16", False, "block"),  # 9 tiles, 8 blocks: the ring across tiles
    (8, 2048, 12, 128, "bf16", False, "block"),
    (16, 1024, 10, 64, "f16", True, "block"),
    (2, 128, 24, 0, "f16", False, "column"),  # one step of fewer chunks than warps
    (4, 64, 16, 0, "f16", True, "tensor"),
]


#: Ring layers run again with two chunks a warp a step (``w4_mma.CHUNKS_PER_STEP``, the
#: variant ``gemm_bench.py --w4-ring-sweep`` times): across tiles, a last step of fewer
#: chunks than its warps take, one step of fewer chunks than warps.
RING_TWO_CHUNK_LAYERS = [
    RING_SIM_LAYERS[0],
    (2, 2560, 24, 128, "f16", True, "block"),
    RING_SIM_LAYERS[3],
]


#: Layers run again with x's chunk sums from the block's shared table
#: (``w4_mma.SHARED_X_SUMS``) through both loops: one B fragment across tiles, two (M = 16,
#: rows past M in the first), one step of fewer chunks than warps (a chunk past K).
X_SUMS_LAYERS = [
    RING_SIM_LAYERS[0],
    (12, 1024, 10, 64, "f16", True, "block"),
    RING_SIM_LAYERS[3],
]


#: Ring layers run again with a producer warp (``w4_mma.PRODUCER_WARP``), with the ring's
#: other knobs: across tiles; two B fragments, two chunks a step; a step of fewer chunks
#: than warps, with the x sums' table and staggered halves.
PRODUCER_SIM_CASES = [
    (RING_SIM_LAYERS[0], {}),
    (RING_SIM_LAYERS[2], {"ring_chunks": 2}),
    (RING_SIM_LAYERS[3], {"x_sums": True, "staggered": True}),
]

#: Layers run with a producer warp that also copies each step's scales and zero points
#: into the stage (``w4_mma.RING_SCALES``): across tiles (signed zero points); two B
#: fragments with unsigned codes and zero points; a scale block of two chunks with the x
#: sums' table and staggered halves; per-column scales (the per-lane loads instead).
RING_SCALES_SIM_LAYERS = [
    (1, 2048, 144, 128, "bf16", False, "block"),
    (16, 1024, 32, 64, "f16", False, "block", True),
    (3, 2560, 48, 256, "bf16", False, "block"),
    (2, 128, 32, 0, "f16", False, "column"),
]


@pytest.fixture(scope="module")
def ring_sim_results() -> dict:
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    cases = [{"name": str(layer), "layer": list(layer)} for layer in RING_SIM_LAYERS]
    cases += [
        {"name": f"{layer} x2", "layer": list(layer), "ring_chunks": 2}
        for layer in RING_TWO_CHUNK_LAYERS
    ]
    cases += [
        {"name": f"{layer} staggered", "layer": list(layer), "staggered": True}
        for layer in RING_SIM_LAYERS[:2]
    ]
    cases += [
        {"name": f"{layer} x sums", "layer": list(layer), "x_sums": True} for layer in X_SUMS_LAYERS
    ]
    cases += [
        {"name": f"{layer} producer", "layer": list(layer), "producer": True, **knobs}
        for layer, knobs in PRODUCER_SIM_CASES
    ]
    cases += [
        {"name": f"{layer} ring scales", "layer": list(layer), "producer": True,
         "ring_scales": True, **({"x_sums": True, "staggered": True} if layer[3] == 256 else {})}
        for layer in RING_SCALES_SIM_LAYERS
    ]  # fmt: skip
    # the kernel's source with its jit options (launch bounds, carveout) runs there too
    layer, options = RING_SIM_LAYERS[0], {"min_blocks": 5, "carveout": 50}
    cases.append({"name": f"{layer} bounded", "layer": list(layer), **options})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KERNEL_CHOICE, "ring")  # the simulator's subprocess inherits it
        return run_simulator(HERE / "w4_sim.py", cases)


@pytest.mark.parametrize("layer", RING_SIM_LAYERS, ids=str)
def test_w4a16_ring_under_the_simulator_matches_the_reference(layer, ring_sim_results) -> None:
    record = ring_sim_results[str(layer)]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.mark.parametrize("layer", RING_TWO_CHUNK_LAYERS, ids=str)
def test_w4a16_ring_of_two_chunks_a_step_matches_the_reference(layer, ring_sim_results) -> None:
    record = ring_sim_results[f"{layer} x2"]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.mark.parametrize("layer", RING_SIM_LAYERS[:2], ids=str)
def test_w4a16_ring_reading_staggered_halves_matches_the_reference(layer, ring_sim_results):
    """``STAGGERED_HALVES``: lanes 4-7 of every 8 read their second 16 bytes of codes first
    and swap the halves back: across tiles, two B fragments' worth of rows."""
    record = ring_sim_results[f"{layer} staggered"]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.mark.parametrize("layer", [layer for layer, _ in PRODUCER_SIM_CASES], ids=str)
def test_w4a16_ring_with_a_producer_warp_matches_the_reference(layer, ring_sim_results):
    """``PRODUCER_WARP``: a ninth warp issues the copies once a stage's readers have all
    arrived on its second mbarrier; no block barrier ends a step."""
    record = ring_sim_results[f"{layer} producer"]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.mark.parametrize("layer", RING_SCALES_SIM_LAYERS, ids=str)
def test_w4a16_ring_with_the_scales_in_the_stage_matches_the_reference(layer, ring_sim_results):
    """``RING_SCALES``: the producer warp's lanes copy a step's scale and zero-point rows
    behind its codes (``cp_async16`` on the stage's mbarrier); readers take theirs from the
    stage (zero points signed or not, a scale block of one or two chunks)."""
    record = ring_sim_results[f"{layer} ring scales"]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.mark.parametrize(
    "layer, applies",
    [
        ((1, 2048, 144, 128, "bf16", False, "block"), True),
        ((1, 2048, 136, 128, "bf16", False, "block"), False),
        ((2, 128, 32, 0, "f16", False, "column"), False),
        ((2, 256, 32, 128, "f16", True, "block"), False),
    ],
    ids=str,
)
def test_the_scales_come_through_the_ring_where_their_rows_are_aligned(layer, applies, monkeypatch):
    """Scales per block of K stored ``[K / block, N]`` with N a multiple of 16 take the
    ring (``ring_scales_problem``); N = 136, per-column scales or scales stored ``[N, K /
    block]`` keep the per-lane loads."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, "ring")
    monkeypatch.setattr(w4_mma, "PRODUCER_WARP", True)
    monkeypatch.setattr(w4_mma, "RING_SCALES", True)
    m, k, n, block, dtype, transposed, scales = layer
    model, _ = w4a16_onnx(m, k, n, block, dtype, 1, transposed, scales)
    (kernel,) = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False).kernels
    assert ("cp_async16(" in kernel.source) == applies
    assert ("sra1 = load_bits(" in kernel.source) != applies  # (the per-lane loads)


def test_w4a16_ring_with_launch_bounds_matches_the_reference(ring_sim_results) -> None:
    record = ring_sim_results[f"{RING_SIM_LAYERS[0]} bounded"]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.fixture(scope="module")
def sim_results() -> dict:
    cases = [{"name": str(layer), "layer": list(layer)} for layer in SIM_LAYERS]
    cases += [
        {"name": f"{layer} x sums", "layer": list(layer), "x_sums": True, "loop": "registers"}
        for layer in X_SUMS_LAYERS
    ]
    return run_simulator(HERE / "w4_sim.py", cases)


@pytest.mark.parametrize("loop", ["registers", "ring"])
@pytest.mark.parametrize("layer", X_SUMS_LAYERS, ids=str)
def test_x_sums_from_the_blocks_table_match_the_reference(loop, layer, request):
    """``SHARED_X_SUMS``: x's sums over each chunk from the block's shared table, the codes'
    ``mma`` alone a word, in the register loop and the ring."""
    results = request.getfixturevalue("ring_sim_results" if loop == "ring" else "sim_results")
    record = results[f"{layer} x sums"]
    assert record["kinds"] == ["matmul"], record
    assert record["nan"] == 0 and record["rel_l2"] < 1e-2, record


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("m, dtype, count", [(1, "bf16", 32), (12, "f16", 64)])
def test_w4a16_tensor_core_kernel_compiles_to_mma(m: int, dtype: str, count: int) -> None:
    """For sm_90 (no GPU needed): a word of codes is two ``mma.sync`` a B fragment (the
    codes', x's sums'), two fragments past 8 rows, 8 words a chunk, two chunks an
    iteration; the codes and activations 16-byte loads, no local memory."""
    import fusec

    model, _ = w4a16_onnx(m, 1024, 64, 128, dtype, seed=3)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32") == count
    assert ptx.count("ld.global.v4.u32") >= 3 and ".local" not in ptx
    assert "cp.async.bulk" not in ptx


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("m, dtype, count", [(1, "bf16", 16), (12, "f16", 32)])
@pytest.mark.parametrize("chunks", [1, 2])
def test_w4a16_ring_compiles_to_bulk_copies(monkeypatch, m, dtype, count, chunks):
    """``FUSEC_W4_KERNEL=ring``: ``chunks`` chunks a warp a step (``CHUNKS_PER_STEP``), their
    codes through shared memory (bulk copies on mbarriers, one stage wait a step, two 16-byte
    shared loads a lane a chunk), the activations 16-byte global loads."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, "ring")
    monkeypatch.setattr(w4_mma, "CHUNKS_PER_STEP", chunks)
    model, _ = w4a16_onnx(m, 1024, 64, 128, dtype, seed=3)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    mmas = ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32")
    assert mmas == count * chunks
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert ptx.count("mbarrier.try_wait.parity.shared::cta.b64") == 1
    assert ptx.count("ld.shared.v4.u32") == 2 * chunks and ptx.count("ld.global.v4.u32") >= 4
    assert ".local" not in ptx


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("loop", ["registers", "ring"])
def test_x_sums_from_a_table_halve_the_mmas(monkeypatch, loop: str) -> None:
    """``SHARED_X_SUMS``: one ``mma.sync`` a word (the codes') where the default has two, x's
    sums read from shared memory, no local memory."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, loop)
    model, _ = w4a16_onnx(1, 1024, 64, 128, "bf16", seed=3)
    counts = []
    for x_sums in (False, True):
        monkeypatch.setattr(w4_mma, "SHARED_X_SUMS", x_sums)
        compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
        ((_, ptx),) = compiled.assembly("sm_90")
        counts.append(ptx.count("mma.sync.aligned.m16n8k16"))
        assert ".local" not in ptx
    assert counts[1] * 2 == counts[0] > 0


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("scales", [False, True])
def test_a_producer_warp_takes_the_block_barrier_out_of_the_step(monkeypatch, scales) -> None:
    """``PRODUCER_WARP``: the ring's PTX has one block barrier fewer (the step's), its readers
    release stages with ``mbarrier.arrive``, 288 threads a block (launch bounds for 3 blocks);
    with ``RING_SCALES`` the scales come by ``cp.async`` onto the stage's mbarrier. No local
    memory either way."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, "ring")
    model, _ = w4a16_onnx(1, 1024, 64, 128, "bf16", seed=3)
    barriers = []
    for producer in (False, True):
        monkeypatch.setattr(w4_mma, "PRODUCER_WARP", producer)
        monkeypatch.setattr(w4_mma, "RING_SCALES", producer and scales)
        monkeypatch.setattr(w4_mma, "MIN_BLOCKS_PER_SM", 3 if producer else None)
        compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
        ((_, ptx),) = compiled.assembly("sm_90")
        barriers.append(ptx.count("barrier.sync") + ptx.count("bar.sync"))
        assert ".local" not in ptx
    assert barriers[1] == barriers[0] - 1 > 0
    assert "mbarrier.arrive.shared::cta.b64" in ptx and ".maxntid 288, 1, 1" in ptx
    assert (
        ("cp.async.mbarrier.arrive.noinc" in ptx) == ("cp.async.cg.shared.global" in ptx) == scales
    )


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("loop", ["registers", "ring"])
@pytest.mark.parametrize("blocks", [None, 5])
def test_blocks_asked_to_fit_a_multiprocessor_reach_the_ptx(monkeypatch, loop, blocks):
    """``MIN_BLOCKS_PER_SM``: the kernel's launch bounds (256 threads, that many blocks) in
    its PTX, which ptxas fits by capping registers; none by default."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, loop)
    monkeypatch.setattr(w4_mma, "MIN_BLOCKS_PER_SM", blocks)
    model, _ = w4a16_onnx(1, 1024, 64, 128, "bf16", seed=3)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    if blocks is None:
        assert ".minnctapersm" not in ptx and ".maxntid" not in ptx
    else:
        assert ".maxntid 256, 1, 1" in ptx and f".minnctapersm {blocks}" in ptx


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
def test_every_kernel_of_the_ring_sweep_compiles_for_sm_90(monkeypatch) -> None:
    """``gemm_bench.py --w4-ring-sweep``'s variants (device time is scarce: each must build
    before a GPU sees it) compile to PTX with their knobs: the launch bounds in the PTX, the
    carveout on the kernel's ``cuda.jit`` (a launch attribute, not PTX)."""
    import importlib.util

    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "gemm_bench.py"
    spec = importlib.util.spec_from_file_location("gemm_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model, _ = w4a16_onnx(1, 2048, 64, 128, "bf16", seed=3)
    for variant in bench.W4_RING_VARIANTS:
        monkeypatch.setenv(w4_mma.KERNEL_CHOICE, variant.loop)
        for knob, value in variant.knobs().items():
            monkeypatch.setattr(w4_mma, knob, value)
        compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
        ((kernel, ptx),) = compiled.assembly("sm_90")
        # 16 a chunk (8 with x's sums from a table): the register loop takes two an
        # iteration, the ring ``chunks`` a step (NVVM may copy a loop's body: two stages'
        # ring has two copies)
        a_chunk = 8 if variant.x_sums else 16
        chunks, mmas = variant.chunks, ptx.count("mma.sync.aligned.m16n8k16")
        assert mmas >= a_chunk * chunks and mmas % (a_chunk * chunks) == 0, variant
        assert ("cp.async.bulk" in ptx) == (variant.loop == "ring"), variant
        assert (f".minnctapersm {variant.fit}" in ptx) == (variant.fit is not None), variant
        carveout = f"shared_memory_carveout={variant.carveout}"
        assert (carveout in kernel.source) == (variant.carveout is not None), variant


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
def test_w4a16_kernel_compiles_to_ptx_with_its_sums_in_registers(monkeypatch) -> None:
    """For sm_90 (no GPU needed): the CUDA-core kernel's codes are 32-bit loads, x 16-byte
    ones, the shuffles of the warp sum are there, and nothing spills to local memory."""
    import fusec
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, "cuda-cores")
    model, _ = w4a16_onnx(1, 1024, 64, 128, "f16", seed=3)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ".entry" in ptx and "shfl.sync.bfly" in ptx
    assert "ld.global.v4" in ptx or "ld.global.nc.v4" in ptx
    assert ".local" not in ptx


def test_an_unknown_constant_layout_is_an_error() -> None:
    from fusec.errors import FusecError

    with pytest.raises(FusecError, match="no constant layout 'w5:kn'"):
        constant_layouts.prepare("w5:kn", np.zeros(8, np.int8))


def test_an_integer_epilogue_leaves_the_w4a16_group() -> None:
    """A quantize of the product to int8 (integer values: the route's epilogue holds
    floats) is a kernel of its own after the W4A16 one."""
    import fusec

    text = """func.func @f(%x: tensor<1x64xf16>, %s: tensor<4x16xf16>) -> tensor<1x16xi8> {
  %q = arith.constant dense<3> : tensor<64x16xi4>
  %z = arith.constant dense<0> : tensor<4x16xi4>
  %w = ai.dequantize %q, %s, %z {axis = 0 : i64, block_size = 16 : i64} : tensor<64x16xi4> * tensor<4x16xf16> * tensor<4x16xi4>
  %y = ai.matmul %x, %w : tensor<1x64xf16> * tensor<64x16xf16>
  %so = arith.constant dense<0.5> : tensor<f16>
  %zo = arith.constant dense<0> : tensor<i8>
  %o = ai.quantize %y, %so, %zo : tensor<1x16xf16> * tensor<f16> * tensor<i8>
  return %o : tensor<1x16xi8>
}"""  # noqa: E501
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["matmul", "pointwise"]
    assert "weight-only int4 route" in compiled.kernels[0].source
    assert "ai.quantize has i8 values" in str(compiled.remarks())


def test_torch_callers_pass_four_bit_values_a_byte_each() -> None:
    """A run-time int4/uint4 argument from torch is an int8/uint8 tensor (a byte a value, as
    on the device): torch's own int4 dtypes hold no usable tensors (the adapter asked for
    them and refused every run-time int4 argument on the H100, 2026-12-05)."""
    from fusec.targets.cuda.adapters import TORCH_DTYPES

    assert (TORCH_DTYPES["i4"], TORCH_DTYPES["ui4"]) == ("int8", "uint8")
    assert TORCH_DTYPES["i8"] == "int8" and TORCH_DTYPES["f8E4M3FN"] == "float8_e4m3fn"


def test_unpacked_fields_minus_their_bias_are_the_codes_exactly() -> None:
    """``unpack_i4x8``'s field j is 2**23 + q_j 16**E[j] (the simulator's form of the
    intrinsic); the kernel's one FFMA by 16**-E minus z + 2**(23 - 4E) gives q - z with no
    rounding, for every code and zero point."""
    from fusec.targets.cuda import w4_device

    helpers = w4_device._make_sim()
    rng = np.random.default_rng(5)
    for word in [0, -1, 0x12345678, *rng.integers(-(2**31), 2**31, 50).tolist()]:
        fields = np.zeros(8, np.float32)
        helpers["unpack_i4x8"](np.int32(word), w4_device.MAGIC, fields, 0)
        codes = [(word >> (4 * j)) & 15 for j in range(8)]
        for j, e in enumerate(w4_device.EXPONENTS):
            assert fields[j] == np.float32(2**23 + codes[j] * 16**e)
            for z in (0, 7, 8, 15):  # z + 8 of an i4 zero point, or a ui4 one
                bias = -(np.float32(z) + np.float32(2.0 ** (23 - 4 * e)))
                got = np.float32(fields[j] * np.float32(16.0**-e) + bias)
                assert got == codes[j] - z


def test_a_k_split_that_does_not_tile_the_block_is_refused(monkeypatch) -> None:
    """3 warps a group would leave two of a block's 8 warps without a group: their partial
    sums would land in the next K slice's place."""
    from fusec.targets.cuda.gemm import w4

    monkeypatch.setattr(w4, "SHAPES", ((w4.MAX_ROWS, 2, 3, 4),))
    with pytest.raises(ValueError, match="K split of 3"):
        w4.warp_shape(1, 1024, 128)


@pytest.mark.parametrize("target", ["reference", "cpu"])
def test_a_weight_read_through_a_transpose_keeps_its_values(target: str) -> None:
    """``MatMul(x, Transpose(DequantizeLinear(W)))`` (a Linear layer as exporters write it)
    canonicalizes to the dequantize of W's transposed constants: against numpy's product
    of the dequantized weight, computed here from the model's initializers (the targets'
    own reference would see the rewritten graph)."""
    from onnx import numpy_helper

    import fusec

    model, x = w4a16_onnx(3, 128, 24, 32, "f16", seed=8, transposed="matmul")
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    blocks = np.repeat(np.arange(128 // 32), 32)
    w = (inits["w_q"] - inits["w_z"][:, blocks]) * inits["w_s"][:, blocks]  # N x K
    want = np.maximum(x.astype(np.float64) @ w.T + inits["bias"], 0.0)
    module = fusec.from_onnx(model)
    ir = str(fusec.compile(module, target=target, executable=False).module)
    assert "ai.transpose" not in ir
    got = fusec.compile(fusec.from_onnx(model), target=target)(x).astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
