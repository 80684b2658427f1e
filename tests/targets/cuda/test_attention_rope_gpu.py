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

#: the default plan, RoPE as its own kernel (its output rounded as the kernel rounds the tiles)
ROPE_KERNEL = "fusec-cuda"
#: RoPE as the flash kernel's prologue (not the default: measured no faster)
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


@pytest.mark.parametrize("name", ["gqa-d64-f16", "long-d128-f16"])
def test_rope_tables_at_an_unaligned_address_read_element_by_element(name: str) -> None:
    """The kernel reads cos and sin 8 at a time where the tables' addresses are 16-byte
    aligned (ROPE_VEC), element by element where not (a tensor 2 bytes into its storage):
    the same factors, so the same output bits."""
    torch = pytest.importorskip("torch")
    import fusec

    text, seq, dtype, rotary = _case(name)
    compiled = fusec.compile(text, target="cuda", pipeline=PROLOGUE)
    (kernel,) = compiled.kernels
    assert "ROPE_VEC = 1" in kernel.specs[0].cpp_source()
    _, _, heads, kv, d, *_ = CASES[name]
    rng = np.random.default_rng(5)
    qkv = torch.from_numpy(rng.standard_normal((CASES[name][0], seq, (heads + 2 * kv) * d)))
    qkv = qkv.to(torch.float16).cuda()
    tables = [torch.from_numpy(t).to(torch.float16).cuda() for t in rope_tables(seq, rotary)]
    unaligned = []
    for table in tables:
        storage = torch.empty(table.numel() + 8, dtype=torch.float16, device="cuda")
        shifted = storage[1 : 1 + table.numel()].view(table.shape)
        shifted.copy_(table)
        assert shifted.data_ptr() % 16 != 0
        unaligned.append(shifted)
    # no synchronize: fusec's work is queued on the caller's stream, so torch's reads of
    # the outputs below (on that stream) are ordered after it
    aligned_out = compiled(qkv, *tables).clone()  # (a program may reuse its output buffer)
    unaligned_out = compiled(qkv, *unaligned)
    assert not torch.isnan(aligned_out).any()
    assert torch.equal(aligned_out, unaligned_out)
