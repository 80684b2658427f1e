"""The cpu attention kernel with ``softcap`` (Gemma-2): each score is ``softcap *
tanh(x * scale / softcap) + mask`` in the kernel's score loop, so a soft-capped attention
stays one attention kernel. Poisoned outputs on fresh random inputs against the float64
reference (``cpu_check.check``); standard-normal q and k give scores of a few units,
where the caps below saturate the tanh. (Rows masked out entirely with a cap:
``test_cpu_blocked.py``'s nan_to_zero test.)"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check

from fusec.runtime.cache import KernelCache
from fusec.targets.cpu import blocked as cpu_blocked


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def four_blocks_at_least(monkeypatch):
    """Ragged row blocks on small shapes, whatever this machine's thread count."""
    monkeypatch.setattr(cpu_blocked, "MIN_BLOCKS", 4)


def _t(shape, dtype="f32"):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


CASES = {
    # q, key, v, mask shapes, scale, softcap, dtype
    "row-mask": ((2, 3, 70, 8), (2, 3, 24, 8), (2, 3, 24, 12), (70, 24), 0.375, 1.5, "f32"),
    # a mask constant along T: the max is not folded through the tanh, the scores stored
    "row-constant-mask": ((3, 100, 8), (3, 64, 8), (3, 64, 8), (3, 100, 1), 0.5, 2.0, "f32"),
    "f16": ((2, 40, 16), (2, 33, 16), (2, 33, 8), (40, 33), 0.25, 1.0, "f16"),
}


@pytest.mark.parametrize("case", CASES)
def test_soft_capped_attention_blocks(cache, case):
    q, key, v, mask, scale, cap, dtype = CASES[case]
    y = (*np.broadcast_shapes(q[:-2], key[:-2], v[:-2]), q[-2], v[-1])
    tq, tk, tv, tm, ty = (_t(s, dtype) for s in (q, key, v, mask, y))
    text = f"""
func.func @f(%q: {tq}, %k: {tk}, %v: {tv}, %m: {tm}) -> {ty} {{
  %a = ai.attention %q, %k, %v, %m {{scale = {scale} : f32, softcap = {cap} : f32}} : {tq} * {tk} * {tv} * {tm}
  return %a : {ty}
}}"""  # noqa: E501
    program = check(text, cache=cache, kind="attention")
    source = program.kernels[0].source
    assert f"f32({cap!r}) * math.tanh(srow[j] * f32({scale!r}) / f32({cap!r}))" in source
    assert "row_exp_sum_affine_inplace" not in source  # never folded through the tanh
    assert program.kernels[0].scratch.max_tasks > 1
    assert program.kernels[0].scratch.full_bytes == 0  # no scores of a whole head


def test_gemma2_chain_is_one_attention_kernel(cache):
    """The exported chain (head split of one QKV tensor, k transposed, (s * c) / cap,
    tanh, * cap, causal mask, softmax, @ v) through the whole cpu pipeline: one
    attention kernel reading the heads where they are, the maths of the ops as written."""
    qkv, heads, s = _t((1, 24, 3, 2, 8)), _t((1, 2, 24, 8)), _t((1, 2, 24, 24))
    mask = np.triu(np.full((24, 24), -np.inf), 1)
    rows = ", ".join("[" + ", ".join("0xFF800000" if x else "0.0" for x in r) + "]" for r in mask)
    text = f"""
func.func @f(%x: {_t((1, 24, 48))}) -> {heads} {{
  %r = ai.reshape %x {{shape = array<i64: 1, 24, 3, 2, 8>}} : {_t((1, 24, 48))}
  %p = ai.transpose %r {{perm = array<i64: 2, 0, 3, 1, 4>}} : {qkv}
  %q0 = ai.slice %p {{offsets = array<i64: 0, 0, 0, 0, 0>, sizes = array<i64: 1, 1, 2, 24, 8>, strides = array<i64: 1, 1, 1, 1, 1>}} : {_t((3, 1, 2, 24, 8))}
  %q = ai.reshape %q0 {{shape = array<i64: 1, 2, 24, 8>}} : {_t((1, 1, 2, 24, 8))}
  %k0 = ai.slice %p {{offsets = array<i64: 1, 0, 0, 0, 0>, sizes = array<i64: 1, 1, 2, 24, 8>, strides = array<i64: 1, 1, 1, 1, 1>}} : {_t((3, 1, 2, 24, 8))}
  %k = ai.reshape %k0 {{shape = array<i64: 1, 2, 24, 8>}} : {_t((1, 1, 2, 24, 8))}
  %v0 = ai.slice %p {{offsets = array<i64: 2, 0, 0, 0, 0>, sizes = array<i64: 1, 1, 2, 24, 8>, strides = array<i64: 1, 1, 1, 1, 1>}} : {_t((3, 1, 2, 24, 8))}
  %v = ai.reshape %v0 {{shape = array<i64: 1, 2, 24, 8>}} : {_t((1, 1, 2, 24, 8))}
  %kt = ai.transpose %k {{perm = array<i64: 0, 1, 3, 2>}} : {heads}
  %qk = ai.matmul %q, %kt : {heads} * {_t((1, 2, 8, 24))}
  %c = arith.constant dense<0.5> : tensor<f32>
  %sc = ai.mul %qk, %c : {s} * tensor<f32>
  %cap = arith.constant dense<2.0> : tensor<f32>
  %d = ai.div %sc, %cap : {s} * tensor<f32>
  %t = ai.tanh %d : {s}
  %capped = ai.mul %t, %cap : {s} * tensor<f32>
  %m = arith.constant dense<[{rows}]> : {_t((24, 24))}
  %masked = ai.add %capped, %m : {s} * {_t((24, 24))}
  %pr = ai.softmax %masked : {s}
  %o = ai.matmul %pr, %v : {s} * {heads}
  return %o : {heads}
}}"""  # noqa: E501
    program = check(text, cache=cache, fuse=True)
    assert [k.kind for k in program.kernels] == ["attention"]
