"""GPU tests of the GEMM's split-K (``TileConfig.split_k``, ``gemm.cuh``: gemm_split_reduce).

Each case forces a split tile with the ``tile-gemm`` pass option and is compared with the
float64 reference on fresh random inputs, output poisoned (NaN) first (``test_gemm_gpu``'s
``_check``): ragged M, N and K, more splits than K steps (empty splits add zeros), the
two-consumer tile with the staged epilogue and an f32 output, bias + GELU, a residual, a
LayerNorm prologue (its rewrite applied to the reduced sum), batches. Then the counters:
one compiled GEMM called again and again (the last split of each tile resets its counter)
gives the same bits every call (the splits are added in split order, whichever is last),
and the heuristic's own split of BERT's batch-1 projection matches the reference.
"""

from __future__ import annotations

import pytest
from test_gemm_gpu import GELU, _check, _inputs, bias, matmul_ir
from test_gemm_variants_gpu import _with_residual

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _forced(tile: str) -> str:
    return f'fusec-default,tile-gemm{{tile="{tile}"}}'


def _split_of(text: str, pipeline: str | None) -> int:
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    compiled = fusec.compile(text, target="cuda", pipeline=pipeline, executable=False)
    (gemm,) = [s for k in compiled.kernels for s in linked_specs(k) if hasattr(s, "config")]
    return gemm.config.split_k


CASES = {
    # (ir, dtype, tile)
    "bert-down-f16-sk8": (
        matmul_ir(128, 768, 3072, "f16", tail=(bias(768, "f16"), GELU)),
        "f16",
        "64x128x64 s8 c1 g8 sk=8",
    ),
    "ragged-bf16-sk5": (matmul_ir(100, 300, 1000, "bf16"), "bf16", "64x128x64 s8 c1 g8 sk=5"),
    "empty-splits-sk6": (matmul_ir(70, 256, 130, "f16"), "f16", "64x128x64 s8 c1 g8 sk=6"),
    "two-consumers-smem-sk3": (
        matmul_ir(256, 512, 2048, "f16", tb=True, tail=(bias(512, "f16"),)),
        "f16",
        "128x128x64 s5 c2 g8 epi=smem math=fast sk=3",
    ),
    "residual-sk4": (_with_residual(128, 768, 768), "f16", "64x128x64 s8 c1 g8 sk=4"),
    "layernorm-prologue-sk4": (
        matmul_ir(128, 768, 768, "f16", ln=True, tail=(bias(768, "f16"), GELU)),
        "f16",
        "64x128x64 s8 c1 g8 sk=4",
    ),
    "batched-sk3": (
        matmul_ir(96, 200, 640, "bf16", batch=(3,), batch_b=True),
        "bf16",
        "64x128x64 s8 c1 g8 sk=3",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_split_k_matches_reference(name: str) -> None:
    text, dtype, tile = CASES[name]
    assert _split_of(text, _forced(tile)) > 1  # the split reached the kernel
    for seed in (0, 1):
        _check(text, dtype, seed, pipeline=_forced(tile))


def test_split_k_f32_output() -> None:
    text = """func.func @g(%a: tensor<128x1536xf16>, %b: tensor<1536x320xf16>)
        -> tensor<128x320xf32> {
  %v0 = ai.matmul %a, %b : tensor<128x1536xf16> * tensor<1536x320xf16>
  %v1 = ai.cast %v0 : tensor<128x320xf16> to tensor<128x320xf32>
  return %v1 : tensor<128x320xf32>
}
"""
    _check(text, "f16", pipeline=_forced("128x128x64 s5 c2 g8 epi=smem sk=4"))


def test_the_heuristic_splits_bert_batch_one_projections(monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_SPLIT_K", "on")
    text = matmul_ir(128, 768, 3072, "f16", tail=(bias(768, "f16"),))
    assert _split_of(text, None) == 3  # 48 K steps, >= 16 a split
    _check(text, "f16")


def test_repeated_calls_give_the_same_bits() -> None:
    """The counters reset themselves (no memset per call) and the sum's order is fixed."""
    import fusec

    text = matmul_ir(128, 768, 3072, "f16", tail=(bias(768, "f16"),))
    compiled = fusec.compile(text, target="cuda", pipeline=_forced("64x128x64 s8 c1 g8 sk=8"))
    tensors = _inputs(compiled, "f16", 3)
    first = compiled._runner(tensors, poison=True)[0].clone()
    for _ in range(20):
        (again,) = compiled._runner(tensors, poison=True)
        assert torch.equal(again, first)
    assert not torch.isnan(first).any()
