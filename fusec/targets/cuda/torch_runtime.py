"""What the generated PyTorch fallback modules call: IEEE f32 conv and matmul, per call.

An f32 group must compute in f32: the IR says f32, and ``--check`` holds it to
1e-4. PyTorch lets cuDNN use TF32 for f32 convolutions by default
(``torch.backends.cudnn.allow_tf32``), and cuBLAS when the process asked for
it (``torch.set_float32_matmul_precision("high")``). Switching those
process-wide flags around each call would not be thread-safe (another
thread's op could run under the wrong setting) and would change the caller's
own ops, so nothing global is touched here:

* conv: ``aten::cudnn_convolution`` takes ``allow_tf32`` as an argument, so
  the one call runs in IEEE f32; where cuDNN cannot run it, the conv is
  computed in float64 and rounded to f32.
* matmul: cuBLAS is IEEE f32 unless the process asked for TF32; then this
  product is computed in float64 and rounded (Hopper's float64 tensor cores
  match its IEEE f32 rate).

Under ``precision="tf32"`` (issue 28) an f32 conv group on this fallback calls
``tf32_conv2d``: the same cuDNN call with ``allow_tf32=True`` (the Tensor Cores with tf32
operands), again without touching the process's flags. Fallback matmuls and attention
stay IEEE f32 (cuBLAS has no per-call TF32 switch).

The functions take ``torch`` as their first argument: importing this module
never imports PyTorch (``--emit ptx`` executes kernel modules without it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any


def ieee_conv2d(
    torch: Any,
    x: Any,
    w: Any,
    bias: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    allow_tf32: bool = False,
) -> Any:
    """An f32 2-D convolution (+ bias) in IEEE f32, whatever the TF32 flags say (in tf32 on
    cuDNN's Tensor Core kernels with ``allow_tf32``)."""
    if x.is_cuda:
        try:
            y = torch.ops.aten.cudnn_convolution(
                x,
                w,
                list(padding),
                list(stride),
                list(dilation),
                groups,
                bool(torch.backends.cudnn.benchmark),
                bool(torch.backends.cudnn.deterministic),
                allow_tf32,
            )
        except (RuntimeError, NotImplementedError):  # no cuDNN, or a case it rejects
            y = torch.nn.functional.conv2d(
                x.double(), w.double(), None, stride, padding, dilation, groups
            ).float()
    else:  # no TF32 off the GPU
        y = torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups)
    if bias is not None:
        y.add_(bias.view(1, -1, 1, 1))  # y is a fresh tensor: add in place
    return y


#: An f32 2-D convolution (+ bias) in tf32 (``precision="tf32"``): ``ieee_conv2d``'s cuDNN
#: call with ``allow_tf32=True`` for this call alone (IEEE f32 where cuDNN cannot run it).
tf32_conv2d = functools.partial(ieee_conv2d, allow_tf32=True)


def _tf32_matmul(torch: Any) -> bool:
    return torch.get_float32_matmul_precision() != "highest"


def ieee_matmul(torch: Any, a: Any, b: Any) -> Any:
    """``torch.matmul`` of f32 operands in IEEE f32 (float64 when TF32 is on for matmuls)."""
    if a.is_cuda and _tf32_matmul(torch):
        return torch.matmul(a.double(), b.double()).float()
    return torch.matmul(a, b)


def ieee_addmm(torch: Any, bias: Any, a: Any, b: Any) -> Any:
    """``torch.addmm`` (bias + a @ b, cuBLAS's bias epilogue) of f32 operands in IEEE f32."""
    if a.is_cuda and _tf32_matmul(torch):
        return torch.addmm(bias.double(), a.double(), b.double()).float()
    return torch.addmm(bias, a, b)


def ieee_attention(
    torch: Any,
    q: Any,
    key: Any,
    v: Any,
    mask: Any,
    scale: float,
    nan_to_zero: bool,
    softcap: float = 0.0,
) -> Any:
    """``softmax(q @ key^T * scale + mask) @ v`` (``ai.attention``) op by op, in IEEE f32
    (16-bit operands widened, as the reference and the flash kernel accumulate: scores
    and probabilities rounded to bf16 were off by 1-4% on the H200's differential run);
    with ``softcap`` > 0 the scores are ``softcap * tanh(scores / softcap)`` before the
    mask (where the flash kernel refuses such an attention, e.g. heads of 256); NaN
    probabilities 0 with ``nan_to_zero``. (PyTorch's fused
    scaled_dot_product_attention would give a masked-out row 0 or NaN depending on its
    backend: these are the dialect's semantics on every backend.)"""
    out_dtype = q.dtype
    q, key, v, mask = (t.float() for t in (q, key, v, mask))
    scores = ieee_matmul(torch, q, key.transpose(-1, -2)) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    p = torch.softmax(scores + mask, dim=-1)
    if nan_to_zero:
        p = torch.nan_to_num(p, nan=0.0, posinf=float("inf"), neginf=float("-inf"))
    return ieee_matmul(torch, p, v).to(out_dtype)


def moe_experts(torch: Any, x: Any, weights: Any, experts: Any, gate_up: Any, down: Any) -> Any:
    """``ai.moe_experts`` through PyTorch, expert by expert over all tokens, each token's
    share selected (``torch.where``, so a token an expert does not serve never meets its
    values): E / k times the routed work, but no host synchronisation (no ``nonzero``, no
    counts read back), so it runs on the caller's stream and inside a CUDA graph. The
    products in x's type (cuBLAS, float32 accumulation; f32 in IEEE f32), the SwiGLU and
    the weighted sum in float32, h rounded to x's type as the reference rounds it. What
    the cuda target runs for the layers its grouped-GEMM kernel does not take (f32, which
    keeps IEEE maths; rows not 16-byte aligned: ``experts.template.plan``). Indices count
    from the end when negative; one out of range selects no expert, as in that kernel (a
    GPU kernel raises no error: the reference and the cpu kernel report it)."""
    count, hidden = gate_up.shape[0], gate_up.shape[1] // 2
    half = x.dtype != torch.float32

    def product(a: Any, b: Any) -> Any:
        return (a @ b.t()).float() if half else ieee_matmul(torch, a, b.t())

    picks = torch.where(experts < 0, experts + count, experts)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in range(count):
        chosen = picks == expert  # (T, k)
        share = torch.where(chosen, weights.float(), 0.0).sum(dim=1, keepdim=True)
        projected = product(x, gate_up[expert])
        gate, up = projected[:, :hidden], projected[:, hidden:]
        h = (torch.nn.functional.silu(gate) * up).to(x.dtype)
        y = product(h, down[expert])
        out += torch.where(chosen.any(dim=1, keepdim=True), y * share, 0.0)
    return out.to(x.dtype)
