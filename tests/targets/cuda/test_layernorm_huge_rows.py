"""LayerNorm of rows of huge finite values on every cuda LayerNorm path (issue #26).

A row of 3e38 (f32, bf16) summed in float32 overflows (mean Inf, then NaN; a row of
+-1e20 overflows the squares), where the float64 reference is finite: a constant row
normalises to beta, a varied one to unit variance. Each path takes such a row's
statistics again, of x scaled by a power of 2:

* the ``row_reduce`` kernel (a LayerNorm of its own, warp and block rows): the edge
  cases ``layernorm-huge-rows-*`` in ``tests/differential/test_edge_cases.py`` run it
  under the simulator, and on the GPU (``-m gpu``); here, on the GPU, before a GEMM
  (K >= 768, N >= K);
* the GEMM's in-kernel LayerNorm (``ln="tile"``): its numpy model here, and the kernel
  on the GPU (``-m gpu``);
* the FlashNorm pre-pass (``ln="fold"``, K between the pipeline's depth and 768, or N < K): its
  statistics are rescaled too (rows of +-1e20 whose squares overflow, on the GPU); the
  GEMM multiplies the raw rows, so a bf16 row of 3e38 overflows ``x . W'`` itself, and a
  row of large mean against its spread (a constant row) cancels its digits in
  ``acc - mean * c``: the epilogue takes those elements again exactly (``gemm.cuh``:
  ``gemm_ln_inexact``, ``gemm_ln_exact``): its numpy model here, the kernel on the GPU.
"""

from __future__ import annotations

import gemm_model as model
import numpy as np
import pytest


def huge_rows(rows: int, k: int, big: float, seed: int = 0, constant: bool = True):
    """Constant +-big rows (unless not ``constant``), varied rows of one sign and of
    alternating signs, rows whose squares only overflow, ordinary rows: float64."""
    rng = np.random.default_rng(seed)
    ramp = rng.uniform(0.5, 1.0, k)
    signs = np.where(np.arange(k) % 2, -1.0, 1.0)
    kinds = [np.full(k, big), np.full(k, -big)] if constant else []
    kinds += [
        big * ramp,
        big * signs * ramp,
        1e20 * signs * ramp,
        3.0 + rng.standard_normal(k),
    ]
    return np.stack([kinds[i % len(kinds)] for i in range(rows)])


def layernorm64(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps) * gamma.astype(np.float64) + beta.astype(np.float64)


