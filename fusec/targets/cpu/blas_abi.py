"""What a cpu kernel's source says about its GEMM: the BLAS modes and their import lines.

A matmul or conv kernel calls the BLAS numpy loads, through the intrinsics of its
integer width and threading mode, or Numba loops (``fusec.targets.cpu.blas`` finds
which; ``blas_mode`` remembers it). Its source imports them with ``import_line_for``,
which also names the mode and the intrinsics' ABI version, so a kernel cached under
one BLAS is never run against another. Text only: nothing here probes.
"""

from __future__ import annotations

import re

#: Bump when the intrinsics' calling convention changes (it is in every kernel's source).
ABI_VERSION = 3
#: ``FUSEC_CPU_GEMM=numba``: the kernels multiply with Numba loops, not the BLAS.
ENV_VAR = "FUSEC_CPU_GEMM"
#: Every answer ``blas.mode()`` gives (``blas_mode`` ignores a record holding another).
MODES = re.compile(r"numba|blas-(lp64|ilp64)-(local|global)")


def import_line_for(current: str) -> str:
    """The line a generated kernel module imports its GEMM and thread controls with, for
    the mode ``current`` (one of ``MODES``)."""
    if current == "numba":
        names = (
            "next_block, sgemm_numba as sgemm, sgemm_acc_numba as sgemm_acc, "
            "threads_noop as threads_begin, threads_noop as threads_end"
        )
    else:
        width = current.split("-")[1]
        threads = "threads_local" if current.endswith("local") else "threads_noop"
        names = (
            f"next_block, sgemm_{width} as sgemm, sgemm_acc_{width} as sgemm_acc, "
            f"{threads} as threads_begin, {threads} as threads_end"
        )
    return f"from fusec.targets.cpu.abi import {names}  # cpu_blas ABI {ABI_VERSION}, {current}"
