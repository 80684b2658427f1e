"""The ops a kernel template is built around: conv2d, bias_add, matmul, batch_norm,
attention, moe_experts, layernorm, softmax and cast."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure

from fusec.dialect import shapes
from fusec.dialect.facts import FrontendNames, Pattern, ScalarBuilder
from fusec.dialect.ops.base import (
    AiOp,
    Canonicalized,
    OneInputOp,
    bool_prop,
    float_prop,
    int_array_prop,
    int_prop,
    operand,
    result,
)
from fusec.ir.dtypes import ALL_TYPES, NUMERIC_TYPES, is_float, numpy_dtype
from fusec.ir.tensors import spec_of, tensor_type

if TYPE_CHECKING:
    import numpy as np


@irdl_op_definition
class Conv2DOp(AiOp):
    """2-D convolution, NCHW input and KCRS (out, in/groups, kh, kw) weight.

    ``padding`` has 2 values (symmetric per spatial dim) or 4 values
    (h_begin, w_begin, h_end, w_end).
    """

    name = "ai.conv2d"
    input = operand()
    weight = operand()
    output = result()
    strides = int_array_prop(1, 1)
    padding = int_array_prop(0, 0)
    dilations = int_array_prop(1, 1)
    groups = int_prop(1)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR

    SHAPE_FUNCTION = shapes.conv2d


@irdl_op_definition
class BiasAddOp(AiOp):
    """x + bias, the 1-D bias broadcast along dimension ``axis`` of x."""

    name = "ai.bias_add"
    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC_TYPES  # ``ai.add`` of integers becomes one too
    input = operand()
    bias = operand()
    output = result()
    axis = int_prop(1)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.BROADCAST

    SHAPE_FUNCTION = shapes.bias_add

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        return s.arith(args[0], "+", args[1])  # an add, once the bias is broadcast


@irdl_op_definition
class MatmulOp(AiOp):
    """(..., M, K) @ (..., K, N), leading (batch) dims broadcast.

    ``transpose_a``/``transpose_b`` swap the last two dims of an operand first.
    A 1-D operand follows numpy: its unit dim is added, then dropped from the result.
    """

    name = "ai.matmul"
    lhs = operand()
    rhs = operand()
    output = result()
    transpose_a = bool_prop(False)
    transpose_b = bool_prop(False)

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR

    SHAPE_FUNCTION = shapes.matmul


@irdl_op_definition
class BatchNormOp(AiOp):
    """Inference batch normalisation over dim 1 (channels) of an N x C x ... input:
    (x - mean) / sqrt(var + epsilon) * scale + bias, each parameter of length C.

    No kernel computes it: ``canonicalize`` folds it into the conv2d feeding it
    (new constant weights and bias) or decomposes it into a per-channel
    multiply and ``ai.bias_add``, which fuse like any elementwise epilogue.
    """

    name = "ai.batch_norm"
    input = operand()
    scale = operand()
    bias = operand()
    mean = operand()
    var = operand()
    output = result()
    epsilon = float_prop(1e-5)
    traits = traits_def(Pure(), Canonicalized())

    PATTERN: ClassVar[Pattern] = Pattern.OPAQUE
    UNSUPPORTED: ClassVar[Mapping[str, str]] = {
        target: "canonicalize rewrites it (folded into its conv2d, or a multiply and a "
        "bias_add): run canonicalize before fusion"
        for target in ("cpu", "cuda")
    }

    SHAPE_FUNCTION = shapes.batch_norm


@irdl_op_definition
class AttentionOp(AiOp):
    """Scaled dot-product attention: ``softmax(q @ key^T * scale + mask) @ v``, the softmax
    over the last axis; q (..., S, D), key (..., T, D) and v (..., T, E) as
    ``scaled_dot_product_attention`` and ONNX's Attention take them, the mask added to
    the (..., S, T) scores. With ``softcap`` > 0 the scores are soft-capped before the
    mask (Gemma-2's logit soft-capping, ONNX Attention's ``softcap``): ``softcap *
    tanh(q @ key^T * scale / softcap) + mask``; 0 (the default) is none, and a negative
    or non-finite softcap is an error. With ``nan_to_zero`` a NaN probability (a row
    masked out entirely) is 0. ``recognize-patterns`` makes it of the chain matmul ->
    scale -> [soft cap] -> [mask] -> softmax -> matmul, written or exported; each target
    runs it as one kernel (cuda: the flash kernel where it applies)."""

    name = "ai.attention"
    query = operand()
    key = operand()
    value = operand()
    mask = operand()
    output = result()
    scale = float_prop(1.0)
    nan_to_zero = bool_prop(False)
    softcap = float_prop(0.0)

    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR

    @classmethod
    def infer(cls, operands, attrs):
        # scale, softcap and nan_to_zero leave the type as it is; softcap is checked here,
        # where the builders, the parser and the verifier all pass
        return shapes.attention(*operands, softcap=attrs.get("softcap", 0.0))


@irdl_op_definition
class MoEExpertsOp(AiOp):
    """The experts of a mixture-of-experts layer, the routing given (issue 31): each token
    of ``input`` (T, D) goes to the k experts ``experts`` (T, k; i64/i32, negative ones
    from the end) with ``weights`` (T, k); expert e computes ``down[e] @ (silu(g) * u)``
    with ``g, u`` the two halves of ``gate_up[e] @ x`` (Mixtral's SwiGLU experts,
    nn.Linear's (out, in) layouts: ``gate_up`` (E, 2F, D), ``down`` (E, D, F)), and a
    token's output is the weighted sum over its k experts. ``recognize-patterns`` makes
    it of the per-token batched GEMMs transformers' ``batched_mm`` experts export (the
    only experts code both ONNX exporters take); no expert weight is gathered per
    token. An expert index out of range is an error."""

    name = "ai.moe_experts"
    input = operand()
    weights = operand()
    experts = operand()
    gate_up = operand()
    down = operand()
    output = result()

    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    PATTERN: ClassVar[Pattern] = Pattern.ANCHOR

    SHAPE_FUNCTION = shapes.moe_experts

    def reference(self, *args: np.ndarray) -> np.ndarray:
        from fusec.dialect import numpy_ops as K

        return K.moe_experts(*self.typed(args))


@irdl_op_definition
class LayerNormOp(AiOp):
    """Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta."""

    name = "ai.layernorm"
    input = operand()
    gamma = operand()
    beta = operand()
    output = result()
    epsilon = float_prop(1e-5)

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION

    SHAPE_FUNCTION = shapes.layernorm


@irdl_op_definition
class RMSNormOp(AiOp):
    """RMS normalisation over the last axis (Llama's RMSNorm, ONNX ``RMSNormalization``):
    x / sqrt(mean(x^2) + eps) * gamma, the statistics in float32 or wider."""

    name = "ai.rms_norm"
    input = operand()
    gamma = operand()
    output = result()
    epsilon = float_prop(1e-6)

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION
    FRONTEND: ClassVar[FrontendNames] = FrontendNames(onnx=("RMSNormalization",))

    SHAPE_FUNCTION = shapes.rms_norm


@irdl_op_definition
class SoftmaxOp(OneInputOp):
    """Softmax along ``axis`` (default the last)."""

    name = "ai.softmax"
    axis = int_prop(-1)

    PATTERN: ClassVar[Pattern] = Pattern.REDUCTION

    SHAPE_FUNCTION = shapes.softmax


@irdl_op_definition
class CastOp(OneInputOp):
    """Element type conversion: ``ai.cast %x : T_from to T_to``, between any two of f16,
    bf16, f32, i64, i32 and i1: floats round to nearest-even, a float becomes an integer
    truncated toward zero (NaN and values out of range are undefined, as in ONNX), any
    value becomes i1 as ``x != 0``, and i1 becomes 1 or 0."""

    name = "ai.cast"
    DTYPES: ClassVar[tuple[str, ...]] = ALL_TYPES
    traits = traits_def(Pure(), Canonicalized())

    HAS_TO_TYPE: ClassVar[bool] = True
    PATTERN: ClassVar[Pattern] = Pattern.ELEMENTWISE

    def __init__(self, value: SSAValue, to_dtype: str) -> None:
        self.check_dtypes([spec_of(value.type)])  # a quantized value: ai.dequantize reads it
        spec = shapes.cast(spec_of(value.type), to_dtype)
        super().__init__(value, result_type=tensor_type(spec))

    @classmethod
    def infer(cls, operands, attrs):
        return shapes.cast(operands[0], attrs["to"])

    def scalar(self, s: ScalarBuilder, *args: str) -> str:
        # Kernels compute floats in float32: a cast to a 16-bit type rounds exactly as
        # numpy/ml_dtypes do, so mid-chain casts change values as the IR says.
        source, target = spec_of(self.input.type).dtype, self.result_dtype()
        if is_float(source) and is_float(target):
            return s.round_to(target, args[0])
        return s.convert(args[0], source, target)

    def reference(self, *args: np.ndarray) -> np.ndarray:
        import numpy as np

        target = self.result_dtype()
        if is_float(target):
            return args[0]  # the executor stores each result in its declared dtype
        # An integer or bool is a value, not a precision: converted whatever the rounding.
        with np.errstate(invalid="ignore"):
            value = np.asarray(args[0])
            if target != "i1" and value.dtype.kind == "f":
                value = np.trunc(value)
            return value.astype(numpy_dtype(target))
