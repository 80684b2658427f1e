"""``fusec.profile`` on the cuda target (skipped without a GPU): CUDA events around each
launch on the call's stream add up to the whole call's events, and an ordinary call's
wall time covers them.

The timed calls are queued behind a sleep kernel (``fusec.targets.cuda.profiling``),
so the launches run back to back: the kernels' event times must then sum to the
whole call's, up to the events' own cost between launches.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

# LayerNorm -> Tensor Core GEMM with bias, GELU and residual in its epilogue -> softmax
# over 1024 columns (a row_reduce kernel of its own): f16, three kernels or more.
BLOCK_F16 = """\
func.func @block(%x: tensor<4096x1024xf16>, %g: tensor<1024xf16>, %b: tensor<1024xf16>, \
%w: tensor<1024x1024xf16>, %c: tensor<1024xf16>) -> tensor<4096x1024xf16> {
  %n = ai.layernorm %x, %g, %b : tensor<4096x1024xf16> * tensor<1024xf16> * tensor<1024xf16>
  %m = ai.matmul %n, %w : tensor<4096x1024xf16> * tensor<1024x1024xf16>
  %a = ai.bias_add %m, %c : tensor<4096x1024xf16> * tensor<1024xf16>
  %e = ai.gelu %a : tensor<4096x1024xf16>
  %r = ai.add %e, %x : tensor<4096x1024xf16> * tensor<4096x1024xf16>
  %s = ai.softmax %r : tensor<4096x1024xf16>
  return %s : tensor<4096x1024xf16>
}
"""

# an f32 matmul: the PyTorch fallback (its ops timed by the same events), then a
# pointwise kernel
FALLBACK_F32 = """\
func.func @fallback(%x: tensor<2048x2048xf32>, %w: tensor<2048x2048xf32>, \
%c: tensor<2048xf32>) -> tensor<2048x2048xf32> {
  %m = ai.matmul %x, %w : tensor<2048x2048xf32> * tensor<2048x2048xf32>
  %s = ai.sigmoid %m : tensor<2048x2048xf32>
  %a = ai.bias_add %s, %c : tensor<2048x2048xf32> * tensor<2048xf32>
  return %a : tensor<2048x2048xf32>
}
"""


@pytest.mark.parametrize("text", [BLOCK_F16, FALLBACK_F32], ids=["block_f16", "fallback_f32"])
def test_kernel_events_add_up_to_the_call(text: str) -> None:
    import fusec

    compiled = fusec.compile(text, target="cuda")
    p = fusec.profile(compiled, repeat=20, warmup=3)
    assert sorted(k.name for k in p.kernels) == sorted(k.name for k in compiled.kernels)
    assert len(p.kernels) >= 2 and all(k.seconds > 0 for k in p.kernels)
    assert not any("outran" in note for note in p.notes), p.table()
    assert not any("not trustworthy" in note for note in p.notes), p.table()
    # back to back: the kernels fill the call but for the events between them
    slack = 0.05 * p.timed_seconds + 10e-6 * len(p.kernels)
    assert abs(p.timed_seconds - p.kernel_seconds) <= slack, p.table()
    # an ordinary call (results ready) takes at least its kernels' time
    assert p.kernel_seconds <= 1.10 * p.plain_seconds, p.table()
    if p.caps is not None:  # a known device: no kernel beats its roofline
        for k in p.kernels:
            assert k.roofline is not None and 0 < k.roofline <= 105.0, p.table()
    print(p.table())


# a weight-only int4 layer whose zero points (i4) and scales (bf16) are arguments: the
# random inputs hold ml_dtypes int4 and bfloat16 arrays, which torch reads only by value
# or through their bits
INT4_ARGUMENTS = """\
func.func @w4(%x: tensor<64x256xbf16>, %s: tensor<2x128xbf16>, %z: tensor<2x128xi4>) \
-> tensor<64x128xbf16> {
  %q = arith.constant dense<3> : tensor<256x128xi4>
  %w = ai.dequantize %q, %s, %z {axis = 0 : i64, block_size = 128 : i64} : \
tensor<256x128xi4> * tensor<2x128xbf16> * tensor<2x128xi4>
  %y = ai.matmul %x, %w : tensor<64x256xbf16> * tensor<256x128xbf16>
  return %y : tensor<64x128xbf16>
}
"""


def test_random_inputs_of_4_bit_codes_reach_the_gpu() -> None:
    """``fusec profile`` of a graph with i4 arguments (the bug: torch cannot read
    ml_dtypes' int4, an internal error before any kernel ran)."""
    import fusec

    compiled = fusec.compile(INT4_ARGUMENTS, target="cuda")
    p = fusec.profile(compiled, repeat=5, warmup=1)
    assert len(p.kernels) >= 1 and all(k.seconds > 0 for k in p.kernels), p.table()
