"""The ``ai`` dialect: tensor ops of AI graphs, and ``ai.fused`` kernel groups.

Every op but ``ai.fused``/``ai.yield`` shares one custom syntax::

    %r = ai.NAME %a, %b {attr = value, ...} : T_a * T_b

(``ai.cast`` adds ``to T_result``). Result types are never written: they are
inferred by the op's shape function in ``shapes.py``, the same function the
builders and the verifier call. Attributes are IRDL properties declared once
with their constraint and default; those equal to their default are not printed.

Each op class is the single home of its facts (``fusec.dialect.facts``): its
fusion pattern, its scalar semantics for the code generators, its numpy
reference implementation and the names front ends map onto it. Adding an
elementwise op is one class in the module of its family (plus its line in
``TENSOR_OPS``).

The ops live in modules by family (issue 27): ``base`` (``AiOp``, attributes, the
canonicalisation trait), ``elementwise``, ``activations``, ``logic``, ``anchors``,
``indexing``, ``quantization``, ``layout``, ``reductions`` and ``fused`` (``ai.fused``,
``ai.yield``, ``TENSOR_OPS``, the ``AI`` dialect); this package re-exports every name,
so ``fusec.dialect.ops.X`` is what it was.
"""

from fusec.dialect.ops.activations import (
    _SELU_ALPHA as _SELU_ALPHA,
)
from fusec.dialect.ops.activations import (
    _SELU_GAMMA as _SELU_GAMMA,
)
from fusec.dialect.ops.activations import (
    _TWO_23 as _TWO_23,
)
from fusec.dialect.ops.activations import (
    AcoshOp as AcoshOp,
)
from fusec.dialect.ops.activations import (
    AcosOp as AcosOp,
)
from fusec.dialect.ops.activations import (
    AsinhOp as AsinhOp,
)
from fusec.dialect.ops.activations import (
    AsinOp as AsinOp,
)
from fusec.dialect.ops.activations import (
    AtanhOp as AtanhOp,
)
from fusec.dialect.ops.activations import (
    AtanOp as AtanOp,
)
from fusec.dialect.ops.activations import (
    CeilOp as CeilOp,
)
from fusec.dialect.ops.activations import (
    CeluOp as CeluOp,
)
from fusec.dialect.ops.activations import (
    CoshOp as CoshOp,
)
from fusec.dialect.ops.activations import (
    CosOp as CosOp,
)
from fusec.dialect.ops.activations import (
    EluOp as EluOp,
)
from fusec.dialect.ops.activations import (
    FloorOp as FloorOp,
)
from fusec.dialect.ops.activations import (
    HardSigmoidOp as HardSigmoidOp,
)
from fusec.dialect.ops.activations import (
    HardSwishOp as HardSwishOp,
)
from fusec.dialect.ops.activations import (
    LeakyReluOp as LeakyReluOp,
)
from fusec.dialect.ops.activations import (
    LogOp as LogOp,
)
from fusec.dialect.ops.activations import (
    MathOp as MathOp,
)
from fusec.dialect.ops.activations import (
    MishOp as MishOp,
)
from fusec.dialect.ops.activations import (
    PReluOp as PReluOp,
)
from fusec.dialect.ops.activations import (
    ReciprocalOp as ReciprocalOp,
)
from fusec.dialect.ops.activations import (
    RoundingOp as RoundingOp,
)
from fusec.dialect.ops.activations import (
    RoundOp as RoundOp,
)
from fusec.dialect.ops.activations import (
    SeluOp as SeluOp,
)
from fusec.dialect.ops.activations import (
    SignOp as SignOp,
)
from fusec.dialect.ops.activations import (
    SinhOp as SinhOp,
)
from fusec.dialect.ops.activations import (
    SinOp as SinOp,
)
from fusec.dialect.ops.activations import (
    SoftplusOp as SoftplusOp,
)
from fusec.dialect.ops.activations import (
    SoftsignOp as SoftsignOp,
)
from fusec.dialect.ops.activations import (
    TanOp as TanOp,
)
from fusec.dialect.ops.activations import (
    ThresholdedReluOp as ThresholdedReluOp,
)
from fusec.dialect.ops.activations import (
    WhereOp as WhereOp,
)
from fusec.dialect.ops.activations import (
    _clamp_unit as _clamp_unit,
)
from fusec.dialect.ops.activations import (
    _exponential_linear as _exponential_linear,
)
from fusec.dialect.ops.activations import (
    _linear as _linear,
)
from fusec.dialect.ops.activations import (
    _math_names as _math_names,
)
from fusec.dialect.ops.activations import (
    _softplus as _softplus,
)
from fusec.dialect.ops.activations import (
    _to_integer as _to_integer,
)
from fusec.dialect.ops.anchors import (
    AttentionOp as AttentionOp,
)
from fusec.dialect.ops.anchors import (
    BatchNormOp as BatchNormOp,
)
from fusec.dialect.ops.anchors import (
    BiasAddOp as BiasAddOp,
)
from fusec.dialect.ops.anchors import (
    CastOp as CastOp,
)
from fusec.dialect.ops.anchors import (
    Conv2DOp as Conv2DOp,
)
from fusec.dialect.ops.anchors import (
    LayerNormOp as LayerNormOp,
)
from fusec.dialect.ops.anchors import (
    MatmulOp as MatmulOp,
)
from fusec.dialect.ops.anchors import (
    MoEExpertsOp as MoEExpertsOp,
)
from fusec.dialect.ops.anchors import (
    RMSNormOp as RMSNormOp,
)
from fusec.dialect.ops.anchors import (
    SoftmaxOp as SoftmaxOp,
)
from fusec.dialect.ops.base import (
    CANONICAL_PATTERNS as CANONICAL_PATTERNS,
)
from fusec.dialect.ops.base import (
    AiOp as AiOp,
)
from fusec.dialect.ops.base import (
    Canonicalized as Canonicalized,
)
from fusec.dialect.ops.base import (
    OneInputOp as OneInputOp,
)
from fusec.dialect.ops.base import (
    ShapeError as ShapeError,
)
from fusec.dialect.ops.base import (
    TensorSpec as TensorSpec,
)
from fusec.dialect.ops.base import (
    _declared_properties as _declared_properties,
)
from fusec.dialect.ops.base import (
    _is_default as _is_default,
)
from fusec.dialect.ops.base import (
    _property_problem as _property_problem,
)
from fusec.dialect.ops.base import (
    _strip_op_prefix as _strip_op_prefix,
)
from fusec.dialect.ops.base import (
    attribute_like as attribute_like,
)
from fusec.dialect.ops.base import (
    bool_prop as bool_prop,
)
from fusec.dialect.ops.base import (
    choice_prop as choice_prop,
)
from fusec.dialect.ops.base import (
    describe as describe,
)
from fusec.dialect.ops.base import (
    element_type_name as element_type_name,
)
from fusec.dialect.ops.base import (
    float_prop as float_prop,
)
from fusec.dialect.ops.base import (
    int_array_prop as int_array_prop,
)
from fusec.dialect.ops.base import (
    int_prop as int_prop,
)
from fusec.dialect.ops.base import (
    operand as operand,
)
from fusec.dialect.ops.base import (
    python_value as python_value,
)
from fusec.dialect.ops.base import (
    result as result,
)
from fusec.dialect.ops.base import (
    spec_of as spec_of,
)
from fusec.dialect.ops.base import (
    tensor_type as tensor_type,
)
from fusec.dialect.ops.elementwise import (
    _GELU_TANH_2C as _GELU_TANH_2C,
)
from fusec.dialect.ops.elementwise import (
    _SQRT1_2 as _SQRT1_2,
)
from fusec.dialect.ops.elementwise import (
    AbsOp as AbsOp,
)
from fusec.dialect.ops.elementwise import (
    AddOp as AddOp,
)
from fusec.dialect.ops.elementwise import (
    ArithmeticOp as ArithmeticOp,
)
from fusec.dialect.ops.elementwise import (
    BinaryOp as BinaryOp,
)
from fusec.dialect.ops.elementwise import (
    ClipOp as ClipOp,
)
from fusec.dialect.ops.elementwise import (
    DivOp as DivOp,
)
from fusec.dialect.ops.elementwise import (
    ErfOp as ErfOp,
)
from fusec.dialect.ops.elementwise import (
    ExpOp as ExpOp,
)
from fusec.dialect.ops.elementwise import (
    ExtremumOp as ExtremumOp,
)
from fusec.dialect.ops.elementwise import (
    GeluOp as GeluOp,
)
from fusec.dialect.ops.elementwise import (
    IsNanOp as IsNanOp,
)
from fusec.dialect.ops.elementwise import (
    MaximumOp as MaximumOp,
)
from fusec.dialect.ops.elementwise import (
    MinimumOp as MinimumOp,
)
from fusec.dialect.ops.elementwise import (
    MulOp as MulOp,
)
from fusec.dialect.ops.elementwise import (
    NegOp as NegOp,
)
from fusec.dialect.ops.elementwise import (
    PowOp as PowOp,
)
from fusec.dialect.ops.elementwise import (
    ReluOp as ReluOp,
)
from fusec.dialect.ops.elementwise import (
    SigmoidOp as SigmoidOp,
)
from fusec.dialect.ops.elementwise import (
    SiluOp as SiluOp,
)
from fusec.dialect.ops.elementwise import (
    SqrtOp as SqrtOp,
)
from fusec.dialect.ops.elementwise import (
    SubOp as SubOp,
)
from fusec.dialect.ops.elementwise import (
    TanhOp as TanhOp,
)
from fusec.dialect.ops.elementwise import (
    UnaryOp as UnaryOp,
)
from fusec.dialect.ops.elementwise import (
    _minus_zero_at_minus_inf as _minus_zero_at_minus_inf,
)
from fusec.dialect.ops.fused import (
    AI as AI,
)
from fusec.dialect.ops.fused import (
    TENSOR_OPS as TENSOR_OPS,
)
from fusec.dialect.ops.fused import (
    FusedOp as FusedOp,
)
from fusec.dialect.ops.fused import (
    YieldOp as YieldOp,
)
from fusec.dialect.ops.fused import (
    _types as _types,
)
from fusec.dialect.ops.indexing import (
    ArgMaxOp as ArgMaxOp,
)
from fusec.dialect.ops.indexing import (
    ArgMinOp as ArgMinOp,
)
from fusec.dialect.ops.indexing import (
    ArgReduceOp as ArgReduceOp,
)
from fusec.dialect.ops.indexing import (
    CumSumOp as CumSumOp,
)
from fusec.dialect.ops.indexing import (
    ExpandOp as ExpandOp,
)
from fusec.dialect.ops.indexing import (
    TakeOp as TakeOp,
)
from fusec.dialect.ops.layout import (
    ConcatOp as ConcatOp,
)
from fusec.dialect.ops.layout import (
    GatherOp as GatherOp,
)
from fusec.dialect.ops.layout import (
    LayoutOp as LayoutOp,
)
from fusec.dialect.ops.layout import (
    ReshapeOp as ReshapeOp,
)
from fusec.dialect.ops.layout import (
    RotateHalfOp as RotateHalfOp,
)
from fusec.dialect.ops.layout import (
    SliceOp as SliceOp,
)
from fusec.dialect.ops.layout import (
    TransposeOp as TransposeOp,
)
from fusec.dialect.ops.logic import (
    AndOp as AndOp,
)
from fusec.dialect.ops.logic import (
    CompareOp as CompareOp,
)
from fusec.dialect.ops.logic import (
    EqualOp as EqualOp,
)
from fusec.dialect.ops.logic import (
    GreaterEqualOp as GreaterEqualOp,
)
from fusec.dialect.ops.logic import (
    GreaterOp as GreaterOp,
)
from fusec.dialect.ops.logic import (
    LessEqualOp as LessEqualOp,
)
from fusec.dialect.ops.logic import (
    LessOp as LessOp,
)
from fusec.dialect.ops.logic import (
    LogicalOp as LogicalOp,
)
from fusec.dialect.ops.logic import (
    ModOp as ModOp,
)
from fusec.dialect.ops.logic import (
    NotOp as NotOp,
)
from fusec.dialect.ops.logic import (
    OrOp as OrOp,
)
from fusec.dialect.ops.logic import (
    XorOp as XorOp,
)
from fusec.dialect.ops.quantization import (
    DequantizeOp as DequantizeOp,
)
from fusec.dialect.ops.quantization import (
    QuantizationOp as QuantizationOp,
)
from fusec.dialect.ops.quantization import (
    QuantizeOp as QuantizeOp,
)
from fusec.dialect.ops.reductions import (
    AvgPool2DOp as AvgPool2DOp,
)
from fusec.dialect.ops.reductions import (
    MaxPool2DOp as MaxPool2DOp,
)
from fusec.dialect.ops.reductions import (
    Pool2DOp as Pool2DOp,
)
from fusec.dialect.ops.reductions import (
    ReduceMaxOp as ReduceMaxOp,
)
from fusec.dialect.ops.reductions import (
    ReduceMeanOp as ReduceMeanOp,
)
from fusec.dialect.ops.reductions import (
    ReduceOp as ReduceOp,
)
from fusec.dialect.ops.reductions import (
    ReduceSumOp as ReduceSumOp,
)
