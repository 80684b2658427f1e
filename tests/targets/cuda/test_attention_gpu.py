"""Attention on the GPU vs the float64 reference (skipped without a GPU).

Every case goes through the unified path: a chain written in ``.mlir``, exported
as PyTorch writes it, or traced with ``@fusec.fuse`` is made ``ai.attention`` by
``recognize-patterns``, grouped as kind ``attention`` and run by the cuda template.
Fresh random inputs, outputs poisoned (NaN) first; the attention kernel's header
must name the route the case is for (the flash kernel, or the PyTorch fallback
with its reason), so a case cannot pass on the other one.
"""

from __future__ import annotations

import pytest
from attention_cases import (
    attention_graph,
    exported_attention_graph,
    scattered_heads_graph,
    sequence_first_mha_graph,
    strided_attention_graph,
)
from numerics import assert_close

pytestmark = pytest.mark.gpu

FLASH = "fused flash-style attention"

CASES = {
    "ragged-q-and-k-d64-dv128": (attention_graph((3,), 200, 300, 64, 128), FLASH),
    "4d-batch-d128-bf16-div": (
        attention_graph((2, 3), 130, 130, 128, 128, "bf16", scale="div"),
        FLASH,
    ),
    "short-keys-no-scale": (attention_graph((2,), 64, 5, 64, 64, scale="none"), FLASH),
    "causal-d64": (attention_graph((2,), 200, 200, 64, 64, causal=True), FLASH),
    "causal-d128-bf16": (attention_graph((1,), 300, 300, 128, 128, "bf16", causal=True), FLASH),
    # GPT-2 as exported: head split copies, then the flash kernel with its causal mask
    "exported-gpt2-causal": (exported_attention_graph(2, 200, 3, 64), FLASH),
    # nn.MultiheadAttention sequence-first (ViT at batch > 1): its [B,S,E] <-> [S,B,E]
    # transposes moved across the projections into the kernel's strides (attention-layout)
    "sequence-first-mha-b4": (sequence_first_mha_graph(4, 77, 4, 64), FLASH),
    "sequence-first-mha-b3-d128-bf16": (sequence_first_mha_graph(3, 130, 2, 128, "bf16"), FLASH),
    # what the kernel cannot take runs through PyTorch, and says why
    "head-32-fallback": (attention_graph((2,), 70, 90, 32, 32), "head sizes 32/32"),
    "f32-fallback": (attention_graph((2,), 70, 90, 64, 64, "f32"), "f32 attention"),
}


#: issue 28: q, k and v read from the projections' [B, S, H*D] layout by the tensor maps
#: (no head split copies), K/V heads of GQA/MQA at h // group (no expand), the output
#: stored as the head merge's [B, S, H*D] (no merge copy): the whole graph one kernel
IN_PLACE = {
    "mha-odd-length": strided_attention_graph(2, 77, 4, 4, 64),
    "gqa-group-2-causal": strided_attention_graph(2, 200, 8, 4, 64, causal=True),
    "gqa-group-4-packed-d128": strided_attention_graph(1, 131, 8, 2, 128, packed=True),
    "gqa-group-8-bf16": strided_attention_graph(2, 257, 8, 1, 64, "bf16"),
    "gqa-group-2-packed-causal-short": strided_attention_graph(
        3, 45, 4, 2, 64, packed=True, causal=True
    ),
    "gqa-group-1-packed-d128-bf16": strided_attention_graph(2, 129, 2, 2, 128, "bf16", packed=True),
    "batch-of-three-strides": scattered_heads_graph(2, 70, 3, 2, 64),  # 5-D tensor maps
}


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_heads_read_and_merged_in_place_match_reference(name: str) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    compiled = fusec.compile(IN_PLACE[name], target="cuda")
    assert [k.kind for k in compiled.kernels] == ["attention"], "no copy kernel"
    header = _attention_header(compiled)
    assert FLASH in header and "read and written in place through strides" in header
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


def _attention_header(compiled) -> str:
    (kernel,) = [k for k in compiled.kernels if k.kind == "attention"]
    return kernel.source.split("\n\n")[0]


@pytest.mark.parametrize("name", list(CASES))
def test_attention_matches_reference(name: str) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    text, route = CASES[name]
    compiled = fusec.compile(text, target="cuda")
    assert route in _attention_header(compiled)
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


def test_traced_attention_runs_the_flash_kernel() -> None:
    """softmax(q @ k^T / 8) @ v traced from Python (k^T as a transpose): one flash kernel."""
    torch = pytest.importorskip("torch")
    import fusec
    from fusec import ops as fops

    @fusec.fuse(target="cuda")
    def attention(q, k, v):
        scores = q @ fops.transpose(k, (0, 2, 1))
        return fops.softmax(scores / 8.0) @ v

    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (
        torch.randn(4, 256, 64, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3)
    )
    (kernel,) = attention.kernels(q, k, v)
    assert kernel.kind == "attention" and FLASH in kernel.source.split("\n\n")[0]
    out = attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), scale=0.125
    )
    assert_close(out.float().cpu().numpy(), ref.cpu().numpy(), "f16", what="traced attention")


def test_attention_on_the_callers_stream() -> None:
    torch = pytest.importorskip("torch")
    import fusec

    compiled = fusec.compile(attention_graph((8,), 512, 512, 64, 64), target="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(8, 512, 64, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3)
    )
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = compiled(q, k, v)  # queued on `side`, no synchronisation inside
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125)
        got, want = out.float().cpu().numpy(), ref.float().cpu().numpy()  # read on `side`
    assert_close(got, want, "f16", what="fused attention vs SDPA")


def test_nan_rows_are_zero_when_the_graph_guards_the_probabilities() -> None:
    """PyTorch's exported attention sets NaN probabilities to 0 (``nan_to_zero``): a NaN in
    one query makes its row of scores NaN, so that row of the output is 0, not NaN."""
    import numpy as np

    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    compiled = fusec.compile(exported_attention_graph(1, 64, 2, 64), target="cuda")
    assert "NaN rows to 0" in _attention_header(compiled)
    args = random_inputs(entry_function(compiled.module), seed=3)
    args[0][0, 5, 3] = np.nan  # query 5 of head 0
    (out,) = compiled._runner(args, poison=True)
    (ref,) = run_reference(compiled.module, args, rounding="groups")
    assert np.all(ref[0, 5, :64] == 0) and not np.isnan(ref).any()
    assert_close(out, ref, what="NaN query row")
