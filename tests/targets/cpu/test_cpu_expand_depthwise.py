"""``cpu-expand-depthwise``: a 1x1 expansion and the depthwise conv reading it, one kernel
(issue #30; ``fusec.targets.cpu.expand_depthwise``, ``conv.planes.ExpandDepthwiseBlocks``).

Numerics: poisoned outputs on fresh random inputs against the float64 reference
(``cpu_check.check``); the pass's decisions: which pairs it joins and which it leaves."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check, poison

from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.targets.cpu.expand_depthwise import expansion_of
from fusec.tools.runner import random_inputs


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _t(*shape: int) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


_ACTIVATIONS = {
    "relu": ["%{o} = ai.relu %{i} : {t}"],
    "hard_swish": ["%{o} = ai.hard_swish %{i} : {t}"],
    "silu": ["%{o}s = ai.sigmoid %{i} : {t}", "%{o} = ai.mul %{i}, %{o}s : {t} * {t}"],
    "none": [],
}


def block(
    n: int = 1,
    c: int = 16,
    hw: int = 32,
    k: int = 64,
    r: int = 3,
    stride: int = 2,
    act: str = "relu",
    out_act: str = "hard_swish",
    second_reader: bool = False,
) -> str:
    """A MobileNet block's first half: 1x1 conv ``c -> k`` + bias + ``act``, then a depthwise
    ``r x r`` conv (``stride``, same padding) + bias + ``out_act``; with ``second_reader``
    the expansion's result is a function result too."""
    oh = (hw + 2 * (r // 2) - r) // stride + 1
    tx, te, to = _t(n, c, hw, hw), _t(n, k, hw, hw), _t(n, k, oh, oh)
    lines = [
        f"%c = ai.conv2d %x, %w1 : {tx} * {_t(k, c, 1, 1)}",
        f"%cb = ai.bias_add %c, %b1 : {te} * {_t(k)}",
    ]
    cur = "cb"
    for line in _ACTIVATIONS[act]:
        lines.append(line.format(o="e", i=cur, t=te))
    cur = "e" if _ACTIVATIONS[act] else cur
    pad = r // 2
    lines += [
        f"%d = ai.conv2d %{cur}, %w2 {{strides = array<i64: {stride}, {stride}>, padding = "
        f"array<i64: {pad}, {pad}>, groups = {k} : i64}} : {te} * {_t(k, 1, r, r)}",
        f"%db = ai.bias_add %d, %b2 : {to} * {_t(k)}",
    ]
    out = "db"
    for line in _ACTIVATIONS[out_act]:
        lines.append(line.format(o="y", i="db", t=to))
    out = "y" if _ACTIVATIONS[out_act] else out
    args = f"%x: {tx}, %w1: {_t(k, c, 1, 1)}, %b1: {_t(k)}, %w2: {_t(k, 1, r, r)}, %b2: {_t(k)}"
    results, returns = to, f"%{out} : {to}"
    if second_reader:
        results, returns = f"{to}, {te}", f"%{out}, %{cur} : {to}, {te}"
    body = "\n  ".join(lines)
    return f"func.func @mb({args}) -> ({results}) {{\n  {body}\n  return {returns}\n}}\n"


def _groups(text: str, pipeline: str = "fusec-cpu") -> list[ai.FusedOp]:
    module = parse(text)
    run_pipeline(module, pipeline)
    return [op for op in module.walk() if isinstance(op, ai.FusedOp)]


def test_default_pipeline_keeps_two_kernels():
    assert [g.kind_name for g in _groups(block(), "fusec-default")] == ["conv", "conv"]


def test_an_expansion_read_elsewhere_is_not_joined():
    groups = _groups(block(second_reader=True))
    assert len(groups) == 2 and not any(expansion_of(g) for g in groups)


def test_small_planes_take_the_lanes_form_and_are_not_joined():
    # 16x16 planes at stride 2: 8-pixel output rows, the depthwise conv's lanes form
    assert len(_groups(block(hw=16))) == 2


def test_a_strided_first_conv_is_not_an_expansion():
    unpadded = block().replace(
        "ai.conv2d %x, %w1 :", "ai.conv2d %x, %w1 {padding = array<i64: 0, 0>} :"
    )
    assert len(_groups(unpadded)) == 1  # zero padding is no padding
    strided = block().replace(
        "ai.conv2d %x, %w1 :", "ai.conv2d %x, %w1 {strides = array<i64: 2, 2>} :"
    )
    strided = strided.replace(_t(1, 16, 32, 32), _t(1, 16, 64, 64))
    assert len(_groups(strided)) == 2


def _hand_fused(relu_first: bool) -> str:
    """An expansion group and a depthwise group fused by hand; the depthwise group also
    computes a relu of another input, before its conv (``relu_first``) or after it."""
    te, tx, to = _t(1, 64, 32, 32), _t(1, 16, 32, 32), _t(1, 64, 16, 16)
    tw, tb, td = _t(64, 16, 1, 1), _t(64), _t(64, 1, 3, 3)
    dw = "strides = array<i64: 2, 2>, padding = array<i64: 1, 1>, groups = 64 : i64"
    relu = f"    %r = ai.relu %t : {to}"
    conv = f"    %d = ai.conv2d %v, %w {{{dw}}} : {te} * {td}"
    body = [relu, conv] if relu_first else [conv, relu]
    lines = [
        f"func.func @f(%x: {tx}, %w1: {tw}, %b1: {tb}, %w2: {td}, %s: {to}) -> {to} {{",
        f'  %e = ai.fused "conv" (%x, %w1, %b1) : ({tx}, {tw}, {tb}) -> {te} {{',
        f"  ^bb0(%a: {tx}, %w: {tw}, %b: {tb}):",
        f"    %c = ai.conv2d %a, %w : {tx} * {tw}",
        f"    %cb = ai.bias_add %c, %b : {te} * {tb}",
        f"    ai.yield %cb : {te}",
        "  }",
        f'  %y = ai.fused "conv" (%s, %e, %w2) : ({to}, {te}, {td}) -> {to} {{',
        f"  ^bb0(%t: {to}, %v: {te}, %w: {td}):",
        *body,
        f"    %o = ai.add %d, %r : {to} * {to}",
        f"    ai.yield %o : {to}",
        "  }",
        f"  return %y : {to}",
        "}",
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("relu_first", "groups"), [(True, 2), (False, 1)])
def test_a_depthwise_group_led_by_another_op_is_not_joined(relu_first, groups):
    """The joined group must be the expansion's ops, then the depthwise group's led by its
    conv (the conv template's rule, ``expansion_of``): a depthwise group computing another
    value first is left apart."""
    module = parse(_hand_fused(relu_first))
    run_pipeline(module, "cpu-expand-depthwise")
    fused = [op for op in module.walk() if isinstance(op, ai.FusedOp)]
    assert len(fused) == groups
    assert (expansion_of(fused[-1]) is not None) == (groups == 1)


# ---- numerics (compiled kernels; after the pass's decisions, which cost no compile)


@pytest.mark.parametrize(
    ("n", "c", "hw", "k", "r", "stride", "act", "out_act"),
    [
        (1, 16, 32, 64, 3, 2, "relu", "hard_swish"),  # MobileNetV3's, a quarter the plane
        (2, 16, 32, 40, 3, 1, "silu", "silu"),  # 40: the last block 8 planes
        (1, 24, 32, 72, 5, 2, "hard_swish", "none"),
        (3, 8, 33, 24, 3, 2, "none", "relu"),  # odd planes: a ragged last vector
    ],
)
def test_the_joined_kernel_matches_the_reference(n, c, hw, k, r, stride, act, out_act, cache):
    text = block(n, c, hw, k, r, stride, act, out_act)
    module = parse(text)
    run_pipeline(module, "fusec-cpu")
    groups = [op for op in module.walk() if isinstance(op, ai.FusedOp)]
    assert [g.kind_name for g in groups] == ["conv"]
    assert expansion_of(groups[0]) is not None
    program = check(str(module), cache=cache)
    header = program.kernels[0].source
    assert "the 1x1 expansion" in header and "gemm_nn(g1 - g" in header


def test_nan_and_inf_reach_the_result_as_in_the_reference(cache):
    module = parse(block(1, 16, 32, 32, 3, 2, "relu", "none"))
    run_pipeline(module, "fusec-cpu")
    inputs = random_inputs(entry_function(module), 3)
    inputs[0][0, 0, 5, 7] = np.nan  # every expanded channel of that pixel is NaN
    inputs[0][0, 1, 20, 3] = np.inf
    got = Program(module, target="cpu", cache=cache)(inputs, alloc=poison)[0]
    want = run_reference(module, inputs, precision="float64")[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)
