"""GPU tests of the GEMM's opt-in variants (pingpong schedule, smem epilogue, fast maths).

Each case is compiled with the variant forced by the ``tile-gemm`` pass options and
compared elementwise with the float64 reference on fresh random inputs, output poisoned
(NaN) first, exactly as ``test_gemm_gpu.py`` checks the default kernel (its ``_check``):
ragged shapes (1000^3; 4097x511x77, whose 1022-byte output rows have no TMA map, so the
smem epilogue's masked fallback runs), bf16, transposed B, batched, every epilogue
kind (elementwise with bias/gelu/silu/tanh, residual add, LayerNorm prologue, row
softmax, long-row softmax partials), and an f32 output.
"""

from __future__ import annotations

import pytest
from test_gemm_gpu import GELU, RELU, SOFTMAX, _check, bias, matmul_ir, scale

pytestmark = pytest.mark.gpu

VARIANTS = {
    "pingpong": "schedule=pingpong",
    "smem": "epilogue=smem",
    "pingpong-smem-fast": "schedule=pingpong epilogue=smem math=fast",
    "fast": "math=fast",
    # the staged vectors of the LayerNorm rewrite (ln=fold: the heuristic normalises a
    # resident K in the kernel instead, which has no vectors to stage)
    "vec": "vectors=smem ln=fold",
    "smem-fast-vec": "epilogue=smem math=fast vectors=smem ln=fold",
    "pre": "prefetch=tile",
    "pingpong-smem-fast-pre": "schedule=pingpong epilogue=smem math=fast prefetch=tile",
    # the epilogue on the staged chunks, in a rolled loop (edge steps clamp their indices)
    "rolled": "epilogue=smem math=fast loop=rolled",
    "pingpong-rolled": "schedule=pingpong epilogue=smem loop=rolled",
}
VECTOR_VARIANTS = ["vec", "smem-fast-vec"]
STRUCTURAL = ["pingpong", "smem", "pingpong-smem-fast", "rolled"]


def _pipeline(variant: str, long_softmax: bool = False) -> str:
    front = (
        "infer-shapes,recognize-patterns,canonicalize,cse,fuse{softmax_tile_limit=1048576}"
        if long_softmax
        else "fusec-default"
    )
    return f"{front},tile-gemm{{{VARIANTS[variant]}}}"


def _run(text: str, dtype: str, variant: str, long_softmax: bool = False, seed: int = 0):
    _check_variant(text, variant, long_softmax)
    _check(text, dtype, seed, pipeline=_pipeline(variant, long_softmax))


def _check_variant(text: str, variant: str, long_softmax: bool) -> None:
    """The kernel really is the variant (the pass option reached the generated C++)."""
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    compiled = fusec.compile(
        text, target="cuda", pipeline=_pipeline(variant, long_softmax), executable=False
    )
    (gemm,) = [s for k in compiled.kernels for s in linked_specs(k) if hasattr(s, "config")]
    words = dict(w.split("=") for w in VARIANTS[variant].split())
    for name, value in words.items():
        if name == "schedule" and gemm.config.consumers != 2:
            continue  # one-consumer tiles (row softmax of few rows) keep their schedule
        assert getattr(gemm.config, name) == value


@pytest.mark.parametrize("variant", STRUCTURAL)
@pytest.mark.parametrize(
    "m, n, k, dtype", [(1000, 1000, 1000, "f16"), (4097, 511, 77, "bf16")], ids=["1000^3", "odd"]
)
def test_ragged(variant: str, m: int, n: int, k: int, dtype: str) -> None:
    _run(matmul_ir(m, n, k, dtype), dtype, variant)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transposed_b_bias_gelu(variant: str) -> None:
    text = matmul_ir(1024, 768, 520, "f16", tb=True, tail=(bias(768, "f16"), GELU))
    _run(text, "f16", variant)


@pytest.mark.parametrize("variant", ["pingpong-smem-fast", "rolled"])
@pytest.mark.parametrize("batch_b", [True, False])
def test_batched(batch_b: bool, variant: str) -> None:
    text = matmul_ir(300, 200, 136, "f16", batch=(3,), batch_b=batch_b, tail=(RELU,))
    _run(text, "f16", variant)


@pytest.mark.parametrize("variant", ["smem", "pingpong-smem-fast", "rolled", "pingpong-rolled"])
def test_bias_residual(variant: str) -> None:
    _run(_with_residual(1000, 1000, 520), "f16", variant)


def _with_residual(m: int, n: int, k: int, dtype: str = "f16") -> str:
    """matmul + bias + residual add: the MLP's second GEMM."""
    t = lambda *s: f"tensor<{'x'.join(map(str, s))}x{dtype}>"  # noqa: E731
    return f"""func.func @g(%a: {t(m, k)}, %b: {t(k, n)}, %c: {t(n)}, %r: {t(m, n)}) -> {t(m, n)} {{
  %v0 = ai.matmul %a, %b : {t(m, k)} * {t(k, n)}
  %v1 = ai.bias_add %v0, %c {{axis = 1 : i64}} : {t(m, n)} * {t(n)}
  %v2 = ai.add %v1, %r : {t(m, n)} * {t(m, n)}
  return %v2 : {t(m, n)}
}}
"""


