"""The GEMM's opt-in variants without a GPU: config, tile model, generated C++, PTX, SASS.

Variants (``config.Variant``): the pingpong schedule, the smem epilogue (staged
through shared memory, TMA stores) and the fast epilogue maths. Each builds exactly
as on the GPU (Numba LTO-IR + NVRTC LTO-IR, nvJitLink for sm_90a): no spills, no
stack, no local memory, wgmma not serialised (``build`` fails on that warning),
HGMMA in SASS. The model replays the new schedule and the staging layout.
"""

from __future__ import annotations

import dataclasses
import re

import gemm_model as model
import numpy as np
import pytest
from test_gemm_build import _sass, needs_toolchain

from fusec.targets.cuda.gemm import config as cfg
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import TileConfig, Variant, with_variant

# ------------------------------------------------------------------ configs


def test_variant_text_and_attribute_round_trip() -> None:
    config = TileConfig(64, 256, 64, 4, 2, 8, "pingpong", "smem", "fast")
    assert config.text == "64x256x64 s4 c2 g8 sched=pingpong epi=smem math=fast"
    assert TileConfig.parse(config.text) == config
    assert TileConfig.parse("128x256x64 s4 c2 g8 math=fast").variant == Variant(math="fast")
    assert cfg.from_attr(cfg.to_attr(config, "tuned")) == config
    assert config.rows_per_consumer == 64 and config.acc_registers == 128
    assert config.epi_bytes == 2 * 4 * 2 * 2048
    default = cfg.to_attr(TileConfig(), "heuristic")
    assert set(default.data) == {"block", "mma", "stages", "consumers", "group_m", "choice"}


@pytest.mark.parametrize(
    "text, problem",
    [
        ("128x256x64 s4 c2 g8 sched=zigzag", "schedule must be"),
        ("128x256x64 s4 c2 g8 epi=tma", "epilogue must be"),
        ("128x256x64 s4 c2 g8 math=loose", "math must be"),
        ("128x256x64 s4 c2 g8 epi=smem epi=smem", "repeated"),
        ("128x256x64 s4 c2 g8 color=red", "unknown"),
        ("128x256x64 s4 c1 g8 sched=pingpong", "2 consumer warpgroups"),
        ("128x256x64 s4 c2 g8 sched=pingpong", "accumulator registers"),
        ("128x256x64 s5 c2 g8 epi=smem", "shared memory"),
        ("128x256x64 s4 c2 g8 loop=rolled", "epi=smem"),
        ("128x256x64 s4 c2 g8 epi=smem loop=tight", "loop must be"),
    ],
)
def test_bad_variants_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        TileConfig.parse(text)


def test_split_k_text_attribute_and_rules() -> None:
    """``sk=N`` in the text and ``split_k`` in the attribute; the cooperative schedule only,
    without ln=tile, at most 64 accumulators per thread (more spill around the reduction);
    pingpong or ln=tile drop a split."""
    config = TileConfig.parse("64x128x64 s8 c1 g8 epi=smem sk=8")
    assert config.split_k == 8 and config.text == "64x128x64 s8 c1 g8 epi=smem sk=8"
    assert cfg.from_attr(cfg.to_attr(config, "heuristic")) == config
    assert "split_k" not in cfg.to_attr(TileConfig(), "heuristic").data
    for text, problem in [
        ("64x128x64 s8 c1 g8 sk=0", "split_k must be 1 to 16"),
        ("64x128x64 s8 c1 g8 sk=17", "split_k must be 1 to 16"),
        ("64x128x64 s8 c1 g8 sk=x", "sk must be an integer"),
        ("64x128x64 s8 c1 g8 sk=2 sk=3", "repeated"),
        ("64x256x64 s4 c2 g8 sched=pingpong sk=2", "cooperative schedule"),
        ("128x256x64 s4 c2 g8 sk=2", "at most 64 accumulators"),
    ]:
        with pytest.raises(ValueError, match=problem):
            TileConfig.parse(text)
    two = TileConfig.parse("128x128x64 s6 c2 g8 sk=4")
    assert with_variant(two, Variant(schedule="pingpong")).split_k == 1
    assert with_variant(two, Variant(epilogue="smem")).split_k == 4


