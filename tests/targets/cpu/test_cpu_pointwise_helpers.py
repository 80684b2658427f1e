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


@pytest.mark.parametrize(("hw", "opaque"), [(4, True), (8, False)])
def test_short_inner_loops_run_over_an_opaque_count(cache, hw, opaque):
    """A squeeze-excite scale over 4x4 planes has a 16-element inner loop, which LLVM
    unrolled into scalar code before vectorising (Numba leaves SLP off; 8x960x4x4 took 116
    us against 27 at one thread): it loops over ``opaque_count(16)`` (``rows.SHORT_ROWS``)
    and keeps a vector body; an 8x8 plane's 64 keep their constant count."""
    from fusec.runtime.launch import SOURCE_NAME

    # 8 x 512 planes: above PARALLEL_MIN_ELEMENTS, a prange loop as the SE scale had
    v, x = "tensor<8x512x1x1xf32>", f"tensor<8x512x{hw}x{hw}xf32>"
    text = f"""
func.func @f(%x: {x}, %s: {v}) -> {x} {{
  %y = ai.mul %x, %s : {x} * {v}
  return %y : {x}
}}"""
    program = check(text, cache=cache, kind="pointwise")
    (kernel,) = program.kernels
    assert ("range(opaque_count(16))" in kernel.source) is opaque
    if opaque:
        fn = getattr(cache.load_module(kernel.source), f"{SOURCE_NAME}_pointwise")
        llvm = "\n".join(fn.inspect_llvm().values())
        # unrolled, the row was 16 scalar multiplies (beside a vector form LLVM made of
        # the outer loop, which the prange's chunks did not take); now one, the remainder's
        assert re.search(r"fmul <(8|16) x float>", llvm)
        assert len(re.findall(r"fmul float ", llvm)) < 4, "the inner loop ran unrolled"
