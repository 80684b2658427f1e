"""The ``cuda`` target: Numba CUDA kernels, and the Hopper Tensor Core GEMM (``gemm``).

``target`` holds the ``Target`` (templates per kind, availability, runtime);
one module per template (``pointwise``, ``row_reduce``, ``gemm.template``,
``torch_fallback`` for conv), their shared pieces (``common``), the device
helpers generated kernels call (``device``) and the runtime (``runtime``).
"""
