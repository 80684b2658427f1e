"""The GEMM's ``ln="tile"`` variant without a GPU: config, tiling pass, generated C++,
the numpy model of the in-place normalisation, PTX and the linked cubin for sm_90a.

With ``ln="tile"`` a LayerNorm -> matmul group whose whole K fits the pipeline (K <=
stages x BK) is one launch: the consumers wait for every K step of their tile, compute
each row's mean and rstd from the resident (128-byte-swizzled) A tiles, write the
normalised rows back in place and only then run the wgmma main loop. No pre-pass, no
folded W', no column sums, no memset; the LayerNorm output is rounded to the operand
type as in PyTorch eager.
"""

from __future__ import annotations

import re

import gemm_model as model
import numpy as np
import pytest
from test_gemm_build import LN_SOFTMAX, clean_sass, needs_toolchain

import fusec
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import (
    TileConfig,
    Variant,
    choose_row_config,
    ln_tile_problem,
    with_variant,
)


def _compile(text: str, options: str):
    return fusec.compile(
        text, target="cuda", pipeline=f"fusec-default,tile-gemm{{{options}}}", executable=False
    )


#: The small chain's tile with ``ln=tile`` and the direct epilogue, exactly.
EXACT = 'tile="64x256x64 s5 c1 g8 ln=tile"'


def _specs(text: str, options: str = "ln=tile") -> list:
    from fusec.targets.cuda.gemm.template import linked_specs

    (kernel,) = _compile(text, options).kernels
    return linked_specs(kernel)


def _ln_bias(m: int, n: int, k: int, dtype: str = "f16") -> str:
    t = lambda *s: f"tensor<{'x'.join(map(str, s))}x{dtype}>"  # noqa: E731
    return f"""func.func @f(%x: {t(m, k)}, %g: {t(k)}, %b: {t(k)}, %w: {t(k, n)}, %c: {t(n)})
    -> {t(m, n)} {{
  %y = ai.layernorm %x, %g, %b : {t(m, k)} * {t(k)} * {t(k)}
  %h = ai.matmul %y, %w : {t(m, k)} * {t(k, n)}
  %o = ai.bias_add %h, %c {{axis = 1 : i64}} : {t(m, n)} * {t(n)}
  return %o : {t(m, n)}
}}"""


# ------------------------------------------------------------------------------- config


def test_ln_tile_text_round_trips_and_reserves_gamma_beta() -> None:
    config = TileConfig.parse("64x256x64 s5 c1 g8 ln=tile")
    assert config.text == "64x256x64 s5 c1 g8 ln=tile" and config.variant == Variant(ln="tile")
    assert config.ln_bytes == 8 * 5 * 64 and config.k_resident == 320
    plain = TileConfig(64, 256, 64, 5, 1, 8)
    # gamma and beta, and a third mbarrier per stage (the A tiles land on their own)
    assert config.smem_bytes == plain.smem_bytes + config.ln_bytes + 8 * 5
    assert plain.ln_bytes == 0
    assert with_variant(choose_row_config(8192, 256), Variant(ln="tile")) == config
    # the heuristic's staged LayerNorm vectors have nothing to stage under ln=tile
    staged = with_variant(choose_row_config(8192, 256), Variant(vectors="smem"))
    assert with_variant(staged, Variant(vectors="smem", ln="tile")) == config


def test_ln_tile_rejects_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="ln must be one of fold, tile"):
        TileConfig.parse("64x256x64 s5 c1 g8 ln=tiles")
    with pytest.raises(ValueError, match="ln=tile runs the cooperative schedule"):
        TileConfig.parse("64x256x64 s4 c2 g8 sched=pingpong ln=tile")
    with pytest.raises(ValueError, match="at most 128 rows per consumer"):
        TileConfig.parse("256x64x64 s4 c1 g8 ln=tile")
    config = TileConfig.parse("64x256x64 s5 c1 g8 ln=tile")
    assert ln_tile_problem(config, 320) is None
    problem = ln_tile_problem(config, 384)
    assert problem is not None and "K = 384 > stages x BK = 5 x 64 = 320" in problem


# ------------------------------------------------------------------------- tiling pass


