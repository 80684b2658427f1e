"""The flash kernel reading a mask from memory (issue 28: padding masks from an
``attention_mask`` input, relative-position biases), the default since
``test_attention_mask_gpu.py`` passed on a GPU (``FUSEC_ATTENTION_MASKS=index``: off).

No GPU here: the plan (which masks, their broadcast strides), the generated C++'s
``mask_offset`` evaluated at every score against numpy's broadcast, the numpy model of the
kernel's online softmax in the mask path against the reference (a mask of the dtype's
minimum, rows the mask hides entirely), and the kernel building for sm_90a."""

from __future__ import annotations

import re

import attention_model as model
import numpy as np
import pytest
from attention_cases import attention_graph
from test_gemm_build import needs_toolchain

import fusec
from fusec.dialect import numpy_ops as K
from fusec.targets.cuda.attention.cpp import AttentionSpec
from fusec.targets.cuda.attention.template import MASKS_ENV
from fusec.targets.cuda.attention.views import Layout, mask_view

pytestmark = pytest.mark.requires_target("cuda")

#: (batch dims, sq, sk, the mask's shape): a padding mask, a per-head bias, a bias shared by
#: the batch, a 2-D one, a per-query-row one
MASKS = {
    "padding": ((2, 4), 40, 40, (2, 1, 1, 40)),
    "head-bias": ((2, 3), 33, 150, (1, 3, 33, 150)),
    "full": ((2, 2), 20, 20, (2, 2, 20, 20)),
    "square": ((3,), 130, 130, (130, 130)),
    "rows": ((2, 2), 17, 9, (2, 1, 17, 1)),
}


def _kernel(text: str, monkeypatch, masks: str = "tensor"):
    monkeypatch.setenv(MASKS_ENV, masks)
    compiled = fusec.compile(text, target="cuda", executable=False)
    (kernel,) = compiled.kernels
    return kernel


def _launch(text: str, monkeypatch):
    kernel = _kernel(text, monkeypatch)
    assert "the mask read from memory" in kernel.source.split("\n\n")[0]
    namespace: dict = {}
    exec(compile(kernel.source, kernel.name, "exec"), namespace)
    return namespace["ATTENTION"]


def test_by_default_a_mask_tensor_is_read_by_the_flash_kernel(monkeypatch) -> None:
    text = attention_graph((2, 4), 40, 40, 64, 64, mask=(2, 1, 1, 40))
    monkeypatch.delenv(MASKS_ENV, raising=False)
    (kernel,) = fusec.compile(text, target="cuda", executable=False).kernels
    assert "FALLBACK" not in kernel.source and "the mask read from memory" in kernel.source
    monkeypatch.setenv(MASKS_ENV, "index")  # the A/B baseline: the PyTorch fallback
    (kernel,) = fusec.compile(text, target="cuda", executable=False).kernels
    assert "FALLBACK" in kernel.source and "neither zero nor a causal" in kernel.source
    with pytest.raises(Exception, match="expected 'tensor' or 'index'"):
        _kernel(text, monkeypatch, masks="sometimes")


def test_a_padding_mask_is_read_at_broadcast_strides(monkeypatch) -> None:
    launch = _launch(attention_graph((2, 4), 40, 40, 64, 64, mask=(2, 1, 1, 40)), monkeypatch)
    # bh = b * 4 + h: the batch digit strides 40 keys, the head digit and rows do not move
    assert launch.spec.mask == ("f16", 0, 0, 1, ((2, 40), (4, 0)))
    assert launch.inputs["mask"] == 3 and launch.spec.arg_count() == (5, 0)
    source = launch.spec.cpp_source()
    assert "MASK = 1," in source and "u64 out, u64 mask)" in source
    assert "(long long)col * 1 + (long long)(bh / 4) * 40" in source


@pytest.mark.parametrize("name", list(MASKS))
def test_mask_offsets_read_the_broadcast_mask(name: str, monkeypatch) -> None:
    """``mask_offset`` of the generated C++, evaluated at every (bh, row, col), reads the
    element numpy's broadcast puts there."""
    batch, sq, sk, shape = MASKS[name]
    launch = _launch(attention_graph(batch, sq, sk, 64, 64, mask=shape), monkeypatch)
    flat = np.arange(np.prod(shape), dtype=np.float32)
    want = np.broadcast_to(flat.reshape(shape), (*batch, sq, sk)).reshape(-1, sq, sk)
    np.testing.assert_array_equal(model.mask_as_addressed(launch.spec, flat), want)


