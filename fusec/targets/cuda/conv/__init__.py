"""Conv2d on the cuda target: the implicit GEMM on the Hopper core and the direct template.

``config`` holds the conv geometry and the tile configuration, ``cpp`` generates
the C++ (implicit GEMM with its weight re-layout; direct convolution), ``host``
encodes the tensor maps and launches on the caller's stream, ``model`` is a
numpy model of the implicit GEMM's index arithmetic, ``template`` is the cuda
target's ``conv`` kind.
"""
