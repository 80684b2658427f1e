"""GPU tests of the cuda experts kernel (issue 31): ``ai.moe_experts`` of 16-bit tokens and
experts as route, gather, two grouped GEMMs, SwiGLU and combine (``targets/cuda/experts``).

Each case draws fresh tokens, routing weights, expert indices (k distinct experts a token,
the last expert unused, every other token's indices negative) and expert weights, runs the
compiled layer with its output poisoned (NaN) first on a side torch stream, and compares
with the definition in float64 (``experts_cases.dense_moe``): rel L2 < 1e-2, the bound of
every 16-bit kernel here. Shapes cover both row tiles (64 rows at decode sizes, 128 where
an expert gets at least 128 rows on average), ragged groups, k of 1 to 4, both index
widths, and the SwiGLU in the gate/up GEMM's gated epilogue and in its own kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from experts_cases import dense_moe, moe_inputs, moe_text

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

_TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def _device(array: np.ndarray):
    if array.dtype.kind in "iu":
        return torch.from_numpy(array).to("cuda")
    name = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[array.dtype.name]
    return torch.from_numpy(array.astype(np.float32)).to("cuda", _TORCH[name])


def _run(compiled, args: list[np.ndarray]) -> np.ndarray:
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (out,) = compiled._runner([_device(a) for a in args], poison=True)  # NaN first
        got = out.float().cpu().numpy().astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    return got


@pytest.mark.parametrize(
    "tokens, width, hidden, count, k, dtype, index",
    [
        (64, 128, 256, 4, 2, "bf16", "i64"),  # 64-row tiles
        (3, 64, 64, 8, 2, "bf16", "i32"),  # decode: a few rows an expert
        (37, 136, 200, 5, 1, "f16", "i64"),  # ragged widths (multiples of 8), k = 1
        (1000, 256, 512, 8, 2, "f16", "i32"),  # 128-row tiles
        (700, 128, 384, 6, 4, "bf16", "i64"),  # 128-row tiles, k = 4
    ],
)
@pytest.mark.parametrize("swiglu", ["epilogue", "kernel"])
def test_experts_kernel_matches_the_definition(
    tokens, width, hidden, count, k, dtype, index, swiglu, monkeypatch
):
    import fusec

    monkeypatch.setenv("FUSEC_MOE_SWIGLU", swiglu)  # the gated GEMM, or the SwiGLU kernel

    text = moe_text(tokens, width, hidden, count, k, dtype, index)
    compiled = fusec.compile(text, target="cuda")
    (kernel,) = compiled.kernels
    assert kernel.kind == "experts" and kernel.remark is None  # the kernel, no fallback
    args = moe_inputs(tokens, width, hidden, count, k, dtype, index, seed=tokens + k)
    got = _run(compiled, args)
    want = dense_moe(*args)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_the_same_inputs_give_the_same_bits():
    """The route's atomics order each expert's rows differently from call to call; a row's
    products do not depend on its place and the combine sums the slots in order, so the
    output's bits do not change."""
    import fusec

    args = moe_inputs(500, 128, 256, 8, 2, "bf16", "i64", seed=5)
    compiled = fusec.compile(moe_text(500, 128, 256, 8, 2, "bf16", "i64"), target="cuda")
    first = _run(compiled, args)
    for _ in range(3):
        assert np.array_equal(_run(compiled, args), first)


def test_an_expert_index_out_of_range_selects_no_expert():
    """A GPU kernel cannot raise: the pair contributes nothing (the PyTorch fallback's
    behaviour; the reference and the cpu kernel report the index)."""
    import fusec

    args = moe_inputs(16, 64, 64, 4, 2, "bf16", "i64", seed=9)
    args[2][3, 1] = 7  # out of range for 4 experts
    compiled = fusec.compile(moe_text(16, 64, 64, 4, 2, "bf16", "i64"), target="cuda")
    got = _run(compiled, args)
    kept = args[1].copy()
    kept[3, 1] = 0.0  # the pair's weight: no contribution
    picks = args[2].copy()
    picks[3, 1] = 0
    want = dense_moe(args[0], kept, picks, args[3], args[4])
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
