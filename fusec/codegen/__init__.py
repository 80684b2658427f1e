"""Code generation: one template per (target, fused kind), chosen by a registry.

``generate(fused_op, target, name)`` returns a ``KernelSource``: the complete
source of one Python module holding the kernel(s) of one ``ai.fused`` group,
plus what the runtime needs to call it. Adding a fused kind (or a target) is
one template module plus one line in ``TEMPLATES``.

A template module exposes ``generate(fused_op: FusedOp, name: str) -> KernelSource``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from fusec.dialect.ops import FusedOp, spec_of
from fusec.dialect.shapes import TensorSpec

#: (target, kind) -> template module. The one rule per kind.
TEMPLATES: dict[tuple[str, str], str] = {
    ("cpu", "pointwise"): "fusec.codegen.cpu_pointwise",
    ("cpu", "row_reduce"): "fusec.codegen.cpu_row_reduce",
    ("cpu", "matmul"): "fusec.codegen.cpu_matmul",
    ("cpu", "conv"): "fusec.codegen.cpu_conv",
    ("cuda", "pointwise"): "fusec.codegen.cuda_pointwise",
    ("cuda", "row_reduce"): "fusec.codegen.cuda_row_reduce",
    ("cuda", "matmul"): "fusec.targets.cuda.gemm.template",  # Hopper wgmma GEMM (+ fallback)
    ("cuda", "conv"): "fusec.targets.cuda.conv.template",  # implicit GEMM / direct (+ fallback)
    ("cuda", "attention"): "fusec.targets.cuda.attention.template",  # flash-style (+ fallback)
}


@dataclass(frozen=True)
class KernelSource:
    """The generated module of one fused group, and how to call it.

    ``source`` is a complete Python module; the runtime imports it (through the
    kernel cache) and calls ``getattr(module, entry)(*inputs, *outputs)``.
    ``inputs``/``outputs`` are the group's operand and result types, in order;
    ``array_dtype`` is the element type of the arrays the entry takes
    (``"f32"`` on cpu, whose kernels get float32 copies of 16-bit tensors and
    whose results the runtime rounds back), or ``None`` when the entry takes
    the tensors' own element types.
    """

    name: str
    kind: str
    target: str
    source: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    entry: str = "launch"
    array_dtype: str | None = "f32"


def template_for(target: str, kind: str):
    """The template module for ``(target, kind)``, or None when there is none."""
    path = TEMPLATES.get((target, kind))
    return importlib.import_module(path) if path else None


def generate(fused_op: FusedOp, target: str, name: str) -> KernelSource:
    """Kernel source for ``fused_op`` on ``target``; ``name`` must be a generated identifier."""
    from fusec.codegen.expr import error_at, is_identifier

    if not is_identifier(name):
        raise ValueError(f"kernel name {name!r} is not an identifier")
    template = template_for(target, fused_op.kind_name)
    if template is None:
        kinds = sorted(k for t, k in TEMPLATES if t == target) or ["none"]
        raise error_at(
            fused_op,
            f"kind {fused_op.kind_name!r} has no '{target}' template "
            f"(kinds with one: {', '.join(kinds)})",
        )
    return template.generate(fused_op, name)


def io_specs(fused_op: FusedOp) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """(input specs, output specs) of a group, for ``KernelSource``."""
    return (
        tuple(spec_of(v.type) for v in fused_op.inputs),
        tuple(spec_of(r.type) for r in fused_op.results),
    )
