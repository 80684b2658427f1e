"""cuda template for "experts" groups: one ``ai.moe_experts`` (issue 31).

``plan`` is the single acceptance rule: a layer of 16-bit x and expert weights (one type),
f32/f16/bf16 routing weights, 32- or 64-bit expert indices, and widths whose rows are
16-byte aligned (D and F multiples of 8: the TMA maps of the grouped GEMMs and the light
kernels' 16-byte accesses) runs the kernel of this package (its docstring); anything else
runs through PyTorch (``torch_runtime.moe_experts``: expert by expert over all tokens, E /
k times the work) with the plan's reason in its header and ``--remarks``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from fusec.codegen import KernelSource
from fusec.codegen.expr import header
from fusec.dialect import ops as ai
from fusec.environ import switch
from fusec.ir.tensors import spec_of
from fusec.targets.cuda import torch_fallback
from fusec.targets.cuda.common import body_ops, kernel_name
from fusec.targets.cuda.epilogue import Epilogue
from fusec.targets.cuda.experts.cpp import MAX_EXPERTS, MoeKernelSpec
from fusec.targets.cuda.experts.launcher import MoeShape
from fusec.targets.cuda.gemm.config import (
    HEURISTIC_VARIANT,
    SMALL_TILE_VARIANT,
    TileConfig,
    with_variant,
)
from fusec.targets.cuda.gemm.cpp import GemmSpec
from fusec.targets.cuda.linked import linked_kernel_source

#: the row tile of both grouped GEMMs: 128 rows where an expert gets at least that many on
#: average (prefill), else 64 (decode: less padding an expert); the gated gate/up GEMM
#: stores through the direct epilogue (``GemmSpec.swiglu``)
LARGE_TILE = with_variant(TileConfig(128, 256, 64, 4, 2, 8), HEURISTIC_VARIANT)
LARGE_GATED_TILE = with_variant(TileConfig(128, 256, 64, 4, 2, 8), SMALL_TILE_VARIANT)
SMALL_TILE = with_variant(TileConfig(64, 128, 64, 8, 1, 8), SMALL_TILE_VARIANT)
#: ``$FUSEC_MOE_SWIGLU``: where the SwiGLU runs, "epilogue" (the default: the gate/up
#: GEMM's gated epilogue, ``gemm.cuh`` gemm_store_gated; its output is h) or "kernel" (the
#: GEMM stores gate and up, ``moe_swiglu`` makes h: one launch and 2 F x 2 bytes a row more
#: traffic; an A/B switch)
SWIGLU_ENV = "FUSEC_MOE_SWIGLU"


def swiglu_in_epilogue() -> bool:
    """``$FUSEC_MOE_SWIGLU`` (validated: "epilogue", the default, or "kernel")."""
    return switch(SWIGLU_ENV, ("epilogue", "kernel")) == "epilogue"


#: the down projection scales each row by its pair's routing weight (f32, by row)
ROW_WEIGHT = Epilogue(body="y = acc * fs_ld_f32(e0, row);", extras=("f32",), name="row_weight")
_INDEX_BYTES = {"i32": 4, "i64": 8}


@dataclass(frozen=True)
class MoePlan:
    """What the kernel needs of the group: the sizes, the types and its row tile."""

    shape: MoeShape
    dtype: str
    weight_dtype: str
    index_bytes: int
    #: the SwiGLU in the gate/up GEMM's epilogue (else the ``moe_swiglu`` kernel)
    gated: bool = True

    @property
    def tile(self) -> TileConfig:
        """The down projection's tile (and the gate/up one's without the gated epilogue)."""
        return LARGE_TILE if self.shape.bm == 128 else SMALL_TILE

    @property
    def up_tile(self) -> TileConfig:
        if self.gated and self.shape.bm == 128:
            return LARGE_GATED_TILE
        return self.tile


def plan(op: ai.MoEExpertsOp) -> MoePlan | str:
    """The kernel's plan of ``op``, or why PyTorch runs it instead."""
    x, w, e, gu, dn = (spec_of(v.type) for v in op.operands)
    if x.dtype not in ("f16", "bf16"):
        return (
            f"the grouped-GEMM kernel multiplies f16/bf16 experts; {x.dtype} keeps IEEE maths "
            "through PyTorch, expert by expert (E / k times the work)"
        )
    if gu.dtype != x.dtype or dn.dtype != x.dtype:
        return f"expert weights of {gu.dtype}/{dn.dtype} beside {x.dtype} tokens"
    if w.dtype not in ("f16", "bf16", "f32") or e.dtype not in _INDEX_BYTES:
        return f"routing weights of {w.dtype} or expert indices of {e.dtype}"
    tokens, width = x.shape
    count, hidden = gu.shape[0], gu.shape[1] // 2
    k = e.shape[1]
    if width % 8 or hidden % 8:
        return f"widths D={width}, F={hidden} not multiples of 8 (16-byte rows for TMA)"
    if count > MAX_EXPERTS:
        return f"{count} experts: the routing kernel counts {MAX_EXPERTS} at most"
    bm = 128 if tokens * k >= 128 * count else 64
    shape = MoeShape(tokens, width, hidden, count, k, bm)
    if shape.rows_max * 2 * hidden >= 2**31:
        return "more than 2^31 elements in the gate/up rows (32-bit indices of the kernels)"
    return MoePlan(shape, x.dtype, w.dtype, _INDEX_BYTES[e.dtype], swiglu_in_epilogue())


