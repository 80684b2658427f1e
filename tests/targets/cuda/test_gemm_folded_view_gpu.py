"""GPU check of the folded GEMM's epilogue in the ``(rows, N)`` view and of the
decomposition it keeps for a per-image input (``folded_cases``), against the float64
reference on fresh random inputs, output poisoned first (``test_gemm_gpu._check``)."""

from __future__ import annotations

import pytest
from folded_cases import folded_ir
from test_gemm_gpu import _check

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "scale", [(1, 1, 1, 96), (8, 14, 13, 1), (8, 1, 1, 96)], ids=["channel", "pixel", "image"]
)
def test_folded_gemm_epilogue_inputs(scale) -> None:
    _check(folded_ir(8, 14, 13, 200, 96, scale), "f16")