def test_heuristic_splits_under_filled_problems(monkeypatch) -> None:
    """Batch-1 transformer projections leave most SMs idle even on the 64x128 tile: a deep
    K is split so that the units fill the GPU, each split at least 16 K steps deep (shorter
    splits lost on the H200: benchmarks/results/gemm-split-k-ab.md), 32 where the tiles
    alone give a quarter of the SMs a block (gemm-tile-sweep.md), at most 8; problems that
    fill half the GPU, or whose K is short, are not split. On by default
    (``$FUSEC_SPLIT_K=auto``; ``conv`` and ``off`` leave the GEMM unsplit)."""
    monkeypatch.setenv("FUSEC_SPLIT_K", "conv")
    assert cfg.choose_config(128, 768, 3072).split_k == 1  # the conv's only
    monkeypatch.setenv("FUSEC_SPLIT_K", "off")
    assert cfg.choose_config(128, 768, 3072).split_k == 1
    monkeypatch.delenv("FUSEC_SPLIT_K", raising=False)  # "auto": the GEMM's too
    expect = {
        (128, 768, 3072): 3,  # BERT's MLP down: 24 tiles of 64x64, 48 K steps / 16
        (128, 768, 768): 1,  # its attention output: 12 K steps (split 4 lost 0.80x)
        (128, 3072, 768): 1,  # MLP up: 12 K steps
        (197, 768, 3072): 1,  # ViT: 48 tiles of 64x64 (a quarter), 48 K steps < 2 x 32
        (1, 768, 768): 1,  # a pooler's row: 12 K steps
        (128, 2048, 5632): 2,  # Llama's down: 64 tiles of 64x64, 88 K steps / 32
        (128, 2048, 2048): 1,  # Llama's Q/O: 64 tiles, 32 K steps (split 2 lost 0.90x)
        (128, 256, 2048): 2,  # Llama's K/V: 8 tiles, 32 K steps / 16 (split 2 won 1.06x)
        (128, 5632, 2048): 1,  # Llama's gate: 88 tiles fill more than half
        (784, 768, 192): 1,  # 78 tiles
        (4096, 4096, 4096): 1,
        (128, 768, 128): 1,  # 2 K steps
    }
    for shape, splits in expect.items():
        assert cfg.choose_config(*shape).split_k == splits, shape
    assert cfg.choose_config(128, 768, 3072, sms=16).split_k == 1
    assert cfg.candidates(128, 768)[0].split_k == 1  # K unknown, no split
    # fusec tune passes K: the heuristic's own choice is the first candidate timed
    assert cfg.candidates(128, 768, k=3072)[0] == cfg.choose_config(128, 768, 3072)
    assert cfg.candidates(8192, 3072, k=768)[0] == cfg.choose_config(8192, 3072, 768)
    assert cfg.candidates(8192, 3072, k=768)[0].bn == 128  # SHORT_K
    assert cfg.candidates(8192, 3072)[0].bn == 256  # K unknown: not short


def test_heuristic_default_variant() -> None:
    """The large tiles take the variant measured fastest on the H200; small-M and whole-row
    tiles take the fast maths alone."""
    measured = Variant(epilogue="smem", math="fast")
    assert cfg.HEURISTIC_VARIANT == measured
    for shape in [(4096, 4096, 4096), (8192, 4096, 1024), (2048, 2048, 1024)]:
        assert cfg.choose_config(*shape).variant == measured
    assert cfg.choose_config(32, 512, 512).variant == Variant(math="fast")


def test_under_filled_problems_take_the_small_tile() -> None:
    """A problem that the large tiles leave more than half the SMs without a block (BERT's
    projections at batch 1: 128 tokens) takes the 64x128 tile: 4x the blocks; where even
    that leaves half the SMs idle, the 64x64 tile (8x)."""
    for m, n, k in [(197, 2304, 768), (1024, 1024, 1024), (128, 5632, 2048), (1, 50257, 768)]:
        config = cfg.choose_config(m, n, k)
        assert (config.bm, config.bn, config.consumers) == (64, 128, 1), (m, n, k)
    for m, n, k in [(128, 3072, 768), (128, 768, 3072), (49, 768, 3072), (1, 768, 768)]:
        config = cfg.choose_config(m, n, k)
        assert (config.bm, config.bn, config.consumers) == (64, 64, 1), (m, n, k)
    assert cfg.small_tile(128, 3072, sms=95).bn == 128  # 48 tiles of 64x128: over half of 95
    assert cfg.choose_config(128, 3072, 768, sms=16).bm == 128  # 12 large tiles fill 16 SMs
    assert cfg.choose_row_config(8192, 256).variant == Variant(math="fast")


