"""Soft-capped attention (Gemma-2's ``cap * tanh(q k^T * scale / cap)``) on the flash
kernel on the GPU vs the reference (skipped without a GPU). Fresh random inputs large
enough that the tanh saturates, outputs poisoned first; the one kernel must be the flash
kernel, so a case cannot pass on the fallback."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from test_flash_softcap import softcap_graph

from fusec.targets.cuda.attention.template import MASKS_ENV

pytestmark = pytest.mark.gpu

CASES = {
    "f16-d64-cap50": (2, 3, 200, 200, 64, "f16", 50.0, "zero"),
    "bf16-d128-cap5-causal": (1, 4, 300, 300, 128, "bf16", 5.0, "causal"),
    "f16-d64-cap20-padding": (3, 2, 150, 150, 64, "f16", 20.0, "input"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_soft_capped_attention_matches_the_reference(name: str, monkeypatch) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    batch, heads, sq, sk, d, dtype, cap, mask = CASES[name]
    monkeypatch.setenv(MASKS_ENV, "tensor")
    compiled = fusec.compile(
        softcap_graph(batch, heads, sq, sk, d, dtype, cap, mask), target="cuda"
    )
    (kernel,) = compiled.kernels
    assert "soft-capped" in kernel.source and "FALLBACK" not in kernel.source
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        for i in range(2):  # scores of a few tens: cap 5 saturates, 50 bends
            args[i] = (args[i].astype(np.float32) * 3).astype(args[i].dtype)
        if mask == "input":
            lengths = np.random.default_rng(seed).integers(1, sk + 1, size=(batch, 1, 1, 1))
            args[3] = np.where(np.arange(sk) >= lengths, -np.inf, 0.0).astype(args[3].dtype)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        assert not np.isnan(out).any() and not np.isnan(ref).any()
        assert_close(out, ref, dtype, what=f"{name}, seed {seed}")
