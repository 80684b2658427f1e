"""The conv templates on the GPU vs the float64 reference (skipped without a GPU).

Every case goes through the default pipeline (the fusion passes make the conv
group) on fresh random inputs, with every output poisoned (NaN) before the
launch, compared elementwise (``numerics.assert_close``: the output type's
tolerance scaled to its magnitude) with the float64 reference rounded where
the kernels round (``rounding="groups"``). The routing each case exercises is asserted from the
kernel header, so a case cannot silently test the PyTorch fallback instead.
"""

from __future__ import annotations

import pytest
from conv_cases import (
    _t,
    resnet_basic,
    resnet_block_constant_weights,
    resnet_downsample,
)
from numerics import assert_close

pytestmark = pytest.mark.gpu


def conv_graph(
    n, c, h, w, k, r, s, *, t="f16", stride=(1, 1), pad=(0, 0), dil=(1, 1), groups=1,
    tail="bias_relu", out_t=None,
) -> str:  # fmt: skip
    """conv2d followed by one of the epilogues the conv group fuses."""
    pads = (pad[0], pad[1], pad[0], pad[1]) if len(pad) == 2 else pad
    p = (h + pads[0] + pads[2] - dil[0] * (r - 1) - 1) // stride[0] + 1
    q = (w + pads[1] + pads[3] - dil[1] * (s - 1) - 1) // stride[1] + 1
    x, wt, o = _t((n, c, h, w), t), _t((k, c // groups, r, s), t), _t((n, k, p, q), t)
    bias, chan = _t((k,), t), _t((k, 1, 1), t)
    params = [f"%x: {x}", f"%w: {wt}"]
    attrs = (
        f"strides = array<i64: {stride[0]}, {stride[1]}>, "
        f"padding = array<i64: {', '.join(map(str, pad))}>, "
        f"dilations = array<i64: {dil[0]}, {dil[1]}>, groups = {groups} : i64"
    )
    lines = [f"%c = ai.conv2d %x, %w {{{attrs}}} : {x} * {wt}"]
    last = "%c"
    if tail in ("bias_relu", "residual", "cast"):
        params.append(f"%b: {bias}")
        lines.append(f"%y = ai.bias_add %c, %b : {o} * {bias}")
        last = "%y"
    if tail == "residual":
        params.append(f"%res: {o}")
        lines.append(f"%a = ai.add %y, %res : {o} * {o}")
        last = "%a"
    if tail == "bn":
        params += [f"%scale: {chan}", f"%shift: {chan}"]
        lines.append(f"%m = ai.mul %c, %scale : {o} * {chan}")
        lines.append(f"%y = ai.add %m, %shift : {o} * {chan}")
        last = "%y"
    if tail in ("bias_relu", "residual", "bn"):
        lines.append(f"%r = ai.relu {last} : {o}")
        last = "%r"
    result = o
    if out_t:
        result = _t((n, k, p, q), out_t)
        lines.append(f"%z = ai.cast {last} : {o} to {result}")
        last = "%z"
    body = "\n  ".join(lines)
    return (
        f"func.func @f({', '.join(params)}) -> {result} {{\n  {body}\n"
        f"  return {last} : {result}\n}}\n"
    )


CASES = {
    # name: (graph, expected routing text in the kernel header); simplest first, so a
    # failing advanced variant leaves the simpler ones measured
    "stride5w-fallback": (
        conv_graph(2, 64, 9, 300, 64, 3, 3, stride=(2, 5), pad=(1, 1)), "FALLBACK"
    ),
    "depthwise-stride2-bf16": (
        conv_graph(2, 64, 15, 15, 64, 3, 3, t="bf16", stride=(2, 2), pad=(1, 1), groups=64),
        "direct conv2d",
    ),
    "grouped-4-channels": (
        conv_graph(2, 32, 9, 9, 16, 3, 3, pad=(1, 1), groups=8), "direct conv2d"
    ),
    "no-epilogue": (conv_graph(1, 32, 6, 9, 16, 2, 2, tail="none"), "implicit-GEMM"),
    "odd-width": (conv_graph(2, 64, 17, 23, 64, 3, 3, pad=(1, 1)), "implicit-GEMM"),
    "ragged-channels-128-rows": (conv_graph(2, 40, 5, 64, 72, 3, 3, pad=(1, 1)), "implicit-GEMM"),
    "residual": (conv_graph(2, 64, 14, 14, 64, 3, 3, pad=(1, 1), tail="residual"), "implicit-GEMM"),
    "bn-folded": (conv_graph(2, 64, 8, 8, 128, 3, 3, pad=(1, 1), tail="bn"), "implicit-GEMM"),
    "groups2": (conv_graph(3, 64, 9, 16, 64, 3, 3, pad=(1, 1), groups=2), "implicit-GEMM"),
    "1x1-bf16-to-f32": (
        conv_graph(2, 128, 7, 7, 256, 1, 1, t="bf16", tail="cast", out_t="f32"),
        "implicit-GEMM",
    ),
    # the channels-last copy: 16-byte loads (H*W % 8 == 0) on the bench layer's image, with
    # CG 20 padded to 24, with a ragged third channel block; 2-byte loads (H*W = 49) with
    # groups 2 of 18 channels (CGP 24)
    "copy-vector-56x56": (conv_graph(2, 64, 56, 56, 64, 3, 3, pad=(1, 1)), "implicit-GEMM"),
    "copy-vector-cgp-pad": (conv_graph(2, 20, 56, 56, 64, 3, 3, pad=(1, 1)), "implicit-GEMM"),
    "copy-vector-136-channels": (conv_graph(1, 136, 8, 8, 64, 1, 1), "implicit-GEMM"),
    "copy-scalar-7x7-groups2-cgp-pad": (
        conv_graph(2, 36, 7, 7, 32, 3, 3, pad=(1, 1), groups=2), "implicit-GEMM"
    ),
    "stride2h-asym-pad-dil2w-bf16": (
        conv_graph(2, 64, 11, 70, 64, 3, 3, t="bf16", stride=(2, 1), pad=(0, 2, 1, 0), dil=(1, 2)),
        "implicit-GEMM",
    ),
    # strided along W: each strip's TMA box traverses every stride_w-th input pixel
    "stride2-3x3": (conv_graph(2, 64, 9, 9, 64, 3, 3, stride=(2, 2), pad=(1, 1)), "implicit-GEMM"),
    "stride2-3x3-resnet-layer2": (
        conv_graph(4, 128, 56, 56, 128, 3, 3, stride=(2, 2), pad=(1, 1), tail="bn"),
        "implicit-GEMM",
    ),
    "stride2-1x1-downsample-2-strips": (
        conv_graph(2, 64, 6, 150, 128, 1, 1, stride=(2, 2), tail="bn"), "implicit-GEMM"
    ),
    "stride4w-dil2-pad-bf16": (
        conv_graph(2, 32, 5, 90, 48, 2, 3, t="bf16", stride=(1, 4), pad=(0, 2, 0, 1), dil=(1, 2)),
        "implicit-GEMM",
    ),
    "stride3-residual": (
        conv_graph(2, 48, 10, 29, 64, 3, 3, stride=(3, 3), pad=(1, 1), tail="residual"),
        "implicit-GEMM",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_conv_matches_reference(name: str) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    text, routing = CASES[name]
    compiled = fusec.compile(text, target="cuda")
    (kernel,) = [k for k in compiled.kernels if k.kind == "conv"]
    assert routing in kernel.source.split("\n\n")[0], kernel.source[:600]
    for seed in (0, 1):  # fresh inputs: a second draw catches stale or unwritten outputs
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


def test_torch_tensors_on_the_callers_stream() -> None:
    """Inputs and the result stay torch tensors on the caller's stream: the launches are
    queued there and the result is read by a copy on the same stream (no synchronize)."""
    torch = pytest.importorskip("torch")
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    text = conv_graph(4, 64, 20, 20, 64, 3, 3, pad=(1, 1), tail="residual")
    compiled = fusec.compile(text, target="cuda")
    args = random_inputs(entry_function(compiled.module), seed=5)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensors = [torch.from_numpy(a).to("cuda", non_blocking=False) for a in args]
        out = compiled(*tensors)
        out2 = compiled(*tensors)  # a second call reuses the per-stream scratch, in order
        host = out.float().cpu()  # ordered after the kernel on `side`
        host2 = out2.float().cpu()
    (ref,) = run_reference(compiled.module, args, rounding="groups")
    assert_close(host.numpy(), ref, "f16", what="first call")
    assert_close(host2.numpy(), ref, "f16", what="second call")


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned-16-byte-loads", "misaligned-2-byte"])
def test_misaligned_input_takes_the_scalar_copy(offset: int) -> None:
    """An input 2 bytes past 16-byte alignment (reachable through ``ConvLaunch``, which the
    runtime's adapters do not realign) is copied by the 2-byte-load twin."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from fusec.dialect.numpy_ops import conv2d as reference_conv2d
    from fusec.targets.cuda.conv.config import ConvGeometry, choose_tile
    from fusec.targets.cuda.conv.cpp import ConvSpec
    from fusec.targets.cuda.conv.launcher import ConvLaunch

    geo = ConvGeometry(2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    launch = ConvLaunch(ConvSpec(geo, choose_tile(geo)), x=0, w=1, extras=())
    kernel = launch.load()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float16)
    w = (rng.standard_normal((geo.k, geo.cg, 3, 3)) * 0.1).astype(np.float16)
    storage = torch.empty(x.size + 8, dtype=torch.float16, device="cuda")
    xd = storage[offset : offset + x.size].view(x.shape)
    xd.copy_(torch.from_numpy(x))
    wd = torch.from_numpy(w).cuda()
    assert (xd.data_ptr() % 16 == 0) == (offset == 0)
    expected = kernel.transpose if offset == 0 else kernel.transpose_scalar
    assert kernel.transpose_for(xd.data_ptr()) is expected
    assert kernel.transpose is not kernel.transpose_scalar
    out = torch.full((geo.n, geo.k, geo.p, geo.q), float("nan"), dtype=torch.float16, device="cuda")
    launch((xd, wd), out, torch.cuda.current_stream())
    ref = reference_conv2d(x.astype(np.float64), w.astype(np.float64), padding=(1, 1, 1, 1))
    assert_close(out.float().cpu().numpy(), ref, "f16", what=f"offset {offset}")


# ---------------------------- $FUSEC_CONV_INPUT=nchw: the NCHW input read in place by TMA

IN_PLACE = "NCHW input read in place"
#: conv-layout relaid the input (a channels-last copy group in front of the conv)
GIVEN = "input given channels-last"
RESNET_BOTTLENECK = """func.func @block(%x: {X}, %w1: {W1}, %s1: {C1}, %t1: {C1}, %w2: {W2},
    %s2: {C1}, %t2: {C1}, %w3: {W3}, %s3: {C4}, %t3: {C4}) -> {X} {{
  %c1 = ai.conv2d %x, %w1 : {X} * {W1}
  %m1 = ai.mul %c1, %s1 : {Y} * {C1}
  %a1 = ai.add %m1, %t1 : {Y} * {C1}
  %r1 = ai.relu %a1 : {Y}
  %c2 = ai.conv2d %r1, %w2 {{padding = array<i64: 1, 1>}} : {Y} * {W2}
  %m2 = ai.mul %c2, %s2 : {Y} * {C1}
  %a2 = ai.add %m2, %t2 : {Y} * {C1}
  %r2 = ai.relu %a2 : {Y}
  %c3 = ai.conv2d %r2, %w3 : {Y} * {W3}
  %m3 = ai.mul %c3, %s3 : {X} * {C4}
  %a3 = ai.add %m3, %t3 : {X} * {C4}
  %s = ai.add %a3, %x : {X} * {X}
  %r = ai.relu %s : {X}
  return %r : {X}
}}"""


def resnet_bottleneck(n=4, c=256, h=14, w=16, t="f16") -> str:
    """A ResNet-50 bottleneck block (1x1 -> 3x3 -> 1x1 + identity, BatchNorm folded): the
    two 1x1 convs can read NCHW in place, the 3x3 (shifts -1 and 1) cannot."""
    mid = c // 4
    return RESNET_BOTTLENECK.format(
        X=_t((n, c, h, w), t), Y=_t((n, mid, h, w), t), W1=_t((mid, c, 1, 1), t),
        W2=_t((mid, mid, 3, 3), t), W3=_t((c, mid, 1, 1), t), C1=_t((mid, 1, 1), t),
        C4=_t((c, 1, 1), t),
    )  # fmt: skip


NCHW_CASES = {
    # name: (graph, the layout each conv group's header must name, in graph order)
    "bench-1x1-bias-relu": (conv_graph(32, 64, 56, 56, 64, 1, 1), [IN_PLACE]),
    # the bench layer itself: refused (tap shifts -1, 1), must still be right via the copy
    "bench-3x3-refused": (conv_graph(32, 64, 56, 56, 64, 3, 3, pad=(1, 1)), [GIVEN]),
    # ragged: 96 channels (second chunk half zero fill), 40 output channels, odd H
    "ragged-3x1-c96-k40": (conv_graph(2, 96, 13, 16, 40, 3, 1, pad=(1, 0)), [IN_PLACE]),
    "bf16-to-f32-1x1": (
        conv_graph(2, 128, 7, 24, 256, 1, 1, t="bf16", tail="cast", out_t="f32"), [IN_PLACE]
    ),
    "dilation2h-stride2h-bf16": (
        conv_graph(2, 64, 15, 32, 64, 3, 1, t="bf16", stride=(2, 1), pad=(2, 0), dil=(2, 1)),
        [IN_PLACE],
    ),
    # shifts -8, 0, 8 along W: negative W coordinates zero-filled by TMA
    "1x3-dilation8w-pad8": (conv_graph(2, 64, 5, 40, 64, 1, 3, pad=(0, 8), dil=(1, 8)), [IN_PLACE]),
    "groups2-1x1": (conv_graph(3, 64, 7, 8, 64, 1, 1, groups=2), [IN_PLACE]),
    "residual-1x1": (conv_graph(2, 64, 14, 16, 64, 1, 1, tail="residual"), [IN_PLACE]),
    "resnet-bottleneck": (resnet_bottleneck(), [IN_PLACE, GIVEN, IN_PLACE]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(NCHW_CASES))
def test_conv_reading_nchw_in_place_matches_reference(name: str, monkeypatch) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_INPUT", "nchw")
    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "off")  # each group's own input path
    text, layouts = NCHW_CASES[name]
    compiled = fusec.compile(text, target="cuda")
    heads = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "conv"]
    assert len(heads) == len(layouts)
    for head, layout in zip(heads, layouts, strict=True):
        assert "implicit-GEMM" in head and layout in head, head[:800]
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


LOADED = "NCHW input loaded in place by the producer"
LD_CASES = {
    # name: (graph, the layout each conv group's header must name, in graph order)
    "bench-3x3-bias-relu": (conv_graph(32, 64, 56, 56, 64, 3, 3, pad=(1, 1)), [LOADED]),
    "ragged-13x16-c96-k40": (conv_graph(2, 96, 13, 16, 40, 3, 3, pad=(1, 1)), [LOADED]),
    # W = 9 is not whole 16-byte vectors: refused, the copy serves it
    "ragged-13x9-refused": (conv_graph(2, 96, 13, 9, 40, 3, 3, pad=(1, 1)), [GIVEN]),
    "bf16-5x5-pad2-to-f32": (
        conv_graph(2, 64, 9, 24, 64, 5, 5, t="bf16", pad=(2, 2), tail="cast", out_t="f32"),
        [LOADED],
    ),
    "dilation2": (conv_graph(2, 64, 11, 16, 64, 3, 3, pad=(2, 2), dil=(2, 2)), [LOADED]),
    "groups2-stride2h-asym-pad": (
        conv_graph(3, 64, 9, 16, 64, 3, 3, stride=(2, 1), pad=(0, 2, 1, 0), groups=2), [LOADED]
    ),
    "resnet-basic-block": (resnet_basic(), [LOADED, LOADED]),
    "resnet-basic-block-bench": (resnet_basic(32, 64, 56, 56), [LOADED, LOADED]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LD_CASES))
def test_conv_loading_nchw_by_threads_matches_reference(name: str, monkeypatch) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_INPUT", "nchw-ld")
    text, layouts = LD_CASES[name]
    compiled = fusec.compile(text, target="cuda")
    heads = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "conv"]
    assert len(heads) == len(layouts)
    for head, layout in zip(heads, layouts, strict=True):
        assert "implicit-GEMM" in head and layout in head, head[:800]
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


@pytest.mark.parametrize("layout", ["nchw", "nchw-ld"])
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned-copied-to-scratch"])
def test_nchw_in_place_misaligned_input(offset: int, layout: str) -> None:
    """An input 2 bytes past 16-byte alignment cannot be a tensor map's base: it is copied
    to an aligned scratch buffer first (stream-ordered), the result unchanged."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from fusec.dialect.numpy_ops import conv2d as reference_conv2d
    from fusec.targets.cuda.conv.config import ConvGeometry, choose_tile
    from fusec.targets.cuda.conv.cpp import ConvSpec
    from fusec.targets.cuda.conv.launcher import ConvLaunch

    geo = ConvGeometry(2, 64, 16, 16, 64, 1, 1, max_strip_rows=1)
    if layout == "nchw-ld":
        geo = ConvGeometry(2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, max_strip_rows=1)
    launch = ConvLaunch(ConvSpec(geo, choose_tile(geo), input=layout), x=0, w=1, extras=())
    kernel = launch.load()
    assert kernel.transpose is None
    rng = np.random.default_rng(8)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float16)
    w = (rng.standard_normal((geo.k, geo.cg, geo.r, geo.s)) * 0.1).astype(np.float16)
    storage = torch.empty(x.size + 8, dtype=torch.float16, device="cuda")
    xd = storage[offset : offset + x.size].view(x.shape)
    xd.copy_(torch.from_numpy(x))
    wd = torch.from_numpy(w).cuda()
    assert (xd.data_ptr() % 16 == 0) == (offset == 0)
    for call in range(2):  # the second call reuses the scratch and the cached map
        out = torch.full((geo.n, geo.k, geo.p, geo.q), float("nan"), dtype=torch.float16,
                         device="cuda")  # fmt: skip
        launch((xd, wd), out, torch.cuda.current_stream())
        pad = (geo.pad_top, geo.pad_left, geo.pad_bottom, geo.pad_right)
        ref = reference_conv2d(x.astype(np.float64), w.astype(np.float64), padding=pad)
        assert_close(out.float().cpu().numpy(), ref, "f16", what=f"offset {offset}, {call}")


# ------------------- $FUSEC_CONV_EPILOGUE=early: the epilogue's inputs loaded ahead of use

EARLY = "loaded ahead of use"
EPILOGUE_CASES = {
    # name: graph (every conv group's header must name the early loads when asked)
    "resnet-basic-block-bench": resnet_basic(32, 64, 56, 56),
    "resnet-basic-block-ragged-c40-13x16": resnet_basic(2, 40, 13, 16),
    "residual-bias-relu-bf16": conv_graph(2, 64, 14, 14, 64, 3, 3, t="bf16", pad=(1, 1),
                                          tail="residual"),
    "residual-odd-7x7": conv_graph(2, 64, 7, 7, 64, 3, 3, pad=(1, 1), tail="residual"),
    "residual-odd-13x9-bf16": conv_graph(2, 64, 13, 9, 64, 3, 3, t="bf16", pad=(1, 1),
                                         tail="residual"),
    # K 256: split-m tile, 128 accumulators a thread: the loads at each output row's head
    "residual-k256-row-loads": conv_graph(2, 256, 8, 12, 256, 3, 3, pad=(1, 1),
                                          tail="residual"),
    "bn-folded-relu": conv_graph(2, 64, 8, 8, 128, 3, 3, pad=(1, 1), tail="bn"),
}  # fmt: skip


@pytest.mark.parametrize("loads", ["inline", "early"])
@pytest.mark.parametrize("name", list(EPILOGUE_CASES))
def test_conv_epilogue_loads_match_reference(name: str, loads: str, monkeypatch) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_EPILOGUE", loads)
    compiled = fusec.compile(EPILOGUE_CASES[name], target="cuda")
    heads = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "conv"]
    assert heads
    for head in heads:
        assert "implicit-GEMM" in head and (EARLY in head) == (loads == "early"), head[:800]
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, {loads}, seed {seed}")


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned-4-byte-pairs", "misaligned-2-byte"])
def test_early_loads_misaligned_residual(offset: int) -> None:
    """A residual 2 bytes past 4-byte alignment (reachable through ``ConvLaunch``) takes
    the two-2-byte-loads copy of the early loads."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from fusec.dialect.numpy_ops import conv2d as reference_conv2d
    from fusec.targets.cuda.conv.config import ConvGeometry, choose_tile
    from fusec.targets.cuda.conv.cpp import ConvSpec
    from fusec.targets.cuda.conv.launcher import ConvLaunch
    from fusec.targets.cuda.gemm.cpp import Epilogue

    geo = ConvGeometry(2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1)
    tail = Epilogue(
        "const float t = acc * ev0 + ev1;\ny = t < 0.0f ? 0.0f : t;",
        ("f16", "f16"),
        "scale_residual_relu",
        channel_args=(0,),
        pixel_args=(1,),
    )
    spec = ConvSpec(geo, choose_tile(geo), "f16", "f16", tail, epilogue_loads="early")
    launch = ConvLaunch(spec, x=0, w=1, extras=(2, 3))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((geo.n, geo.c, geo.h, geo.w)).astype(np.float16)
    w = (rng.standard_normal((geo.k, geo.cg, 3, 3)) * 0.1).astype(np.float16)
    scale = rng.standard_normal(geo.k).astype(np.float16)
    res = rng.standard_normal((geo.n, geo.k, geo.p, geo.q)).astype(np.float16)
    storage = torch.empty(res.size + 8, dtype=torch.float16, device="cuda")
    rd = storage[offset : offset + res.size].view(res.shape)
    rd.copy_(torch.from_numpy(res))
    assert (rd.data_ptr() % 4 == 0) == (offset == 0)
    xd, wd, sd = (torch.from_numpy(a).cuda() for a in (x, w, scale))
    out = torch.full((geo.n, geo.k, geo.p, geo.q), float("nan"), dtype=torch.float16, device="cuda")
    launch((xd, wd, sd, rd), out, torch.cuda.current_stream())
    conv = reference_conv2d(x.astype(np.float64), w.astype(np.float64), padding=(1, 1, 1, 1))
    ref = np.maximum(conv * scale.astype(np.float64)[None, :, None, None] + res, 0.0)
    assert_close(out.float().cpu().numpy(), ref, "f16", what=f"offset {offset}")


# --------------- $FUSEC_CONV_HANDOFF=nhwc: conv1 stores channels-last, conv2 reads it as is

HANDOFF_CASES = {
    "resnet-basic-block-bench": resnet_basic(32, 64, 56, 56),
    "resnet-basic-block-ragged-c40-13x16": resnet_basic(2, 40, 13, 16),
    "resnet-basic-block-odd-7x7": resnet_basic(2, 64, 7, 7),
    "resnet-basic-block-bf16-13x9": resnet_basic(2, 64, 13, 9, t="bf16"),
}


@pytest.mark.parametrize("loads", ["inline", "early"])
@pytest.mark.parametrize("name", list(HANDOFF_CASES))
def test_conv_handoff_matches_reference(name: str, loads: str, monkeypatch) -> None:
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_HANDOFF", "nhwc")
    monkeypatch.setenv("FUSEC_CONV_EPILOGUE", loads)
    compiled = fusec.compile(HANDOFF_CASES[name], target="cuda")
    first, second = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "conv"]
    assert "output stored channels-last" in first, first[:900]
    assert "input given channels-last" in second, second[:900]
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, {loads}, seed {seed}")


@pytest.mark.parametrize("handoff", ["nhwc", "off"])
@pytest.mark.parametrize(
    "shape",
    [(2, 64, 16, 16), (4, 64, 56, 56), (2, 64, 15, 13)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_resnet_downsample_block_runs_every_conv_on_the_tensor_cores(
    shape: tuple, handoff: str, monkeypatch
) -> None:
    """The stride-2 3x3 and 1x1 convs of a downsampling block run as the implicit GEMM
    (strided TMA boxes), with the conv -> conv hand-off and without, odd sizes included."""
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_HANDOFF", handoff)
    compiled = fusec.compile(resnet_downsample(*shape), target="cuda")
    headers = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "conv"]
    assert len(headers) == 3 and all("implicit-GEMM" in h for h in headers), headers
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"downsample {shape}, {handoff}, seed {seed}")


STEMS = {
    "resnet-7x7s2-c3": conv_graph(4, 3, 64, 64, 64, 7, 7, stride=(2, 2), pad=(3, 3), tail="bn"),
    # stride 4 (a box of 256 pixels) with padding: not a patchify conv (conv-patchify)
    "c3-5x5s4-pad2-bf16": conv_graph(2, 3, 33, 35, 96, 5, 5, t="bf16", stride=(4, 4), pad=(2, 2)),
    "c5-3x3-odd": conv_graph(2, 5, 13, 11, 32, 3, 3, pad=(1, 1), tail="residual"),
    # MobileNet's and EfficientNet's 3x3/2 stems; a stride of 6 along W (im2col only)
    "mobilenet-3x3s2-c3": conv_graph(2, 3, 32, 30, 16, 3, 3, stride=(2, 2), pad=(1, 1)),
    "c3-3x3s6-bf16": conv_graph(1, 3, 20, 70, 24, 3, 3, t="bf16", stride=(1, 6), pad=(1, 1)),
}
#: the tap-wise implicit GEMM cannot step 6 pixels along W
_TAPWISE = [name for name in STEMS if name != "c3-3x3s6-bf16"]


@pytest.mark.parametrize(
    "mode, name",
    [("im2col", name) for name in STEMS] + [("implicit", name) for name in _TAPWISE],
)
def test_few_channel_stems_through_the_implicit_gemm(mode: str, name: str, monkeypatch) -> None:
    """An ungrouped conv of fewer than 16 input channels runs as the implicit GEMM of a 1x1
    conv over its im2col matrix (the default, $FUSEC_CONV_FEW_CHANNELS=im2col), or over
    taps with the channel chunk zero-filled past the real channels ("implicit")."""
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_FEW_CHANNELS", mode)
    compiled = fusec.compile(STEMS[name], target="cuda")
    (kernel,) = [k for k in compiled.kernels if k.kind == "conv"]
    header = kernel.source.split("\n\n")[0]
    assert "implicit-GEMM" in header, kernel.source[:600]
    assert ("im2col matrix" in header) == (mode == "im2col"), header
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")


# ------------- conv-layout: the channels-last copy groups, constant weights relaid at compile


@pytest.mark.parametrize(
    "shape", [(2, 64, 90), (64, 64, 9), (3, 136, 11), (4, 256, 56 * 56)], ids=lambda s: str(s)
)
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned-2-byte-loads"])
def test_relayout_copy_matches_numpy(shape: tuple, offset: int) -> None:
    """``RelayoutLaunch`` (the conversions' kernel) writes exactly ``x.transpose(0, 2, 1)``
    into a poisoned output, from an aligned input and from one 2 bytes past alignment."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from fusec.targets.cuda.conv.launcher import RelayoutLaunch
    from fusec.targets.cuda.conv.transpose import RelayoutSpec

    launch = RelayoutLaunch(RelayoutSpec(*shape))
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float16)
    storage = torch.empty(x.size + 8, dtype=torch.float16, device="cuda")
    xd = storage[offset : offset + x.size].view(x.shape)
    xd.copy_(torch.from_numpy(x))
    assert (xd.data_ptr() % 16 == 0) == (offset == 0)
    out = torch.full((shape[0], shape[2], shape[1]), float("nan"), dtype=torch.float16,
                     device="cuda")  # fmt: skip
    launch((xd,), out, torch.cuda.current_stream())
    got = out.cpu().numpy()
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got, x.transpose(0, 2, 1))


def test_resnet_block_with_constant_weights(monkeypatch) -> None:
    """Constant weights (an ONNX model's) are relaid at compile time: the block launches one
    copy (its NCHW input), conv1 (NHWC out) and conv2, and matches the reference."""
    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    text = resnet_block_constant_weights()
    compiled = fusec.compile(text, target="cuda")
    assert [k.kind for k in compiled.kernels] == ["copy", "conv", "conv"]
    first, second = [k.source.split("\n\n")[0] for k in compiled.kernels if k.kind == "conv"]
    assert "weights given [K][R][S][C]" in first and "weights given [K][R][S][C]" in second
    assert "output stored channels-last" in first and GIVEN in second
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"constant weights, seed {seed}")


