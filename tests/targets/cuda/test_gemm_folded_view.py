"""The epilogue of a folded GEMM indexes its inputs in the output's ``(rows, N)`` view
(``template._row_view``) where every input has one: no division or remainder per element
(ConvNeXt-T's NHWC GEMMs spent twice the 2-D GEMM's time decomposing ``row``), and the
residual becomes a tile input (the L2 prefetch reaches it). A per-image input has no such
view: the leading dims are decomposed as before."""

from __future__ import annotations

import re

import pytest
from folded_cases import folded_ir


def _epilogue(text: str):
    import fusec
    from fusec.targets.cuda.gemm.template import linked_specs

    compiled = fusec.compile(text, target="cuda", executable=False)
    (spec,) = [s for k in compiled.kernels for s in linked_specs(k) if hasattr(s, "config")]
    return spec.epilogue


@pytest.mark.parametrize("scale", [(1, 1, 1, 96), (4, 6, 5, 1)], ids=["channel", "pixel"])
def test_collapsible_inputs_are_indexed_by_row_and_col(scale) -> None:
    epi = _epilogue(folded_ir(4, 6, 5, 64, 96, scale))
    assert "const long long i0 = row;" in epi.body and "const long long i1 = col;" in epi.body
    assert not re.search(r"row\s*/", epi.body) and "%" not in epi.body
    assert "i0 * 96 + i1" in epi.body  # the residual
    assert ("(e1, i1)" if scale[-1] != 1 else "(e1, i0)") in epi.body  # the scale
    assert len(epi.tile_inputs) == 1  # the residual: prefetched by pre=tile


def test_a_per_image_input_keeps_the_decomposition() -> None:
    epi = _epilogue(folded_ir(4, 6, 5, 64, 96, (4, 1, 1, 96)))
    assert "((long long)row / 30) % 4" in epi.body and epi.tile_inputs == ()
