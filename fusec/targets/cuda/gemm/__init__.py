"""The Hopper Tensor Core GEMM of the cuda target (wgmma + TMA + mbarrier pipeline).

``cpp`` generates the C++ block program per ``TileConfig`` (``config``),
``fusec.targets.cuda.build`` links it into a Numba kernel and caches the cubin, ``host`` encodes
tensor maps and launches on the caller's stream, ``model`` is a numpy model of
the kernel's tile arithmetic for CPU tests.
"""

from fusec.targets.cuda.gemm.config import TileConfig, choose_config
from fusec.targets.cuda.gemm.cpp import Epilogue, GemmSpec

__all__ = ["Epilogue", "GemmSpec", "TileConfig", "choose_config"]