def test_default_tiling_normalises_in_the_kernel_when_k_is_resident() -> None:
    (spec,) = _specs(LN_SOFTMAX.format(m=8192, k=256, n=256), "")
    assert spec.config.text == "64x256x64 s5 c1 g8 epi=smem math=fast ln=tile"
    specs = _specs(LN_SOFTMAX.format(m=8192, k=256, n=256), "ln=fold")
    assert [type(s).__name__ for s in specs] == ["LayerNormPrep", "GemmSpec"]
    # a 64x192 row tile drops a stage for the staged epilogue and keeps ln=tile (one kernel:
    # 8.9 us against 11.6 for the pre-pass, its memset and the GEMM on the H200)
    (narrow,) = _specs(LN_SOFTMAX.format(m=8192, k=256, n=192), "")
    assert narrow.config.text == "64x192x64 s6 c1 g8 epi=smem math=fast ln=tile"
    specs = _specs(LN_SOFTMAX.format(m=8192, k=384, n=256), "")  # K > 5 stages x 64
    assert [type(s).__name__ for s in specs] == ["LayerNormPrep", "GemmSpec"]
    assert specs[1].config.ln == "fold" and specs[1].config.vectors == "smem"


def test_forced_ln_tile_is_one_launch_with_gamma_beta_inputs() -> None:
    (spec,) = _specs(LN_SOFTMAX.format(m=8192, k=256, n=256), EXACT)
    assert spec.config.text == "64x256x64 s5 c1 g8 ln=tile"
    assert spec.epilogue.ln_affine == (0, 1) and not spec.epilogue.ln_slots
    assert spec.epilogue.extras == ("f16", "f16") and spec.epilogue.softmax == "row"
    (kernel,) = _compile(LN_SOFTMAX.format(m=8192, k=256, n=256), EXACT).kernels
    assert "prologue=None" in kernel.source and "extras=(1, 2)" in kernel.source
    assert "b=(3, 256, 256, 1)" in kernel.source  # the raw W, no folded scratch copy
    assert "normalised in the resident A tiles (ln=tile)" in kernel.source
    namespace: dict = {"__name__": "_ln_tile_module"}
    exec(compile(kernel.source, "<ln tile>", "exec"), namespace)
    assert namespace["GEMM"].scratch_bytes() == {}  # no statistics, no W', no memset


def test_ln_tile_falls_back_where_it_cannot_serve() -> None:
    too_deep = _specs(LN_SOFTMAX.format(m=8192, k=512, n=256))  # K 512 > 5 x 64
    assert [type(s).__name__ for s in too_deep] == ["LayerNormPrep", "GemmSpec"]
    assert too_deep[1].config.ln == "fold"
    t = "tensor<300x136xf16>"
    plain = f"""func.func @g(%a: {t}, %b: tensor<136x136xf16>) -> {t} {{
  %v0 = ai.matmul %a, %b : {t} * tensor<136x136xf16>
  return %v0 : {t}
}}"""
    (spec,) = _specs(plain)
    assert spec.config.ln == "fold"


