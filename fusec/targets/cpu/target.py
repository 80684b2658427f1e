"""The ``cpu`` target: its templates per fused kind, and how it runs them."""

from __future__ import annotations

from typing import Any

from fusec.dialect import ops as ai
from fusec.target import Target, Template

_ROW = (ai.LayerNormOp, ai.SoftmaxOp)


class CpuTarget(Target):
    """Numba ``@njit(parallel=True)`` kernels, one per ``ai.fused`` group; BLAS for the
    matmul and conv cores; 16-bit tensors computed in float32 and rounded back."""

    name = "cpu"
    description = "Numba CPU kernels (parallel loops, BLAS cores)"
    templates = {
        "pointwise": Template("fusec.targets.cpu.pointwise"),
        "row_reduce": Template("fusec.targets.cpu.row_reduce", _ROW),
        "matmul": Template("fusec.targets.cpu.matmul", (ai.MatmulOp, *_ROW)),
        "conv": Template("fusec.targets.cpu.conv", (ai.Conv2DOp,)),
    }

    def backend(self, cache: Any = None) -> Any:
        from fusec.targets.cpu.backend import CpuBackend

        return CpuBackend(cache)


TARGET = CpuTarget()
