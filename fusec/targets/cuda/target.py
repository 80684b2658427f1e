"""The ``cuda`` target: its templates per fused kind, availability and runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.dialect import ops as ai
from fusec.target import Target, Template, deferred, rotations_read_inputs

_ROW = (ai.LayerNormOp, ai.SoftmaxOp)
_ROWS = (*_ROW, ai.RMSNormOp)  # the row kernel's; the GEMM's prologue/epilogue: _ROW
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


def _planned(module: str, lowers: tuple[type[ai.AiOp], ...]) -> Template:
    """The Template of ``module``, whose ``accepts`` (its plan of the group fusion would
    pack) fusion asks."""
    return Template(module, lowers, accepts=deferred(module, "accepts"))


class CudaTarget(Target):
    """Numba CUDA kernels (pointwise, row reductions); on the Hopper Tensor Cores the wgmma
    GEMM for matmul groups, the implicit-GEMM conv (a direct kernel for depthwise) and
    fused flash-style attention."""

    name = "cuda"
    description = "NVIDIA GPUs: Numba CUDA kernels and the Hopper Tensor Core GEMM"
    devices = ("cuda",)
    pipeline = "fusec-cuda"
    #: The flash attention kernel reads a GQA head repeat (``ai.expand``) and writes the
    #: head merge (transposes, reshapes) through strides (``attention.views``, issue 28).
    rule_params = {"attention_layout_ops": 8}
    passes = {
        "tile-gemm": "fusec.targets.cuda.tiling:TileGemmPass",
        "conv-layout": "fusec.targets.cuda.conv.layout:ConvLayoutPass",
        "conv-patchify": "fusec.targets.cuda.conv.patchify:ConvPatchifyPass",
        "attention-layout": "fusec.targets.cuda.attention.rowwise:AttentionLayoutPass",
        "fp8-constant-weights": "fusec.targets.cuda.gemm.fp8_weights:Fp8ConstantWeightsPass",
        "read-views-in-place": "fusec.targets.cuda.views_in_place:ReadViewsInPlacePass",
        "rope-into-attention": "fusec.targets.cuda.rope_into_attention:RopeIntoAttentionPass",
    }
    pipelines = {
        # patchify convs as GEMMs, constant weights of float8 values as float8 codes (the
        # float8 GEMM's operand), the f32 tail of an exporter's upcast f16 attention in
        # f16 again, transposes moved below elementwise chains (RoPE) and
        # across GEMMs towards the attention, the q, k and v projections of one input as
        # one GEMM (Llama-style q and k through RoPE too: q's and k's RoPE one chain over
        # both; cse first, as sink-transposes leaves the cos and sin views twice), fusion,
        # slices that only a pointwise kernel reads read in place, the channels-last layout
        # of the conv groups (explicit conversions), then the Tensor Core tile of every GEMM
        # group. Soft-capped attention (Gemma-2) is one ai.attention for the flash kernel's
        # head sizes (attention.cpp.HEAD_DIMS: it caps the scores itself) and stays its ops
        # for others (Gemma-2's 256: a GEMM with the cap and softmax in its epilogue beats
        # the PyTorch fallback). The
        # RoPE part measured on the H200 (2026-12-06, the zoo's Llama): b1 0.337
        # -> 0.282 ms, b8 0.767 -> 0.715 (benchmarks/results/models-gpu.md). RoPE stays
        # its own kernel (one a layer over q's and k's heads): as the flash kernel's
        # prologue (fusec-cuda-rope-prologue) it measured no faster for the zoo's Llama
        # (seq 128; H200 2026-12-07 before the factors were read ahead: 6% slower; H100
        # after: a tie) and slower with every further block of 128 queries (each K tile
        # rotated once per query block: 1.18x at 512 keys, 1.77x at 4096)
        "fusec-cuda": "infer-shapes,recognize-patterns{softcap_heads=64,128},conv-patchify,"
        "canonicalize,cse,fp8-constant-weights,demote-upcasts,sink-transposes,"
        "attention-layout,cse,combine-projections{repeated_heads=true rope=true},fuse,"
        "read-views-in-place,conv-layout,tile-gemm",
        # ... with RoPE as the flash kernel's prologue (rope-into-attention: the kernel
        # rotates q and k in shared memory, no RoPE kernel): the A/B of
        # `benchmarks/profile_zoo.py --pipeline fusec-cuda-rope-prologue`
        "fusec-cuda-rope-prologue": "infer-shapes,recognize-patterns{softcap_heads=64,128},"
        "conv-patchify,canonicalize,cse,fp8-constant-weights,demote-upcasts,sink-transposes,"
        "attention-layout,cse,combine-projections{repeated_heads=true rope=true},fuse,"
        "read-views-in-place,rope-into-attention,conv-layout,tile-gemm",
        # ... with a softmax of any row length in its matmul's group (rows longer than a
        # block tile: the GEMM's partials epilogue and a finalise pass). Measured slower
        # than the softmax as its own kernel on the H200 (benchmarks/results/
        # gemm-2026-11-30.md, git history, 0fa3236), so not the default
        "fusec-cuda-long-softmax": "infer-shapes,recognize-patterns{softcap_heads=64,128},"
        "conv-patchify,canonicalize,cse,fp8-constant-weights,demote-upcasts,"
        "sink-transposes,attention-layout,cse,"
        "combine-projections{repeated_heads=true rope=true},fuse{softmax_tile_limit=1048576},"
        "read-views-in-place,conv-layout,tile-gemm",
        # the default before Llama's RoPE combined (three GEMMs and two RoPE kernels a
        # layer): the A/B baseline of `benchmarks/profile_zoo.py --pipeline
        # fusec-cuda-separate-rope`
        "fusec-cuda-separate-rope": "infer-shapes,recognize-patterns{softcap_heads=64,128},"
        "conv-patchify,canonicalize,cse,fp8-constant-weights,demote-upcasts,sink-transposes,"
        "attention-layout,combine-projections{repeated_heads=true},fuse,conv-layout,tile-gemm",
    }
    templates = {
        "pointwise": Template(
            "fusec.targets.cuda.pointwise", (ai.RotateHalfOp,), accepts=rotations_read_inputs
        ),
        "row_reduce": Template(
            "fusec.targets.cuda.row_reduce", _ROWS, accepts=_floats_only("the cuda row kernel")
        ),
        "matmul": _planned(
            "fusec.targets.cuda.gemm.template", (ai.MatmulOp, ai.LayerNormOp, ai.SoftmaxOp)
        ),
        "conv": _planned("fusec.targets.cuda.conv.template", (ai.Conv2DOp,)),
        "attention": _planned(
            "fusec.targets.cuda.attention.template", (ai.AttentionOp, *_INDEX_MAPS, ai.ExpandOp)
        ),
        "reduce": _planned(
            "fusec.targets.cuda.reduce", (ai.ReduceMeanOp, ai.ReduceSumOp, ai.ReduceMaxOp)
        ),
        "pool": _planned("fusec.targets.cuda.pool", (ai.MaxPool2DOp, ai.AvgPool2DOp)),
        "copy": Template(
            "fusec.targets.cuda.copy",
            (*_INDEX_MAPS, *_DATA),
            accepts=_copy_accepts,
        ),
        "view": Template("fusec.codegen.view", (ai.ReshapeOp,)),
        "experts": Template("fusec.targets.cuda.experts.template", (ai.MoEExpertsOp,)),
    }

    def can_fuse(
        self, kind: str, members: Sequence[Operation], anchor: Operation | None
    ) -> str | None:
        """``Target.can_fuse``, and a quantization op with per-block scales in pointwise
        groups only, or as the weight of a matmul group (whose plan says whether its
        weight-only int4 route takes it): the pointwise kernel reads such a scale at
        ``index // block_size`` (issue 31), the other kernels per tensor or per axis."""
        if kind not in ("pointwise", "matmul"):
            for op in members:
                if isinstance(op, ai.QuantizationOp) and op.blocks() is not None:
                    return (
                        f"{op.name} has per-block scales (block_size "
                        f"{op.attr('block_size')}): only the cuda pointwise kernel reads them"
                    )
        return super().can_fuse(kind, members, anchor)

    def unavailable_reason(self, *, device: bool = True) -> str | None:
        from fusec.extras import install_hint
        from fusec.targets.cuda.env import cuda_support, gpu_available, simulator_enabled

        problem = cuda_support()
        if problem is not None:
            return f"{problem} ({install_hint('cuda')})"
        if device and not simulator_enabled() and not gpu_available():
            return "it needs an NVIDIA GPU, and none is usable here"
        return None

    def resolve_sms(self, sms: int) -> int:
        """``sms``, else the usable GPU's SM count, else an H200's (``caps.resolve_device``)."""
        from fusec.targets.cuda.caps import resolve_device

        return resolve_device(sms).sms

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
        from fusec.targets.cuda.build import linked_ptx

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