def test_ln_tile_two_consumers_and_the_smem_epilogue(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusec.targets.cuda.gemm import config, template

    # N = 4K would leave the LayerNorm to a kernel of its own (layernorm_prologue_problem):
    # this test pins the tile the GEMM picks once it holds the LayerNorm; K <= SHORT_K would
    # take the 128x128 tile, whose stage fit is the last case
    monkeypatch.setattr(template, "LN_SPLIT_WIDE", 10**9)
    monkeypatch.setattr(config, "SHORT_K", 0)
    (spec,) = _specs(_ln_bias(8192, 1024, 256), "epilogue=direct ln=tile")
    assert spec.config.text == "128x256x64 s4 c2 g8 math=fast ln=tile"
    # beside the smem epilogue's staging the 128x256 tile has 3 stages: K 256 does not fit,
    # the pre-pass stays; K 192 does
    specs = _specs(_ln_bias(8192, 1024, 256), "ln=tile")
    assert [type(s).__name__ for s in specs] == ["LayerNormPrep", "GemmSpec"]
    (spec,) = _specs(_ln_bias(8192, 1024, 192), "ln=tile")
    assert spec.config.text == "128x256x64 s3 c2 g8 epi=smem math=fast ln=tile"
    (spec,) = _specs(_ln_bias(2000, 768, 256), "ln=tile")  # 128x128: 5 stages fit
    assert spec.config.text == "128x128x64 s5 c2 g8 epi=smem math=fast ln=tile"


def test_forced_tile_with_k_too_deep_is_a_diagnostic() -> None:
    from fusec.errors import FusecError

    text = LN_SOFTMAX.format(m=8192, k=256, n=256)
    with pytest.raises(FusecError, match=r"K = 256 > stages x BK = 3 x 64 = 192") as err:
        _compile(text, 'tile="64x256x64 s3 c1 g8 ln=tile"')
    assert "fusec.tile" in str(err.value)
    with pytest.raises(FusecError, match="ln=tile needs a LayerNorm prologue"):
        t = "tensor<300x136xf16>"
        _compile(
            f"""func.func @g(%a: {t}, %b: tensor<136x136xf16>) -> {t} {{
  %v0 = ai.matmul %a, %b : {t} * tensor<136x136xf16>
  return %v0 : {t}
}}""",
            'tile="64x256x64 s5 c1 g8 ln=tile"',
        )
    with pytest.raises(FusecError, match="tile-gemm option ln='tiles'"):
        _compile(text, "ln=tiles")
    with pytest.raises(FusecError, match="cooperative schedule"):
        _compile(_ln_bias(2000, 768, 128), "schedule=pingpong ln=tile")


# ------------------------------------------------------------------------ generated C++


def test_source_normalises_in_place_before_the_main_loop() -> None:
    """The instantiation turns ln=tile on (its epsilon, gamma and beta accessors, no FlashNorm
    rewrite in the epilogue); gemm.cuh normalises before the main loop."""
    (spec,) = _specs(LN_SOFTMAX.format(m=8192, k=256, n=256))
    source = cpp.generate(spec)
    assert "LN_TILE = 1," in source and "return 9.999999747378752e-06f;" in source
    assert "float gamma(int i) const { return fs_ld_f16(e" in source
    epilogue = source[source.index("float operator()(") : source.index("return y;")]
    assert "ln_mu" not in epilogue and "fs_lds" not in epilogue  # no FlashNorm rewrite
    assert "WM = 64," in source  # 2 threads per row (TPR = 128 / WM): one shuffle step
    linked = spec.cpp_source()
    consumer = linked[linked.index("void gemm_consumer_tile(") :]
    tile = consumer[consumer.index("if constexpr (C::LN_TILE) {") : consumer.index("C::mma(acc[m]")]
    assert tile.index("fs_fence_async_smem();") < tile.index("fs_named_sync(LN_BARRIER + cw, 128);")
    assert "rsqrtf(ssd / (float)K + eps)" in tile
    default = _specs(LN_SOFTMAX.format(m=8192, k=256, n=256), "ln=fold")[1]
    assert "LN_TILE = 0," in cpp.generate(default) and "gamma(" not in cpp.generate(default)


def test_a_tiles_land_first_and_only_consumers_wait_for_gamma_beta() -> None:
    """The producer issues every A tile of the tile on its own barrier before any B tile, the
    consumers normalise after waiting for those A barriers only, and gamma/beta are loaded
    by the consumers after the block's ``__syncthreads`` (not ahead of the first TMA load)."""
    (spec,) = _specs(LN_SOFTMAX.format(m=8192, k=256, n=256))
    linked = spec.cpp_source()
    kernel = linked[linked.index("static __device__ __forceinline__ int gemm(") :]
    head, body = kernel.split("__syncthreads();", 1)
    assert "epi.gamma" not in head and "return 0;  // ln=tile: K must be resident" in head
    assert "if constexpr (C::LN_TILE) fs_bar_init(bars + 8 * (2 * STAGES + s), 1);" in head
    producer = body[: body.index("fs_consumer_thread<")]
    a_loads = producer.index("fs_tma_load(sa + s * A_BYTES, map_a, a_full")
    assert a_loads < producer.index("fs_bar_expect(full, B_BYTES);")
    ln_b = producer[producer.index("fs_bar_expect(full, B_BYTES);") :]
    assert ln_b.index("gemm_load_b<C>(") < ln_b.index("} else {")  # B alone
    consumer = body[body.index("fs_consumer_thread<") :]
    assert consumer.index("gemm_ln_affine<C>(epi, sg, tid, K);") < consumer.index("float acc[")
    tile = linked[linked.index("void gemm_consumer_tile(") :]
    assert "fs_bar_wait(bars + 8 * (2 * STAGES + (it + kb) % STAGES)" in tile
    affine = linked[linked.index("void gemm_ln_affine(") :]
    staged = affine.index("fs_named_sync(LN_AFFINE_BARRIER, 128 * C::CONSUMERS);")
    assert affine.index("epi.gamma(i)") < staged
    # without ln=tile the stage's one barrier counts both tiles, as before
    assert "fs_bar_expect(full, A_BYTES + B_BYTES);" in producer


def test_gemm_spec_requires_gamma_beta_with_ln_tile() -> None:
    with pytest.raises(ValueError, match="come together"):
        cpp.GemmSpec(TileConfig.parse("64x256x64 s5 c1 g8 ln=tile"))


# ------------------------------------------------------------------------- numpy model


@pytest.mark.parametrize("rows, k", [(64, 256), (128, 200), (64, 128), (64, 77)])
def test_model_of_the_in_place_normalisation(rows: int, k: int) -> None:
    rng = np.random.default_rng(rows + k)
    x = (rng.standard_normal((rows, k)) + 3.0).astype(np.float16)
    x[5] = np.float16(2.5)  # a constant row: exactly beta
    gamma = (1.0 + 0.2 * rng.standard_normal(k)).astype(np.float16)
    beta = (0.2 * rng.standard_normal(k)).astype(np.float16)
    stages = model.ln_tile_stages(x)
    writes = model.ln_tile_normalise(stages, k, gamma, beta, 1e-5, rows)
    assert (writes == 1).all()
    got = model.ln_tile_unswizzle(stages, rows, k).astype(np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    ref = (x64 - mean) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5)
    ref = (ref * gamma + beta).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)
    assert (got[5] == beta.astype(np.float32)).all()
    # the columns past K stay zero (gamma and beta are zero there)
    padded = model.ln_tile_unswizzle(stages, rows, len(stages) * 64)
    assert (padded[:, k:] == 0).all()


