"""The cpu pointwise template's exponentials and erfc are the loop-vectorising helpers
(``exp_f32``, ``erfc_f32``), as in the blocked and row templates' epilogues: libm's scalar
``expf``/``erfcf`` kept a standalone GELU + sigmoid over 16x64x256 scalar (3.7 ms against
0.53 ms, one thread). Checked against the float64 reference, outputs poisoned first."""

from __future__ import annotations

import re

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


def test_pointwise_offsets_are_unsigned_so_the_prange_body_vectorises(cache):
    """A signed index makes Numba check every access for a negative one, which LLVM cannot
    prove away inside a ``prange`` body: EfficientNet-B0's SE scale (a per-channel vector
    times 1x144x32x32) ran scalar, 189 us against 18 us at one thread. Every load and store
    of the loop goes through ``U`` (uint64); the broadcast operand and a ragged shape are
    checked against the reference."""
    v, x = "tensor<1x7x1x1xf32>", "tensor<1x7x9x11xf32>"
    text = f"""
func.func @f(%s: {v}, %x: {x}) -> {x} {{
  %y = ai.mul %s, %x : {v} * {x}
  %z = ai.relu %y : {x}
  return %z : {x}
}}"""
    (kernel,) = check(text, cache=cache, kind="pointwise").kernels
    accesses = re.findall(r"\b(?:in\d+|out\d+)\[([^\]]*)\]", kernel.source)
    assert len(accesses) == 3 and all(a.startswith("U(") for a in accesses), accesses
