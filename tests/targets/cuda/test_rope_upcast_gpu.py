"""Issue 28 on the GPU vs the reference (skipped without a GPU): Llama's RoPE on the
projection's rows with the head split read by the flash kernel (``sink-transposes``),
and the TorchScript exporter's upcast f16 attention run as the f16 flash kernel with its
f32 tail in f16 (``recognize_attention``, ``demote-upcasts``). Fresh random inputs,
outputs poisoned (NaN) first; the kernels' headers must show the route (no copy kernel,
the flash kernel, no PyTorch fallback), so a case cannot pass on another one."""

from __future__ import annotations

from pathlib import Path

import pytest
from numerics import assert_close

pytestmark = pytest.mark.gpu

FLASH = "fused flash-style attention"


def _rope_gqa(batch: int, seq: int, heads: int, kv_heads: int, dtype: str) -> str:
    """HF Llama's attention inputs: Q/K projections split into heads before RoPE, cos/sin
    [1, 1, S, 64], K and V repeated over the query heads (GQA), head size 64."""
    d, group = 64, heads // kv_heads
    t = f"x{dtype}>"
    q, k = f"tensor<{batch}x{heads}x{seq}x{d}{t}", f"tensor<{batch}x{kv_heads}x{seq}x{d}{t}"
    cs = f"tensor<1x1x{seq}x{d}{t}"
    xq, xk = f"tensor<{batch}x{seq}x{heads * d}{t}", f"tensor<{batch}x{seq}x{kv_heads * d}{t}"
    sq, sk = f"tensor<{batch}x{seq}x{heads}x{d}{t}", f"tensor<{batch}x{seq}x{kv_heads}x{d}{t}"
    k1, k2 = (
        f"tensor<{batch}x{kv_heads}x1x{seq}x{d}{t}",
        f"tensor<{batch}x{kv_heads}x{group}x{seq}x{d}{t}",
    )
    rep = f"{batch}, {kv_heads}, {group}, {seq}, {d}"
    perm = "{perm = array<i64: 0, 2, 1, 3>}"
    return f"""
func.func @f(%xq: {xq}, %xk: {xk}, %v: {q}, %cos: {cs}, %sin: {cs}) -> {q} {{
  %q0 = ai.reshape %xq {{shape = array<i64: {batch}, {seq}, {heads}, {d}>}} : {xq}
  %q = ai.transpose %q0 {perm} : {sq}
  %k0 = ai.reshape %xk {{shape = array<i64: {batch}, {seq}, {kv_heads}, {d}>}} : {xk}
  %k = ai.transpose %k0 {perm} : {sk}
  %qa = ai.mul %q, %cos : {q} * {cs}
  %qr = ai.rotate_half %q : {q}
  %qb = ai.mul %qr, %sin : {q} * {cs}
  %qe = ai.add %qa, %qb : {q} * {q}
  %ka = ai.mul %k, %cos : {k} * {cs}
  %kr = ai.rotate_half %k : {k}
  %kb = ai.mul %kr, %sin : {k} * {cs}
  %ke = ai.add %ka, %kb : {k} * {k}
  %k1 = ai.reshape %ke {{shape = array<i64: {batch}, {kv_heads}, 1, {seq}, {d}>}} : {k}
  %k2 = ai.expand %k1 {{shape = array<i64: {rep}>}} : {k1}
  %k3 = ai.reshape %k2 {{shape = array<i64: {batch}, {heads}, {seq}, {d}>}} : {k2}
  %z = arith.constant dense<0.000000e+00> : tensor<{dtype}>
  %r = ai.attention %qe, %k3, %v, %z {{scale = 1.25e-01 : f32}} : {q} * {q} * {q} * tensor<{dtype}>
  return %r : {q}
}}
"""


#: the TorchScript exporter's chain (f16, head size 64, a causal f32 mask), the FileCheck
#: test's input
UPCAST = (
    Path(__file__).resolve().parents[2] / "passes/filecheck/recognize/upcast_attention.mlir"
).read_text()

CASES = {
    "rope-gqa-f16": _rope_gqa(2, 77, 4, 2, "f16"),
    "rope-gqa-bf16-long": _rope_gqa(1, 200, 8, 2, "bf16"),
    "torchscript-upcast-attention": UPCAST,
}

#: the element type each case computes in, which sets its tolerance: the upcast chain's
#: result is declared f32, but demote-upcasts runs it in f16 up to the final cast (the
#: FileCheck test pins that), so the flash kernel's f16 rounding order shows at f16 scale
COMPUTES_IN = {"torchscript-upcast-attention": "f16"}


def _headers(compiled) -> list[str]:
    return [
        "\n".join(line for line in k.source.splitlines()[:60] if line.startswith("#"))
        for k in compiled.kernels
    ]


@pytest.mark.parametrize("name", list(CASES))
def test_issue28_attention_routes_match_reference(name: str) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    compiled = fusec.compile(CASES[name], target="cuda")
    kinds = [k.kind for k in compiled.kernels]
    assert "copy" not in kinds, kinds
    headers = _headers(compiled)
    assert not [h for h in headers if "FALLBACK" in h], headers
    assert sum(FLASH in h for h in headers) == 1, headers
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, COMPUTES_IN.get(name), what=f"{name}, seed {seed}")
