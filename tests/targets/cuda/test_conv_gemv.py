"""The conv template's gemv route (``conv.gemv``): which convs take it (no GPU needed).

Its numerics run under the simulator (``test_cuda_sim.py``: ``GEMV_CASES``)."""

from __future__ import annotations

import cuda_cases
import pytest

import fusec
from fusec.targets.cuda.conv.config import ConvGeometry
from fusec.targets.cuda.conv.gemv import MAX_ROWS, gemv_problem, plan_rows

pytestmark = pytest.mark.requires_target("cuda")

GEMV = "conv as dot products on CUDA cores"
IMPLICIT = "implicit-GEMM conv2d on the Hopper Tensor Cores"


def _targets(text: str) -> list[str]:
    compiled = fusec.compile(text, target="cuda", executable=False)
    return [k.source for k in compiled.kernels if k.kind == "conv"]


def test_squeeze_excite_convs_take_the_gemv_kernel() -> None:
    sources = _targets(cuda_cases.squeeze_excite(1, 96, 24, 7, "f16"))
    assert len(sources) == 2 and all(GEMV in s for s in sources)


def test_the_switch_and_the_row_limit_keep_the_implicit_gemm(monkeypatch) -> None:
    many = _targets(cuda_cases.squeeze_excite(MAX_ROWS + 1, 96, 24, 7, "f16"))
    assert len(many) == 2 and all(IMPLICIT in s for s in many)
    monkeypatch.setenv("FUSEC_CONV_GEMV", "off")
    off = _targets(cuda_cases.squeeze_excite(1, 96, 24, 7, "f16"))
    assert len(off) == 2 and all(IMPLICIT in s for s in off)
    monkeypatch.setenv("FUSEC_CONV_GEMV", "sometimes")
    with pytest.raises(Exception, match="FUSEC_CONV_GEMV"):
        _targets(cuda_cases.squeeze_excite(1, 96, 24, 7, "f16"))


def _geo(n=1, c=96, h=1, w=1, k=24, r=1, s=1, pad=0, groups=1) -> ConvGeometry:
    return ConvGeometry(n, c, h, w, k, r, s, 1, 1, pad, pad, pad, pad, 1, 1, groups)


@pytest.mark.parametrize(
    ("geo", "why"),
    [
        (_geo(), None),
        (_geo(n=MAX_ROWS), None),
        (_geo(h=2, w=2), "1x1 plane"),
        (_geo(r=3, s=3, pad=1), "1x1 plane"),
        (_geo(c=96, k=96, groups=96), "1x1 plane"),
        (_geo(n=MAX_ROWS + 1), "images"),
        (_geo(c=8192), "images"),
    ],
)
def test_gemv_problem(geo: ConvGeometry, why: str | None) -> None:
    found = gemv_problem(geo, ())
    assert (found is None) if why is None else (why in found)


def test_rows_are_whole_lanes_of_about_eight_products() -> None:
    wide = plan_rows(_geo(c=1152, k=48))  # EfficientNet-B0's widest squeeze
    assert (wide.ty, wide.z, wide.blocks) == (256, 1, 48)
    narrow = plan_rows(_geo(c=48, k=1152))  # ... and its excite
    assert (narrow.ty, narrow.z, narrow.blocks) == (8, 32, 36)
