"""cuda template for "experts" groups: one ``ai.moe_experts`` (issue 31).

Not a kernel of its own yet: the group runs through PyTorch (``torch_runtime.moe_experts``:
expert by expert over all tokens, each token's share selected, no host synchronisation,
so on the caller's stream and inside a CUDA graph), E / k times the routed work. The
kernel this stands in for (issue 31): the pairs sorted by expert on the device, one
grouped Tensor Core GEMM launch per projection over the experts' variable-size row
groups (the gate/up product with the SwiGLU in its epilogue, the down product with the
routing weight), and the k slots summed.
"""

from __future__ import annotations

from fusec.codegen import KernelSource
from fusec.dialect import ops as ai
from fusec.targets.cuda import torch_fallback

#: Why the group runs through PyTorch (its kernel header and ``--remarks`` say it).
REASON = (
    "ai.moe_experts has no grouped-GEMM kernel on the cuda target yet: "
    "expert by expert through PyTorch, every token's share selected (E / k times the work)"
)


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    return torch_fallback.generate(fused_op, name, reason=REASON, template="the experts template")
