"""``demote-upcasts``: the f32 tail that an exporter's upcast attention leaves in an f16
model computes in f16 again (issue 28).

The TorchScript exporter writes ``scaled_dot_product_attention`` of an f16 model with an
f32 mask; ONNX's type rules then cast the scores and v to f32, and everything after the
attention follows in f32: the output projection's weights are folded to f32, the
residual stream is cast up, every later layer's matmuls run in f32 (on the cuda target
the PyTorch fallback, no Tensor Core GEMM). ``recognize-patterns`` makes that attention
the f16 one it is, its result cast to f32 (``recognize_attention``); this pass follows
that cast forward: an op whose f32 operands are all f32 casts of f16 values (the
attention's among them) or constants that f16 holds exactly (the f16 weights the
exporter upcast) computes in f16, its result cast to f32 for its readers; a cast back to
f16 of such a value is the f16 value itself. So the model runs as PyTorch runs it in
f16 (f32 accumulation and statistics inside the matmul, norm and softmax kernels; each
op's result rounded to f16), and the casts left are at the program's f32 results.

Only values downstream of an upcast attention are demoted, and only through ops that
compute in f32 inside (matmuls, norms, softmax, elementwise ops) or whose f16 result is
their f32 one exactly (layout ops, concat, RoPE's rotate_half: moves and a negation, so a
later layer's rotary q and k, and its attention after them, are f16 again): an f32
computation the model wrote on purpose elsewhere (an RMSNorm's f32 statistics, an f32
reduction) is left alone. bf16 likewise.

Two exporter spellings the tail meets are taken too: an attention's mask computed at run
time (a padding mask from an ``attention_mask`` input, ``where(keep, 0, -inf)`` in f32) is
cast to the half type, as ``recognize_attention`` casts the first attention's; and a norm
whose scale or shift the half type does not hold (Gemma's ``1 + w``, folded in f32)
computes in f32 as written with its result rounded to the half type, as the f16 model's
norm returns it (``type_as(x)``), so the projections reading it are half GEMMs again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.ops.elementwise import BinaryOp, UnaryOp
from fusec.ir.constants import dense_constant
from fusec.ir.tensors import ShapeError
from fusec.passes.matching import constant
from fusec.passes.recognize_attention import half_mask_values

if TYPE_CHECKING:
    import numpy as np

#: Ops that compute in f32 inside whatever their element type, or move elements only
#: (layout ops, concat) or move and negate them (rotate_half): exact in any type.
_DEMOTABLE = (
    ai.MatmulOp,
    ai.BiasAddOp,
    ai.LayerNormOp,
    ai.RMSNormOp,
    ai.SoftmaxOp,
    ai.ReshapeOp,
    ai.TransposeOp,
    ai.SliceOp,
    ai.ExpandOp,
    ai.ConcatOp,
    ai.RotateHalfOp,
    ai.AttentionOp,
    BinaryOp,
    UnaryOp,
)
#: Elementwise ops left in f32: a float result that is a test (isnan), or a power (the
#: f16 range is the question there).
_KEPT = (ai.IsNanOp, ai.PowOp)
_HALF = ("f16", "bf16")


def _dtype(value: SSAValue) -> str:
    return spec_of(value.type).dtype


def _held(values: np.ndarray, dtype: str) -> np.ndarray:
    """f32 ``values`` as ``dtype`` holds them (f32 again); a value past f16's range is
    inf there, so no exact one (numpy's overflow warning is that answer, not a fault)."""
    import numpy as np

    if dtype == "bf16":  # the upper 16 bits of the f32 pattern
        return (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    with np.errstate(over="ignore"):
        return values.astype(np.float16).astype(np.float32)


@dataclass
class _Demotion:
    """One function's sweep: ``half`` maps an f32 value to the f16/bf16 value it is the
    upcast of; ``tainted`` the f32 values downstream of an upcast attention."""

    half: dict[SSAValue, SSAValue]
    tainted: dict[SSAValue, str]
    constants: dict[tuple[int, str], SSAValue]
    originals: dict[int, SSAValue]

    def operand(
        self, value: SSAValue, dtype: str, before: Operation, rounded: bool = False
    ) -> SSAValue | None:
        """``value`` (an operand of ``before``) in ``dtype``, or None; a constant must be
        exact in ``dtype`` unless ``rounded`` (an attention's mask: rounded, values past
        the range clamped, ``half_mask_values``; a mask computed at run time is cast)."""
        if _dtype(value) != "f32":
            return value if _dtype(value) not in ("f64",) else None
        source = self.half.get(value)
        if source is not None:
            return source if _dtype(source) == dtype else None
        key = (id(value), dtype)
        if key in self.constants:
            return self.constants[key]
        array = constant(value, max_elements=1 << 26)
        if array is None and rounded:
            # a mask computed at run time (a padding mask from an ``attention_mask``
            # input: ``where(keep, 0, -inf)`` in f32): cast, as ``recognize_attention``
            # casts the upcast attention's (exact for 0 and infinities)
            cast = ai.CastOp(value, dtype)
            cast.location = before.location
            Rewriter.insert_op(cast, InsertPoint.before(before))
            self.constants[key] = cast.output
            return cast.output
        if array is None:
            return None
        import numpy as np

        exact = array.astype(np.float32)
        if rounded:
            exact = half_mask_values(exact, dtype)
        elif not np.array_equal(_held(exact, dtype), exact):
            return None
        new = dense_constant(exact, dtype)
        Rewriter.insert_op(new, InsertPoint.before(before))
        self.constants[key] = new.results[0]
        self.originals[id(value)] = value
        return new.results[0]


def _seed(op: Operation, sweep: _Demotion) -> None:
    """Record an f32 cast of an f16/bf16 value; one of an attention's result taints."""
    if not isinstance(op, ai.CastOp) or _dtype(op.output) != "f32":
        return
    source = op.input
    if _dtype(source) not in _HALF:
        return
    sweep.half[op.output] = source
    if isinstance(source.owner, ai.AttentionOp):
        sweep.tainted[op.output] = _dtype(source)


def _demote(op: Operation, sweep: _Demotion) -> bool:
    """Rebuild ``op`` in the half type of its tainted operands; True when it was."""
    if not isinstance(op, _DEMOTABLE) or isinstance(op, _KEPT):
        return False
    if len(op.results) != 1 or _dtype(op.results[0]) != "f32":
        return False
    kinds = {sweep.tainted[v] for v in op.operands if v in sweep.tainted}
    if len(kinds) != 1:
        return False
    (dtype,) = kinds
    operands = []
    for index, value in enumerate(op.operands):
        mask = isinstance(op, ai.AttentionOp) and index == 3
        half = sweep.operand(value, dtype, op, rounded=mask)
        if half is None:
            return _round_norm(op, sweep, dtype)
        operands.append(half)
    try:
        demoted = type(op)(*operands, **op.attr_values())
    except ShapeError:
        return False
    up = ai.CastOp(demoted.results[0], "f32")
    demoted.location = up.location = op.location
    Rewriter.insert_op([demoted, up], InsertPoint.before(op))
    op.results[0].replace_all_uses_with(up.output)
    Rewriter.erase_op(op)
    sweep.half[up.output] = demoted.results[0]
    sweep.tainted[up.output] = dtype
    return True


def _round_norm(op: Operation, sweep: _Demotion, dtype: str) -> bool:
    """A norm of a tainted value whose scale or shift the half type does not hold (Gemma's
    ``1 + w``, folded in f32) computes in f32 as written, its result rounded to ``dtype``:
    the f16 model's norm returns an f16 tensor (HF's norms end in ``type_as(x)``, a cast
    the f32 tail made a no-op), which its readers, the next layer's projections, take.
    True when it was."""
    if not isinstance(op, ai.LayerNormOp | ai.RMSNormOp) or op.operands[0] not in sweep.tainted:
        return False
    result = op.results[0]
    down = ai.CastOp(result, dtype)
    up = ai.CastOp(down.output, "f32")
    down.location = up.location = op.location
    Rewriter.insert_op([down, up], InsertPoint.after(op))
    result.replace_uses_with_if(up.output, lambda use: use.operation is not down)
    sweep.half[up.output] = down.output
    sweep.tainted[up.output] = dtype
    return True


def _fold_cast_back(op: Operation, sweep: _Demotion) -> bool:
    """``cast(x32, half)`` of an upcast ``x`` of that type is ``x``."""
    if not isinstance(op, ai.CastOp) or op.input not in sweep.tainted:
        return False
    source = sweep.half[op.input]
    if _dtype(source) != _dtype(op.output):
        return False
    op.output.replace_all_uses_with(source)
    Rewriter.erase_op(op)
    return True


def demote_upcasts(module: ModuleOp) -> int:
    """Demote the f32 tails of upcast attentions in every function; the ops rebuilt."""
    count = 0
    for function in module.walk():
        if not isinstance(function, func.FuncOp):
            continue
        sweep = _Demotion({}, {}, {}, {})
        for op in list(function.body.walk()):
            if op.parent_op() is not function:
                continue
            if _fold_cast_back(op, sweep):
                continue
            _seed(op, sweep)
            count += _demote(op, sweep)
        for value in reversed(list(sweep.half)):  # the upcasts nothing reads now
            cast = value.owner
            if isinstance(cast, ai.CastOp) and cast.parent is not None and not list(value.uses):
                Rewriter.erase_op(cast)
        for value in sweep.constants.values():  # converted for an op that stayed f32
            owner = value.owner
            if isinstance(owner, Operation) and not list(value.uses):
                Rewriter.erase_op(owner)
        for value in sweep.originals.values():  # and the f32 constants
            owner = value.owner
            if isinstance(owner, Operation) and owner.parent is not None and not list(value.uses):
                Rewriter.erase_op(owner)
    return count


@dataclass(frozen=True)
class DemoteUpcastsPass(ModulePass):
    """The f32 tail of an upcast f16/bf16 attention computes in f16/bf16."""

    name = "demote-upcasts"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        demote_upcasts(op)