@pytest.mark.parametrize("rows, k", [(64, 256), (128, 200)])
def test_model_of_ln_tile_on_huge_bf16_rows(rows: int, k: int) -> None:
    """The in-place normalisation's model (``cpp._ln_tile_prologue``'s arithmetic) gives
    the float64 LayerNorm, rounded to bf16, for rows of 3e38: constant rows exactly beta."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(rows + k)
    x = huge_rows(rows, k, 3e38).astype(bf16)
    gamma = (1.0 + 0.2 * rng.standard_normal(k)).astype(bf16)
    beta = (0.2 * rng.standard_normal(k)).astype(bf16)
    stages = model.ln_tile_stages(x)
    writes = model.ln_tile_normalise(stages, k, gamma, beta, 1e-5, rows)
    assert (writes == 1).all()
    got = model.ln_tile_unswizzle(stages, rows, k).astype(np.float32)
    ref = layernorm64(x, gamma, beta).astype(bf16).astype(np.float32)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2)
    assert (got[0] == beta.astype(np.float32)).all() and (got[1] == got[0]).all()


#: LayerNorm -> matmul on the GPU: (M, N, K, the path the group takes, the pipeline).
#: K = 256 fits the pipeline: ``tile-gemm{ln=tile}`` normalises in the GEMM kernel (the
#: default does so before a softmax); K = N = 1024: a LayerNorm kernel of its own
#: (``gemm.template.layernorm_prologue_problem``), then the GEMM; K = 512 with N = 256 keeps the
#: prologue, as the FlashNorm pre-pass (``ln=fold``).
GPU_PATHS = [
    (1000, 768, 256, "tile", "fusec-default,tile-gemm{ln=tile}"),
    (512, 1024, 1024, "own kernel", None),
    (600, 256, 512, "fold", None),
    (600, 256, 512, "fold 1e20", None),  # no constant rows: acc - mean * c cancels there
]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, path, pipeline", GPU_PATHS, ids=[c[3] for c in GPU_PATHS])
def test_layernorm_matmul_of_huge_bf16_rows_gpu(m, n, k, path, pipeline) -> None:
    """LN(x) @ W in bf16 with rows of 3e38 (constant and varied) and +-1e20 (for the
    FlashNorm pre-pass also: varied rows of 1e20 alone) against the float64 reference,
    output poisoned first: finite, and within bf16's tolerance."""
    torch = pytest.importorskip("torch")
    import ml_dtypes
    from numerics import compare
    from test_gemm_gpu import matmul_ir

    import fusec
    from fusec.runtime.reference import run_reference
    from fusec.targets.cuda.gemm.template import linked_specs

    text = matmul_ir(m, n, k, "bf16", ln=True)
    compiled = fusec.compile(text, target="cuda", pipeline=pipeline)
    specs = [s for kernel in compiled.kernels for s in linked_specs(kernel)]
    gemm = [s for s in specs if type(s).__name__ == "GemmSpec"]
    assert len(gemm) == 1, [type(s).__name__ for s in specs]
    own = any(kernel.kind == "row_reduce" for kernel in compiled.kernels)
    assert own == (path == "own kernel")
    assert own or gemm[0].config.ln == path.split()[0]

    rng = np.random.default_rng(m + n + k)
    bf16 = ml_dtypes.bfloat16
    x = huge_rows(m, k, 1e20, constant=False) if path == "fold 1e20" else huge_rows(m, k, 3e38)
    arrays = [
        x.astype(bf16),
        (rng.standard_normal((k, n)) / k**0.5).astype(bf16),
        (1.0 + 0.2 * rng.standard_normal(k)).astype(bf16),
        (0.2 * rng.standard_normal(k)).astype(bf16),
    ]
    tensors = [torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda() for a in arrays]
    (out,) = compiled._runner(tensors, poison=True)
    got = out.float().cpu().numpy()
    (ref,) = run_reference(compiled.module, arrays)
    assert np.isfinite(got).all(), f"{int((~np.isfinite(got)).sum())} elements not finite"
    result = compare(got, np.asarray(ref, dtype=np.float64), "bf16")
    assert result.passed, str(result)