def test_layernorm_prologue() -> None:
    tail = (bias(768, "bf16"), GELU)
    text = matmul_ir(1000, 768, 1000, "bf16", ln=True, tail=tail)
    _run(text, "bf16", "pingpong-smem-fast")


@pytest.mark.parametrize("variant", ["smem", "pingpong-smem-fast"])
def test_row_softmax(variant: str) -> None:
    tail = (scale((200,), "f16"), SOFTMAX, scale((200,), "f16"))
    _run(matmul_ir(20000, 200, 256, "f16", tail=tail), "f16", variant)


def test_long_row_softmax_partials() -> None:
    tail = (bias(1000, "f16"), SOFTMAX, scale((1000,), "f16"))
    _run(matmul_ir(513, 1000, 512, "f16", tail=tail), "f16", "pingpong-smem-fast", True)


@pytest.mark.parametrize("variant", ["smem", "pingpong-smem-fast", "pingpong-rolled"])
def test_f32_output(variant: str) -> None:
    text = """func.func @g(%a: tensor<300x200xf16>, %b: tensor<200x136xf16>)
        -> tensor<300x136xf32> {
  %v0 = ai.matmul %a, %b : tensor<300x200xf16> * tensor<200x136xf16>
  %v1 = ai.cast %v0 : tensor<300x136xf16> to tensor<300x136xf32>
  return %v1 : tensor<300x136xf32>
}
"""
    _run(text, "f16", variant)


SILU_TANH = (("ai.silu {v} : {o}", None), ("ai.tanh {v} : {o}", None))


@pytest.mark.parametrize("variant", ["fast", "pingpong-smem-fast", "rolled"])
def test_fast_silu_tanh_bf16(variant: str) -> None:
    text = matmul_ir(700, 640, 384, "bf16", tail=(bias(640, "bf16"), *SILU_TANH))
    _run(text, "bf16", variant)


# ------------------------------------------------- staged LayerNorm vectors (vectors=smem)


@pytest.mark.parametrize("variant", VECTOR_VARIANTS)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_layernorm_prologue_ragged_columns(variant: str, dtype: str) -> None:
    """1000 columns: the last tile's vector chunks past N are zero-filled, d starts at 1000."""
    tail = (bias(1000, dtype), GELU)
    _run(matmul_ir(777, 1000, 520, dtype, ln=True, tail=tail), dtype, variant)


@pytest.mark.parametrize("variant", VECTOR_VARIANTS)
@pytest.mark.parametrize("m, n, dtype", [(8192, 256, "f16"), (1001, 200, "bf16")])
def test_small_row_layernorm_matmul_softmax(variant: str, m: int, n: int, dtype: str) -> None:
    """The profiled chain (8192 x 256 -> 256 -> softmax) and a ragged one (M, N odd)."""
    _run(matmul_ir(m, n, 256, dtype, ln=True, tail=(SOFTMAX,)), dtype, variant)


@pytest.mark.parametrize("variant", VECTOR_VARIANTS)
def test_layernorm_long_row_softmax(variant: str) -> None:
    _run(matmul_ir(513, 1000, 512, "f16", ln=True, tail=(SOFTMAX,)), "f16", variant, True)


# ------------------------------------------- L2 prefetch of the residual (prefetch=tile)


@pytest.mark.parametrize("variant", ["pre", "pingpong-smem-fast-pre"])
@pytest.mark.parametrize(
    "m, n, k, dtype", [(1000, 1000, 520, "f16"), (4097, 511, 77, "bf16")], ids=["1000", "odd"]
)
def test_bias_residual_prefetched(variant: str, m: int, n: int, k: int, dtype: str) -> None:
    _run(_with_residual(m, n, k, dtype), dtype, variant)


# ------------------------------ three consumer warpgroups (the 192x192 tile, WAVE_TILE)

THREE = {
    "smem-fast": "192x192x64 s3 c3 g8 epi=smem math=fast",  # the heuristic's
    "direct": "192x192x64 s4 c3 g8",
    "vec": "192x192x64 s3 c3 g8 epi=smem math=fast vec=smem",  # barriers 3..5 beside 6..8
    "ln-tile": "192x192x64 s3 c3 g8 epi=smem math=fast ln=tile",
}


def _three(text: str, dtype: str, tile: str) -> None:
    """Forced to a three-consumer tile (152 registers a consumer thread: ``setmaxnreg``
    would wait forever for 232), checked like every variant."""
    _forced(text, dtype, THREE[tile], (192, 192, 3))


