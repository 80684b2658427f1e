"""``cpu-channels-last`` and the channels-last depthwise conv kernel (issue #30).

The pass (``fusec.targets.cpu.channels_last``) relays ConvNeXt-style stages NHWC so that the
NCHW <-> NHWC copy groups around each block go; the conv template runs the relaid depthwise
groups in ``fusec.targets.cpu.depthwise_nhwc``. Numerics: poisoned outputs on fresh random
inputs against the float64 reference (``cpu_check.check``); NaN and Inf where the reference
has them. The pass's decisions: which groups it relays and how many copies are left."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check, poison

from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.errors import FusecError
from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.targets.cpu import depthwise_nhwc
from fusec.tools.runner import random_inputs


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _t(*shape: int) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def stage(blocks: int, c: int, hw: int, k: int = 7, n: int = 1, norm: bool = True) -> str:
    """``blocks`` ConvNeXt blocks: depthwise k x k + bias (NCHW), permute to NHWC,
    LayerNorm (when ``norm``), Linear, GELU, Linear, permute back, a constant layer scale
    (c x 1 x 1) and the residual add."""
    t, tl, th, tc = _t(n, c, hw, hw), _t(n, hw, hw, c), _t(n, hw, hw, 2 * c), _t(c)
    tw = _t(c, 1, k, k)
    scale = ", ".join(f"[[{0.25 + i / (2 * c)}]]" for i in range(c))
    lines = [f"%s = arith.constant dense<[{scale}]> : {_t(c, 1, 1)}"]
    args = [f"%x: {t}", f"%lw: {tc}", f"%lb: {tc}"]
    cur = "%x"
    for i in range(blocks):
        args += [
            f"%w{i}: {tw}",
            f"%b{i}: {tc}",
            f"%wa{i}: {_t(c, 2 * c)}",
            f"%wb{i}: {_t(2 * c, c)}",
        ]
        a = f"%p{i}"
        lines += [
            f"%c{i} = ai.conv2d {cur}, %w{i} {{padding = array<i64: {k // 2}, {k // 2}>, "
            f"groups = {c} : i64}} : {t} * {tw}",
            f"%cb{i} = ai.bias_add %c{i}, %b{i} : {t} * {tc}",
            f"%p{i} = ai.transpose %cb{i} {{perm = array<i64: 0, 2, 3, 1>}} : {t}",
        ]
        if norm:
            lines.append(
                f"%l{i} = ai.layernorm %p{i}, %lw, %lb {{epsilon = 1.0e-06 : f32}} : "
                f"{tl} * {tc} * {tc}"
            )
            a = f"%l{i}"
        lines += [
            f"%m{i} = ai.matmul {a}, %wa{i} : {tl} * {_t(c, 2 * c)}",
            f"%g{i} = ai.gelu %m{i} : {th}",
            f"%n{i} = ai.matmul %g{i}, %wb{i} : {th} * {_t(2 * c, c)}",
            f"%q{i} = ai.transpose %n{i} {{perm = array<i64: 0, 3, 1, 2>}} : {tl}",
            f"%sq{i} = ai.mul %s, %q{i} : {_t(c, 1, 1)} * {t}",
            f"%r{i} = ai.add %sq{i}, {cur} : {t} * {t}",
        ]
        cur = f"%r{i}"
    body = "\n  ".join(lines)
    return f"func.func @stage({', '.join(args)}) -> {t} {{\n  {body}\n  return {cur} : {t}\n}}\n"


def _groups(module) -> list[ai.FusedOp]:
    return [op for op in module.walk() if isinstance(op, ai.FusedOp)]


def _compiled(text: str):
    module = parse(text)
    run_pipeline(module, "fusec-cpu")
    return module


@pytest.mark.slow  # compiles four to six matmul kernels: 11-15 s each on 2 cores
@pytest.mark.parametrize(
    ("blocks", "c", "hw", "k", "n"),
    [(2, 32, 8, 7, 1), (3, 40, 9, 3, 2)],  # 40: a block of 8 channels (lanes past them)
)
def test_stage_runs_channels_last(blocks, c, hw, k, n, cache):
    module = _compiled(stage(blocks, c, hw, k, n))
    groups = _groups(module)
    relaid = [g for g in groups if "fusec.layout" in g.attributes]
    assert len(relaid) == 2 * blocks  # each block's depthwise conv and residual add
    # the graph's input converted once, its result once: 2 of the 2 * blocks copies left
    assert [g.kind_name for g in groups].count("copy") == 2
    check(str(module), cache=cache)


def test_a_stage_of_two_blocks_keeps_two_copies():
    """The pass's fact without running kernels (the slow test above runs them)."""
    groups = _groups(_compiled(stage(2, 32, 8)))
    assert sum("fusec.layout" in g.attributes for g in groups) == 4
    assert [g.kind_name for g in groups].count("copy") == 2


def test_one_block_is_left_as_it_is(cache):
    """One block: relaying converts the input and the result, as many copies as it saves."""
    module = _compiled(stage(1, 32, 8))
    assert not any("fusec.layout" in g.attributes for g in _groups(module))
    assert [g.kind_name for g in _groups(module)].count("copy") == 2


