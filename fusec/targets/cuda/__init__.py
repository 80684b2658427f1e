"""The ``cuda`` target: Numba CUDA kernels, and the Hopper Tensor Core templates.

``target`` holds the ``Target`` (templates per kind, its passes and pipelines,
availability, runtime). The Numba templates (``pointwise``, ``row_reduce``, ``reduce``,
``pool``, ``copy``) share ``common`` and call the device helpers (``device``). The Tensor
Core templates ``gemm``, ``conv`` and ``attention`` are siblings: none imports another (an
import contract in pyproject.toml). They stand on the kernel layer: the C++ headers
(``include/fusec``, expanded by ``headers``), ``build`` (NVRTC + nvJitLink, the cubin
cache) with ``intrinsics``, ``linked`` (the launcher plumbing and module text),
``tensormaps`` (loaded cubins, TMA tensor maps, parameter blocks), ``epilogue`` and
``anchored`` (the generated epilogues), ``tile_rules`` (what the GEMM's and the conv's block
tiles share) and ``caps`` (the device). ``tiling`` is the ``tile-gemm`` pass over the GEMM
and conv groups. Generated modules import ``abi`` only.
"""
