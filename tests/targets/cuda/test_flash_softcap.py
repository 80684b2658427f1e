"""Soft-capped attention (Gemma-2's logit soft-capping: scores ``cap * tanh(q k^T *
scale / cap)`` before the mask, ``ai.attention``'s softcap) on the flash kernel, without
a GPU: the plan, the kernel's model against the reference, the build for sm_90a
(``test_flash_softcap_gpu.py`` runs it)."""

from __future__ import annotations

import re

import attention_model as model
import numpy as np
import pytest
from test_gemm_build import needs_toolchain

import fusec
from fusec.dialect import numpy_ops as K
from fusec.targets.cuda.attention.cpp import AttentionSpec


def softcap_graph(
    batch: int,
    heads: int,
    sq: int,
    sk: int,
    d: int,
    dtype: str,
    cap: float,
    mask: str = "zero",
) -> str:
    """One ``ai.attention`` with ``softcap = cap``; its mask a zero constant, a causal one
    (-inf above the diagonal: the kernel masks by index) or an input ``(batch, 1, 1,
    sk)`` (a padding mask, read from memory)."""
    q = f"tensor<{batch}x{heads}x{sq}x{d}x{dtype}>"
    k = f"tensor<{batch}x{heads}x{sk}x{d}x{dtype}>"
    params = f"%q: {q}, %k: {k}, %v: {k}"
    if mask == "input":
        m = f"tensor<{batch}x1x1x{sk}x{dtype}>"
        params += f", %m: {m}"
        constant = ""
    else:
        m = f"tensor<{sq}x{sk}x{dtype}>"
        rows = [
            "["
            + ", ".join("0xFC00" if mask == "causal" and j > i else "0.0" for j in range(sk))
            + "]"
            for i in range(sq)
        ]
        values = "0.0" if mask == "zero" else "[" + ", ".join(rows) + "]"
        constant = f"\n  %m = arith.constant dense<{values}> : {m}"
    attrs = f"scale = {d**-0.5}, softcap = {cap}"
    return f"""func.func @f({params}) -> {q} {{{constant}
  %o = ai.attention %q, %k, %v, %m {{{attrs}}} : {q} * {k} * {k} * {m}
  return %o : {q}
}}"""


def test_a_soft_capped_attention_is_the_flash_kernel() -> None:
    compiled = fusec.compile(
        softcap_graph(1, 2, 100, 100, 64, "f16", 50.0), target="cuda", executable=False
    )
    (kernel,) = compiled.kernels
    assert kernel.kind == "attention" and "FALLBACK" not in kernel.source
    assert "scores soft-capped at 50.0 (tanh)" in kernel.source
    (spec,) = kernel.specs
    assert "softmax(softcap * tanh(Q K^T * scale / softcap)) V" in spec.cpp_source()


def test_a_negative_or_infinite_softcap_is_no_kernel() -> None:
    with pytest.raises(ValueError, match="softcap"):
        AttentionSpec(1, 8, 8, 64, 64, softcap=float("inf"))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cap", [50.0, 5.0])
def test_the_soft_capped_online_softmax_matches_the_reference(cap: float, causal: bool) -> None:
    """The model of the kernel (``attention_model.run``) against the reference executor's
    ``attention`` with softcap: scores large enough that the tanh saturates (cap 5), 300
    keys (three blocks, a ragged one)."""
    batch, sq, sk = 2, 150, 300 if not causal else 150
    rng = np.random.default_rng(3)
    q, k, v = ((rng.standard_normal((batch, n, 64)) * 2).astype(np.float16) for n in (sq, sk, sk))
    spec = AttentionSpec(batch, sq, sk, 64, 64, scale=0.125, causal=causal, softcap=cap)
    out, writes = model.run(spec, q, k, v)
    assert (writes == 1).all()
    mask = np.zeros((sq, sk), dtype=np.float32)
    if causal:
        mask = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, mask)
    ref = K.attention(q, k, v, mask, 0.125, softcap=cap).astype(np.float64)
    assert not np.isnan(out).any()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 2e-3
    plain = K.attention(q, k, v, mask, 0.125).astype(np.float64)
    assert np.linalg.norm(plain - ref) / np.linalg.norm(ref) > 1e-2  # the cap matters here


@needs_toolchain
def test_the_soft_capped_kernel_builds_for_sm_90a(tmp_path) -> None:
    """With the tanh the kernel still builds without spills or local memory."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    spec = AttentionSpec(4, 200, 200, 128, 128, scale=0.088, softcap=50.0)
    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
