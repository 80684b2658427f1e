"""GEMMs whose A has batch dims folded into M (NHWC ConvNeXt-style, ``[N, H, W, K] @
[K, C]``) with epilogue inputs of every broadcast kind, shared by the source test
(``test_gemm_folded_view.py``) and the GPU test (``test_gemm_folded_view_gpu.py``)."""

from __future__ import annotations


def t(*shape: int, dtype: str = "f16") -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def folded_ir(n: int, h: int, w: int, k: int, c: int, scale: tuple[int, ...]) -> str:
    """``(x @ w + b) * s + r``: ``s`` of shape ``scale`` (a per-channel layer scale
    ``(1, 1, 1, c)``, a per-pixel one ``(n, h, w, 1)``, or a per-image one ``(n, 1, 1, c)``,
    which has no ``(rows, N)`` view), ``r`` the residual of the output's shape."""
    o = t(n, h, w, c)
    return f"""func.func @g(%x: {t(n, h, w, k)}, %w: {t(k, c)}, %b: {t(c)}, %s: {t(*scale)},
                 %r: {o}) -> {o} {{
  %v0 = ai.matmul %x, %w : {t(n, h, w, k)} * {t(k, c)}
  %v1 = ai.bias_add %v0, %b {{axis = 3 : i64}} : {o} * {t(c)}
  %v2 = ai.mul %v1, %s : {o} * {t(*scale)}
  %v3 = ai.add %v2, %r : {o} * {o}
  return %v3 : {o}
}}
"""