def _forced(text: str, dtype: str, tile: str, shape: tuple[int, int, int]) -> None:
    """``text`` compiled with the GEMM's tile forced to ``tile`` (its (bm, bn, consumers)
    checked to be ``shape``), then checked like every variant."""
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    pipeline = f'fusec-default,tile-gemm{{tile="{tile}"}}'
    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    (gemm,) = [s for k in compiled.kernels for s in linked_specs(k) if hasattr(s, "config")]
    assert (gemm.config.bm, gemm.config.bn, gemm.config.consumers) == shape
    _check(text, dtype, pipeline=pipeline)


def test_three_consumers_batched() -> None:
    text = matmul_ir(300, 200, 136, "f16", batch=(3,), batch_b=False, tail=(RELU,))
    _three(text, "f16", "smem-fast")


@pytest.mark.parametrize("tile", ["vec", "ln-tile"])
def test_three_consumers_layernorm_prologue(tile: str) -> None:
    """The LayerNorm's named barriers of all three consumers (ln=tile: K = 192 resident;
    N < 4 K keeps the LayerNorm in the GEMM group)."""
    tail = (bias(500, "bf16"), GELU)
    _three(matmul_ir(777, 500, 192, "bf16", ln=True, tail=tail), "bf16", tile)


# ------------------------------ the 128x192 tile of two consumers (NARROW_TILE)

NARROW = {
    "smem-fast": "128x192x64 s4 c2 g8 epi=smem math=fast",  # the heuristic's
    "smem-fast-pre": "128x192x64 s4 c2 g8 epi=smem math=fast pre=tile",  # ... with a residual
    "direct": "128x192x64 s4 c2 g8",
}


def _narrow(text: str, dtype: str, tile: str) -> None:
    """Forced to the 128x192 tile (96 accumulators a consumer thread, three 64-column
    chunks of the staged epilogue a warp row), checked like every variant."""
    _forced(text, dtype, NARROW[tile], (128, 192, 2))


#: The tiles the heuristic added to the two-consumer 128x128 / 128x256 ones, forced:
#: (tile text, its (bm, bn, consumers)).
FORCED = {
    "c3-smem-fast": (THREE["smem-fast"], (192, 192, 3)),
    "c3-direct": (THREE["direct"], (192, 192, 3)),
    "128x192-smem-fast": (NARROW["smem-fast"], (128, 192, 2)),
    "128x192-direct": (NARROW["direct"], (128, 192, 2)),
    "c3-rolled": (THREE["smem-fast"] + " loop=rolled", (192, 192, 3)),
    "128x192-rolled": (NARROW["smem-fast"] + " loop=rolled", (128, 192, 2)),
}


@pytest.mark.parametrize("tile", list(FORCED))
@pytest.mark.parametrize(
    "m, n, k, dtype", [(1000, 1000, 1000, "f16"), (4097, 511, 77, "bf16")], ids=["1000^3", "odd"]
)
def test_forced_tile_ragged(tile: str, m: int, n: int, k: int, dtype: str) -> None:
    _forced(matmul_ir(m, n, k, dtype), dtype, *FORCED[tile])


@pytest.mark.parametrize("tile", list(FORCED))
def test_forced_tile_transposed_b_bias_gelu_and_residual(tile: str) -> None:
    text = matmul_ir(1024, 768, 520, "f16", tb=True, tail=(bias(768, "f16"), GELU))
    _forced(text, "f16", *FORCED[tile])
    _forced(_with_residual(1000, 1000, 520), "f16", *FORCED[tile])


@pytest.mark.parametrize(
    "m, n, k, dtype", [(1000, 384, 1536, "f16"), (777, 500, 200, "bf16")], ids=["384", "odd"]
)
def test_narrow_tile_layer_scale_prefetched_residual(m: int, n: int, k: int, dtype: str) -> None:
    """The heuristic's pick for ConvNeXt-T's stage-3 MLP down (N = 384): bias, the layer
    scale and the residual, prefetched into L2 (``pre=tile``)."""
    residual = (f"ai.add {{v}}, {{e}} : {{o}} * tensor<{m}x{n}x{dtype}>", (m, n))
    tail = (bias(n, dtype), scale((1, n), dtype), residual)
    _narrow(matmul_ir(m, n, k, dtype, tail=tail), dtype, "smem-fast-pre")


@pytest.mark.parametrize("variant", ["rolled", "pingpong-rolled"])
def test_rolled_exact_gelu_odd_shapes(variant: str) -> None:
    """The exact GELU (ConvNeXt's, the epilogue loop=rolled was made for) on rows whose
    1022 bytes have no TMA map (the masked copy) and edge tiles whose steps clamp their
    bias index."""
    tail = (bias(511, "bf16"), ("ai.gelu {v} : {o}", None))
    _run(matmul_ir(4097, 511, 77, "bf16", tail=tail), "bf16", variant)
