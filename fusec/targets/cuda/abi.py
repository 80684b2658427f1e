"""The runtime ABI of generated CUDA kernel modules: the only fusec module they import.

Generated source names everything it needs from here, so the runtime's
internals can move without invalidating cached kernels or their text:

* ``cuda``: ``numba.cuda``, prepared, and ``launch_bounds``: ``cuda.jit``'s options for a
  number of blocks a multiprocessor (``fusec.targets.cuda.env``);
* the device helpers of ``fusec.targets.cuda.device`` (``ld_f16``,
  ``load_bf16x8``, ``block_sum``, ``round_f16``...; ``device.helper_names()``);
* ``move4``, ``move8``, ``move16``, ``load_bits``, ``store_bits``, ``udiv32``,
  ``urem32``, ``ufield32``, ``sfield32``, ``load_bytes4/8/16``: raw moves and 32-bit index
  and bit-field arithmetic of the copy kernels, vector loads of one-byte elements
  (``fusec.targets.cuda.rawmove``);
* ``load_words1/2/4``, ``unpack_i4x8``, ``w4_magic``, ``f16_bits``, ``bf16_bits``: the W4A16
  kernels' vector loads of codes, 4-bit codes unpacked as float bits, and 16-bit floats'
  bits as f32 (``fusec.targets.cuda.w4_device``);
* ``w4_mma_<f16|bf16>x<1|2>``, ``w4_mmaq_<f16|bf16>x<1|2>`` (no sums of x): the W4A16
  Tensor Core kernel's codes as 16-bit floats into ``mma.sync``
  (``fusec.targets.cuda.w4_mma_device``);
* ``align16``, ``mbar_init``, ``mbar_arrive``, ``bulk_load``, ``mbar_wait``, ``lds_words4``,
  ``cp_async16``, ``cp_async_arrive``: bulk and asynchronous copies into a ring of
  shared-memory stages on mbarriers (``fusec.targets.cuda.bulk``);
* ``grid_dependency_wait``: every kernel's first statement, the wait for the kernels it
  depends on in a graph with programmatic edges (``fusec.targets.cuda.dependent``);
* ``ieee_conv2d``, ``ieee_matmul``, ``ieee_addmm``, ``ieee_attention``, ``moe_experts``:
  the PyTorch fallback's IEEE-f32 library calls (``fusec.targets.cuda.torch_runtime``);
* ``TileConfig``, ``Epilogue``, ``GemmSpec``, ``W4B``, ``GemmLaunch``: the Tensor Core
  GEMM's description (``W4B``: an int4 B its producer dequantizes) and launcher, with
  ``Prologue``/``LayerNormPrep`` (its LayerNorm pre-pass) and
  ``Finalise``/``SoftmaxFinalise`` (its long-row softmax pass) (``fusec.targets.cuda.gemm``);
* ``ConvGeometry``, ``ConvTile``, ``ConvSpec``, ``DirectConvSpec``, ``ConvLaunch``: the
  implicit-GEMM and direct convs (``fusec.targets.cuda.conv``);
* ``AttentionSpec``, ``AttentionLaunch``: flash attention (``fusec.targets.cuda.attention``);
* ``RelayoutSpec``, ``RelayoutLaunch``: the channels-last copy (``fusec.targets.cuda.conv``);
* ``MoeShape``, ``MoeKernelSpec``, ``MoeLaunch``: a mixture-of-experts layer's route, gather,
  grouped GEMMs, SwiGLU and combine (``fusec.targets.cuda.experts``);
* ``scratch_f32``, ``scratch_f64``: a module's float32 / float64 workspace per stream (a
  two-pass reduction's partials, ``fusec.targets.cuda.workspace``).

Names resolve on first use, so a module that needs only the torch helpers
never imports numba.cuda, and one that needs the device helpers never imports
the GEMM's toolchain. Removing or changing the meaning of a name here is a
break of every cached kernel: add names, do not repurpose them.
"""

from __future__ import annotations

import importlib
from typing import Any

