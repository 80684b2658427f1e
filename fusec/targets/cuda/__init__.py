"""The ``cuda`` target's Tensor Core code (the Hopper GEMM in ``gemm``)."""