def test_with_variant_adapts_tile_and_stages() -> None:
    base = TileConfig(128, 256, 64, 4, 2, 8)
    assert with_variant(base, Variant()) == base
    pp = with_variant(base, Variant("pingpong", "smem", "fast"))
    assert pp.text == "64x256x64 s4 c2 g8 sched=pingpong epi=smem math=fast"
    assert with_variant(base, Variant("pingpong")).stages == 5  # 40 KB stages: 5 fit
    assert with_variant(pp, Variant()) == dataclasses.replace(base, stages=4)
    one = TileConfig(64, 128, 64, 8, 1, 8)  # one consumer: no pingpong
    assert with_variant(one, Variant("pingpong", "smem")).schedule == "cooperative"
    assert with_variant(one, Variant("pingpong", "smem")).smem_bytes <= cfg.SMEM_LIMIT


def test_with_variant_shrinks_a_full_pipeline_for_the_staged_epilogue() -> None:
    """A row tile at its deepest pipeline (64x192, 7 stages) takes the staged epilogue and
    ln=tile by dropping a stage; the staging is computed, not read off an intermediate
    config at 7 stages (which does not fit and used to raise)."""
    full = cfg.choose_row_config(8192, 192)
    assert full.text == "64x192x64 s7 c1 g8 math=fast"
    tiled = with_variant(full, Variant(epilogue="smem", math="fast", ln="tile"))
    assert tiled.text == "64x192x64 s6 c1 g8 epi=smem math=fast ln=tile"
    assert tiled.smem_bytes <= cfg.SMEM_LIMIT
    assert cfg.epilogue_staging_bytes("smem", 1) == tiled.epi_bytes == 16384
    assert cfg.epilogue_staging_bytes("direct", 2) == 0


def test_tune_candidates_include_every_variant() -> None:
    found = {c.variant for c in cfg.candidates(8192, 4096)}
    assert {Variant(), *cfg.TUNE_VARIANTS} <= found
    texts = {c.text for c in cfg.candidates(8192, 4096)}
    assert "128x128x64 s6 c2 g8 sched=pingpong epi=smem math=fast" in texts
    assert cfg.candidates(8192, 4096)[0] == cfg.choose_config(8192, 4096, 0)


# -------------------------------------------------------------- tile model

RAGGED = [(1, 130, 260, 70, 3), (2, 65, 129, 129, 2), (1, 200, 100, 64, 132)]
#: the tile model's outputs (f16 and f32 stored by TMA, bf16 by the masked copy) and shapes
MODEL_OUTPUTS = pytest.mark.parametrize(
    "out_dtype, tma_out", [("f16", True), ("f32", True), ("bf16", False)]
)
MODEL_SHAPES = pytest.mark.parametrize(
    "shape", RAGGED, ids=["130x260x70", "b2-65x129x129", "200x100x64"]
)


@pytest.mark.parametrize(
    "text",
    [
        "64x256x64 s4 c2 g8 sched=pingpong",
        "128x128x64 s6 c2 g8 sched=pingpong epi=smem",
        "128x256x64 s4 c2 g8 epi=smem",
        "64x128x64 s8 c1 g2 epi=smem",
    ],
)
@MODEL_OUTPUTS
@MODEL_SHAPES
def test_tile_model_writes_every_element_once(text, out_dtype, tma_out, shape) -> None:
    out, product, bias = _model_bias_relu(text, out_dtype, tma_out, shape)
    np.testing.assert_allclose(out, np.maximum(product + bias, 0), rtol=1e-4, atol=1e-4)


