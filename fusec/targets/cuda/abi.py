"""The runtime ABI of generated CUDA kernel modules: the only fusec module they import.

Generated source names everything it needs from here, so the runtime's
internals can move without invalidating cached kernels or their text:

* ``cuda``: ``numba.cuda``, prepared (``fusec.targets.cuda.env``);
* the device helpers of ``fusec.targets.cuda.device`` (``ld_f16``,
  ``load_bf16x8``, ``block_sum``, ``round_f16``...; ``device.helper_names()``);
* ``move4``, ``move8``, ``move16``, ``load_bits``, ``store_bits``, ``udiv32``,
  ``urem32``: raw moves and 32-bit index arithmetic of the copy kernels
  (``fusec.targets.cuda.rawmove``);
* ``ieee_conv2d``, ``ieee_matmul``, ``ieee_addmm``, ``ieee_attention``: the
  PyTorch fallback's IEEE-f32 library calls (``fusec.targets.cuda.torch_runtime``);
* ``TileConfig``, ``Epilogue``, ``GemmSpec``, ``GemmLaunch``: the Tensor Core
  GEMM's description and launcher, with ``Prologue``/``LayerNormPrep`` (its
  LayerNorm pre-pass) and ``Finalise``/``SoftmaxFinalise`` (its long-row
  softmax pass) (``fusec.targets.cuda.gemm``);
* ``scratch_f32``: a module's float32 workspace per stream (a two-pass reduction's
  partials, ``fusec.targets.cuda.workspace``).

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
    "store_bits": "fusec.targets.cuda.rawmove",
    "udiv32": "fusec.targets.cuda.rawmove",
    "urem32": "fusec.targets.cuda.rawmove",
    "ieee_conv2d": "fusec.targets.cuda.torch_runtime",
    "ieee_matmul": "fusec.targets.cuda.torch_runtime",
    "ieee_addmm": "fusec.targets.cuda.torch_runtime",
    "ieee_attention": "fusec.targets.cuda.torch_runtime",
    "TileConfig": "fusec.targets.cuda.gemm.config",
    "Epilogue": "fusec.targets.cuda.epilogue",
    "GemmSpec": "fusec.targets.cuda.gemm.cpp",
    "GemmLaunch": "fusec.targets.cuda.gemm.launcher",
    "Prologue": "fusec.targets.cuda.gemm.launcher",
    "Finalise": "fusec.targets.cuda.gemm.launcher",
    "LayerNormPrep": "fusec.targets.cuda.gemm.aux",
    "SoftmaxFinalise": "fusec.targets.cuda.gemm.aux",
    "scratch_f32": "fusec.targets.cuda.workspace",
}
#: Everything else (the device helpers) comes from here.
_DEVICE = "fusec.targets.cuda.device"


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
