"""GPU tests of the GEMM's ``ln="tile"`` variant (the LayerNorm prologue normalised in the
resident A tiles, one launch), forced by ``tile-gemm{ln=tile}`` or an exact tile.

Each case is compared elementwise with the float64 reference executor on fresh random
inputs, output poisoned (NaN) first (``test_gemm_gpu._check``): the profiled chain
(8192 x 256 -> 256 -> softmax, f16), a ragged one (1001 x 200 -> 136, bf16) on one and
two consumer warpgroups, K = 128, LN -> matmul + bias without a softmax (two consumers,
direct and smem epilogues), against PyTorch eager (LN output rounded to f16, then the
matmul), and constant rows, whose LayerNorm output is exactly beta.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_gemm_gpu import SOFTMAX, TORCH, _check, _numpy, bias, matmul_ir

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _pipeline(options: str) -> str:
    return f"fusec-default,tile-gemm{{{options}}}"


def _gemm(text: str, options: str):
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    compiled = fusec.compile(text, target="cuda", pipeline=_pipeline(options), executable=False)
    specs = [s for k in compiled.kernels for s in linked_specs(k)]
    assert [type(s).__name__ for s in specs] == ["GemmSpec"], "ln=tile: one launch, no pre-pass"
    assert specs[0].config.ln == "tile"
    return specs[0]


def _run(text: str, dtype: str, options: str = "ln=tile", seed: int = 0) -> None:
    _gemm(text, options)
    _check(text, dtype, seed, pipeline=_pipeline(options))


@pytest.mark.parametrize("seed", [0, 1])
def test_profiled_chain_8192x256_softmax_f16(seed: int) -> None:
    _run(matmul_ir(8192, 256, 256, "f16", ln=True, tail=(SOFTMAX,)), "f16", seed=seed)


@pytest.mark.parametrize(
    "options", ["ln=tile", 'tile="128x256x64 s4 c2 g8 ln=tile"'], ids=["c1", "c2"]
)
def test_ragged_1001x200_to_136_bf16(options: str) -> None:
    _run(matmul_ir(1001, 136, 200, "bf16", ln=True, tail=(SOFTMAX,)), "bf16", options)


@pytest.mark.parametrize("k", [256, 128])
def test_several_tiles_per_block_on_a_deeper_ring(k: int) -> None:
    """20000 rows: 313 tiles of 64 rows, 2-3 per block of the persistent grid, with K
    steps (4 or 2) fewer than the ring's 5 stages: each tile's A tiles and B tiles land
    on ring positions and barrier phases that move from tile to tile."""
    _run(matmul_ir(20000, 256, k, "f16", ln=True, tail=(SOFTMAX,)), "f16")


def test_k128_softmax() -> None:
    _run(matmul_ir(3000, 256, 128, "f16", ln=True, tail=(SOFTMAX,)), "f16")


@pytest.mark.parametrize(
    "m, n, k, dtype, options",
    [
        (8192, 1024, 256, "f16", "epilogue=direct ln=tile"),  # 128x256, 2 consumers
        (1000, 768, 256, "bf16", "ln=tile"),  # 128x128 s5, smem epilogue
        (777, 1000, 192, "f16", "ln=tile"),
    ],
)
def test_layernorm_matmul_bias(
    m: int, n: int, k: int, dtype: str, options: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fusec.targets.cuda.gemm import template

    # N = 4K would leave the LayerNorm to a kernel of its own: keep it in the GEMM here
    monkeypatch.setattr(template, "LN_SPLIT_WIDE", 10**9)
    _run(matmul_ir(m, n, k, dtype, ln=True, tail=(bias(n, dtype),)), dtype, options)


def _launch(text: str, options: str, tensors: list):
    import fusec

    compiled = fusec.compile(text, target="cuda", pipeline=_pipeline(options))
    (out,) = compiled._runner(tensors, poison=True)
    return out


def test_matches_pytorch_eager_semantics() -> None:
    """LN in f32 rounded to f16 (eager), then matmul -> softmax: ln=tile computes the same
    thing; compared with eager on the same inputs."""
    m, n, k = 8192, 256, 256
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = (torch.randn(m, k, generator=gen, device="cuda") + 3.0).half()
    g = (1.0 + 0.2 * torch.randn(k, generator=gen, device="cuda")).half()
    b = (0.2 * torch.randn(k, generator=gen, device="cuda")).half()
    w = (torch.randn(k, n, generator=gen, device="cuda") / k**0.5).half()
    text = matmul_ir(m, n, k, "f16", ln=True, tail=(SOFTMAX,))
    got = _launch(text, "ln=tile", [x, w, g, b]).float()
    normed = torch.nn.functional.layer_norm(x, (k,), g, b, eps=1e-5)
    ref = torch.softmax((normed @ w).float(), dim=-1)
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max()))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_constant_rows_give_exactly_beta(dtype: str) -> None:
    """Every row constant (a different constant per row): the LayerNorm output is exactly
    beta, so every output row is softmax(beta W) (the FlashNorm rewrite would multiply a
    cancelled difference by 1/sqrt(eps))."""
    m, n, k = 1001, 256, 256
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = (3.0 + torch.randn(m, 1, generator=gen, device="cuda")).expand(m, k).contiguous()
    x = x.to(TORCH[dtype])
    g = (1.0 + 0.2 * torch.randn(k, generator=gen, device="cuda")).to(TORCH[dtype])
    b = (0.2 * torch.randn(k, generator=gen, device="cuda")).to(TORCH[dtype])
    w = (torch.randn(k, n, generator=gen, device="cuda") / k**0.5).to(TORCH[dtype])
    text = matmul_ir(m, n, k, dtype, ln=True, tail=(SOFTMAX,))
    got = _numpy(_launch(text, "ln=tile", [x, w, g, b])).astype(np.float64)
    logits = _numpy(b).astype(np.float64) @ _numpy(w).astype(np.float64)
    row = np.exp(logits - logits.max())
    row /= row.sum()
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, np.broadcast_to(row, got.shape), rtol=1e-2, atol=1e-3)
    assert float(np.abs(got - got[0]).max()) <= 1e-3  # every row the same distribution