def test_mobilenet_depthwise_between_1x1_convs_is_left_as_it_is():
    t, tw = _t(1, 32, 8, 8), _t(32, 1, 3, 3)
    t1 = _t(32, 32, 1, 1)
    text = f"""func.func @mb(%x: {t}, %a: {t1}, %w: {tw}, %b: {t1}) -> {t} {{
  %0 = ai.conv2d %x, %a : {t} * {t1}
  %1 = ai.relu %0 : {t}
  %2 = ai.conv2d %1, %w {{padding = array<i64: 1, 1>, groups = 32 : i64}} : {t} * {tw}
  %3 = ai.relu %2 : {t}
  %4 = ai.conv2d %3, %b : {t} * {t1}
  return %4 : {t}
}}
"""
    module = _compiled(text)
    assert not any("fusec.layout" in g.attributes for g in _groups(module))
    assert "copy" not in [g.kind_name for g in _groups(module)]


def dw_group(n, c, h, k, stride=1, dilation=1, pad=None, bias=True, constant=False) -> str:
    """One relaid depthwise conv group, as ``cpu-channels-last`` writes it."""
    pad = k // 2 * dilation if pad is None else pad
    oh = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    t_in, t_out, tw = _t(n, h, h, c), _t(n, oh, oh, c), _t(c, 1, k, k)
    x_nchw, y_nchw = _t(n, c, h, h), _t(n, c, oh, oh)
    rng = np.random.default_rng(c * 100 + k)
    args = [f"%x: {t_in}"]
    consts = []
    if constant:
        data = rng.standard_normal((c, 1, k, k)).astype(np.float32).tobytes().hex().upper()
        consts.append(f'%w = arith.constant dense<"0x{data}"> : {tw}')
    else:
        args.append(f"%w: {tw}")
    ins, types, bargs = ["%x", "%w"], [t_in, tw], [f"%x1: {t_in}", f"%w1: {tw}"]
    body = [
        f"%v = ai.transpose %x1 {{perm = array<i64: 0, 3, 1, 2>}} : {t_in}",
        f"%cv = ai.conv2d %v, %w1 {{strides = array<i64: {stride}, {stride}>, "
        f"dilations = array<i64: {dilation}, {dilation}>, padding = array<i64: {pad}, {pad}>, "
        f"groups = {c} : i64}} : {x_nchw} * {tw}",
    ]
    last = "%cv"
    if bias:
        args.append(f"%b: {_t(c)}")
        ins.append("%b")
        types.append(_t(c))
        bargs.append(f"%b1: {_t(c)}")
        body.append(f"%cb = ai.bias_add %cv, %b1 : {y_nchw} * {_t(c)}")
        last = "%cb"
    body += [
        f"%o = ai.transpose {last} {{perm = array<i64: 0, 2, 3, 1>}} : {y_nchw}",
        f"ai.yield %o : {t_out}",
    ]
    inner = "\n    ".join(body)
    layout = '{fusec.layout = {input = "nhwc", output = "nhwc"}}'
    group = f'ai.fused "conv" ({", ".join(ins)}) {layout} : ({", ".join(types)}) -> {t_out}'
    return f"""func.func @dw({", ".join(args)}) -> {t_out} {{
  {"  ".join(c + chr(10) for c in consts)}  %r = {group} {{
  ^bb0({", ".join(bargs)}):
    {inner}
  }}
  return %r : {t_out}
}}
"""


@pytest.mark.parametrize(
    ("n", "c", "h", "k", "stride", "dilation", "bias", "constant"),
    [
        (1, 64, 8, 7, 1, 1, True, True),  # ConvNeXt's 7x7, the weight packed once
        (2, 40, 9, 3, 1, 1, False, False),  # a ragged channel block, a weight argument
        pytest.param(1, 32, 12, 5, 2, 1, True, False, marks=pytest.mark.slow),  # strided
        pytest.param(1, 48, 10, 3, 1, 2, True, True, marks=pytest.mark.slow),  # dilated
    ],
)
def test_depthwise_kernel_channels_last(n, c, h, k, stride, dilation, bias, constant, cache):
    program = check(
        dw_group(n, c, h, k, stride, dilation, bias=bias, constant=constant), cache=cache
    )
    (source,) = [s for s in program.kernels if s.kind == "conv"]
    assert "(NHWC)" in source.source and "channels-last" in source.source
    if constant:
        assert source.prepared_inputs == ((1, f"depthwise_lanes:{depthwise_nhwc.CB}"),)


def test_depthwise_kernel_nan_and_inf_where_the_reference_has_them(cache):
    module = parse(dw_group(1, 32, 8, 3))
    program = Program(module, target="cpu", cache=cache)
    inputs = random_inputs(entry_function(module), 3)
    inputs[0][0, 2, 5, 7] = np.nan
    inputs[0][0, 6, 1, 30] = np.inf
    (got,) = program(inputs, alloc=poison)
    (want,) = run_reference(module, inputs, precision="float64")
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()
    assert np.array_equal(np.isinf(got), np.isinf(want)) and np.isinf(want).any()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_a_malformed_channels_last_group_is_a_located_error(cache):
    text = dw_group(1, 32, 8, 3).replace(
        "ai.transpose %x1 {perm = array<i64: 0, 3, 1, 2>}",
        "ai.transpose %x1 {perm = array<i64: 0, 3, 2, 1>}",
    )
    with pytest.raises(FusecError, match="NHWC views"):
        Program(parse(text), target="cpu", cache=cache)