def test_mask_views_refuse_what_they_cannot_address() -> None:
    merged = Layout.contiguous((4, 6)).transpose((1, 0)).reshape((24,))
    assert merged is None or "one stride" in str(
        mask_view(merged, (24,), (2, 24), "f16")  # keys through two strides
    )
    assert "does not broadcast" in str(
        mask_view(Layout.contiguous((3, 5)), (3, 5), (2, 4, 5), "f16")
    )
    assert "rank" in str(mask_view(Layout.contiguous((1, 1, 1, 4)), (1, 1, 1, 4), (2, 4), "f16"))


def test_a_bf16_mask_is_read_as_bf16(monkeypatch) -> None:
    launch = _launch(attention_graph((2,), 64, 64, 128, 128, "bf16", mask=(64, 64)), monkeypatch)
    assert launch.spec.mask == ("bf16", 0, 64, 1, ((2, 0),))
    assert "using Mask = fusec::BF16;" in launch.spec.cpp_source()


# ------------------------------------------------------------ the online softmax, mask path


def _masked_spec(batch: int, sq: int, sk: int, **kw) -> AttentionSpec:
    mask = ("f32", 0, sk, 1, ((batch, sq * sk),))
    return AttentionSpec(batch, sq, sk, 64, 64, scale=0.125, mask=mask, **kw)


@pytest.mark.parametrize(
    "fill, nan_to_zero",
    [
        ("-inf", False),
        ("-inf", True),
        ("min", False),
        ("bias", False),
        ("nan", False),
        ("nan", True),
        ("+inf", True),
    ],
    ids=[
        "padding-inf",
        "padding-inf-nan-to-zero",
        "padding-f32-min",
        "random-bias",
        "a-nan",
        "a-nan-nan-to-zero",
        "a-plus-inf-nan-to-zero",
    ],
)
def test_the_mask_path_of_the_online_softmax_matches_the_reference(fill, nan_to_zero) -> None:
    """The model of the kernel (``attention_model.run``) against the reference executor's
    ``attention``: keys masked past each row's length (-inf, or f32's minimum, which times
    log2 e would be -inf before the maximum is subtracted), one row hidden entirely (NaN as
    the graph's softmax gives, 0 with nan_to_zero), or a random bias; 300 keys: three
    blocks, the masked ones whole blocks for some rows."""
    batch, sq, sk = 2, 150, 300
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((batch, n, 64)).astype(np.float16) for n in (sq, sk, sk))
    if fill == "bias":
        mask = rng.standard_normal((batch, sq, sk)).astype(np.float32) * 3
    elif fill in ("nan", "+inf"):  # one poisoned score a row in a few rows: NaN rows
        mask = rng.standard_normal((batch, sq, sk)).astype(np.float32)
        mask[0, ::7, 150] = np.nan if fill == "nan" else np.inf
    else:
        value = -np.inf if fill == "-inf" else np.finfo(np.float32).min
        lengths = rng.integers(1, sk, size=(batch, sq, 1))
        mask = np.where(np.arange(sk) >= lengths, value, 0.0).astype(np.float32)
        mask[1, 5] = value  # a row the mask hides entirely
    spec = _masked_spec(batch, sq, sk, nan_to_zero=nan_to_zero)
    out, writes = model.run(spec, q, k, v, mask)
    assert (writes == 1).all()
    ref = K.attention(q, k, v, mask, 0.125, nan_to_zero).astype(np.float32)
    assert (np.isnan(out) == np.isnan(ref)).all(), "NaN exactly where the graph has NaN"
    fin = np.isfinite(ref)
    assert np.linalg.norm(out[fin] - ref[fin]) / np.linalg.norm(ref[fin]) < 1e-3
    hidden = out[1, 5]
    if fill == "-inf":  # the graph's softmax of a row of -inf: NaN (0 with nan_to_zero)
        assert (hidden == 0).all() if nan_to_zero else np.isnan(hidden).all()
    elif fill == "min":  # a row of f32's minimum: every key alike, the mean of v
        np.testing.assert_allclose(hidden, v[1].astype(np.float32).mean(axis=0), atol=2e-3)


@needs_toolchain
@pytest.mark.parametrize("name", ["padding", "head-bias"])
def test_mask_kernels_build_for_sm_90a(name: str, monkeypatch, tmp_path) -> None:
    """With the mask's reads the kernel still builds without spills or local memory."""
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda import build

    batch, sq, sk, shape = MASKS[name]
    spec = _launch(attention_graph(batch, sq, sk, 64, 64, mask=shape), monkeypatch).spec
    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
