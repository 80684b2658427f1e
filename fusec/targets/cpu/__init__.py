"""The ``cpu`` target: Numba ``@njit(parallel=True)`` kernels, BLAS for matmul/conv cores.

``target`` holds the ``Target`` (templates per kind, runtime); one module per
template (``pointwise``, ``row_reduce``, ``matmul``, ``conv``) and their shared
pieces (``common``); ``backend`` runs the kernels, ``threads`` tunes the pools.
"""
