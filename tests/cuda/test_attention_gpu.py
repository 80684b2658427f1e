"""The fused attention kernel on the GPU vs the float64 reference (skipped without a GPU).

Graphs go through ``fusec.compile(target="cuda")`` (``fuse-attention`` forms
the attention group for the cuda target) on fresh random inputs with the output poisoned
(NaN) first; the kernel header must name the fused kernel, so a case cannot
pass on the PyTorch fallback.
"""

from __future__ import annotations

import pytest
from attention_cases import attention_graph
from numerics import assert_close

pytestmark = pytest.mark.gpu

CASES = {
    "ragged-q-and-k-d64-dv128": attention_graph((3,), 200, 300, 64, 128),
    "4d-batch-d128-bf16-div": attention_graph((2, 3), 130, 130, 128, 128, "bf16", scale="div"),
    "short-keys-no-scale": attention_graph((2,), 64, 5, 64, 64, scale="none"),
    "causal-d64": attention_graph((2,), 200, 200, 64, 64, causal=True),
    "causal-d128-bf16": attention_graph((1,), 300, 300, 128, 128, "bf16", causal=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_attention_matches_reference(name: str) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.runtime.runner import random_inputs

    compiled = fusec.compile(CASES[name], target="cuda")
    (kernel,) = compiled.kernels
    assert "fused flash-style attention" in kernel.source.split("\n\n")[0]
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


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
