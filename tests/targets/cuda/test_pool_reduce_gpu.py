"""GPU tests of the cuda pool and reduce templates at the zoo's sizes (skipped without a GPU).

ResNet-50's 3x3/2 max pool, the global means before the classifiers (NCHW: rows; NHWC:
columns), MobileNetV3's squeeze-and-excitation means with their epilogue, and a long
reduction into few outputs. Outputs are poisoned with NaN first; max pooling and max
reductions are compared bit for bit (NaN and -inf in the input), the rest with the
float64 reference at the element type's tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from pool_reduce_cases import inputs, pool_program, reduce_program

pytestmark = pytest.mark.gpu


def _check(
    text: str, kind: str, exact: bool = False, seed: int = 0, pipeline: str | None = None
) -> None:
    import fusec
    from fusec.runtime.reference import run_reference

    options = {"pipeline": pipeline} if pipeline else {}
    compiled = fusec.compile(text, target="cuda", **options)
    kernels = [k for k in compiled.kernels if k.kind == kind]
    assert len(kernels) == 1 and "FALLBACK" not in kernels[0].source
    args = inputs(compiled.module, seed, special=exact)
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    for out, ref in zip(outs, refs, strict=True):
        out = np.asarray(out)
        if exact:
            expected = ref.astype(out.dtype)
            differ = ~((out == expected) | (np.isnan(out) & np.isnan(expected)))
            assert not differ.any(), f"{int(differ.sum())} of {out.size} elements differ"
        else:
            assert_close(out, ref, what=kind)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_resnet50_max_pool(dtype: str) -> None:
    text = pool_program((32, 64, 112, 112), dtype, "max", (3, 3), (2, 2), (1, 1))
    _check(text, "pool", exact=True)


@pytest.mark.parametrize("include_pad", [False, True])
def test_average_pool_ceil_mode_with_epilogue(include_pad: bool) -> None:
    args = ((32, 96, 35, 35), "f16", "avg", (3, 3), (2, 2), (1, 1), (1, 1), True, include_pad)
    _check(pool_program(*args, epilogue=True), "pool")


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_global_mean_nchw_rows(dtype: str) -> None:
    _check(reduce_program((32, 2048, 7, 7), dtype, "mean", (2, 3), True, False), "reduce")


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_global_mean_nhwc_columns(dtype: str) -> None:
    _check(reduce_program((32, 7, 7, 2048), dtype, "mean", (1, 2), False, True), "reduce")


@pytest.mark.parametrize(
    ("batch", "channels", "size"), [(1, 72, 28), (1, 480, 14), (1, 960, 7), (32, 672, 14)]
)
def test_mobilenet_v3_se_means(batch: int, channels: int, size: int) -> None:
    shape = (batch, channels, size, size)
    _check(reduce_program(shape, "f16", "mean", (2, 3), True, True), "reduce")


@pytest.mark.parametrize("kind", ["max", "sum"])
def test_long_reduction_into_few_outputs(kind: str) -> None:
    """Two passes (parts into a workspace, then combined), rows and columns."""
    text = reduce_program((2, 3, 512, 512), "f32", kind, (2, 3), True, False)
    _check(text, "reduce", exact=kind == "max")
    text = reduce_program((1, 512, 512, 8), "f16", kind, (1, 2), False, kind != "max")
    _check(text, "reduce", exact=kind == "max")


def test_two_pass_reduction_twice_and_on_two_streams() -> None:
    """The workspace is per stream and reused: two calls on each of two torch streams
    give the same (right) results."""
    torch = pytest.importorskip("torch")
    import fusec

    text = reduce_program((2, 3, 512, 512), "f32", "mean", (2, 3), True, True)
    compiled = fusec.compile(text, target="cuda")
    assert any("two passes" in k.source for k in compiled.kernels)
    x = torch.randn(2, 3, 512, 512, device="cuda")
    b = torch.randn(1, device="cuda")  # along the result's last dim, of size 1
    expected = -(x.double().mean(dim=(2, 3), keepdim=True) * b.double())
    for stream in (torch.cuda.Stream(), torch.cuda.Stream()):
        with torch.cuda.stream(stream):
            for _ in range(2):
                out = compiled(x, b)  # one result: the tensor itself
                torch.cuda.synchronize()
                assert torch.allclose(out.double(), expected, rtol=1e-4, atol=1e-5)


def test_channels_last_max_pool_at_resnet50_size() -> None:
    """The pool as conv-layout leaves it between convs: NHWC in, NHWC out."""
    from pool_reduce_cases import channels_last_group

    attrs = "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>"
    text = channels_last_group(
        "max_pool2d", (32, 64, 112, 112), "f16", attrs, (32, 64, 56, 56), True, False
    )
    _check(text, "pool", exact=True, pipeline="infer-shapes")


def test_conv_pool_conv_mean_chain_channels_last() -> None:
    """ResNet's stem shape end to end: conv -> max pool -> 1x1 conv -> global mean, the
    pool and the mean reading the convs' NHWC results in place."""
    text = """
func.func @f(%x: tensor<8x64x56x56xf16>, %w1: tensor<64x64x3x3xf16>, %w2: tensor<256x64x1x1xf16>)
    -> tensor<8x256x1x1xf16> {
  %c1 = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<8x64x56x56xf16> * tensor<64x64x3x3xf16>
  %r1 = ai.relu %c1 : tensor<8x64x56x56xf16>
  %p = ai.max_pool2d %r1 {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>} : tensor<8x64x56x56xf16>
  %c2 = ai.conv2d %p, %w2 : tensor<8x64x28x28xf16> * tensor<256x64x1x1xf16>
  %m = ai.reduce_mean %c2 {axes = array<i64: 2, 3>, keepdims = true} : tensor<8x256x28x28xf16>
  return %m : tensor<8x256x1x1xf16>
}
"""  # noqa: E501
    _check(text, "pool")
    _check(text, "reduce")
