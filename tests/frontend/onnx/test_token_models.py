"""Token-id transformers (issue 29): ``input_ids`` and ``attention_mask`` inputs, as the
exporters write them (``token_models``), import and match onnxruntime on the reference
and cpu targets; the masks computed from ``attention_mask`` at run time still reach the
attention recognizer (one ``ai.attention`` per layer), as the constant masks did."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from numerics import assert_close
from onnx_nets import run_onnxruntime
from token_models import token_feeds, token_model

import fusec

CASES = {
    # id: (kind, kv_heads, positions)
    "bert": ("bert", None, "buffer"),
    "gpt2_cumsum_positions": ("gpt2", None, "cumsum"),
    "llama_gqa_expand": ("gpt2", 2, "buffer"),
}


def _ops(module) -> Counter:
    return Counter(op.name for op in module.walk() if op.name.startswith("ai."))


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("bert", marks=pytest.mark.slow),  # ~10 s of kernels cold
        pytest.param("gpt2_cumsum_positions", marks=pytest.mark.slow),
        pytest.param("llama_gqa_expand", marks=pytest.mark.slow),
    ],
)
def test_token_model_matches_onnxruntime_on_cpu(case):
    kind, kv_heads, positions = CASES[case]
    model = token_model(kind, kv_heads=kv_heads, positions=positions)
    feeds = token_feeds(model)
    (want,) = run_onnxruntime(model, feeds)
    module = fusec.from_onnx(model)
    assert _ops(module)["ai.take"] >= 1  # the lookup runs at the ids given
    for target in ("reference", "cpu"):
        compiled = fusec.compile(module, target=target)
        got = compiled(*feeds.values())
        assert got.dtype == np.float32 and not np.isnan(got).any()
        assert_close(got, want, what=f"{case} on {target}")
    assert _ops(compiled.module)["ai.attention"] == 1, "the run-time mask reached attention"


def test_padding_changes_the_result_where_the_mask_says():
    """The mask is data: flipping one padded position changes exactly the rows that
    may see it (a constant folded at import could not)."""
    model = token_model("bert")
    feeds = token_feeds(model)
    compiled = fusec.compile(fusec.from_onnx(model), target="reference")
    base = compiled(*feeds.values())
    mask = feeds["attention_mask"].copy()
    mask[0, -1] = 1  # row 0 was padded on the right
    changed = compiled(feeds["input_ids"], mask)
    differs = np.abs(changed - base).max(axis=-1) > 0
    assert differs[0].all() and not differs[1:].any()
    (want,) = run_onnxruntime(model, {"input_ids": feeds["input_ids"], "attention_mask": mask})
    assert_close(changed, want)


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_token_model_matches_onnxruntime_on_cuda(case):
    """On the GPU: the lookups and the integer mask maths run through PyTorch in their
    own types, the rest as cuda kernels; the results match onnxruntime at f32 tolerance,
    with poisoned outputs."""
    kind, kv_heads, positions = CASES[case]
    model = token_model(kind, kv_heads=kv_heads, positions=positions)
    feeds = token_feeds(model)
    (want,) = run_onnxruntime(model, feeds)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    (got,) = compiled._runner(list(feeds.values()), poison=True)
    assert got.dtype == np.float32 and not np.isnan(got).any()
    assert_close(got, want, what=f"{case} on cuda")
