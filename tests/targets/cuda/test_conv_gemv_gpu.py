"""GPU tests of the conv template's gemv route at EfficientNet-B0's squeeze-excite sizes
(skipped without a GPU): the relaid 1x1 convs on a 1x1 plane (NHWC input, KRSC weights)
and whole blocks through the cuda pipeline, outputs poisoned with NaN first, against the
float64 reference at the element type's tolerance; the channels-last means of few tiles
that the reduce template now splits."""

from __future__ import annotations

import cuda_cases
import numpy as np
import pytest
from numerics import assert_close
from pool_reduce_cases import reduce_program

pytestmark = pytest.mark.gpu

GEMV = "conv as dot products on CUDA cores"


def _check(text: str, pipeline: str, gemv_convs: int, seed: int = 0) -> None:
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(text, target="cuda", pipeline=pipeline)
    assert sum(GEMV in k.source for k in compiled.kernels) == gemv_convs
    assert not any("FALLBACK" in k.source for k in compiled.kernels)
    args = cuda_cases.random_inputs(compiled.module, seed=seed)
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    for out, ref in zip(outs, refs, strict=True):
        assert_close(np.asarray(out), ref, what="gemv conv")


@pytest.mark.parametrize(
    ("n", "c", "k", "dtype", "output"),
    [
        (1, 1152, 48, "f16", "nhwc"),  # the widest squeeze
        (1, 48, 1152, "bf16", "nchw"),  # ... and its excite, stored NCHW for the scale
        (8, 672, 28, "f16", "nhwc"),  # 8 images: the most the route takes
        (3, 37, 5, "bf16", "nhwc"),  # ragged
    ],
)
def test_relaid_gemv_conv(n: int, c: int, k: int, dtype: str, output: str) -> None:
    _check(cuda_cases.conv_gemv_nhwc(n, c, k, dtype, output), "infer-shapes", 1)


@pytest.mark.parametrize(("n", "dtype"), [(1, "f16"), (4, "bf16")])
def test_squeeze_excite_block(n: int, dtype: str) -> None:
    _check(cuda_cases.squeeze_excite(n, 240, 10, 28, dtype), "fusec-cuda", 2, seed=n)


@pytest.mark.parametrize("channels", [96, 144])
def test_split_channels_last_mean(channels: int) -> None:
    """EfficientNet-B0's (1, 56, 56, C) means: 13 parts of 32 elements a lane now."""
    from pool_reduce_cases import inputs

    import fusec
    from fusec.runtime.reference import run_reference

    text = reduce_program((1, 56, 56, channels), "f16", "mean", (1, 2), True, False)
    compiled = fusec.compile(text, target="cuda")
    (kernel,) = [k for k in compiled.kernels if k.kind == "reduce"]
    assert "two passes: each reduction in 13 parts" in kernel.source
    args = inputs(compiled.module, 0, special=False)
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    for out, ref in zip(outs, refs, strict=True):
        assert_close(np.asarray(out), ref, what="reduce")
