"""ONNX elementwise operators as ai ops: the one-to-one unary and binary ones (from the
ops' ``FRONTEND.onnx`` facts), activations with attributes, Clip, Pow, Where, Max/Min,
Sum/Mean, Cast, Dropout and Mod.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import Importer, Node, converter
from fusec.ir.dtypes import FLOAT_TYPES
from fusec.ir.tensors import dtype_of, shape_of


def _onnx_names(base: type[ai.AiOp]) -> dict[str, type[ai.AiOp]]:
    """ONNX operator -> op, from the ops' own facts (``FRONTEND.onnx``)."""
    return {n: op for op in ai.TENSOR_OPS if issubclass(op, base) for n in op.FRONTEND.onnx}


_UNARY = _onnx_names(ai.UnaryOp)


_BINARY = _onnx_names(ai.BinaryOp)


@converter(*_UNARY, attrs=("consumed_inputs",))
def _unary(imp: Importer, node: Node) -> list[SSAValue]:
    return [imp.emit(_UNARY[node.op_type], imp.input(node, 0))]


@converter(*_BINARY, attrs=("broadcast", "axis", "consumed_inputs"))
def _binary(imp: Importer, node: Node) -> list[SSAValue]:
    a, b = imp.input(node, 0), imp.input(node, 1)
    if node.attrs.get("broadcast", 0) and "axis" in node.attrs:
        # opset < 7: b is aligned with a at ``axis``; numpy's rule is the special
        # case axis = rank(a) - rank(b).
        rank_a, rank_b = len(shape_of(a)), len(shape_of(b))
        if node.attrs["axis"] % max(rank_a, 1) != rank_a - rank_b:
            raise imp.error(
                f"legacy broadcast with axis={node.attrs['axis']} (opset < 7) is not supported",
                "attribute",
            )
    return [imp.emit(_BINARY[node.op_type], a, b)]


@converter("Clip", attrs=("min", "max"))
def _clip(imp: Importer, node: Node) -> list[SSAValue]:
    """Bounds are attributes before opset 11, optional scalar inputs after: constant
    bounds become ai.clip, bounds computed at run time ai.maximum/ai.minimum."""
    x = imp.input(node, 0)
    bounds: dict[str, float] = {}
    runtime: list[tuple[type[ai.AiOp], SSAValue]] = []
    limits: tuple[tuple[int, str, type[ai.AiOp]], ...] = (
        (1, "min", ai.MaximumOp),
        (2, "max", ai.MinimumOp),
    )
    for index, key, op in limits:
        if key in node.attrs:
            bounds[key] = float(node.attrs[key])
        elif imp.optional_input_name(node, index) is not None:
            value = imp.array(node, index)
            if value is None:
                runtime.append((op, imp.input(node, index)))
                continue
            if value.size != 1:
                raise imp.error(f"input '{key}' must be a scalar, got shape {value.shape}")
            bounds[key] = float(value.reshape(()))
    y = imp.emit(ai.ClipOp, x, **bounds) if bounds or not runtime else x
    for op, bound in runtime:
        if shape_of(bound) not in ((), (1,)):
            raise imp.error(f"the bounds must be scalars, got {bound.type}")
        y = imp.emit(op, y, bound)
    return [y]


@converter("Pow")
def _pow(imp: Importer, node: Node) -> list[SSAValue]:
    """x ** y; a constant integer exponent becomes a float one of x's type."""
    x = imp.input(node, 0)
    exponent = imp.array(node, 1)
    if exponent is not None and exponent.dtype.kind in "iub":
        y = imp.constant(exponent.astype(np.float64), dtype_of(x))
    else:
        y = imp.input(node, 1)
    return [imp.emit(ai.PowOp, x, y)]


@converter("IsNaN")
def _isnan(imp: Importer, node: Node) -> list[SSAValue]:
    """A bool: ai.isnan (1/0 in x's float type) cast to i1."""
    return [imp.emit(ai.CastOp, imp.emit(ai.IsNanOp, imp.input(node, 0)), "i1")]


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def _isinf(imp: Importer, node: Node) -> list[SSAValue]:
    """A bool: x == +inf, x == -inf, or either (ai.equal with infinite constants)."""
    x = imp.input(node, 0)
    signs = [
        s for s, k in ((1.0, "detect_positive"), (-1.0, "detect_negative")) if node.attrs.get(k, 1)
    ]
    found = [imp.emit(ai.EqualOp, x, imp.scalar(sign * math.inf, x)) for sign in signs]
    if not found:  # neither sign: false everywhere
        return [imp.emit(ai.LessOp, x, imp.scalar(-math.inf, x))]  # nothing is below -inf
    return [found[0] if len(found) == 1 else imp.emit(ai.OrOp, *found)]


