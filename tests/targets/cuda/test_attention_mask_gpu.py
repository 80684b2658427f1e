"""The flash kernel with a mask read from memory on the GPU vs the reference (skipped
without a GPU; issue 28): the default since these cases passed on an H100 (2026-12-07;
``FUSEC_ATTENTION_MASKS=index`` turns the path off, so the cases set "tensor"). Fresh
random inputs, padding masks with -inf or the dtype's minimum past each row's length
(one batch's keys all hidden for the -inf case: NaN where the graph's softmax is NaN),
biases broadcast over the batch or heads, outputs poisoned first; the one kernel must be
the flash kernel, so a case cannot pass on the fallback."""

from __future__ import annotations

import numpy as np
import pytest
from attention_cases import attention_graph
from numerics import assert_close

from fusec.targets.cuda.attention.template import MASKS_ENV

pytestmark = pytest.mark.gpu

CASES = {
    "padding-inf-f16": ((2, 4), 200, 200, 64, (2, 1, 1, 200), "f16", "-inf"),
    "padding-min-bf16": ((3, 2), 77, 77, 128, (3, 1, 1, 77), "bf16", "min"),
    "head-bias-f16": ((2, 3), 130, 300, 64, (1, 3, 130, 300), "f16", "bias"),
    "square-bias-bf16": ((4,), 64, 64, 64, (64, 64), "bf16", "bias"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_mask_read_from_memory_matches_the_reference(name: str, monkeypatch) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    batch, sq, sk, d, shape, dtype, fill = CASES[name]
    monkeypatch.setenv(MASKS_ENV, "tensor")
    text = attention_graph(batch, sq, sk, d, d, dtype, mask=shape)
    compiled = fusec.compile(text, target="cuda")
    (kernel,) = compiled.kernels
    assert "the mask read from memory" in kernel.source and "FALLBACK" not in kernel.source
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        rng = np.random.default_rng(seed)
        if fill != "bias":
            value = -np.inf if fill == "-inf" else float(np.finfo(np.float16).min)
            lengths = rng.integers(1, sk + 1, size=(shape[0], 1, 1, 1))
            if fill == "-inf":
                lengths[0] = 0  # every key of batch 0 hidden: NaN rows
            mask = np.where(np.arange(sk) >= lengths, value, 0.0)
            args[3] = mask.astype(args[3].dtype)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        assert (np.isnan(out) == np.isnan(ref)).all(), f"{name}: NaN where the graph's is"
        finite = ~np.isnan(ref)
        assert_close(out[finite], ref[finite], dtype, what=f"{name}, seed {seed}")
