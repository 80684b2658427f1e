"""Code generation: one template per (target, fused kind), chosen by a registry.

``generate(fused_op, target, name)`` returns a ``KernelSource``: the complete
source of one Python module holding the kernel(s) of one ``ai.fused`` group,
plus what the runtime needs to call it. ``lowering(op, target)`` says how a
target computes an op, from the op's facts and the templates' ``lowers``.

A template module exposes ``generate(fused_op: FusedOp, name: str) -> KernelSource``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from fusec.dialect import ops as ai
from fusec.dialect.ops import AiOp, FusedOp, spec_of
from fusec.dialect.shapes import TensorSpec


@dataclass(frozen=True)
class Template:
    """Where a (target, kind) template lives and which non-elementwise ops it lowers.

    Every template computes elementwise ops from their scalar semantics (the
    op's ``scalar`` fact, rendered by the shared ``ExprGenerator``); ``lowers``
    names the other ops it handles (its anchor, a reduction it fuses in).
    """

    module: str
    lowers: tuple[type[AiOp], ...] = ()


_ROW = (ai.LayerNormOp, ai.SoftmaxOp)

#: (target, kind) -> template. The one rule per kind.
TEMPLATES: dict[tuple[str, str], Template] = {
    ("cpu", "pointwise"): Template("fusec.codegen.cpu_pointwise"),
    ("cpu", "row_reduce"): Template("fusec.codegen.cpu_row_reduce", _ROW),
    ("cpu", "matmul"): Template("fusec.codegen.cpu_matmul", (ai.MatmulOp, *_ROW)),
    ("cpu", "conv"): Template("fusec.codegen.cpu_conv", (ai.Conv2DOp,)),
    ("cuda", "pointwise"): Template("fusec.codegen.cuda_pointwise"),
    ("cuda", "row_reduce"): Template("fusec.codegen.cuda_row_reduce", _ROW),
    # the Hopper wgmma GEMM (PyTorch fallback for the groups it does not take)
    ("cuda", "matmul"): Template("fusec.targets.cuda.gemm.template", (ai.MatmulOp, *_ROW)),
    # implicit-GEMM / direct conv (PyTorch fallback for the groups they do not take)
    ("cuda", "conv"): Template("fusec.targets.cuda.conv.template", (ai.Conv2DOp,)),
    # flash-style attention (PyTorch fallback for the groups it does not take)
    ("cuda", "attention"): Template(
        "fusec.targets.cuda.attention.template", (ai.MatmulOp, ai.SoftmaxOp)
    ),
}


def lowering(op_type: type[AiOp], target: str) -> str | None:
    """How ``target`` computes ``op_type`` (for messages and the completeness test),
    or None when it cannot; an op's ``UNSUPPORTED`` fact overrides everything."""
    if target in op_type.UNSUPPORTED:
        return None
    if target == "reference":
        return "numpy reference" if op_type.reference is not AiOp.reference else None
    if op_type.has_scalar():
        return "scalar semantics in every template"
    kinds = [k for (t, k), tpl in TEMPLATES.items() if t == target and op_type in tpl.lowers]
    return f"template(s) of kind {', '.join(kinds)}" if kinds else None


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
    template = TEMPLATES.get((target, kind))
    return importlib.import_module(template.module) if template else None


def generate(fused_op: FusedOp, target: str, name: str) -> KernelSource:
    """Kernel source for ``fused_op`` on ``target``; ``name`` must be a generated identifier."""
    from fusec.codegen.expr import error_at, is_identifier

    if not is_identifier(name):
        raise ValueError(f"kernel name {name!r} is not an identifier")
    for op in fused_op.block.ops:
        if isinstance(op, AiOp) and target in op.UNSUPPORTED:
            raise error_at(op, f"is not supported on target '{target}': {op.UNSUPPORTED[target]}")
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
