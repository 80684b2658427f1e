"""ConvNeXt's channels-last blocks and the NHWC depthwise kernel on the GPU (issue 28).

Every case is compiled for cuda and run on fresh random inputs with every output
poisoned (NaN) before the launch, compared with the float64 reference rounded where the
kernels round (``rounding="groups"``, ``numerics.assert_close``). The kernel headers are
asserted, so a case cannot silently test another route. Without a GPU these are skipped;
``test_conv_depthwise_nhwc.py`` checks the same without one (the pass, the IR, the
kernel's C++ on the host)."""

from __future__ import annotations

import pytest
from numerics import assert_close
from test_conv_depthwise_nhwc import _t, convnext_stage, mobilenet_block, squeeze_excite_head

pytestmark = pytest.mark.gpu

NHWC = "direct conv2d channels-last"


def _run(text: str, what: str, nhwc_kernels: int):
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    compiled = fusec.compile(text, target="cuda")
    found = [k for k in compiled.kernels if k.kind == "conv" and NHWC in k.source]
    assert len(found) == nhwc_kernels, [k.source.split("\n\n")[0] for k in compiled.kernels]
    assert not any(k.runs_op_by_op for k in compiled.kernels)
    for seed in (0, 1):  # fresh inputs: a second draw catches stale or unwritten outputs
        args = random_inputs(entry_function(compiled.module), seed=seed)
        outs = compiled._runner(args, poison=True)
        refs = run_reference(compiled.module, args, rounding="groups")
        for k, (out, ref) in enumerate(zip(outs, refs, strict=True)):
            assert_close(out, ref, what=f"{what}, result {k}, seed {seed}")
    return compiled


#: (blocks, channels, output size, type, batch, head): ConvNeXt-T's stage shapes, smaller
STAGES = {
    "stage1-96ch-56px-f16": (1, 96, 56, "f16", 2, False),
    "stage2-192ch-28px-bf16": (2, 192, 28, "bf16", 2, True),
    "stage3-384ch-14px-f16": (3, 384, 14, "f16", 4, True),
    "stage4-768ch-7px-bf16": (2, 768, 7, "bf16", 8, True),
    "odd-size-40ch-9px-f16": (2, 40, 9, "f16", 3, False),
}


@pytest.mark.parametrize("name", list(STAGES))
def test_convnext_stage_channels_last_matches_reference(name: str) -> None:
    blocks, c, hw, t, n, head = STAGES[name]
    compiled = _run(convnext_stage(blocks, c, hw, t=t, n=n, head=head), name, blocks)
    # the layer scale and residual add run in the second Linear's GEMM epilogue
    assert "pointwise" not in [k.kind for k in compiled.kernels]


def test_convnext_stage_with_the_old_layout_matches_reference(monkeypatch) -> None:
    """``$FUSEC_CONV_DEPTHWISE=nchw`` (the A/B baseline): the NCHW direct kernel."""
    monkeypatch.setenv("FUSEC_CONV_DEPTHWISE", "nchw")
    _run(convnext_stage(2, 96, 14, n=2), "nchw baseline", 0)


def relaid_depthwise(n, c, h, w, k, stride, dil, pad, t="f16") -> str:
    """One depthwise conv group (+ bias) NHWC in and out, as the channels-last pass
    writes it."""
    p = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    q = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    t_in, t_out, tw, tb = _t((n, h, w, c), t), _t((n, p, q, c), t), _t((c, 1, k, k), t), _t((c,), t)
    x_nchw, y_nchw = _t((n, c, h, w), t), _t((n, c, p, q), t)
    layout = '{fusec.layout = {input = "nhwc", output = "nhwc"}}'
    return f"""func.func @dw(%x: {t_in}, %w: {tw}, %b: {tb}) -> {t_out} {{
  %r = ai.fused "conv" (%x, %w, %b) {layout} : ({t_in}, {tw}, {tb}) -> {t_out} {{
  ^bb0(%x1: {t_in}, %w1: {tw}, %b1: {tb}):
    %v = ai.transpose %x1 {{perm = array<i64: 0, 3, 1, 2>}} : {t_in}
    %cv = ai.conv2d %v, %w1 {{strides = array<i64: {stride}, {stride}>, dilations = array<i64: {dil}, {dil}>, padding = array<i64: {pad}, {pad}>, groups = {c} : i64}} : {x_nchw} * {tw}
    %cb = ai.bias_add %cv, %b1 : {y_nchw} * {tb}
    %o = ai.transpose %cb {{perm = array<i64: 0, 2, 3, 1>}} : {y_nchw}
    ai.yield %o : {t_out}
  }}
  return %r : {t_out}
}}
"""  # noqa: E501


#: (n, c, h, w, k, stride, dilation, padding, type)
GROUPS = {
    "convnext-7x7-96ch": (4, 96, 56, 56, 7, 1, 1, 3, "f16"),
    "odd-channels-3x3": (2, 5, 13, 11, 3, 1, 1, 1, "bf16"),
    "stride2-5x5-ragged": (2, 50, 17, 19, 5, 2, 1, 2, "f16"),
    "dilated-3x3": (1, 64, 20, 20, 3, 1, 2, 2, "bf16"),
    "many-channel-tiles": (1, 1000, 10, 10, 7, 1, 1, 3, "f16"),
}


@pytest.mark.parametrize("name", list(GROUPS))
def test_nhwc_depthwise_group_matches_reference(name: str) -> None:
    _run(relaid_depthwise(*GROUPS[name]), name, 1)


@pytest.mark.parametrize("t", ["f16", "bf16"])
def test_mobilenet_block_depthwise_nhwc_matches_reference(t: str) -> None:
    """A depthwise conv with a ReLU epilogue between two implicit-GEMM 1x1 convs, relaid."""
    _run(mobilenet_block(64, 28, t=t, n=2), f"mobilenet block {t}", 1)


@pytest.mark.parametrize("t", ["f16", "bf16"])
def test_order_keeping_conversions_as_views_match_reference(t: str) -> None:
    """The pooled value's and the 1x1 weights' conversions are views (aliases) on the GPU."""
    _run(squeeze_excite_head(4, 64, 14, t=t), f"squeeze-excite head {t}", 0)
