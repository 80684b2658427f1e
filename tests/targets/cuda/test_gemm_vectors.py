"""The GEMM's staged epilogue vectors (``vectors="smem"``) and L2 prefetch of full-tile
epilogue inputs (``prefetch="tile"``) without a GPU: config, generated
C++, PTX and the linked cubin for sm_90a (built as on the GPU: Numba LTO-IR + NVRTC
LTO-IR, nvJitLink).

With a LayerNorm prologue the epilogue reads per column ``c`` and ``d`` and per row
(mean, rstd). Loaded element by element from global memory behind the bounds predicates
they stalled the epilogue of the small-row LN -> matmul -> softmax kernel on every load
(Nsight Compute, H200, 2026-12-01); staged, the epilogue reads shared memory only.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_gemm_build import FOLD_TILE, LN_SOFTMAX, _group_specs, _sass, clean_sass, needs_toolchain

from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import TileConfig, Variant, with_variant


def _staged(n: int, **variant: str) -> cpp.GemmSpec:
    """The GEMM of LN(8192 x 256) -> matmul(256 x n) -> softmax with ``variant``."""
    text = LN_SOFTMAX.format(m=8192, k=256, n=n)
    spec = (_group_specs(text, FOLD_TILE) if n <= 256 else _group_specs(text))[1]
    wanted = dataclasses.replace(spec.config.variant, vectors="smem", **variant)
    return dataclasses.replace(spec, config=with_variant(spec.config, wanted))


def test_vectors_variant_text_round_trips_and_reserves_shared_memory() -> None:
    config = TileConfig.parse("64x256x64 s5 c1 g8 vec=smem")
    assert config.variant == Variant(vectors="smem")
    assert config.vec_bytes == 8 * (256 + 64)
    assert config.smem_bytes == TileConfig(64, 256, 64, 5, 1, 8).smem_bytes + config.vec_bytes
    # the large tile with the smem epilogue has no room left: one stage fewer
    large = with_variant(
        TileConfig(128, 256, 64, 4, 2, 8, epilogue="smem"),
        Variant("cooperative", "smem", "ieee", "smem"),
    )
    assert large.stages == 3 and large.vec_bytes == 2 * 8 * (256 + 64)
    with pytest.raises(ValueError, match="vectors must be"):
        TileConfig.parse("64x256x64 s5 c1 g8 vec=tex")


def test_staged_source_copies_the_vectors_and_reads_shared_memory() -> None:
    spec = _staged(256)
    assert spec.epilogue.ln_slots and spec.epilogue.ln_stride == 256
    source = cpp.generate(spec)
    assert "cp.async.cg.shared.global" in spec.cpp_source() and "STAGED = 1," in source
    start = source.index("float operator()(")
    epilogue = source[start : source.index("return y;", start)]
    assert "fs_lds_f32x2(ln_rows" in epilogue and "fs_ld_f32(" not in epilogue
    assert "u64 cd() const" in source and "u64 stats() const" in source
    plain = cpp.generate(dataclasses.replace(spec, config=TileConfig(64, 256, 64, 5, 1, 8)))
    assert "STAGED = 0," in plain and "fs_ld_f32(e0, 2LL * row)" in plain


def test_vectors_variant_without_a_layernorm_stages_nothing() -> None:
    spec = cpp.GemmSpec(
        TileConfig.parse("128x128x64 s4 c2 g8 vec=smem"), epilogue=cpp.bias_relu("f16")
    )
    assert "cp.async.cg" not in cpp.generate(spec)


def test_ragged_columns_keep_d_16_byte_aligned() -> None:
    spec = _group_specs(LN_SOFTMAX.format(m=8192, k=256, n=1001))[1]
    assert spec.epilogue.ln_stride == 1004


STAGED = {
    "row-softmax-64x256": lambda: _staged(256),
    "row-softmax-200-smem-epilogue-off": lambda: _staged(200),
    "partials-1000-smem-fast": lambda: _staged(1000, epilogue="smem", math="fast"),
}


@needs_toolchain
@pytest.mark.parametrize("name", list(STAGED))
def test_staged_ptx_has_async_copies_and_no_local_memory(name: str) -> None:
    from fusec.targets.cuda import build

    ptx = build.ptx(STAGED[name]())
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_all" in ptx
    assert "ld.shared.v2.f32" in ptx  # (mean, rstd) of a row
    assert not re.search(r"\b(ld|st)\.local\b", ptx)
    assert "ld.global.nc.f32" not in ptx  # no element-wise vector loads left


@needs_toolchain
@pytest.mark.parametrize("name", list(STAGED))
def test_staged_cubin_has_no_spills_and_no_global_vector_loads(name: str, tmp_path) -> None:
    sass = clean_sass(STAGED[name](), tmp_path)
    assert "LDGSTS" in sass and "LDS" in sass
    assert not re.search(r"\bLDG\.E\.CONSTANT\b", sass)


@needs_toolchain
def test_layernorm_statistics_read_16_bytes_per_load() -> None:
    from fusec.targets.cuda import build
    from fusec.targets.cuda.gemm import aux

    ptx = build.ptx(aux.LayerNormPrep("f16", "f16", "f16", "n", 1e-5))
    assert "ld.global.nc.v4.u32" in ptx and "shfl.sync.idx" in ptx  # shift by a shuffle


# ----------------------------------------------------- prefetch of full-tile inputs


def _residual_spec(m: int, n: int, k: int, options: str) -> cpp.GemmSpec:
    """The GEMM of matmul + bias + residual (the MLP's down projection) with ``options``."""
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    t = lambda *s: f"tensor<{'x'.join(map(str, s))}xf16>"  # noqa: E731
    text = f"""func.func @g(%a: {t(m, k)}, %b: {t(k, n)}, %c: {t(n)}, %r: {t(m, n)}) -> {t(m, n)} {{
  %v0 = ai.matmul %a, %b : {t(m, k)} * {t(k, n)}
  %v1 = ai.bias_add %v0, %c {{axis = 1 : i64}} : {t(m, n)} * {t(n)}
  %v2 = ai.add %v1, %r : {t(m, n)} * {t(m, n)}
  return %v2 : {t(m, n)}
}}
"""
    pipeline = f"fusec-default,tile-gemm{{{options}}}"
    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    (spec,) = [s for k in compiled.kernels for s in linked_specs(k) if hasattr(s, "config")]
    return spec


def test_prefetch_variant_text_and_the_residual_is_a_tile_input() -> None:
    config = TileConfig.parse("128x256x64 s4 c2 g8 epi=smem pre=tile")
    assert (
        config.prefetch == "tile"
        and config.smem_bytes == TileConfig.parse("128x256x64 s4 c2 g8 epi=smem").smem_bytes
    )  # no shared memory
    spec = _residual_spec(1000, 1000, 520, "prefetch=tile")
    assert spec.config.prefetch == "tile"
    (slot,) = spec.epilogue.tile_inputs  # the residual, not the bias vector
    assert "prefetch.global.L2" in spec.cpp_source() and f"fs_prefetch_l2((u64)e{slot} +" in (
        cpp.generate(spec)
    )
    plain = _residual_spec(1000, 1000, 520, "prefetch=none")
    assert "fs_prefetch_l2(" not in cpp.generate(plain) and "PREFETCH = 0" in cpp.generate(plain)
    default = _residual_spec(4096, 1024, 520, "")  # the heuristic prefetches a residual
    assert default.config.prefetch == "tile" and "PREFETCH = 1" in cpp.generate(default)
    small = _residual_spec(128, 768, 3072, "")  # ... but not on the small-M tiles (it lost)
    assert small.config.consumers == 1 and small.config.prefetch == "none"


@needs_toolchain
@pytest.mark.parametrize("options", ["prefetch=tile", "schedule=pingpong prefetch=tile"])
def test_prefetch_cubin_has_l2_prefetches_and_no_spills(options: str, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    spec = _residual_spec(1000, 1000, 520, options)
    assert "prefetch.global.L2" in build.ptx(spec)
    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    sass = _sass(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert "CCTL.E.PF2" in sass  # the L2 prefetch