@pytest.mark.parametrize(
    "name", ["conv_layout_resnet", "conv_layout_constants", "conv_layout_pointwise"]
)
@pytest.mark.parametrize("handoff", ["nhwc", "off"])
def test_conv_layout_graphs_match_reference(name: str, handoff: str, monkeypatch) -> None:
    """The FileCheck graphs of ``conv-layout`` (hand-off, shared and constant-folded
    conversions, an f32 and a depthwise conv left NCHW, an elementwise group relaid
    between convs) run on the GPU: every result against the reference."""
    from pathlib import Path

    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_HANDOFF", handoff)
    path = Path(__file__).parent / "filecheck" / f"{name}.mlir"
    compiled = fusec.compile(path, target="cuda")
    assert any(k.kind == "copy" and "channels-last transpose" in k.source for k in compiled.kernels)
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        outs = compiled._runner(args, poison=True)
        refs = run_reference(compiled.module, args, rounding="groups")
        for k, (out, ref) in enumerate(zip(outs, refs, strict=True)):
            assert_close(out, ref, what=f"{name}, handoff {handoff}, result {k}, seed {seed}")


@pytest.mark.parametrize("c, hw", [(32, 8), (64, 14), (256, 7)], ids=["c32", "c64", "c256"])
def test_residuals_read_channels_last_match_reference(c: int, hw: int, monkeypatch) -> None:
    """``$FUSEC_CONV_RESIDUAL=nhwc``: the chained residual blocks of
    ``test_conv_layout.py`` with each block output stored NHWC and read as the next
    block's residual at its NHWC index, against the reference (the opt-in's GPU check)."""
    from test_conv_layout import _residual_chain_graph

    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    monkeypatch.setenv("FUSEC_CONV_RESIDUAL", "nhwc")
    compiled = fusec.compile(_residual_chain_graph(c, hw), target="cuda")
    assert [k.kind for k in compiled.kernels].count("copy") == 1  # the graph input's
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"residual nhwc C{c} {hw}x{hw}, seed {seed}")


# ------------- conv-patchify: patchify convs as one copy and one Tensor Core GEMM


@pytest.mark.parametrize(
    "name, shape",
    [
        ("vit-b16-224", (8, 3, 224, 224, 768, 16)),
        ("vit-odd-batch-bf16", (3, 3, 32, 48, 64, 16)),
        ("convnext-stem", (4, 3, 64, 64, 96, 4)),
    ],
)
def test_patchify_convs_run_as_a_gemm(name: str, shape: tuple) -> None:
    from test_conv_patchify import patch_graph

    import fusec
    from fusec.runtime.reference import entry_function, run_reference
    from fusec.tools.runner import random_inputs

    n, c, h, w, k, p = shape
    text = patch_graph(n, c, h, w, k, p, t="bf16" if "bf16" in name else "f16")
    compiled = fusec.compile(text, target="cuda")
    assert sorted(kernel.kind for kernel in compiled.kernels) == ["copy", "matmul"]
    for seed in (0, 1):
        args = random_inputs(entry_function(compiled.module), seed=seed)
        (out,) = compiled._runner(args, poison=True)
        (ref,) = run_reference(compiled.module, args, rounding="groups")
        assert_close(out, ref, what=f"{name}, seed {seed}")
