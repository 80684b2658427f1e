"""The Hopper GEMM on a machine without a GPU: configs, generated C++, PTX, SASS, tile model.

The kernel is built exactly as on the GPU (Numba LTO-IR + NVRTC LTO-IR linked
by nvJitLink for sm_90a), so the cubin checked here is the one that runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import gemm_model as model
import numpy as np
import pytest

from fusec.targets.cuda.env import simulator_enabled
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import TileConfig, choose_config


def _nvjitlink_problem() -> str | None:
    """Why nvJitLink (part of the cuda extra, beside numba-cuda) cannot link here."""
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()
    except Exception as err:
        return f"nvJitLink is not usable: {err}"
    return None


_NVJITLINK_PROBLEM = _nvjitlink_problem()
_TOOLCHAIN_MARKS = (
    pytest.mark.requires_target("cuda"),  # first: without numba-cuda, the Target's reason
    pytest.mark.skipif(
        simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no compilation under the simulator"
    ),
    pytest.mark.skipif(_NVJITLINK_PROBLEM is not None, reason=f"{_NVJITLINK_PROBLEM}"),
)


def needs_toolchain(test: Callable[..., None]) -> Callable[..., None]:
    """Marks a test that builds PTX or cubins as on the GPU: it needs the cuda target's
    software (``requires_target``), nvJitLink, and no simulator. A build takes seconds,
    so these run in the slow lane; the default lane keeps ``test_cuda_ptx`` (every
    Numba template's PTX) and ``needs_toolchain_in_the_default_lane`` tests."""
    return needs_toolchain_in_the_default_lane(pytest.mark.slow(test))


def needs_toolchain_in_the_default_lane(test: Callable[..., None]) -> Callable[..., None]:
    """``needs_toolchain`` for the few builds the default lane keeps (one per path)."""
    for mark in _TOOLCHAIN_MARKS:
        test = mark(test)
    return test


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia

        for root in nvidia.__path__:
            candidate = Path(root) / "cu13" / "bin" / "cuobjdump"
            if candidate.exists():
                return str(candidate)
    except ImportError:
        pass
    return None


def sass_of(cubin: bytes, tmp_path: Path) -> str | None:
    """The SASS of ``cubin`` (None when cuobjdump or nvdisasm is missing)."""
    tool = _cuobjdump()
    if tool is None:
        return None
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    sass = subprocess.run(
        [tool, "-sass", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(tool).parent}:{os.environ.get('PATH', '')}"},
    ).stdout
    if "nvdisasm" in sass and "Function" not in sass:
        return None
    return sass


# ------------------------------------------------------------------ configs


def test_config_text_round_trips() -> None:
    config = TileConfig(128, 256, 64, 4, 2, 8)
    assert config.text == "128x256x64 s4 c2 g8"
    assert TileConfig.parse(config.text) == config
    assert config.threads == 384
    assert config.acc_registers == 128
    assert config.smem_bytes == 4 * (128 + 256) * 128 + 64 + 1024


@pytest.mark.parametrize(
    "text, problem",
    [
        ("128x256x16 s4 c2 g8", "bk must be 64"),
        ("128x256x64 s6 c2 g8", "shared memory"),
        ("128x512x64 s2 c2 g8", "bn must be"),
        ("192x256x64 s2 c2 g8", "multiple of 64 x consumers"),
        ("256x256x64 s2 c2 g8", "accumulator registers"),
    ],
)
def test_bad_configs_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        TileConfig.parse(text)


def test_choose_config() -> None:
    large = "128x256x64 s4 c2 g8 epi=smem math=fast"  # the measured default variant
    assert choose_config(4096, 4096, 4096).text == large
    assert choose_config(8192, 8192, 8192).text == large
    # 1024 x 1024: 32 tiles of 128x256 fill a quarter of the GPU, 64 of 128x128 half
    assert choose_config(1024, 1024, 1024).bn == 128
    assert choose_config(32, 1024, 1024).bm == 64
    # K = 768 (GPT-2 at batch 8): the 128x128 tile, whose epilogue is half as long
    assert choose_config(8192, 3072, 768).bn == 128
    assert choose_config(8192, 3072, 1024).bn == 256
    # ViT-B/16 at batch 32 (6304 tokens): 33 x 4 tiles of 192x192 are one wave of 132 SMs,
    # where 128x128 makes three (300 tiles): the three-consumer tile
    wave = "192x192x64 s3 c3 g8 epi=smem math=fast"
    assert choose_config(6304, 768, 768).text == wave
    assert choose_config(6304, 3072, 768).text == wave
    assert choose_config(6304, 768, 768, sms=120).bn == 128  # 132 tiles: two waves of 120
    assert choose_config(6304, 768, 768, three_consumers=False).consumers == 2  # tf32
    # ConvNeXt-T at batch 32: stage 3's MLP down (N = 384) in two 192-wide column tiles
    # (98 tiles), where 128x256 pads N to 512 and 128x128 makes three waves
    assert choose_config(6272, 384, 1536).text == "128x192x64 s4 c2 g8 epi=smem math=fast"
    assert choose_config(6272, 384, 1536, three_consumers=False).bn != 192  # tf32
    # ... and its MLP ups, K short: every tile fills the waves alike (about 1% waste), the
    # three-consumer tile has a third warpgroup for the bias + GELU epilogue
    for m, n, k in [(100352, 384, 96), (25088, 768, 192), (6272, 1536, 384)]:
        assert choose_config(m, n, k).text == wave, (m, n, k)
    assert choose_config(6272, 1536, 1536).text != wave  # K not short: the waste decides
    # stage 4 (1568 rows): 192-row tiles would pad M to 1728 and leave half the SMs idle
    assert choose_config(1568, 3072, 768).text == "128x128x64 s6 c2 g8 epi=smem math=fast"


# -------------------------------------------------------------- tile model


@pytest.mark.parametrize(
    "config, shape, grid",
    [
        (TileConfig(128, 256, 64, 4, 2, 8), (2, 130, 260, 70), 3),
        (TileConfig(128, 128, 64, 4, 2, 2), (1, 300, 129, 129), 5),
        (TileConfig(256, 128, 64, 4, 2, 8), (1, 257, 64, 1), 1),
        (TileConfig(64, 128, 64, 8, 1, 8), (3, 5, 7, 3), 132),
        (TileConfig(192, 192, 64, 3, 3, 8), (2, 400, 385, 70), 7),
    ],
)
def test_tile_model_writes_every_element_once(config, shape, grid) -> None:
    batches, m, n, k = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batches, m, k)).astype(np.float32)
    b = rng.standard_normal((batches, k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)

    def bias_relu(acc: float, row: int, col: int, bat: int) -> float:
        return max(acc + bias[col], 0.0)

    out, writes = model.run(config, a, b, grid=grid, epilogue=bias_relu)
    assert (writes == 1).all(), "an element was written twice or never"
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def test_tile_order_is_a_permutation_grouped_by_rows() -> None:
    tiles_m, tiles_n, group = 10, 7, 4
    coords = [model.tile_coords(t, tiles_m, tiles_n, group) for t in range(2 * tiles_m * tiles_n)]
    assert len(set(coords)) == len(coords)
    assert {c[2] for c in coords} == {0, 1}
    # the first group_m * tiles_n tiles cover only the first group_m tile rows
    assert {c[0] for c in coords[: group * tiles_n]} == set(range(group))


def test_fragment_layout_covers_the_m64_block() -> None:
    seen = {model.fragment_coords(t, j) for t in range(128) for j in range(128)}
    assert seen == {(r, c) for r in range(64) for c in range(256)}


# ------------------------------------------------------------ generated C++

SPECS = [
    cpp.GemmSpec(TileConfig(128, 256, 64, 4, 2, 8), "f16", "f16", "k", "k"),
    cpp.GemmSpec(
        TileConfig(128, 128, 64, 4, 2, 8),
        "bf16",
        "f32",
        "m",
        "n",
        True,
        False,
        cpp.bias_relu("bf16"),
    ),
]


#: The small LN chain's tile with the LayerNorm pre-pass (the heuristic normalises in the
#: kernel instead, ``ln=tile``): the fold kernels are still what a longer K runs.
FOLD_TILE = 'fusec-default,tile-gemm{tile="64x256x64 s5 c1 g8 vec=smem"}'


def _group_specs(text: str, pipeline: str = "fusec-cuda-long-softmax") -> list:
    """The linked kernels (pre-pass, GEMM, finalise) the template makes of ``text``."""
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    (kernel,) = compiled.kernels
    return linked_specs(kernel)


LN_SOFTMAX = """func.func @f(%x: tensor<{m}x{k}xf16>, %g: tensor<{k}xf16>, %b: tensor<{k}xf16>,
                 %w: tensor<{k}x{n}xf16>) -> tensor<{m}x{n}xf16> {{
  %y = ai.layernorm %x, %g, %b : tensor<{m}x{k}xf16> * tensor<{k}xf16> * tensor<{k}xf16>
  %h = ai.matmul %y, %w : tensor<{m}x{k}xf16> * tensor<{k}x{n}xf16>
  %p = ai.softmax %h : tensor<{m}x{n}xf16>
  return %p : tensor<{m}x{n}xf16>
}}"""


def test_group_kernels_of_the_fused_chains() -> None:
    (one,) = _group_specs(LN_SOFTMAX.format(m=8192, k=256, n=256))  # K = 256 is resident
    assert one.config.ln == "tile" and one.epilogue.softmax == "row" and one.config.bn == 256
    small = _group_specs(LN_SOFTMAX.format(m=8192, k=256, n=256), FOLD_TILE)
    assert [type(s).__name__ for s in small] == ["LayerNormPrep", "GemmSpec"]
    assert small[1].epilogue.softmax == "row" and small[1].config.bn == 256
    large = _group_specs(LN_SOFTMAX.format(m=8192, k=4096, n=2048))  # N < K: the rewrite
    assert [type(s).__name__ for s in large] == ["LayerNormPrep", "GemmSpec", "SoftmaxFinalise"]
    assert large[1].epilogue.softmax == "partials" and large[1].epilogue.extras[-1] == "f32"


@pytest.mark.parametrize("k, n", [(4096, 4096), (1024, 4096), (1024, 1024)])
def test_layernorm_is_a_kernel_of_its_own_before_a_gemm_as_wide_as_k(k: int, n: int) -> None:
    import fusec

    text = LN_SOFTMAX.format(m=512, k=k, n=n)
    compiled = fusec.compile(
        text, target="cuda", pipeline="fusec-cuda-long-softmax", executable=False
    )
    assert [kernel.kind for kernel in compiled.kernels] == ["row_reduce", "matmul"]


LN_GELU = """func.func @f(%x: tensor<{m}x{k}xf16>, %g: tensor<{k}xf16>, %b: tensor<{k}xf16>,
                 %w: tensor<{k}x{n}xf16>, %c: tensor<{n}xf16>) -> tensor<{m}x{n}xf16> {{
  %y = ai.layernorm %x, %g, %b : tensor<{m}x{k}xf16> * tensor<{k}xf16> * tensor<{k}xf16>
  %h = ai.matmul %y, %w : tensor<{m}x{k}xf16> * tensor<{k}x{n}xf16>
  %i = ai.bias_add %h, %c {{axis = 1 : i64}} : tensor<{m}x{n}xf16> * tensor<{n}xf16>
  %o = ai.gelu %i : tensor<{m}x{n}xf16>
  return %o : tensor<{m}x{n}xf16>
}}"""


@pytest.mark.parametrize(
    "k, n, kinds",
    [
        (96, 384, ["row_reduce", "matmul"]),  # ConvNeXt-T's stage-1 MLP-up: N = 4K
        (192, 768, ["row_reduce", "matmul"]),
        (96, 376, ["matmul"]),  # narrower: the LayerNorm stays in the GEMM
    ],
)
def test_an_mlp_up_projection_takes_its_layernorm_apart(k: int, n: int, kinds: list) -> None:
    """The whole pipeline on ConvNeXt's LayerNorm -> MLP-up (bias, exact GELU): fusion asks
    the GEMM's plan, which leaves the LayerNorm of an output 4x wider than K to a kernel of
    its own (gemm-ln-ab-convnext.md: 0.43-0.51 of the folded time on the H200)."""
    import fusec

    text = LN_GELU.format(m=3136, k=k, n=n)
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert [kernel.kind for kernel in compiled.kernels] == kinds


def test_layernorm_prologue_rule() -> None:
    from fusec.targets.cuda.gemm.template import layernorm_prologue_problem

    assert layernorm_prologue_problem(256, 256) is None  # whole-row tiles: ln=tile
    assert layernorm_prologue_problem(1000, 256) is None  # short rows: the pre-pass is small
    assert layernorm_prologue_problem(2048, 4096) is None  # N < K: the rewrite pays
    reason = layernorm_prologue_problem(4096, 1024)
    assert reason is not None and "K = 1024" in reason and "N = 4096" in reason
    # GPT-2's and ViT-B/16's QKV and MLP-up (benchmarks/results/gemm-ln-ab.md)
    assert layernorm_prologue_problem(2304, 768) is not None
    assert layernorm_prologue_problem(3072, 768) is not None
    assert layernorm_prologue_problem(768, 768) is not None
    assert layernorm_prologue_problem(2304, 640) is None  # shorter rows: not measured
    # ConvNeXt-T's MLP-up at K = 96, 192, 384 (gemm-ln-ab-convnext.md): N = 4K splits
    for k in (96, 192, 384):
        assert layernorm_prologue_problem(4 * k, k) is not None
    assert layernorm_prologue_problem(4 * 96 - 1, 96) is None


def _fused_variants() -> list:
    """Every new kernel variant: the row-softmax and partials GEMMs (with the LayerNorm
    rewrite), both pre-pass layouts and the finalise pass."""
    small = _group_specs(LN_SOFTMAX.format(m=8192, k=256, n=256), FOLD_TILE)
    large = _group_specs(LN_SOFTMAX.format(m=8192, k=4096, n=2048))
    from fusec.targets.cuda.gemm import aux

    return [
        small[1],
        large[1],
        small[0],
        aux.LayerNormPrep("bf16", "f32", "bf16", "k", 1e-5),
        large[2],
        aux.SoftmaxFinalise("f32", "y = s * 2.0f;", ("f16",)),
    ]


VARIANT_IDS = ["row-softmax-ln", "partials-ln", "prep-n", "prep-k", "finalise", "finalise-f32"]


@needs_toolchain
@pytest.mark.parametrize("index", range(6), ids=VARIANT_IDS)
def test_fused_variant_ptx(index: int) -> None:
    from fusec.targets.cuda import build

    spec = _fused_variants()[index]
    ptx = build.ptx(spec)
    assert ".target sm_90a" in ptx
    if isinstance(spec, cpp.GemmSpec):
        assert f"wgmma.mma_async.sync.aligned.m64n{spec.config.bn}k16" in ptx
        assert "shfl.sync.bfly" in ptx  # the quad reductions of the row statistics
    elif spec.function_name.startswith("fusec_lnprep"):
        assert "shfl.sync.bfly" in ptx
        atomics = re.search(r"\b(red|atom)(\.global)?\.add\.f32", ptx) is not None
        assert atomics == (spec.b_major == "n")  # the column sums of a K x N weight
    else:
        assert "ex2.approx" in ptx  # expf


@needs_toolchain
@pytest.mark.parametrize("index", range(6), ids=VARIANT_IDS)
def test_fused_variant_cubin(index: int, tmp_path) -> None:
    spec = _fused_variants()[index]
    sass = clean_sass(spec, tmp_path)
    if isinstance(spec, cpp.GemmSpec):
        # nothing called from the main loop (the template's helpers are inlined); ptxas may
        # outline an integer-division routine used by the per-tile set-up (seen with the
        # staged LayerNorm vectors), which is called before the first HGMMA
        lines = sass.splitlines()
        mma = [i for i, line in enumerate(lines) if "HGMMA" in line]
        assert not any("CALL" in line for line in lines[mma[0] : mma[-1]])
    else:
        assert "CALL" not in sass
    if isinstance(spec, cpp.GemmSpec):
        hgmma = len(re.findall(r"HGMMA\.64x\d+x16\.F32", sass))
        assert hgmma == 4 * (spec.config.acc_registers // (spec.config.bn // 2))
        assert "SHFL.BFLY" in sass and "UTMALDG" in sass


def _sass(cubin: bytes, tmp_path) -> str | None:
    tool = _cuobjdump()
    if tool is None:
        return None
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    sass = subprocess.run(
        [tool, "-sass", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{Path(tool).parent}:{os.environ.get('PATH', '')}"},
    ).stdout
    return sass if "Function" in sass and ("nvdisasm" not in sass) else None


def clean_sass(spec, tmp_path) -> str:
    """``spec``'s linked cubin for sm_90a, checked free of spills, stack frame and
    local-memory traffic; its SASS (the test is skipped without a disassembler)."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert "0 bytes stack frame" in built.log
    sass = _sass(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    return sass


def spill_free_sass(spec, tmp_path) -> str:
    """``spec``'s linked cubin for sm_90a, checked free of spills and local-memory traffic
    (the conv and copy templates' check: a stack frame allowed); its SASS (the test is
    skipped without a disassembler)."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    built = build.build(spec, KernelCache(tmp_path))
    assert not re.search(r"\b[1-9]\d* bytes spill", built.log)
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    return sass


def test_generated_source_has_no_user_text() -> None:
    source = cpp.generate(SPECS[0])
    assert 'extern "C" __device__' in source
    assert re.fullmatch(r"fusec_gemm_[0-9a-f]{16}", SPECS[0].function_name)
    assert "m64n256k16.f32.f16.f16" in source
    assert "CONSUMER_REGISTERS = 232" in source  # the instantiation; the code is gemm.cuh's
    assert "setmaxnreg.inc.sync.aligned.u32" in SPECS[0].cpp_source()
    # NVRTC has no standard headers: only the kernel layer's, inlined into the linked source
    includes = re.findall(r"^#include .*$", source, re.MULTILINE)
    assert includes and all(re.fullmatch(r'#include "fusec/\w+\.cuh"', i) for i in includes)
    assert "#include" not in SPECS[0].cpp_source()


@needs_toolchain
@pytest.mark.parametrize("spec", SPECS, ids=["128x256-f16-kk", "128x128-bf16-mn-bias"])
def test_ptx_for_sm90a_has_wgmma_and_tma(spec: cpp.GemmSpec) -> None:
    from fusec.targets.cuda import build

    ptx = build.ptx(spec)
    assert ".target sm_90a" in ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{spec.config.bn}k16" in ptx
    assert "cp.async.bulk.tensor.3d" in ptx
    assert "setmaxnreg" in ptx


@needs_toolchain
@pytest.mark.parametrize("spec", SPECS, ids=["128x256-f16-kk", "128x128-bf16-mn-bias"])
def test_linked_cubin_is_one_inlined_kernel(spec: cpp.GemmSpec, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    built = build.build(spec, KernelCache(tmp_path))
    # nvJitLink inlined the C++ into the Numba kernel: ptxas reports one function, no spills
    assert f"Function properties for {spec.function_name}" not in built.log
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    assert len(re.findall(r"HGMMA\.64x\d+x16\.F32", sass)) == 4 * (
        spec.config.acc_registers // (spec.config.bn // 2)
    )
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "CALL" not in sass
    assert "UTMALDG" in sass
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass  # one wgmma group kept in flight


def test_serialised_wgmma_fails_the_build() -> None:
    from fusec.targets.cuda.build import _SERIALISED

    log = (
        "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to wgmma pipeline crossing function boundary"
    )
    assert _SERIALISED.search(log)
    assert not _SERIALISED.search("ptxas info    : Used 168 registers")


def test_the_direct_epilogue_computes_first_unless_asked_otherwise(monkeypatch) -> None:
    """``$FUSEC_GEMM_EPILOGUE_ORDER``: E over a block's accumulators, then the stores (the
    default), or each pair's E then its store ("interleaved", the A/B switch)."""
    spec = cpp.GemmSpec(TileConfig(64, 64, 64, 8, 1, 8))
    assert "EPILOGUE_FIRST = 1," in spec.cpp_source()
    monkeypatch.setenv(cpp.EPILOGUE_ORDER_ENV, "interleaved")
    assert "EPILOGUE_FIRST = 0," in spec.cpp_source()
    monkeypatch.setenv(cpp.EPILOGUE_ORDER_ENV, "last")
    with pytest.raises(ValueError, match="expected 'first' or 'interleaved'"):
        spec.cpp_source()


@needs_toolchain
def test_the_direct_epilogue_issues_its_loads_before_any_store(tmp_path) -> None:
    """EPILOGUE_FIRST (a 64x64 tile's 32 accumulators a thread): every load of the bias +
    GELU + residual epilogue comes before the first store, and nothing spills; interleaved,
    a store stands between loads (what exposed each load's latency in turn)."""
    from fusec.api import parse, run_pipeline
    from fusec.targets.cuda.gemm import template

    t = lambda *s: f"tensor<{'x'.join(map(str, s))}xf16>"  # noqa: E731
    text = f"""func.func @f(%x: {t(128, 768)}, %w: {t(768, 768)}, %b: {t(768)}, %r: {t(128, 768)}) -> {t(128, 768)} {{
  %0 = ai.matmul %x, %w : {t(128, 768)} * {t(768, 768)}
  %1 = ai.bias_add %0, %b {{axis = 1 : i64}} : {t(128, 768)} * {t(768)}
  %2 = ai.gelu %1 : {t(128, 768)}
  %3 = ai.add %2, %r : {t(128, 768)} * {t(128, 768)}
  return %3 : {t(128, 768)}
}}"""  # noqa: E501
    module = parse(text)
    run_pipeline(module, "fusec-cuda")
    (group,) = [op for op in module.walk() if getattr(op, "kind_name", None) == "matmul"]
    spec = template.generate(group, "k0").specs[-1]
    assert (spec.config.bm, spec.config.bn, spec.config.epilogue) == (64, 64, "direct")
    sass = clean_sass(spec, tmp_path)
    lines = sass.splitlines()
    first_store = next(i for i, line in enumerate(lines) if re.search(r"\bSTG\.", line))
    last_load = max(i for i, line in enumerate(lines) if re.search(r"\bLDG\.", line))
    assert last_load < first_store  # (the producer's TMA loads, UTMALDG, come after both)