def _model_bias_relu(text, out_dtype, tma_out, shape, seed=0):
    """The tile model of ``text`` on random A, B and a bias + relu epilogue that refuses
    an index outside the matrix; every element checked written once. (output, A @ B, bias)"""
    config = TileConfig.parse(text)
    batches, m, n, k, grid = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batches, m, k)).astype(np.float32)
    b = rng.standard_normal((batches, k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)

    def bias_relu(acc: float, row: int, col: int, bat: int) -> float:
        assert 0 <= row < m and 0 <= col < n and 0 <= bat < batches, (row, col, bat)
        return max(acc + bias[col], 0.0)

    out, writes = model.run(
        config, a, b, grid=grid, epilogue=bias_relu, out_dtype=out_dtype, tma_out=tma_out
    )
    assert (writes == 1).all(), "an element was written twice or never"
    return out, a @ b, bias


@pytest.mark.parametrize(
    "text",
    [
        "128x256x64 s4 c2 g8 epi=smem loop=rolled",
        "192x192x64 s3 c3 g8 epi=smem loop=rolled",
        "128x128x64 s6 c2 g8 sched=pingpong epi=smem loop=rolled",
    ],
)
@MODEL_OUTPUTS
@MODEL_SHAPES
def test_rolled_epilogue_model(text, out_dtype, tma_out, shape) -> None:
    """loop=rolled: every element written once, as the epilogue of its accumulator rounded
    to the output type; the epilogue never sees a row or column outside the matrix (the
    steps past the edges read the last one's inputs)."""
    out, product, bias = _model_bias_relu(text, out_dtype, tma_out, shape, seed=1)
    staged = model._rounded(product.astype(np.float32), out_dtype)
    want = model._rounded(np.maximum(staged + bias, 0), out_dtype)
    # a few accumulators sit next to a rounding boundary: one unit of the type apart
    ulp = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}[out_dtype]
    np.testing.assert_allclose(out, want, rtol=ulp, atol=ulp)


@pytest.mark.parametrize("text", ["64x256x64 s4 c2 g8 sched=pingpong", "128x256x64 s4 c2 g8"])
@pytest.mark.parametrize("tiles, grid, kblocks", [(7, 3, 5), (2, 132, 16), (9, 2, 1)])
def test_ring_positions_match_the_producer(text, tiles, grid, kblocks) -> None:
    config = TileConfig.parse(text)
    for block in range(min(grid, tiles)):
        steps = model.ring_schedule(config, block, grid, tiles, kblocks)
        produced = [
            (local * kblocks + kb, t, kb)
            for local, t in enumerate(range(block, tiles, grid))
            for kb in range(kblocks)
        ]
        positions = [it for it, _, _, _ in steps]
        assert positions == sorted(positions)  # waited for in ring order
        if config.pingpong:
            assert [(it, t, kb) for it, _, t, kb in steps] == produced  # each once
            owners = [cw for _, cw, _, kb in steps if kb == 0]
            assert owners == [local % 2 for local in range(len(owners))]  # alternating
        else:
            assert len(steps) == config.consumers * len(produced)


# ------------------------------------------------------------ staging layout


@pytest.mark.parametrize("element_bytes", [2, 4])
@pytest.mark.parametrize("warp, ch", [(0, 0), (3, 1), (2, 3)])
def test_staging_stores_put_each_fragment_value_at_its_box_position(element_bytes, warp, ch):
    bn = 256
    rows = np.arange(64 * bn, dtype=np.float32).reshape(64, bn)  # value = its position
    regs = model._fragments(rows, bn)[0]
    stores = model.stage_chunk(regs, warp, ch, element_bytes)
    box = model.unswizzle(model.stage_buffer(stores, element_bytes), element_bytes)
    cols = 128 // element_bytes
    expected = rows[warp * 16 : warp * 16 + 16, ch * cols : (ch + 1) * cols]
    np.testing.assert_array_equal(box, expected)