# ------------------------------------------------------------------------- PTX, cubin

BUILDS = {
    "row-softmax-64x256-f16": lambda: _specs(LN_SOFTMAX.format(m=8192, k=256, n=256))[0],
    "row-softmax-c2-bf16": lambda: _specs(
        LN_SOFTMAX.format(m=1001, k=200, n=136).replace("f16", "bf16"),
        'tile="128x256x64 s4 c2 g8 ln=tile"',
    )[0],
    "bias-c2-direct": lambda: _specs(_ln_bias(8192, 1024, 256), "epilogue=direct ln=tile")[0],
    "bias-smem-epilogue": lambda: _specs(_ln_bias(1000, 768, 256), "ln=tile")[0],
}


@pytest.fixture
def layernorm_in_the_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """N = 4K would leave the LayerNorm to a kernel of its own (bias-c2-direct's 8192 x 256
    -> 1024): these builds are of the GEMM holding it."""
    from fusec.targets.cuda.gemm import template

    monkeypatch.setattr(template, "LN_SPLIT_WIDE", 10**9)


@needs_toolchain
@pytest.mark.usefixtures("layernorm_in_the_gemm")
@pytest.mark.parametrize("name", list(BUILDS))
def test_ptx_has_the_proxy_fence_and_no_local_memory(name: str) -> None:
    from fusec.targets.cuda import build

    ptx = build.ptx(BUILDS[name]())
    assert "fence.proxy.async.shared::cta" in ptx and "wgmma.mma_async" in ptx
    assert "ld.shared.v4.u32" in ptx and "st.shared.v4.u32" in ptx and "bar.sync" in ptx
    assert not re.search(r"\b(ld|st)\.local\b", ptx)


@needs_toolchain
@pytest.mark.usefixtures("layernorm_in_the_gemm")
@pytest.mark.parametrize("name", list(BUILDS))
def test_cubin_has_no_spills(name: str, tmp_path) -> None:
    sass = clean_sass(BUILDS[name](), tmp_path)
    assert "HGMMA" in sass and "FENCE.VIEW.ASYNC.S" in sass
