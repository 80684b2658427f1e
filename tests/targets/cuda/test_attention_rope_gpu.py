"""RoPE as the flash attention's prologue on the GPU vs the reference (skipped without a
GPU; issue 28): Llama's layer after its combined q/k/v projection, the RoPE group moved
into the attention (``rope-into-attention``), the kernel rotating the Q tile and each K
stage in shared memory after the TMA load. Fresh random inputs, Llama's cos and sin
tables, outputs poisoned first; the one kernel must be the attention with the prologue."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close, assert_rel_l2
from rope_cases import neox_attention_graph, rope_attention_graph, rope_tables

pytestmark = pytest.mark.gpu

#: the plan with RoPE as its own kernel (its output rounded as the kernel rounds the tiles)
ROPE_KERNEL = "fusec-cuda-rope-kernel"
#: the prologue at every sequence length (``fusec-cuda`` takes it up to 128 queries)
PROLOGUE = "fusec-cuda-rope-prologue"

CASES = {
    "gqa-d64-f16": (2, 40, 4, 2, 64, "f16"),
    "long-d128-f16": (1, 300, 2, 1, 128, "f16"),
    "mha-ragged-f16": (3, 17, 2, 2, 64, "f16"),
    "gqa-d128-bf16": (2, 200, 8, 2, 128, "bf16"),
    # GPT-NeoX's partial rotary: the first 16 of 64 dims; 64 of 128 with GQA in bf16
    "partial-d64-f16": (2, 40, 4, 4, 64, "f16", 16),
    "partial-d128-bf16": (1, 300, 4, 2, 128, "bf16", 64),
}
#: GPT-NeoX's layer, f16 (q, k and v slices of one head split): (batch, seq, heads, head
#: size, rotary dims)
NEOX = {"neox-d64": (2, 40, 4, 64, 16), "neox-d128": (1, 130, 2, 128, 32)}


def _case(name: str) -> tuple[str, int, str, int]:
    """(the graph, seq, dtype, rotary dims) of case ``name``."""
    if name in NEOX:
        _, seq, _, _, rotary = NEOX[name]
        return neox_attention_graph(*NEOX[name]), seq, "f16", rotary
    _, seq, _, _, d, dtype, *rotary = CASES[name]
    return rope_attention_graph(*CASES[name]), seq, dtype, rotary[0] if rotary else d


@pytest.mark.parametrize("name", [*CASES, *NEOX])
def test_rope_in_the_attention_matches_the_reference(name: str) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    text, seq, dtype, rotary = _case(name)
    compiled = fusec.compile(text, target="cuda", pipeline=PROLOGUE)
    (kernel,) = compiled.kernels
    assert "RoPE of q and k" in kernel.source and "FALLBACK" not in kernel.source
    # the kernel rounds the rotated q and k tiles to their 16-bit type (the wgmma's
    # operands), as the RoPE kernel's output is rounded: elementwise against the reference
    # of that plan; the one-group plan's reference keeps them f32 (in bf16 a few elements
    # differ by more than the elementwise tolerance: rel L2 against it instead)
    separate = fusec.compile(text, target="cuda", executable=False, pipeline=ROPE_KERNEL)
    cos, sin = rope_tables(seq, rotary)
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        args[1], args[2] = cos.astype(args[1].dtype), sin.astype(args[2].dtype)
        (out,) = compiled._runner(args, poison=True)
        out = np.asarray(out, dtype=np.float64)
        assert not np.isnan(out).any()
        for module, check in ((separate.module, assert_close), (compiled.module, assert_rel_l2)):
            (ref,) = run_reference(module, args, rounding="groups")
            check(out, np.asarray(ref, dtype=np.float64), dtype, what=f"{name}, seed {seed}")