@converter("Where")
def _where(imp: Importer, node: Node) -> list[SSAValue]:
    """ai.where on a constant condition (folded away when it picks one side whole) or a
    bool computed at run time (an attention mask, IsNaN)."""
    a, b = imp.input(node, 1), imp.input(node, 2)
    known = imp.array(node, 0)
    if known is not None:
        out_shape = np.broadcast_shapes(known.shape, shape_of(a), shape_of(b))
        if known.all() and shape_of(a) == out_shape:
            return [a]
        if not known.any() and shape_of(b) == out_shape:
            return [b]
        condition = imp.constant(known.astype(bool).astype(np.float64), dtype_of(a))
    else:
        condition = imp.input(node, 0)
        if dtype_of(condition) != "i1":
            raise imp.error(f"the condition is {condition.type}, expected a BOOL tensor", "dtype")
    return [imp.emit(ai.WhereOp, condition, a, b)]


@converter("Identity")
def _identity(imp: Importer, node: Node) -> list[SSAValue]:
    return [imp.input(node, 0)]


@converter("Max", "Min", attrs=("consumed_inputs",))
def _max_min(imp: Importer, node: Node) -> list[SSAValue]:
    values = [imp.value(name) for name in node.proto.input if name]
    if not values:
        raise imp.error("needs at least one input")
    op = ai.MaximumOp if node.op_type == "Max" else ai.MinimumOp
    result = values[0]
    for other in values[1:]:
        result = imp.emit(op, result, other)
    return [result]


@converter("Sum", "Mean", attrs=("consumed_inputs",))
def _sum_mean(imp: Importer, node: Node) -> list[SSAValue]:
    """A chain of ai.add (the inputs broadcast together); Mean divides by their count."""
    values = [imp.value(name) for name in node.proto.input if name]
    if not values:
        raise imp.error("needs at least one input")
    result = values[0]
    for other in values[1:]:
        result = imp.emit(ai.AddOp, result, other)
    if node.op_type == "Mean" and len(values) > 1:
        result = imp.emit(ai.DivOp, result, imp.scalar(len(values), result))
    return [result]


#: Activations whose ONNX attributes are the op's own (same names and defaults).
_ACTIVATIONS: dict[str, type[ai.AiOp]] = {
    "LeakyRelu": ai.LeakyReluOp,
    "Elu": ai.EluOp,
    "Selu": ai.SeluOp,
    "Celu": ai.CeluOp,
    "HardSigmoid": ai.HardSigmoidOp,
    "ThresholdedRelu": ai.ThresholdedReluOp,
}


@converter(*_ACTIVATIONS, attrs=("alpha", "beta", "gamma", "consumed_inputs"))
def _activation(imp: Importer, node: Node) -> list[SSAValue]:
    op = _ACTIVATIONS[node.op_type]
    declared = op.declared_properties()
    attrs = {k: float(v) for k, v in node.attrs.items() if k != "consumed_inputs"}
    for key in attrs:
        if key not in declared:
            raise imp.error(f"unsupported attribute '{key}'", "attribute")
    return [imp.emit(op, imp.input(node, 0), **attrs)]


@converter("Swish", attrs=("alpha",))
def _swish(imp: Importer, node: Node) -> list[SSAValue]:
    return [swish(imp, imp.input(node, 0), float(node.attrs.get("alpha", 1.0)))]


def swish(imp: Importer, x: SSAValue, alpha: float) -> SSAValue:
    """x * sigmoid(alpha * x): ai.silu when alpha is 1 (Swish, and SwiGLU's gate)."""
    if alpha == 1.0:
        return imp.emit(ai.SiluOp, x)
    gate = imp.emit(ai.SigmoidOp, imp.emit(ai.MulOp, x, imp.scalar(alpha, x)))
    return imp.emit(ai.MulOp, x, gate)


@converter("Shrink", attrs=("bias", "lambd"))
def _shrink(imp: Importer, node: Node) -> list[SSAValue]:
    """x + bias below -lambd, x - bias above lambd, else 0 (NaN too, as ONNX's reference)."""
    x = imp.input(node, 0)
    bias, lambd = float(node.attrs.get("bias", 0.0)), float(node.attrs.get("lambd", 0.5))
    low = imp.emit(ai.LessOp, x, imp.scalar(-lambd, x))
    high = imp.emit(ai.GreaterOp, x, imp.scalar(lambd, x))
    above = imp.emit(
        ai.WhereOp, high, imp.emit(ai.SubOp, x, imp.scalar(bias, x)), imp.scalar(0.0, x)
    )
    return [imp.emit(ai.WhereOp, low, imp.emit(ai.AddOp, x, imp.scalar(bias, x)), above)]


