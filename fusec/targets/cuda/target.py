"""The ``cuda`` target: its templates per fused kind, availability and runtime."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.target import Target, Template, deferred

_ROW = (ai.LayerNormOp, ai.SoftmaxOp)
#: Data ops of copy groups, through PyTorch: run-time lookups, running sums, arg-reductions.
_DATA = (ai.TakeOp, ai.CumSumOp, ai.ArgMaxOp, ai.ArgMinOp)
#: The layout ops one cuda copy kernel chains (``fusec.targets.cuda.gather``).
_INDEX_MAPS = (ai.TransposeOp, ai.ReshapeOp, ai.SliceOp, ai.ConcatOp, ai.GatherOp)


def _copy_accepts(members: Sequence[Operation], anchor: Operation | None) -> str | None:
    """A chain of index maps is one copy kernel; ``ai.take`` and ``ai.cumsum`` run alone
    (through PyTorch, op by op: anything fused with them would be slower)."""
    if len(members) == 1:
        return None
    data = next((op for op in members if not isinstance(op, _INDEX_MAPS)), None)
    if data is None:
        return None
    return (
        f"the cuda copy template runs {data.name} alone (through PyTorch): only chains of "
        "index maps (transpose, reshape, slice, gather, concat) are one kernel"
    )


def integer_values(members: Sequence[Operation], what: str) -> str | None:
    """``fusec.targets.cuda.common.integer_values``, imported when a group is judged: a
    compile for another target loads none of the cuda code generators (the start-up test
    in tests/test_cli_usability.py)."""
    from fusec.targets.cuda.common import integer_values as check

    return check(members, what)


def _floats_only(what: str) -> Any:
    """The ``accepts`` of a template whose kernels hold floats only (``integer_values``)."""

    def accepts(members: Sequence[Operation], anchor: Operation | None) -> str | None:
        return integer_values(members, what)

    return accepts


def gemm_accepts(members: Sequence[Operation], anchor: Operation | None) -> str | None:
    """Whether the Tensor Core GEMM computes a matmul group with these members.

    A group it cannot take runs op by op through PyTorch, where any fused work
    is slower than a separate kernel: so only the matmul alone, or an f16/bf16
    matmul of group inputs (rank >= 2, batch dims whole or broadcast) with a
    LayerNorm on its left operand (an unbatched right operand), an elementwise
    tail and at most one softmax over the last axis.
    """
    if len(members) == 1 or not isinstance(anchor, ai.MatmulOp):
        return None
    if (reason := integer_values(members, "the cuda Tensor Core GEMM")) is not None:
        return reason
    lhs, rhs, out = (spec_of(v.type) for v in (anchor.lhs, anchor.rhs, anchor.output))
    fallback = "so the group would run op by op through PyTorch"
    if lhs.dtype not in ("f16", "bf16") or rhs.dtype != lhs.dtype:
        return (
            f"the cuda Tensor Core GEMM takes f16/bf16 operands, not {lhs.dtype} x {rhs.dtype}, "
            f"{fallback}"
        )
    if lhs.rank < 2 or rhs.rank < 2:
        return f"the cuda Tensor Core GEMM takes no 1-D operand, {fallback}"
    memberset = set(members)
    if anchor.rhs.owner in memberset:
        return f"the cuda Tensor Core GEMM takes no prologue on its right operand, {fallback}"
    producer = anchor.lhs.owner
    if producer in memberset:
        if not isinstance(producer, ai.LayerNormOp) or producer.input.owner in memberset:
            return (
                "the cuda Tensor Core GEMM takes one prologue, a LayerNorm of a group input, "
                f"{fallback}"
            )
        if anchor.attr("transpose_a") or rhs.rank != 2:
            return (
                "the cuda Tensor Core GEMM's LayerNorm prologue needs a plain left operand and "
                f"an unbatched right one, {fallback}"
            )
        if (reason := layernorm_prologue_problem(out.shape[-1], lhs.shape[-1])) is not None:
            return reason
    softmaxes = [op for op in members if isinstance(op, ai.SoftmaxOp)]
    if len(softmaxes) > 1:
        return f"the cuda Tensor Core GEMM takes at most one softmax, {fallback}"
    for op in softmaxes:
        rank = spec_of(op.output.type).rank
        if op.attr("axis") % rank != rank - 1:
            return f"the cuda Tensor Core GEMM takes a softmax over the last axis only, {fallback}"
    escaping = [
        r
        for op in members
        for r in op.results
        if any(use.operation not in memberset for use in r.uses)
    ]
    if len(escaping) > 1:
        return f"the cuda Tensor Core GEMM writes one result, not {len(escaping)}, {fallback}"
    batch = out.shape[:-2]
    for shape in (lhs.shape[:-2], rhs.shape[:-2]):
        padded = (1,) * (len(batch) - len(shape)) + tuple(shape)
        if math.prod(shape) != 1 and padded != batch:
            return f"the cuda Tensor Core GEMM takes no partially broadcast batch, {fallback}"
    return None


LN_SPLIT_MIN_K = 1024  # the LayerNorm rows measured faster as a kernel of their own


def layernorm_prologue_problem(n: int, k: int) -> str | None:
    """Why ``LN(x) @ W`` (x: M x K, W: K x N) runs faster as two kernels, or None.

    In the GEMM the LayerNorm costs the rewrite ``rstd * (acc - mu * c) + d`` on every
    output element (M x N) plus a pre-pass over x and W; as a kernel of its own it costs
    one read and one write of x (M x K), and the GEMM reads the normalised x. With
    N >= K the kernel of its own wins (H200, 2026-12-01: MLP 8192x1024 -> 4096, 242.0
    against 257.5 us of kernels; LN(8192x4096) -> matmul 4096x4096 -> softmax, 0.473
    against 0.490 ms). Measured at K = 1024 and 4096 only: shorter rows keep the prologue
    (their whole rows fit the pipeline, ``ln=tile``, or the pre-pass is small).
    """
    if k < LN_SPLIT_MIN_K or n < k:
        return None
    return (
        f"the cuda Tensor Core GEMM leaves a LayerNorm over K = {k} to a kernel of its own: "
        f"its output is N = {n} >= K wide, and normalising x once costs less than the "
        "LayerNorm rewrite on every output element"
    )


class CudaTarget(Target):
    """Numba CUDA kernels (pointwise, row reductions); on the Hopper Tensor Cores the wgmma
    GEMM for matmul groups, the implicit-GEMM conv (a direct kernel for depthwise) and
    fused flash-style attention."""

    name = "cuda"
    description = "NVIDIA GPUs: Numba CUDA kernels and the Hopper Tensor Core GEMM"
    devices = ("cuda",)
    pipeline = "fusec-cuda"
    templates = {
        "pointwise": Template("fusec.targets.cuda.pointwise"),
        "row_reduce": Template(
            "fusec.targets.cuda.row_reduce", _ROW, accepts=_floats_only("the cuda row kernel")
        ),
        "matmul": Template(
            "fusec.targets.cuda.gemm.template",
            (ai.MatmulOp, ai.LayerNormOp, ai.SoftmaxOp),
            accepts=gemm_accepts,
        ),
        "conv": Template(
            "fusec.targets.cuda.conv.template",
            (ai.Conv2DOp,),
            accepts=deferred("fusec.targets.cuda.conv.template", "accepts"),
        ),
        "attention": Template(
            "fusec.targets.cuda.attention.template",
            (ai.AttentionOp,),
            accepts=deferred("fusec.targets.cuda.attention.template", "accepts"),
        ),
        "reduce": Template(
            "fusec.targets.cuda.reduce", (ai.ReduceMeanOp, ai.ReduceSumOp, ai.ReduceMaxOp)
        ),
        "pool": Template("fusec.targets.cuda.pool", (ai.MaxPool2DOp, ai.AvgPool2DOp)),
        "copy": Template(
            "fusec.targets.cuda.copy",
            (*_INDEX_MAPS, *_DATA),
            accepts=_copy_accepts,
        ),
        "view": Template("fusec.codegen.view", (ai.ReshapeOp,)),
    }

    def unavailable_reason(self, *, device: bool = True) -> str | None:
        from fusec.extras import install_hint
        from fusec.targets.cuda.env import cuda_support, gpu_available, simulator_enabled

        problem = cuda_support()
        if problem is not None:
            return f"{problem} ({install_hint('cuda')})"
        if device and not simulator_enabled() and not gpu_available():
            return "it needs an NVIDIA GPU, and none is usable here"
        return None

    def auto_selectable(self) -> bool:
        from fusec.targets.cuda.env import gpu_available

        return gpu_available()  # never the simulator behind the caller's back

    def assembly(self, kernel: KernelSource, arch: str) -> str:
        """PTX: NVVM's for Numba kernels; for a Tensor Core GEMM group, its linked kernels'
        (nvJitLink, link-time optimised) for sm_90a, which the wgmma instructions need."""
        from fusec.errors import FusecError
        from fusec.targets.cuda.env import require_cuda_compiler
        from fusec.targets.cuda.gemm.template import linked_specs
        from fusec.targets.cuda.kernels import emit_ptx, parse_arch

        cc = parse_arch(arch)
        require_cuda_compiler("cannot emit PTX")  # also when a linked kernel's PTX is cached
        specs = linked_specs(kernel)
        if not specs:
            return emit_ptx(kernel, cc) or "// (no Numba kernel: see its header)\n"
        if cc != (9, 0):
            raise FusecError(
                f"kernel {kernel.name} is a Hopper Tensor Core GEMM: its PTX exists for sm_90a "
                "only (give --arch sm_90a)"
            )
        from fusec.targets.cuda.gemm.build import linked_ptx

        return "\n".join(f"// {spec.function_name}\n{linked_ptx(spec)}" for spec in specs)

    def native_source(self, kernel: KernelSource) -> str | None:
        from fusec.targets.cuda.gemm.template import linked_specs

        specs = linked_specs(kernel)
        return "\n".join(spec.cpp_source() for spec in specs) if specs else None

    def tune(self, module: ModuleOp, entry: str | None = None, reps: int = 20) -> list:
        """``fusec tune``: the tile of every Tensor Core GEMM group (``gemm.tuning``)."""
        from fusec.targets.cuda.gemm.tuning import tune

        return tune(module, entry, reps)

    def backend(self, cache: Any = None) -> Any:
        from fusec.targets.cuda.program import CudaBackend

        return CudaBackend(cache)

    def program(self, module: ModuleOp, entry: str | None = None, cache: Any = None) -> Any:
        from fusec.targets.cuda.program import CudaProgram

        return CudaProgram(module, entry, self, cache)


TARGET = CudaTarget()
