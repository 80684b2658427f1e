"""The cpu pointwise template's exponentials and erfc are the loop-vectorising helpers
(``exp_f32``, ``erfc_f32``), as in the blocked and row templates' epilogues: libm's scalar
``expf``/``erfcf`` kept a standalone GELU + sigmoid over 16x64x256 scalar (3.7 ms against
0.53 ms, one thread). Checked against the float64 reference, outputs poisoned first."""

from __future__ import annotations

import pytest
from cpu_check import check

from fusec.runtime.cache import KernelCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def test_pointwise_gelu_sigmoid_tanh_gelu_call_the_helpers(cache):
    t = "tensor<3x37x41xf32>"  # odd sizes: the loops' vector remainders
    text = f"""
func.func @f(%x: {t}, %y: {t}) -> ({t}, {t}) {{
  %a = ai.add %x, %y : {t} * {t}
  %g = ai.gelu %a : {t}
  %s = ai.sigmoid %g : {t}
  %h = ai.gelu %a {{approximate = "tanh"}} : {t}
  return %s, %h : {t}, {t}
}}"""
    (kernel,) = check(text, cache=cache, kind="pointwise").kernels
    assert kernel.kind == "pointwise"
    assert "erfc_f32(" in kernel.source and "exp_nonpos_f32(" in kernel.source
    assert "math.erfc(" not in kernel.source and "math.exp(" not in kernel.source