@converter("Dropout", attrs=("ratio", "seed", "is_test", "consumed_inputs"))
def _dropout(imp: Importer, node: Node) -> list[SSAValue | None]:
    """Inference, or training with a ratio of 0: the identity, and a mask output of
    true everywhere (a constant). Training mode that drops (a true ``training_mode``
    input and a ratio above 0, or ``is_test=0`` before opset 7) is refused: random."""
    training = imp.array(node, 2)
    if imp.optional_input_name(node, 2) is not None and training is None:
        raise imp.error(
            "training_mode is computed at run time: fusec compiles inference only", "attribute"
        )
    ratio = imp.array(node, 1)
    drops = float(node.attrs.get("ratio", 0.5) if ratio is None else np.asarray(ratio).item())
    if training is not None and bool(np.asarray(training).item()) and drops != 0.0:
        raise imp.error(
            f"training_mode=1 with a ratio of {drops} is not supported (random drops; "
            "inference only)",
            "attribute",
        )
    if imp.opset < 7 and node.attrs.get("is_test", 0) == 0:
        raise imp.error("is_test=0 (opset < 7) is training mode: not supported", "attribute")
    x = imp.input(node, 0)
    mask = node.proto.output[1] if len(node.proto.output) > 1 else ""
    if mask and imp.uses[mask]:
        return [x, imp.constant(np.ones(shape_of(x), dtype=bool), "i1")]
    return [x]


@converter("Gelu", attrs=("approximate",))
def _gelu(imp: Importer, node: Node) -> list[SSAValue]:
    approximate = node.attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise imp.error(f"approximate='{approximate}' is not supported", "attribute")
    return [imp.emit(ai.GeluOp, imp.input(node, 0), approximate=approximate)]


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    if "to" not in node.attrs:
        raise imp.error("attribute 'to' is required")
    if node.attrs["to"] == TensorProto.DOUBLE and dtype_of(x) in FLOAT_TYPES:
        return [_widened(imp, node, x)]
    to = imp.element_type(node.attrs["to"], "the cast target")
    return [x if dtype_of(x) == to else imp.emit(ai.CastOp, x, to)]


#: Operators whose result from a DOUBLE input that is an f16, bf16 or f32 value widened
#: (exactly) is the result from that value itself: the infinity and NaN tests, and
#: casts (one rounding of the same number to any type; to DOUBLE again, the rule again).
_WIDTH_BLIND = frozenset({"IsInf", "IsNaN", "Cast"})


def _widened(imp: Importer, node: Node, x: SSAValue) -> SSAValue:
    """A Cast of float ``x`` to DOUBLE, which fusec has no tensors of, is ``x`` itself
    when only ``_WIDTH_BLIND`` nodes read it (the TorchScript exporter writes T5's f16
    ``isinf(h).any()`` as Cast(DOUBLE) -> IsInf -> ...); any other reader (arithmetic,
    a comparison, a graph output) would see f64 values, and is a located error."""
    name = node.proto.output[0]
    readers = [n for n in imp.graph.node if name in n.input]
    other = next(
        (n for n in readers if n.domain not in ("", "ai.onnx") or n.op_type not in _WIDTH_BLIND),
        None,
    )
    if other is not None:
        why = f'node "{other.name or other.op_type}" ({other.op_type}) reads it'
    elif any(o.name == name for o in imp.graph.output):
        why = "it is a graph output"
    else:
        return x
    raise imp.error(
        f"the cast target has element type DOUBLE, and {why}: fusec supports FLOAT, FLOAT16, "
        f"BFLOAT16, INT64, INT32 and BOOL (a {dtype_of(x)} value cast to DOUBLE is imported "
        f"as itself where only {', '.join(sorted(_WIDTH_BLIND))} nodes read it)",
        "dtype",
    )


@converter("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(imp: Importer, node: Node) -> list[SSAValue]:
    """Cast to the element type of the second input (a value or a constant)."""
    x = imp.input(node, 0)
    like = imp.array(node, 1)
    if like is not None:
        to = imp.dtype_of_array(node.proto.input[1], like)
    else:
        to = dtype_of(imp.input(node, 1))
    return [x if dtype_of(x) == to else imp.emit(ai.CastOp, x, to)]


@converter("Mod", attrs=("fmod",))
def _mod(imp: Importer, node: Node) -> list[SSAValue]:
    """Integer remainders (ai.mod); float ones are refused."""
    a, b = imp.input(node, 0), imp.input(node, 1)
    fmod = bool(node.attrs.get("fmod", 0))
    if dtype_of(a) in ("i64", "i32"):
        return [imp.emit(ai.ModOp, a, b, fmod=fmod)]
    raise imp.error(f"Mod of {dtype_of(a)} values is not supported (integers only)", "dtype")
