"""Thread-pool settings that keep Numba's and BLAS's worker threads from fighting.

A cpu kernel alternates Numba parallel loops (OpenMP threads) with numpy's
BLAS (OpenBLAS threads). Both pools busy-wait after finishing a job, so each
steals the cores the other needs next: measured on a 2-core machine, a
matmul + fused epilogue took 8.2 ms with the defaults, 3.9 ms with a passive
OpenMP wait policy and 2.3 ms with OpenBLAS's spinning shortened too.

The settings are environment variables read when the libraries start:
``OMP_WAIT_POLICY`` when Numba first starts its OpenMP pool (fusec's cpu
runtime calls ``configure()`` before that), ``OPENBLAS_THREAD_TIMEOUT`` only
when numpy is first imported (so only entry points that run before numpy, such
as the ``fusec`` command and the benchmarks, can apply it). Values the user
has set are kept.
"""

from __future__ import annotations

import os

DEFAULTS = {
    "OMP_WAIT_POLICY": "PASSIVE",
    # OpenBLAS workers spin 2**N cycles before sleeping (default N = 28, ~0.1 s)
    "OPENBLAS_THREAD_TIMEOUT": "4",
}


def configure() -> None:
    """Set the thread-pool variables the user has not set (see the module docstring)."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