def test_model_of_the_flashnorm_prepass_on_rows_whose_squares_overflow() -> None:
    """The pre-pass's statistics (``model.layernorm_prep``, as ``aux.fs_finish_stats``)
    of bf16 rows of +-1e20 (their shifted squares overflow float32: rstd was 0) through
    the rewrite rstd * (x @ W' - mean * c) + d equal LN(x) @ W in float64. No constant
    rows: there the rewrite cancels the row's digits whatever the statistics."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    m, k, n = 40, 512, 64
    rng = np.random.default_rng(5)
    x = huge_rows(m, k, 1e20, constant=False).astype(bf16)
    gamma = (1.0 + 0.2 * rng.standard_normal(k)).astype(bf16)
    beta = (0.2 * rng.standard_normal(k)).astype(bf16)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(bf16)
    stats, folded, c, d = model.layernorm_prep(x, gamma, beta, w, 1e-5, dtype=bf16)
    acc = x.astype(np.float32) @ folded.astype(np.float32)  # the GEMM on the raw x
    got = model.layernorm_epilogue(acc, stats, c, d)
    ref = layernorm64(x, gamma, beta) @ w.astype(np.float64)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


def _fold_case(x: np.ndarray, dtype, n: int = 64, seed: int = 5):
    """(the plain rewrite, the epilogue with its exact path, the float64 LN(x) @ W) of the
    FlashNorm pre-pass's model on ``x`` (rounded to ``dtype``), the GEMM on the raw x."""
    m, k = x.shape
    rng = np.random.default_rng(seed)
    x = x.astype(dtype)
    gamma = (1.0 + 0.2 * rng.standard_normal(k)).astype(dtype)
    beta = (0.2 * rng.standard_normal(k)).astype(dtype)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(dtype)
    stats, folded, c, d = model.layernorm_prep(x, gamma, beta, w, 1e-5, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        acc = x.astype(np.float32) @ folded.astype(np.float32)  # the GEMM on the raw x
        plain = model.layernorm_epilogue(acc, stats, c, d)
    got = model.layernorm_epilogue_exact(x, folded, acc, stats, c, d)
    ref = layernorm64(x, gamma, beta) @ w.astype(np.float64)
    return plain, got, ref


def test_model_of_the_flashnorm_epilogue_on_rows_of_3e38() -> None:
    """bf16 rows of 3e38 (constant, varied, alternating signs), +-1e20 and ordinary ones:
    the plain rewrite gives Inf or NaN (x . W' overflows; constant rows cancel), the
    epilogue's exact path the float64 LN(x) @ W, constant rows exactly d = beta @ W."""
    import ml_dtypes

    x = huge_rows(48, 512, 3e38)
    plain, got, ref = _fold_case(x, ml_dtypes.bfloat16)
    assert not np.isfinite(plain).all()  # what the kernel gave before the exact path
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


@pytest.mark.parametrize("value", [1000.0, 30000.0])
def test_model_of_the_flashnorm_epilogue_on_constant_f16_rows(value: float) -> None:
    """Constant f16 rows (a different constant per row, around ``value``): their LayerNorm
    is exactly beta; the plain rewrite multiplies what acc - mu c leaves by 1/sqrt(eps),
    the exact path gives beta @ W."""
    rng = np.random.default_rng(int(value))
    x = np.repeat(value * (1.0 + 0.1 * rng.standard_normal((32, 1))), 384, axis=1)
    plain, got, ref = _fold_case(x, np.float16)
    err = np.linalg.norm(plain - ref) / np.linalg.norm(ref)
    assert err > 1e-2  # the rewrite alone is wrong here: the test can fail
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


def test_model_of_the_flashnorm_epilogue_leaves_ordinary_rows_to_the_rewrite() -> None:
    """Rows of mean 3 and unit spread (|mu| rstd ~ 3): the rewrite, bit for bit."""
    rng = np.random.default_rng(2)
    x = 3.0 + rng.standard_normal((64, 256))
    plain, got, ref = _fold_case(x, np.float16)
    assert (got == plain).all()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_constant_rows_through_the_flashnorm_prepass_gpu(dtype: str) -> None:
    """Every row constant (3 + a normal value per row) through ``ln=fold``: the LayerNorm
    is exactly beta, so every output row is beta @ W, within the dtype's tolerance of the
    float64 reference (the rewrite alone gave (acc - mu c) / sqrt(eps), issue #26)."""
    torch = pytest.importorskip("torch")
    from numerics import compare
    from test_gemm_gpu import TORCH, _numpy, matmul_ir

    import fusec
    from fusec.runtime.reference import run_reference
    from fusec.targets.cuda.gemm.template import linked_specs

    m, n, k = 1001, 320, 384
    text = matmul_ir(m, n, k, dtype, ln=True)
    compiled = fusec.compile(text, target="cuda", pipeline="fusec-default,tile-gemm{ln=fold}")
    specs = [s for kernel in compiled.kernels for s in linked_specs(kernel)]
    assert [type(s).__name__ for s in specs] == ["LayerNormPrep", "GemmSpec"]
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = (3.0 + torch.randn(m, 1, generator=gen, device="cuda")).expand(m, k).contiguous()
    g = 1.0 + 0.2 * torch.randn(k, generator=gen, device="cuda")
    b = 0.2 * torch.randn(k, generator=gen, device="cuda")
    w = torch.randn(k, n, generator=gen, device="cuda") / k**0.5
    tensors = [t.to(TORCH[dtype]) for t in (x, w, g, b)]
    (out,) = compiled._runner(tensors, poison=True)
    got = _numpy(out).astype(np.float64)
    (ref,) = run_reference(compiled.module, [_numpy(t) for t in tensors])
    assert np.isfinite(got).all()
    result = compare(got, np.asarray(ref, dtype=np.float64), dtype)
    assert result.passed, str(result)
