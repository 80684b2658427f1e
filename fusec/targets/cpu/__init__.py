"""The ``cpu`` target: Numba ``@njit(parallel=True)`` kernels, BLAS for matmul/conv cores.

``target`` holds the ``Target`` (templates per kind, runtime). The templates
(``pointwise``, ``row_reduce``, ``matmul``, ``conv``, ``attention``, ``pool``,
``reduce``, ``copy``) are siblings: none imports another (an import contract in
pyproject.toml). They stand on the kernel layer: ``common`` (the kernel module's
layout, stages, group helpers), ``loops`` (the pointwise loop), ``rows`` (the row
loop) with ``row_helpers`` (its reductions' source), ``segments`` (how a core group
splits into stages), ``blocked`` (the blocked kernel of the core templates),
``microkernel`` and ``depthwise_tiles`` (LLVM IR tiles, with ``intrinsics``: what such
intrinsics share), ``winograd``, ``blas``/``blas_calls``,
``buffers``, ``tasks`` and ``reduce_helpers`` (what the generated modules call, through
``abi``: the only fusec module they import). ``backend`` runs the kernels, ``threads``
tunes the pools.
"""