def _specs(p: MoePlan) -> dict[str, object]:
    stages = ("route", "gather", "combine") if p.gated else ("route", "gather", "swiglu", "combine")
    light = {
        stage: MoeKernelSpec(
            stage, p.dtype, p.weight_dtype, p.index_bytes, p.shape.experts, p.shape.bm
        )
        for stage in stages
    }
    # B is each expert's N x K slice of the stacked weights (K-major), A the sorted rows
    up = GemmSpec(p.up_tile, p.dtype, p.dtype, batch_b=True, grouped=True, swiglu=p.gated)
    down = GemmSpec(p.tile, p.dtype, "f32", batch_b=True, epilogue=ROW_WEIGHT, grouped=True)
    return {**light, "up": up, "down": down}


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of an experts group (the fallback's when the plan refuses)."""
    name = kernel_name(name)
    (op,) = [o for o in body_ops(fused_op) if isinstance(o, ai.MoEExpertsOp)]
    p = plan(op)
    if isinstance(p, str):
        return torch_fallback.generate(fused_op, name, reason=p, template="the experts template")
    args: dict[SSAValue, int] = {arg: i for i, arg in enumerate(fused_op.block.args)}
    order = [args[v] for v in op.operands]  # the group input of each operand
    s = p.shape
    specs = _specs(p)
    up = (
        "grouped GEMM (gate/up, SwiGLU in its epilogue)"
        if p.gated
        else ("grouped GEMM (gate/up), SwiGLU")
    )
    notes = [
        f"target: cuda, mixture-of-experts layer: route, gather, {up}, grouped GEMM (down, "
        "routing weight in its epilogue), combine;",
        f"T={s.tokens} tokens of D={s.width}, top-{s.k} of E={s.experts} experts of F="
        f"{s.hidden}; {p.dtype}, f32 accumulation; row tile {s.bm}, at most {s.rows_max} "
        "sorted rows;",
        f"grouped GEMMs: tiles {p.up_tile.text} and {p.tile.text}, one launch a projection "
        "for all experts",
    ]
    specs_text = ",\n".join(f"    {key}={spec!r}" for key, spec in specs.items())
    lines = [
        header(fused_op, notes=notes),
        "from fusec.targets.cuda.abi import (  # noqa: F401",
        "    Epilogue, GemmSpec, MoeKernelSpec, MoeLaunch, MoeShape, TileConfig,",
        ")",
        "",
        "MOE = MoeLaunch(",
        f"    {s!r},",
        f"    order={tuple(order)!r},",
        specs_text + ",",
        ")",
    ]
    launch_order = ("route", "gather", "up", "swiglu", "down", "combine")
    first, *more = (specs[key] for key in launch_order if key in specs)
    return linked_kernel_source(
        fused_op, name, "experts", lines, var="MOE", launcher="MoeLaunch", spec=first,
        more_specs=tuple(more),
    )  # fmt: skip
