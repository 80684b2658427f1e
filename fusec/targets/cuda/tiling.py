"""``tile-gemm``: choose the Tensor Core tile of every matmul and conv group, on the op.

For each ``ai.fused "matmul"`` group that the cuda GEMM template serves (see
``fusec.targets.cuda.gemm.template.plan``) the pass writes

    fusec.tile = {block = array<i64: BM, BN, BK>, mma = "m64nBNk16", stages = S,
                  consumers = C, group_m = G, choice = "..."}

chosen, in this order, from a ``fusec tune`` record of the same problem on the
same device (``choice = "tuned"``; only with the option ``tuned=true``, so the
records in the kernel cache are an explicit input: ``fusec compile --tuned``), or by
the heuristic from the problem shape and the device's SM count (``"heuristic"``, or
``"row softmax"`` when the block tile must hold whole rows). The device is what the
``sms`` option says, else an H200: the pass never asks the machine (``fusec.compile``
resolves the device once and gives its SM count, ``caps.resolve_device``). The
``schedule``, ``epilogue``, ``math``, ``vectors``, ``prefetch`` and ``ln`` options force
a variant on every group (``config.with_variant`` adapts the tile; ``choice`` then says
so), e.g.
``fusec-default,tile-gemm{schedule=pingpong epilogue=smem math=fast vectors=smem}``, and
``tile="128x128x64 s6 c2 g8 sched=pingpong"`` forces one exact configuration; the
variants and their attribute keys are in ``fusec.targets.cuda.gemm.config``.
Each conv group the implicit-GEMM conv serves gets its tile the same way
(``fusec.tile = "64x256 s4 c2n"``: ``conv.config.ConvTile``, from ``choose_tile`` for the
device's SM count, or ``$FUSEC_CONV_TILE``). Groups the templates cannot
serve (they run on the PyTorch fallback or the direct conv) get no attribute. The attribute is
what the template generates from, so ``fusec compile`` output shows the tile
and FileCheck tests pin it.

Each weight-only int4 (W4A16) group the Tensor Core W4A16 kernel serves gets its loop,
``fusec.w4_loop = "ring"`` where the device's grid is smaller than the group's tiles (its
blocks walk several tiles) and ``"registers"`` otherwise (``gemm.w4_mma.choose_loop``).

Under ``precision="tf32"`` (issue 28) the tf32 GEMM reads its operands K-major only: a
group whose B is a 2-D ``arith.constant`` stored K x N that it alone reads (a model's
weight, ``x @ W``) gets the N x K constant instead, read ``transpose_b``
(``_constant_b_k_major``): the weight is transposed once, here, not by a transpose
launch on every call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from fusec.dialect import ops as ai
from fusec.targets.cuda.caps import DeviceCaps, given_device, tuning_device

if TYPE_CHECKING:
    from fusec.targets.cuda.gemm.config import TileConfig, Variant
    from fusec.targets.cuda.gemm.w4 import W4Plan


@dataclass(frozen=True)
class TileGemmPass(ModulePass):
    """Write ``fusec.tile`` on every matmul group the Tensor Core GEMM serves."""

    name = "tile-gemm"

    sms: int = 0
    """SM count to tile for (0: an H200's 132; ``fusec.compile`` gives the resolved
    device's)."""

    tuned: bool = False
    """Use ``fusec tune`` records from the kernel cache when one matches (an explicit
    input: without it the output depends on the IR and the options alone)."""

    tile: str = ""
    """Force this exact configuration (``TileConfig.text``, e.g. ``"128x128x64 s6 c2 g8
    sched=pingpong"``) on every group, tuned or not."""

    schedule: str = ""
    """Force the schedule ("cooperative" or "pingpong"; "": the heuristic's or the record's)."""

    epilogue: str = ""
    """Force the epilogue ("direct" or "smem")."""

    math: str = ""
    """Force the epilogue maths ("ieee" or "fast")."""

    vectors: str = ""
    """Force where the epilogue reads its LayerNorm vectors ("global" or "smem")."""

    prefetch: str = ""
    """Force the L2 prefetch of full-tile epilogue inputs ("none" or "tile")."""

    ln: str = ""
    """Force how a LayerNorm prologue runs ("fold": pre-pass and epilogue rewrite, or
    "tile": normalised in the resident A tiles, one launch; groups without a LayerNorm
    prologue, or whose K does not fit the pipeline, keep "fold")."""

    loop: str = ""
    """Force how the "smem" epilogue runs ("unrolled" over the accumulators, or "rolled" over
    the staged chunk; groups with the direct epilogue, a LayerNorm prologue or a softmax keep
    "unrolled")."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from fusec.errors import FusecError
        from fusec.targets.cuda.gemm import template, tuning, w4
        from fusec.targets.cuda.gemm.config import to_attr, with_variant

        device = None
        for fused in list(op.walk()):  # (a constant B may be replaced on the way)
            if isinstance(fused, ai.FusedOp) and fused.kind_name == "conv":
                device = device or given_device(self.sms)
                _tile_conv(fused, device)
            if not isinstance(fused, ai.FusedOp) or fused.kind_name != "matmul":
                continue
            if (route := w4.route_plan(fused)) is not None:
                device = device or given_device(self.sms)
                _choose_w4_loop(fused, route, device)
                continue
            p = template.plan(fused)
            if isinstance(p, str):
                continue
            if _constant_b_k_major(fused, p):
                p = template.plan(fused)
                assert not isinstance(p, str), p
            device = device or given_device(self.sms)
            config, choice = template.heuristic_config(p, device.sms)
            # (tuning records are of the plain GEMM's tiles, not the int4 consumers' kernel;
            # a forced tile it cannot run is refused by ``template.tile_config``)
            tunable = self.tuned and not (p.w4 is not None and p.w4.in_registers)
            record = tuning.lookup(fused, p, tuning_device(self.sms)) if tunable else None
            if record is not None:
                config, choice = record, "tuned"
            if self.tile:
                config, choice = self.forced_tile(), "pass option"
            config = template.fit_operands(p, config)  # tf32 operands: a BK = 32 tile
            forced = self.forced_variant(config)
            if forced is not None:
                try:
                    if forced.ln == "tile" and not _ln_tile_fits(p, with_variant(config, forced)):
                        forced = replace(forced, ln="fold")
                    staged = forced.epilogue == "smem"
                    if forced.loop == "rolled" and (not staged or template.rolled_problem(p)):
                        forced = replace(forced, loop="unrolled")
                    config = with_variant(config, forced)
                except ValueError as err:
                    raise FusecError(f"tile-gemm options: {err}") from None
                choice = f"{choice}, variant option"
            fused.attributes[template.TILE_ATTR] = to_attr(config, choice)

    def forced_tile(self) -> TileConfig:
        from fusec.errors import FusecError
        from fusec.targets.cuda.gemm.config import TileConfig

        try:
            return TileConfig.parse(self.tile)
        except ValueError as err:
            raise FusecError(f"tile-gemm option tile: {err}") from None

    def forced_variant(self, config: TileConfig) -> Variant | None:
        """The variant the options ask for (the rest from ``config``), or None."""
        from fusec.errors import FusecError
        from fusec.targets.cuda.gemm.config import VARIANT_CHOICES

        asked = {name: getattr(self, name) for name in VARIANT_CHOICES}
        for name, allowed in VARIANT_CHOICES.items():
            if asked[name] and asked[name] not in allowed:
                raise FusecError(
                    f"tile-gemm option {name}={asked[name]!r}: expected one of {', '.join(allowed)}"
                )
        if not any(asked.values()):
            return None
        # an option left empty keeps the config's own
        return replace(config.variant, **{name: value for name, value in asked.items() if value})


def _choose_w4_loop(fused: ai.FusedOp, p: W4Plan, device: DeviceCaps) -> None:
    """Write the W4A16 Tensor Core kernel's loop on a weight-only int4 group it serves (the
    route's plan ``p``; ``w4_mma.choose_loop`` for ``device``'s SM count); groups it cannot
    serve (the CUDA-core kernel's) get no attribute."""
    from xdsl.dialects.builtin import StringAttr

    from fusec.targets.cuda.gemm import w4_mma

    if w4_mma.mma_problem(p) is not None:
        return
    fused.attributes[w4_mma.LOOP_ATTR] = StringAttr(w4_mma.choose_loop(p, device.sms))


def _tile_conv(fused: ai.FusedOp, device: DeviceCaps) -> None:
    """Write the implicit-GEMM conv's tile on a conv group it serves (``conv.template
    tile_for``: a tile already written, else ``$FUSEC_CONV_TILE``, else ``choose_tile`` for
    ``device``), so that code generation reads it from the IR, never the machine."""
    from xdsl.dialects.builtin import StringAttr

    from fusec.errors import FusecError
    from fusec.targets.cuda.conv import template as conv

    p = conv.plan(fused)
    if isinstance(p, str) or conv.route(p) != "implicit":
        return
    try:
        tile = conv.tile_for(fused, conv.gemm_geometry(p), device.sms)
    except ValueError as err:
        raise FusecError(f"tile-gemm: {err}") from None
    fused.attributes[conv.TILE_ATTR] = StringAttr(tile.text)


def _constant_b_k_major(fused: ai.FusedOp, p) -> bool:
    """A tf32 group's B stored K x N that is a 2-D constant only this group reads becomes
    the N x K constant, read ``transpose_b`` by the group's matmul (same values, so the
    same products); True when it did."""
    from xdsl.rewriter import InsertPoint, Rewriter

    from fusec.dialect.ops import spec_of
    from fusec.ir.constants import constant_value, dense_constant, is_constant

    if not p.tf32 or p.b_major != "n" or p.batch_b:
        return False
    index = p.b[0]
    value = fused.operands[index]
    owner, arg = value.owner, fused.block.args[index]
    if not is_constant(owner) or len(list(value.uses)) != 1 or len(spec_of(value.type).shape) != 2:
        return False
    if [use.operation for use in arg.uses] != [p.matmul] or p.matmul.lhs is arg:
        return False
    import numpy as np

    from fusec.errors import FusecError

    try:
        data = constant_value(owner, np.dtype(np.float32))
    except FusecError:  # not a dense constant: the transpose launch copies it per call
        return False
    relaid = dense_constant(np.ascontiguousarray(data.T), "f32")
    Rewriter.insert_op(relaid, InsertPoint.before(owner))
    fused.operands[index] = relaid.result
    Rewriter.erase_op(owner)
    block = fused.block
    new_arg = block.insert_arg(relaid.result.type, index)
    matmul = ai.MatmulOp(
        p.matmul.lhs, new_arg, transpose_a=bool(p.matmul.attr("transpose_a")), transpose_b=True
    )
    Rewriter.replace_op(p.matmul, matmul)
    block.erase_arg(arg)
    return True


def _ln_tile_fits(p, config: TileConfig) -> bool:
    """``config`` with ``ln="tile"`` can serve plan ``p``: a LayerNorm prologue whose K the
    pipeline holds whole (``config.ln_tile_problem``)."""
    from fusec.targets.cuda.gemm.config import ln_tile_problem

    return p.layernorm is not None and ln_tile_problem(config, p.k) is None