_PROVIDERS: dict[str, str] = {
    "move4": "fusec.targets.cuda.rawmove",
    "move8": "fusec.targets.cuda.rawmove",
    "move16": "fusec.targets.cuda.rawmove",
    "load_bits": "fusec.targets.cuda.rawmove",
    "load_bytes4": "fusec.targets.cuda.rawmove",
    "load_bytes8": "fusec.targets.cuda.rawmove",
    "load_bytes16": "fusec.targets.cuda.rawmove",
    "store_bits": "fusec.targets.cuda.rawmove",
    "udiv32": "fusec.targets.cuda.rawmove",
    "urem32": "fusec.targets.cuda.rawmove",
    "ufield32": "fusec.targets.cuda.rawmove",
    "sfield32": "fusec.targets.cuda.rawmove",
    "load_words1": "fusec.targets.cuda.w4_device",
    "load_words2": "fusec.targets.cuda.w4_device",
    "load_words4": "fusec.targets.cuda.w4_device",
    "unpack_i4x8": "fusec.targets.cuda.w4_device",
    "w4_magic": "fusec.targets.cuda.w4_device",
    "f16_bits": "fusec.targets.cuda.w4_device",
    "bf16_bits": "fusec.targets.cuda.w4_device",
    "w4_mma_f16x1": "fusec.targets.cuda.w4_mma_device",
    "w4_mma_f16x2": "fusec.targets.cuda.w4_mma_device",
    "w4_mma_bf16x1": "fusec.targets.cuda.w4_mma_device",
    "w4_mma_bf16x2": "fusec.targets.cuda.w4_mma_device",
    "w4_mmaq_f16x1": "fusec.targets.cuda.w4_mma_device",
    "w4_mmaq_f16x2": "fusec.targets.cuda.w4_mma_device",
    "w4_mmaq_bf16x1": "fusec.targets.cuda.w4_mma_device",
    "w4_mmaq_bf16x2": "fusec.targets.cuda.w4_mma_device",
    "align16": "fusec.targets.cuda.bulk",
    "mbar_init": "fusec.targets.cuda.bulk",
    "mbar_arrive": "fusec.targets.cuda.bulk",
    "bulk_load": "fusec.targets.cuda.bulk",
    "mbar_wait": "fusec.targets.cuda.bulk",
    "lds_words4": "fusec.targets.cuda.bulk",
    "cp_async16": "fusec.targets.cuda.bulk",
    "cp_async_arrive": "fusec.targets.cuda.bulk",
    "grid_dependency_wait": "fusec.targets.cuda.dependent",
    "launch_bounds": "fusec.targets.cuda.env",
    "ieee_conv2d": "fusec.targets.cuda.torch_runtime",
    "tf32_conv2d": "fusec.targets.cuda.torch_runtime",
    "ieee_matmul": "fusec.targets.cuda.torch_runtime",
    "ieee_addmm": "fusec.targets.cuda.torch_runtime",
    "ieee_attention": "fusec.targets.cuda.torch_runtime",
    "moe_experts": "fusec.targets.cuda.torch_runtime",
    "TileConfig": "fusec.targets.cuda.gemm.config",
    "Epilogue": "fusec.targets.cuda.epilogue",
    "GemmSpec": "fusec.targets.cuda.gemm.cpp",
    "W4B": "fusec.targets.cuda.gemm.cpp",
    "GemmLaunch": "fusec.targets.cuda.gemm.launcher",
    "Prologue": "fusec.targets.cuda.gemm.launcher",
    "Finalise": "fusec.targets.cuda.gemm.launcher",
    "LayerNormPrep": "fusec.targets.cuda.gemm.aux",
    "SoftmaxFinalise": "fusec.targets.cuda.gemm.aux",
    "TransposeF32": "fusec.targets.cuda.gemm.aux",
    "TransposeCodes": "fusec.targets.cuda.gemm.aux",
    "Transpose": "fusec.targets.cuda.gemm.launcher",
    "ConvGeometry": "fusec.targets.cuda.conv.config",
    "ConvTile": "fusec.targets.cuda.conv.config",
    "ConvSpec": "fusec.targets.cuda.conv.cpp",
    "DirectConvSpec": "fusec.targets.cuda.conv.cpp",
    "ConvLaunch": "fusec.targets.cuda.conv.launcher",
    "AttentionSpec": "fusec.targets.cuda.attention.cpp",
    "AttentionLaunch": "fusec.targets.cuda.attention.launcher",
    "RelayoutSpec": "fusec.targets.cuda.conv.transpose",
    "RelayoutLaunch": "fusec.targets.cuda.conv.launcher",
    "MoeKernelSpec": "fusec.targets.cuda.experts.cpp",
    "MoeLaunch": "fusec.targets.cuda.experts.launcher",
    "MoeShape": "fusec.targets.cuda.experts.launcher",
    "scratch_f32": "fusec.targets.cuda.workspace",
    "scratch_f64": "fusec.targets.cuda.workspace",
}
#: Everything else (the device helpers) comes from here.
_DEVICE = "fusec.targets.cuda.device"
#: The module generated code imports (tests/targets/cuda/test_cuda_abi.py checks that it is
#: the only one).
MODULE = __name__


def names() -> tuple[str, ...]:
    """Every name of the ABI: ``cuda``, the providers' names and the device helpers."""
    helpers: list[str] = importlib.import_module(_DEVICE).helper_names()
    return ("cuda", *_PROVIDERS, *helpers)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "cuda":
        from fusec.targets.cuda.env import numba_cuda

        return numba_cuda()
    module = importlib.import_module(_PROVIDERS.get(name, _DEVICE))
    if name not in _PROVIDERS and name not in module.helper_names():
        raise AttributeError(f"'{name}' is not part of the generated-kernel ABI")
    return getattr(module, name)