@pytest.mark.parametrize("element_bytes, per_store", [(2, 1), (4, 2)])
def test_staging_stores_are_bank_conflict_free(element_bytes: int, per_store: int) -> None:
    regs = np.zeros((128, 128), dtype=np.float32)
    for lanes in model.stage_chunk(regs, 1, 0, element_bytes):
        addresses = [(offset, len(values) * element_bytes) for offset, values, _ in lanes]
        assert model.wavefronts(addresses) == per_store  # 128 bytes per wavefront
    reads = [(model.swizzled(i * 4 + lane // 8, lane % 8), 16) for i in (0,) for lane in range(32)]
    assert model.wavefronts(reads) == 4  # the fallback's 16-byte reads: 512 bytes, 4 waves


# ------------------------------------------------------------ generated C++

SPECS = {
    "pingpong-64x256-f16-bias": cpp.GemmSpec(
        TileConfig.parse("64x256x64 s5 c2 g8 sched=pingpong"),
        "f16",
        "f16",
        "k",
        "n",
        epilogue=cpp.bias_relu("f16"),
    ),
    "smem-128x256-f16": cpp.GemmSpec(
        TileConfig.parse("128x256x64 s4 c2 g8 epi=smem"), "f16", "f16", "k", "n"
    ),
    "pingpong-smem-128x128-bf16-f32-mn": cpp.GemmSpec(
        TileConfig.parse("128x128x64 s6 c2 g8 sched=pingpong epi=smem"),
        "bf16",
        "f32",
        "m",
        "n",
        True,
        False,
        cpp.bias_relu("bf16"),
    ),
    "pingpong-smem-64x256-bf16-kk-batched": cpp.GemmSpec(
        TileConfig.parse("64x256x64 s4 c2 g8 sched=pingpong epi=smem"),
        "bf16",
        "bf16",
        "k",
        "k",
        True,
        True,
        cpp.bias_relu("bf16"),
    ),
    "smem-1consumer-64x128": cpp.GemmSpec(
        TileConfig.parse("64x128x64 s8 c1 g8 epi=smem"), "f16", "f16", "k", "n"
    ),
    "rolled-128x256-f16-bias-relu": cpp.GemmSpec(
        TileConfig.parse("128x256x64 s4 c2 g8 epi=smem math=fast loop=rolled"),
        "f16",
        "f16",
        "k",
        "n",
        epilogue=cpp.bias_relu("f16"),
    ),
    "split8-64x128-f16": cpp.GemmSpec(
        TileConfig.parse("64x128x64 s8 c1 g8 sk=8"),
        "f16",
        "f16",
        "k",
        "n",
        epilogue=cpp.bias_relu("f16"),
    ),
    "split3-smem-128x128-bf16-f32-mn": cpp.GemmSpec(
        TileConfig.parse("128x128x64 s5 c2 g8 epi=smem math=fast sk=3"),
        "bf16",
        "f32",
        "m",
        "n",
        True,
        False,
        cpp.bias_relu("bf16"),
    ),
}


# the pingpong bf16 -> f32 MN-major spec with its epilogue run rolled over the staged chunks
SPECS["rolled-pingpong-128x128-bf16-f32-mn"] = dataclasses.replace(
    SPECS["pingpong-smem-128x128-bf16-f32-mn"],
    config=TileConfig.parse("128x128x64 s6 c2 g8 sched=pingpong epi=smem loop=rolled"),
)


def test_default_kernel_source_has_none_of_the_variants() -> None:
    source = cpp.generate(cpp.GemmSpec(TileConfig(), "f16", "f16", "k", "n"))
    for word in ("stmatrix", "bulk_group", "bar.sync", "fs_named", "map_out", "const u32 se"):
        assert word not in source


def test_pingpong_source_orders_the_main_loops() -> None:
    """The instantiation turns the schedule on; gemm.cuh's code for it (one consumer per
    stage, the named barriers' turns, the ring position of a tile) is in the linked source."""
    source = cpp.generate(SPECS["pingpong-64x256-f16-bias"])
    assert "PINGPONG = 1," in source and "SMEM_EPILOGUE = 0," in source
    assert "PINGPONG = 0," in cpp.generate(SPECS["smem-128x256-f16"])
    linked = SPECS["pingpong-64x256-f16-bias"].cpp_source()
    assert "fs_bar_init(bars + 8 * (STAGES + s), C::PINGPONG ? 1 : C::CONSUMERS);" in linked
    assert "if (local > 0) fs_named_sync(1 + cw, 256);" in linked
    assert "if (t + gridDim.x < tiles) fs_named_arrive(2 - cw, 256);" in linked
    assert "int it = local * kblocks;" in linked
    assert "const int row_blk = C::PINGPONG ? m * 64 : cw * WM + m * 64;" in linked


def test_smem_source_stages_and_stores_with_tma() -> None:
    source = cpp.generate(SPECS["smem-128x256-f16"])
    assert "u64 map_out" in source and SPECS["smem-128x256-f16"].arg_count() == (4, 4)
    assert "SMEM_EPILOGUE = 1," in source and "EPI_BYTES = 32768," in source
    assert "(epi, smem_raw, map_a, map_b, out, map_out, M, N, K, batches,\n" in source
    linked = SPECS["smem-128x256-f16"].cpp_source()
    assert "fs_fence_async_smem();" in linked and "fs_bulk_wait_read<1>();" in linked
    assert "if (lane == 0) fs_bulk_wait<0>();" in linked


@needs_toolchain
@pytest.mark.parametrize("name", list(SPECS))
def test_variant_ptx(name: str) -> None:
    from fusec.targets.cuda import build

    spec = SPECS[name]
    ptx = build.ptx(spec)
    assert ".target sm_90a" in ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{spec.config.bn}k16" in ptx
    staged = spec.config.epilogue == "smem"
    assert ("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group" in ptx) == staged
    assert ("fence.proxy.async.shared::cta" in ptx) == staged
    assert ("stmatrix.sync.aligned.m8n8.x4" in ptx) == (staged and spec.out_dtype != "f32")
    assert ("bar.arrive" in ptx) == spec.config.pingpong


@needs_toolchain
@pytest.mark.parametrize("name", list(SPECS))
def test_variant_cubin_has_no_local_memory(name: str, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    spec = SPECS[name]
    built = build.build(spec, KernelCache(tmp_path))  # raises if wgmma was serialised
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert "0 bytes stack frame" in built.log
    assert "setmaxnreg' ignored" not in built.log
    sass = _sass(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "CALL" not in sass
    hgmma = len(re.findall(r"HGMMA\.64x\d+x16\.F32", sass))
    assert hgmma == 4 * (spec.config.acc_registers // (spec.config.bn // 2))
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass  # one wgmma group kept in flight
    staged = spec.config.epilogue == "smem"
    chunks = spec.config.rows_per_consumer // 64 * spec.config.bn * 2 // 128
    chunks *= 2 if spec.out_dtype == "f32" else 1
    assert len(re.findall(r"\bUTMASTG\b", sass)) == (chunks if staged else 0)
    assert ("STSM" in sass) == (staged and spec.out_dtype != "f32")
    assert ("BAR.ARV" in sass) == spec.config.pingpong


@needs_toolchain
@pytest.mark.parametrize("loop", ["unrolled", "rolled"])
def test_fast_math_epilogue_uses_the_approximations(tmp_path, loop) -> None:
    """The MLP's first GEMM (bias + tanh GELU) with math=fast: MUFU.EX2 + MUFU.RCP, no
    IEEE division's slow path; ai.tanh is one MUFU.TANH. Both epilogue loops: unrolled
    over the tile, and rolled over the staged chunks (the default for this epilogue,
    ``FUSEC_GEMM_LOOP=auto``)."""
    import fusec
    from fusec.targets.cuda import build
    from fusec.targets.cuda.gemm.template import linked_specs

    # 8192 rows: 128 tiles of the large tile (a smaller problem takes the 64x128 tile,
    # which has one consumer and so no pingpong schedule)
    text = """func.func @f(%x: tensor<8192x256xf16>, %w: tensor<256x512xf16>, %b: tensor<512xf16>)
        -> tensor<8192x512xf16> {
      %h = ai.matmul %x, %w : tensor<8192x256xf16> * tensor<256x512xf16>
      %hb = ai.bias_add %h, %b {axis = 1 : i64} : tensor<8192x512xf16> * tensor<512xf16>
      %a = ai.gelu %hb {approximate = "tanh"} : tensor<8192x512xf16>
      %t = ai.tanh %a : tensor<8192x512xf16>
      return %t : tensor<8192x512xf16>
    }"""
    pipeline = f"fusec-default,tile-gemm{{math=fast epilogue=smem schedule=pingpong loop={loop}}}"
    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    (spec,) = linked_specs(compiled.kernels[0])
    assert spec.config.variant == Variant("pingpong", "smem", "fast", loop=loop)
    source = spec.cpp_source()
    # the epilogue functor's maths; gemm.cuh holds both softmax exponentials (the PTX
    # below shows which one the instantiation keeps)
    assert "__fdividef(" in source and "fs_tanh_approx(" in source
    ptx = build.ptx(spec)
    assert "ex2.approx.ftz.f32" in ptx and "tanh.approx.f32" in ptx
    assert "div.rn.f32" not in ptx  # no IEEE division left
    built = build.build(spec, _cache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    sass = _sass(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert "MUFU.TANH" in sass and "MUFU.EX2" in sass and "FSEL" in sass
    # interior tiles run the epilogue straight-line (selects too): a divergent region
    # (BSSY ... BSYNC) per element serialised it; this kernel had 277 of them, now 29
    assert len(re.findall(r"\bBSSY\b", sass)) < 64


def _cache(tmp_path):
    from fusec.runtime.cache import KernelCache

    return KernelCache(tmp_path)


@needs_toolchain
@pytest.mark.parametrize("math", ["ieee", "fast"])
def test_row_softmax_exponential_and_dense_path(math: str, tmp_path) -> None:
    """The row softmax epilogue (LN -> matmul 256x256 -> softmax): with math=fast each
    exponential is one FFMA and one MUFU.EX2 (libdevice's expf is ~8 instructions; the
    kernel has 128 per thread); with math=ieee it stays expf. Tiles inside the matrix's
    columns take pass 1 without per-element bounds checks (``dense``)."""
    from test_gemm_build import LN_SOFTMAX

    import fusec
    from fusec.targets.cuda import build
    from fusec.targets.cuda.gemm.template import linked_specs

    pipeline = f"fusec-default,tile-gemm{{math={math}}}"
    text = LN_SOFTMAX.format(m=1024, k=256, n=256)
    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    (spec,) = linked_specs(compiled.kernels[0])
    assert spec.epilogue.softmax == "row" and spec.config.math == math
    source = spec.cpp_source()
    assert "const bool dense = live && pn * BN + BN <= N;" in source
    # both exponentials are in gemm.cuh; the instantiation's FAST_MATH picks one
    assert "fs_ex2(fmaf(" in source and "expf(FS_FRAG(m, q, e) - shift)" in source
    assert f"FAST_MATH = {int(math == 'fast')}," in source
    sass = _sass(build.build(spec, _cache(tmp_path)).cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    exps = len(re.findall(r"\bMUFU\.EX2\b", sass))
    assert exps >= 128  # at least one per accumulator (the dense and edge paths)
    # libdevice's expf rounds with FFMA.RM (and clamps with FFMA.SAT) per element
    assert (len(re.findall(r"\bFFMA\.RM\b", sass)) >= 128) == (math == "ieee")


def test_split_k_source_takes_its_workspace() -> None:
    """A split tile's kernel takes the workspace and the counters after the epilogue inputs
    (two more u64 parameters) and says so in its header; an unsplit one passes 0, 0."""
    split = SPECS["split8-64x128-f16"]
    source = cpp.generate(split)
    assert "u64 e0, u64 split_ws, u64 split_counters, int M" in source
    assert "SPLIT_K = 8" in source and "// K split 8 ways (split-K)" in source
    assert "M, N, K, batches,\n                             split_ws, split_counters);" in source
    assert split.arg_count() == (3 + 1 + 2, 4)
    plain = cpp.generate(cpp.GemmSpec(TileConfig(), "f16", "f16", "k", "n"))
    assert "SPLIT_K = 1" in plain and "batches,\n                             0, 0);" in plain


MLP_UP = """func.func @f(%x: tensor<6272x384xf16>, %w: tensor<384x1536xf16>, %b: tensor<1536xf16>)
    -> tensor<6272x1536xf16> {
  %h = ai.matmul %x, %w : tensor<6272x384xf16> * tensor<384x1536xf16>
  %hb = ai.bias_add %h, %b {axis = 1 : i64} : tensor<6272x1536xf16> * tensor<1536xf16>
  %y = ai.gelu %hb : tensor<6272x1536xf16>
  return %y : tensor<6272x1536xf16>
}"""


@needs_toolchain
def test_rolled_epilogue_code_does_not_grow_with_the_tile(tmp_path) -> None:
    """ConvNeXt-T b32's stage-3 MLP up (bias + exact GELU) on the heuristic's 192x192 tile:
    unrolled, the epilogue is 96 copies per consumer thread (and again for edge tiles);
    loop=rolled keeps one 8-element step per staged chunk (3 a thread), so the kernel's
    SASS shrinks to about the bias-only kernel's (126 -> 39 KB when measured)."""
    import fusec
    from fusec.targets.cuda import build
    from fusec.targets.cuda.gemm.template import linked_specs

    counts = {}
    for loop in ("unrolled", "rolled"):
        pipeline = f"fusec-default,tile-gemm{{loop={loop}}}"
        compiled = fusec.compile(MLP_UP, target="cuda", pipeline=pipeline, executable=False)
        (spec,) = linked_specs(compiled.kernels[0])
        assert (spec.config.bm, spec.config.bn, spec.config.loop) == (192, 192, loop)
        assert f"ROLLED = {int(loop == 'rolled')}," in spec.cpp_source()
        sass = _sass(build.build(spec, _cache(tmp_path)).cubin, tmp_path)
        if sass is None:
            pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
        counts[loop] = (
            len(re.findall(r"/\*[0-9a-f]{4,}\*/", sass)),
            len(re.findall(r"MUFU\.EX2", sass)),
        )
    (unrolled, unrolled_ex2), (rolled, rolled_ex2) = counts["unrolled"], counts["rolled"]
    assert unrolled_ex2 >= 2 * 96 and rolled_ex2 <= 3 * 8 + 8, counts
    assert rolled < 0.45 * unrolled, counts


RESIDUAL = """func.func @f(%x: tensor<6272x1536xf16>, %w: tensor<1536x384xf16>,
    %r: tensor<6272x384xf16>) -> tensor<6272x384xf16> {
  %h = ai.matmul %x, %w : tensor<6272x1536xf16> * tensor<1536x384xf16>
  %y = ai.add %h, %r : tensor<6272x384xf16> * tensor<6272x384xf16>
  return %y : tensor<6272x384xf16>
}"""


@pytest.mark.parametrize(
    "setting, gelu_loop, residual_loop",
    [
        (None, "rolled", "unrolled"),
        ("unrolled", "unrolled", "unrolled"),
        ("auto", "rolled", "unrolled"),
        ("rolled", "rolled", "rolled"),
    ],
)
def test_heuristic_loop_follows_the_setting(monkeypatch, setting, gelu_loop, residual_loop):
    """``$FUSEC_GEMM_LOOP``: ``auto`` (the default) rolls the epilogues that call a
    transcendental function (the GELU), ``unrolled`` none, ``rolled`` every smem epilogue."""
    import fusec
    from fusec.errors import FusecError
    from fusec.targets.cuda.gemm.template import LOOP_ENV, linked_specs

    if setting is None:
        monkeypatch.delenv(LOOP_ENV, raising=False)
    else:
        monkeypatch.setenv(LOOP_ENV, setting)
    for text, want in ((MLP_UP, gelu_loop), (RESIDUAL, residual_loop)):
        compiled = fusec.compile(text, target="cuda", executable=False)
        (spec,) = linked_specs(compiled.kernels[0])
        assert spec.config.epilogue == "smem" and spec.config.loop == want, spec.config.text
    monkeypatch.setenv(LOOP_ENV, "sideways")
    with pytest.raises(FusecError, match="FUSEC_GEMM_LOOP='sideways'"):
        fusec.compile(MLP_UP, target="cuda", executable=False)
