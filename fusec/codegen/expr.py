"""The one expression generator shared by every template and every target.

A fused group's elementwise/broadcast ops become straight-line scalar
statements (``t0 = l0 * l1``) that a template places inside its loops: the
pointwise body, a row reduction's prologue and epilogue, a matmul or conv
epilogue. What each op computes is its own fact: the op class's ``scalar``
method (``fusec.dialect.ops``) builds the expression through the generator,
which implements the dialect's ``ScalarBuilder`` for one ``Language``:

* ``PYTHON``: Numba Python, valid in a Numba CPU kernel and in a Numba CUDA
  kernel alike;
* ``CUDA_CPP``: CUDA C++ device code (``const float t0 = ...;``), for the
  epilogues of generated C++ kernels such as the Tensor Core GEMM;
* ``TORCH``: PyTorch tensor expressions, for the cuda fallback path.

The numerics guarantees hold in every language:

* no ``min``/``max`` builtins: ``maximum`` and ``relu`` are selects written so
  that NaN propagates (``a != a``), and comparisons stay IEEE (no fast-math);
* every literal is a float32 (``f32(...)`` in Python, an exact hexadecimal
  ``0x1.8p-1f`` in C++), so arithmetic stays in float32 instead of being
  promoted to float64;
* a mid-chain ``ai.cast`` to a 16-bit type rounds to nearest-even exactly like
  numpy/ml_dtypes do: Python calls the helpers ``round_f16``/``round_bf16``
  (source from ``helper_source``; float32 arithmetic only, Veltkamp
  splitting), C++ the CUDA conversion intrinsics (``fusec.targets.cuda.cpp_expr``).

A cpu template may ask for ``ExprGenerator(fast_exp=True)``: ``exp`` (and the
sigmoid, silu and tanh-gelu forms built on it) then calls the helper
``exp_f32``, a float32 exponential in plain arithmetic (Cody-Waite range
reduction, a degree-7 polynomial, exponent bits built by integer shifts) that
LLVM vectorises inside a loop, where ``math.exp`` is a scalar libm call that
keeps the whole loop scalar (Numba has no SVML by default). It is faithfully
rounded (under 1 ulp from the exact value over every float32, checked
exhaustively) and exact at the edges (NaN, +-inf, overflow, subnormal results).
It needs ``fma32`` (an LLVM ``fma`` intrinsic), so it is cpu only; the CUDA
templates keep ``math.exp``, which is a fast device function there. The same
flag makes ``erfc`` (the exact GELU) call ``erfc_f32``, built on that exponential.

The Python module holding the generated code must therefore bind ``math``,
``f32`` and the helpers ``gen.helpers`` names (see ``PRELUDE_NAMES`` and
``helper_source``).

Nothing spliced into generated source comes from user text: identifiers are
generated (``t0``, ``l0``, ``in0``), op names come from the dialect's classes,
numbers go through ``literal`` and attribute strings are only compared against
the dialect's fixed choices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from xdsl.ir import Operation, SSAValue

from fusec.codegen import quant as _quant
from fusec.dialect import ops as ai
from fusec.dialect.facts import MATH_FUNCTIONS
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.ir import diagnostics
from fusec.ir.dtypes import is_float
from fusec.ir.tensors import shape_of

#: Names the generated statements refer to; the kernel module must bind them.
PRELUDE_NAMES = ("math", "f32")

#: Elementwise ops the generator knows: those with scalar semantics.
ELEMENTWISE_OPS: tuple[type[ai.AiOp], ...] = tuple(op for op in ai.TENSOR_OPS if op.has_scalar())

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CodegenError(FusecError):
    """A group the templates cannot lower (located at the offending op)."""


def error_at(op: Operation, message: str) -> FusecError:
    """A CodegenError located at ``op`` (its file:line:col, or its ONNX node)."""
    return diagnostics.error_at(op, message, error=CodegenError)


#: The ops a row-reduction group is built around: one per group, the others elementwise.
ROW_REDUCTIONS = (ai.LayerNormOp, ai.RMSNormOp, ai.SoftmaxOp)


def the_row_reduction(where: Operation, ops: Sequence[Operation]) -> Operation:
    """The single layernorm, rms_norm or softmax of a row-reduction group's ``ops``, else
    a CodegenError located at ``where``."""
    reductions = [op for op in ops if isinstance(op, ROW_REDUCTIONS)]
    if len(reductions) != 1:
        raise error_at(
            where,
            "a row_reduce group needs exactly one layernorm, rms_norm or softmax, has "
            f"{len(reductions)}",
        )
    return reductions[0]


def literal(x: float) -> str:
    """A float32 literal for generated code: ``f32(0.5)``, ``f32(math.inf)``, ...

    ``repr`` of a Python float round-trips exactly and is always a plain
    number, so no text of the input reaches the source.
    """
    value = float(x)
    if math.isnan(value):
        return "f32(math.nan)"
    if math.isinf(value):
        return "f32(math.inf)" if value > 0 else "f32(-math.inf)"
    return f"f32({value!r})"


def is_identifier(text: str) -> bool:
    return bool(_IDENT.match(text))


def operand_shape(op: Operation, index: int) -> tuple[int, ...]:
    """The shape operand ``index`` of ``op`` has under numpy broadcasting.

    It is the operand's own shape, except for ``ai.bias_add``'s 1-D bias along
    axis ``a`` of a rank-r input: that is (C, 1, ..., 1) with r-1-a trailing
    ones, so one rule (right-aligned broadcasting) indexes every operand.
    """
    shape = shape_of(op.operands[index])
    if isinstance(op, ai.BiasAddOp) and index == 1:
        rank = len(shape_of(op.results[0]))
        axis = op.attr("axis") % rank
        return shape + (1,) * (rank - 1 - axis)
    if isinstance(op, ai.QuantizationOp) and index > 0:
        return quantization_operand_shape(op, shape)
    return shape


def quantization_operand_shape(op: ai.QuantizationOp, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of a quantization op's scale or zero point (``shape``): per
    tensor its own, per axis ``(C, 1, ..., 1)`` along the axis, per block its own when
    one block or one index per block makes it a broadcast, else the input's shape: the
    block scale is then read at index ``i // block_size`` along the axis, which only the
    cpu pointwise loop does (``block_leaves``; the other templates refuse such an op)."""
    x = shape_of(op.input)
    if op.attr("block_size") == 0:
        if math.prod(shape) == 1 and len(shape) <= 1:
            return shape
        axis = op.attr("axis") % len(x)
        return shape + (1,) * (len(x) - 1 - axis)
    return shape if op.blocks() is None else x


def block_leaves(ops: Sequence[Operation]) -> dict[SSAValue, tuple[int, int, int]]:
    """The values ``ops`` read as per-block scales or zero points that are no broadcast
    (``QuantizationOp.blocks``): value -> (axis of the input, block size, blocks)."""
    found: dict[SSAValue, tuple[int, int, int]] = {}
    for op in ops:
        if isinstance(op, ai.QuantizationOp) and (blocks := op.blocks()) is not None:
            for value in op.operands[1:]:
                found[value] = blocks
    return found


def block_axis_shapes(
    space: Sequence[int],
    leaves: Mapping[SSAValue, tuple[int, ...]],
    blocks: Mapping[SSAValue, tuple[int, int, int]],
) -> list[tuple[int, ...]]:
    """One shape per per-block leaf (``block_leaves``), full along its block axis alone:
    coalesced beside the operands' shapes, it keeps that axis a dim of its own (a scale is
    read at ``index // block`` along it); ``block_axis_dims`` finds the dims again."""
    shapes = []
    for value, (axis, _, _) in blocks.items():
        dim = len(space) - len(leaves[value]) + axis
        shapes.append(tuple(n if d == dim else 1 for d, n in enumerate(space)))
    return shapes


def block_axis_dims(merged: Sequence[tuple[int, ...]]) -> list[int]:
    """The dim of each coalesced ``block_axis_shapes`` shape (its one dim above 1)."""
    return [next(d for d, n in enumerate(shape) if n != 1) for shape in merged]


def block_offset(
    space: Sequence[int], shape: Sequence[int], index_vars: Sequence[str], dim: int, block: int
) -> str:
    """Flat offset into a per-block scale read in ``space`` (merged dims) as if of the
    broadcast shape ``shape``, whose dim ``dim`` holds ``ceil(n / block)`` blocks of the
    loop's ``n`` indices: ``broadcast_offset`` with ``index_vars[dim] // block`` there."""
    lead = len(space) - len(shape)
    terms = []
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        size = shape[d]
        if lead + d == dim:
            size = -(-size // block)
            terms.append(f"({index_vars[dim]} // {block})" + (f" * {stride}" if stride > 1 else ""))
        elif size != 1:
            terms.append(
                index_vars[lead + d] if stride == 1 else f"{index_vars[lead + d]} * {stride}"
            )
        stride *= size
    return " + ".join(reversed(terms)) if terms else "0"


def leaf_shapes(ops: Sequence[Operation]) -> dict[SSAValue, tuple[int, ...]]:
    """Broadcast shape of every value ``ops`` use but do not define.

    A template indexes such a leaf with ``broadcast_offset(space, shape, idx)``.
    A value used under two different shapes (a bias that is also added as a
    plain broadcast operand) cannot be one load: that is reported.
    """
    shapes, conflict = _leaves(ops)
    if conflict is not None:
        raise error_at(conflict, INDEXING_CONFLICT)
    return shapes


INDEXING_CONFLICT = (
    "uses a group input both as a bias and as a broadcast operand; "
    "the code generator needs one indexing per input"
)


def indexing_conflict(ops: Sequence[Operation]) -> Operation | None:
    """The first of ``ops`` that uses a value they do not define under another broadcast
    shape than an earlier op does (``leaf_shapes`` cannot index it), or None. The
    targets refuse such a group before planning it (``Target.can_fuse``)."""
    return _leaves(ops)[1]


def _leaves(
    ops: Sequence[Operation],
) -> tuple[dict[SSAValue, tuple[int, ...]], Operation | None]:
    defined = {r for op in ops for r in op.results}
    shapes: dict[SSAValue, tuple[int, ...]] = {}
    for op in ops:
        for index, value in enumerate(op.operands):
            if value in defined:
                continue
            shape = operand_shape(op, index)
            previous = shapes.setdefault(value, shape)
            if _strip_ones(previous) != _strip_ones(shape):
                return shapes, op
    return shapes, None


def _strip_ones(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def coalesce(
    space: Sequence[int], shapes: Sequence[Sequence[int]]
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge neighbouring dims of ``space`` that every shape treats alike (broadcasts both or
    neither) and drop dims of size 1: fewer dims, less index arithmetic per element.

    ``shapes`` broadcast to ``space`` (right-aligned). Returns the merged space and each
    shape in it (every merged dim is 1 or the full merged size); a space of size-1 dims
    only is ``(1,)``. ``coalesce_groups`` says which dims of ``space`` each merged dim is.
    """
    groups = coalesce_groups(space, shapes)
    if not groups:
        return (1,), [(1,)] * len(shapes)
    padded = [(1,) * (len(space) - len(s)) + tuple(s) for s in shapes]
    new_space = tuple(math.prod(space[d] for d in g) for g in groups)
    new_shapes = [tuple(math.prod(s[d] for d in g) for g in groups) for s in padded]
    return new_space, new_shapes


def coalesce_groups(space: Sequence[int], shapes: Sequence[Sequence[int]]) -> list[list[int]]:
    """The dims of ``space`` (size-1 ones left out) that ``coalesce`` merges into each of its
    merged dims, outer first."""
    rank = len(space)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    groups: list[list[int]] = []
    last_pattern = None
    for d in range(rank):
        if space[d] == 1:
            continue
        pattern = tuple(s[d] != 1 for s in padded)
        if groups and pattern == last_pattern:
            groups[-1].append(d)
        else:
            groups.append([d])
        last_pattern = pattern
    return groups


def merged_runs(dims: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(size, stride) dims, outer first, without the size-1 ones and with neighbours that
    are one run in memory (the outer's stride is the inner's size times its stride) merged."""
    out: list[tuple[int, int]] = []
    for n, stride in dims:
        if n == 1:
            continue
        if out and out[-1][1] == n * stride:
            out[-1] = (out[-1][0] * n, stride)
        else:
            out.append((n, stride))
    return out


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to together by numpy's rules (``np.broadcast_shapes``
    without importing numpy, which ``fusec compile`` never needs: issue #26); a size 1
    stretches to any other, 0 included. ValueError when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(-rank, 0):
        sizes = {s[d] for s in shapes if len(s) >= -d and s[d] != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(map(str, shapes))} do not broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_offset(
    out_shape: Sequence[int], in_shape: Sequence[int], index_vars: Sequence[str]
) -> str:
    """Flat C-order offset into an input broadcast (numpy rules) to ``out_shape``.

    ``index_vars[d]`` names the index of output dim ``d``; input dims of size
    1 contribute nothing. Returns e.g. ``"i0 * 1024 + i2"`` or ``"0"``.
    """
    out_shape, in_shape = tuple(out_shape), tuple(in_shape)
    if len(index_vars) != len(out_shape):
        raise ValueError(f"{len(index_vars)} index variables for a rank-{len(out_shape)} space")
    if len(in_shape) > len(out_shape):
        raise ValueError(f"shape {in_shape} does not broadcast to {out_shape}")
    lead = len(out_shape) - len(in_shape)
    terms = []
    stride = 1
    for d in range(len(in_shape) - 1, -1, -1):
        size = in_shape[d]
        if size != 1:
            if size != out_shape[lead + d]:
                raise ValueError(f"shape {in_shape} does not broadcast to {out_shape}")
            var = index_vars[lead + d]
            if not is_identifier(var):
                raise ValueError(f"index variable {var!r} is not an identifier")
            terms.append(var if stride == 1 else f"{var} * {stride}")
        stride *= size
    return " + ".join(reversed(terms)) if terms else "0"


def header(fused_op: ai.FusedOp, *, notes: Iterable[str] = ()) -> str:
    """The kernel's header comment: the group's kind, its ops in order, its I/O types.

    Only dialect op names, the (template-validated) kind and printed tensor
    types appear: never symbol names or file names from the input.
    """
    body = [op for op in fused_op.block.ops if not isinstance(op, ai.YieldOp)]
    kind = fused_op.kind_name if is_identifier(fused_op.kind_name) else "?"
    lines = [
        f'# fusec kernel for one ai.fused "{kind}" group of {len(body)} op(s):',
        f"#   {' -> '.join(op.name for op in body) or '(no ops)'}",
    ]
    for label, values in (("inputs ", fused_op.inputs), ("outputs", fused_op.results)):
        types = ", ".join(str(spec_of(v.type)) for v in values) or "none"
        lines.append(f"#   {label}: {types}")
    lines.extend(f"# {note}" for note in notes)
    return "\n".join(lines) + "\n"


Leaf = Callable[[SSAValue], str]


# ------------------------------------------------------------------- languages


class Language:
    """How scalar expressions and statements are spelled in one target language.

    The arithmetic and comparison operators are the same in every language
    here (fully parenthesised); a language differs in literals, conditions,
    function names and statements.
    """

    name = "abstract"

    def literal(self, value: float) -> str:
        raise NotImplementedError

    def either(self, a: str, b: str) -> str:
        raise NotImplementedError

    def negate(self, cond: str) -> str:
        raise NotImplementedError

    def select(self, cond: str, a: str, b: str) -> str:
        raise NotImplementedError

    def call(self, function: str, args: Sequence[str]) -> str:
        raise NotImplementedError

    def exp(self, a: str) -> str:
        raise NotImplementedError

    def assign(self, name: str, expr: str) -> str:
        """The statement binding the new name ``name`` to ``expr``."""
        raise NotImplementedError


class PythonLanguage(Language):
    """Numba Python (cpu ``@njit`` and CUDA ``@cuda.jit`` kernels alike).

    Every literal is ``f32(...)`` (``numpy.float32``) so arithmetic stays in
    float32; math functions are ``math.*``, which Numba types as float32.
    """

    name = "python"

    def literal(self, value: float) -> str:
        return literal(value)

    def either(self, a: str, b: str) -> str:
        return f"({a} or {b})"

    def negate(self, cond: str) -> str:
        return f"(not {cond})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({a} if {cond} else {b})"

    def call(self, function: str, args: Sequence[str]) -> str:
        return f"math.{function}({', '.join(args)})"

    def exp(self, a: str) -> str:
        return f"math.exp({a})"

    def assign(self, name: str, expr: str) -> str:
        return f"{name} = {expr}"


class CudaCppLanguage(Language):
    """CUDA C++ device code (e.g. a Tensor Core kernel's epilogue).

    Literals are exact hexadecimal ``float`` literals; the math functions are
    the single-precision CUDA math library (``expf``...), which nvcc compiles
    IEEE-correctly unless ``--use_fast_math`` is given (the generated code
    needs NaN comparisons to work, so it must not be); 16-bit rounding uses the
    round-to-nearest-even conversions of ``cuda_fp16.h``/``cuda_bf16.h`` (see
    ``fusec.targets.cuda.cpp_expr``).
    """

    name = "cuda-c++"

    def literal(self, value: float) -> str:
        import numpy as np

        value = float(np.float32(value))
        if math.isnan(value):
            return "__int_as_float(0x7fc00000)"
        if math.isinf(value):
            return "__int_as_float(0x7f800000)" if value > 0 else "__int_as_float(0xff800000)"
        return f"{value.hex()}f"

    def either(self, a: str, b: str) -> str:
        return f"({a} || {b})"

    def negate(self, cond: str) -> str:
        return f"(!{cond})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def call(self, function: str, args: Sequence[str]) -> str:
        return f"{function}f({', '.join(args)})"

    def exp(self, a: str) -> str:
        return f"expf({a})"

    def assign(self, name: str, expr: str) -> str:
        return f"const float {name} = {expr};"


class TorchLanguage(Language):
    """PyTorch expressions on float32 tensors: the same scalar semantics, applied
    elementwise by torch (the cuda fallback for groups without a fused template)."""

    name = "torch"
    _FUNCTIONS = {
        "tanh": "torch.tanh",
        "sqrt": "torch.sqrt",
        "erf": "torch.erf",
        "erfc": "torch.special.erfc",
        "pow": "torch.pow",
        "fabs": "torch.abs",
        "copysign": "torch.copysign",
        **{f: f"torch.{f}" for f in ("log", "log1p", "expm1", "sin", "cos", "tan", "sinh", "cosh")},
        **{f: f"torch.{f}" for f in ("asin", "acos", "atan", "asinh", "acosh", "atanh")},
    }

    def literal(self, value: float) -> str:
        import numpy as np

        value = float(np.float32(value))
        if math.isnan(value) or math.isinf(value):
            return f"float({str(value)!r})"
        return repr(value)

    def either(self, a: str, b: str) -> str:
        return f"({a} | {b})"

    def negate(self, cond: str) -> str:
        return f"(~{cond})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"torch.where({cond}, {a}, {b})"

    def call(self, function: str, args: Sequence[str]) -> str:
        return f"{self._FUNCTIONS[function]}({', '.join(args)})"

    def exp(self, a: str) -> str:
        return f"torch.exp({a})"

    def assign(self, name: str, expr: str) -> str:
        return f"{name} = {expr}"


PYTHON = PythonLanguage()
CUDA_CPP = CudaCppLanguage()
TORCH = TorchLanguage()
LANGUAGES: tuple[Language, ...] = (PYTHON, CUDA_CPP, TORCH)

_ARITHMETIC = frozenset("+-*/")
_COMPARISONS = frozenset(("<", "<=", ">", ">=", "==", "!="))


class ExprGenerator:
    """Scalar float32 expressions for elementwise ops, and straight-line chains of them.

    It is the dialect's ``ScalarBuilder`` for one ``language``: an op class's
    ``scalar`` method builds its expression through it, so each op's
    semantics is written once and rendered for every target.

    One instance per generated kernel module: it numbers temporaries (``t0``,
    ``t1``, ... and ``l0``, ... for bound leaf loads) uniquely within the
    module and records the helpers the statements call (``helpers``).
    """

    def __init__(
        self,
        temp_prefix: str = "t",
        leaf_prefix: str = "l",
        *,
        fast_exp: bool = False,
        language: Language = PYTHON,
    ) -> None:
        if not (is_identifier(temp_prefix) and is_identifier(leaf_prefix)):
            raise ValueError("prefixes must be identifiers")
        if fast_exp and language is not PYTHON:
            raise ValueError("fast_exp is a Numba cpu helper: Python only")
        self.temp_prefix = temp_prefix
        self.leaf_prefix = leaf_prefix
        self.language = language
        #: Exponentials call the vectorisable ``exp_f32`` helper (cpu) instead of ``math.exp``.
        self.fast_exp = fast_exp
        self.helpers: set[str] = set()
        self._counters: dict[str, int] = {}
        #: The statements of the chain being generated (``bind`` adds to them).
        self._statements: list[str] | None = None

    def fresh(self, prefix: str) -> str:
        """A new generated identifier ``<prefix><n>``."""
        n = self._counters.get(prefix, 0)
        self._counters[prefix] = n + 1
        return f"{prefix}{n}"

    # ----------------------------------------------------------------- ops
    def scalar(self, op: Operation, args: list[str]) -> str:
        """An expression computing ``op`` on scalar operand expressions ``args``.

        Operands are evaluated more than once in a few forms (maximum, relu),
        so pass names or other side-effect-free expressions.
        """
        if not (isinstance(op, ai.AiOp) and op.has_scalar()):
            raise error_at(op, "is not an elementwise op the code generator knows")
        return op.scalar(self, *args)

    # ------------------------------------------------------ ScalarBuilder
    def literal(self, value: float) -> str:
        return self.language.literal(value)

    def arith(self, a: str, symbol: str, b: str) -> str:
        if symbol not in _ARITHMETIC:
            raise ValueError(f"not an arithmetic operator: {symbol!r}")
        return f"({a} {symbol} {b})"

    def neg(self, a: str) -> str:
        return f"(-{a})"

    def compare(self, a: str, symbol: str, b: str) -> str:
        if symbol not in _COMPARISONS:
            raise ValueError(f"not a comparison: {symbol!r}")
        return f"({a} {symbol} {b})"

    def either(self, cond_a: str, cond_b: str) -> str:
        return self.language.either(cond_a, cond_b)

    def negate(self, cond: str) -> str:
        return self.language.negate(cond)

    def select(self, cond: str, a: str, b: str) -> str:
        return self.language.select(cond, a, b)

    def bind(self, expr: str) -> str:
        """``expr`` bound to a new temporary by a statement of its own, when a chain is
        being generated (else ``expr`` itself)."""
        if self._statements is None:
            return expr
        name = self.fresh(self.temp_prefix)
        self._statements.append(self.language.assign(name, expr))
        return name

    def call(self, function: str, *args: str) -> str:
        if function not in MATH_FUNCTIONS:
            raise ValueError(f"not a scalar math function: {function!r}")
        if self.fast_exp and function == "erfc":  # exact GELU's erfc: a loop-vectorising helper
            self.helpers.add("erfc_f32")
            return f"erfc_f32({args[0]})"
        return self.language.call(function, args)

    def exp(self, a: str) -> str:
        """A float32 ``e ** a``: ``exp_f32`` with ``fast_exp`` (recorded in ``helpers``)."""
        if self.fast_exp:
            self.helpers.add("exp_f32")
            return f"exp_f32({a})"
        return self.language.exp(a)

    def logistic(self, numerator: str, x: str) -> str:
        """``numerator / (1 + exp(-x))``, with the language's division and exponential.

        With ``fast_exp`` the exponential's argument is never positive: ``e = exp(-|x|)``
        in (0, 1] by ``exp_nonpos_f32`` (15 vector operations against ``exp_f32``'s 22,
        no overflow path), and ``numerator * e / (1 + e)`` for x < 0, the same value.
        A SiLU over 393k floats, one AMD EPYC core (AVX2): 0.75 -> 0.45-0.53 ns an
        element. exp(-|x|) below e ** -86.5 is 0 there: sigmoid(x < -86.5) is 0 where the
        exact value is below 3e-38. NaN stays NaN (both branches carry it)."""
        if not self.fast_exp:
            denominator = self.arith(self.literal(1.0), "+", self.exp(self.neg(x)))
            return self.arith(numerator, "/", denominator)
        self.helpers.add("exp_nonpos_f32")
        x = self.bind(x)
        e = self.bind(f"exp_nonpos_f32(-abs({x}))")
        positive = self.compare(x, ">=", self.literal(0.0))
        scaled = self.bind(self.select(positive, numerator, self.arith(numerator, "*", e)))
        return self.arith(scaled, "/", self.arith(self.literal(1.0), "+", e))

    def round_to(self, dtype: str, a: str) -> str:
        """``a`` rounded to ``dtype`` exactly (nearest-even), as a float32."""
        if dtype == "f32":
            return a
        if self.language is TORCH:
            return f"{a}.to(torch.{'float16' if dtype == 'f16' else 'bfloat16'}).float()"
        helper = {"f16": "round_f16", "bf16": "round_bf16"}[dtype]
        self.helpers.add(helper)
        return f"{helper}({a})"

    # -------------------------------------------------- integers and bools
    def convert(self, a: str, source: str, target: str) -> str:
        """``a`` converted from element type ``source`` to ``target`` (see ScalarBuilder).

        Numba Python and PyTorch compute integers as integers and i1 as conditions;
        CUDA C++ (the Tensor Core epilogues, which no integer group reaches: the
        fusion rules keep them out) carries them as floats, exact to 2^24.
        """
        if target == "i1":
            zero = "0.0f" if self.language is CUDA_CPP else "0"
            return f"({a} != {zero})"
        if is_float(target):
            if self.language is TORCH:
                value = f"{a}.float()"
            elif self.language is CUDA_CPP:
                value = a
            elif source == "i1":
                value = self.select(a, self.literal(1.0), self.literal(0.0))
            else:
                value = f"f32({a})"
            return self.round_to(target, value)
        if self.language is TORCH:
            return f"{a}.to(torch.{'int64' if target == 'i64' else 'int32'})"
        if self.language is CUDA_CPP:
            return f"truncf({a})" if is_float(source) else a
        if is_float(source):  # NaN and values beyond int64: INT64_MIN, as numpy on x86
            inside = f"({a} == {a} and abs({a}) < {self.literal(9.2e18)})"
            return f"(int({a}) if {inside} else -9223372036854775808)"
        return f"int({a})"

    def int_divide(self, a: str, b: str) -> str:
        """Integer ``a / b`` truncated toward zero; 0 where ``b`` is 0."""
        if self.language is TORCH:
            return (
                f"torch.div({a}, {b}.masked_fill({b} == 0, 1), rounding_mode='trunc')"
                f".masked_fill({b} == 0, 0)"
            )
        if self.language is CUDA_CPP:
            return f"(({b}) == 0.0f ? 0.0f : truncf(({a}) / ({b})))"
        # inline, no device function (the CUDA kernels compile to PTX without a GPU): the
        # floor quotient moved toward zero where the signs differ and b does not divide a
        q = f"({a} // {b})"
        up = f"(1 if ({q} < 0 and {q} * {b} != {a}) else 0)"
        return f"({a} - {a} if {b} == 0 else {q} + {up})"

    def int_remainder(self, a: str, b: str, floored: bool) -> str:
        """Integer ``a mod b`` (sign of ``b`` when ``floored``, else of ``a``); 0 where
        ``b`` is 0."""
        if self.language is TORCH:
            function = "torch.remainder" if floored else "torch.fmod"
            return f"{function}({a}, {b}.masked_fill({b} == 0, 1)).masked_fill({b} == 0, 0)"
        if self.language is CUDA_CPP:
            rem = f"(({a}) - floorf(({a}) / ({b})) * ({b}))" if floored else f"fmodf({a}, {b})"
            return f"(({b}) == 0.0f ? 0.0f : {rem})"
        r = f"({a} % {b})"  # Python's (and Numba's) floored remainder
        if not floored:  # C's: the sign of a
            r = f"({r} - ({b} if ({r} != 0 and ({r} < 0) != ({a} < 0)) else {b} - {b}))"
        return f"({a} - {a} if {b} == 0 else {r})"

    # ---------------------------------------------------- quantized elements
    def quantize_code(self, dtype: str, q: str, zero_point: str, saturate: bool) -> str:
        """``ai.quantize``'s code (``fusec.codegen.quant``): a Numba helper (the cpu
        kernels' and the cuda Numba kernels'); the C++ and torch languages have none."""
        from fusec.codegen.quant import quantize_helper

        helper = self._quant_helper(quantize_helper(dtype, saturate))
        return f"{helper}({q}, {zero_point})"

    def quantized_value(self, dtype: str, code: str) -> str:
        from fusec.codegen.quant import value_helper

        name = value_helper(dtype)
        if name is None:
            self._quant_helper(None)
            return f"f32({code})"
        return f"{self._quant_helper(name)}({code})"

    def _quant_helper(self, name: str | None) -> str | None:
        if self.language is not PYTHON:
            raise FusecError(
                f"quantized element types have no {self.language.name} code (issue 31): "
                "Numba kernels compute ai.quantize and ai.dequantize"
            )
        if name is not None:
            self.helpers.add(name)
        return name

    # --------------------------------------------------------------- chains
    def chain(
        self,
        ops: Sequence[Operation],
        leaf: Leaf,
        rotated: Callable[[SSAValue], tuple[str, str]] | None = None,
    ) -> tuple[list[str], dict[SSAValue, str]]:
        """Statements ``tN = <expr>`` computing ``ops`` in order.

        Operands that ``ops`` do not define are resolved by ``leaf(value)``
        (the template's load expression or accumulator variable); a leaf that
        is not a plain name is bound once to an ``lN`` temporary before its
        first use. Returns the statements and the name of every value (leaves
        and results).

        An ``ai.rotate_half`` reads its operand, a leaf, at another index:
        ``rotated(value)`` is the template's load of that element and the condition
        under which it is negated (a template without it refuses the op).
        """
        names: dict[SSAValue, str] = {}
        stmts: list[str] = []
        for op in ops:
            if isinstance(op, ai.RotateHalfOp):
                if rotated is None or op.input in {r for o in ops for r in o.results}:
                    raise error_at(
                        op,
                        "reads its operand at another index: only a pointwise kernel "
                        "computes it, from a group input",
                    )
                load, negated = rotated(op.input)
                loaded = self.fresh(self.leaf_prefix)
                stmts.append(self.language.assign(loaded, load))
                name = self.fresh(self.temp_prefix)
                expr = self.language.select(negated, self.neg(loaded), loaded)
                stmts.append(self.language.assign(name, expr))
                names[op.results[0]] = name
                continue
            args = []
            for value in op.operands:
                if value not in names:
                    expr = leaf(value)
                    if not is_identifier(expr):
                        name = self.fresh(self.leaf_prefix)
                        stmts.append(self.language.assign(name, expr))
                        expr = name
                    names[value] = expr
                args.append(names[value])
            self._statements = stmts
            try:
                expr = self.scalar(op, args)
            finally:
                self._statements = None
            name = self.fresh(self.temp_prefix)
            stmts.append(self.language.assign(name, expr))
            names[op.results[0]] = name
        return stmts, names


# --------------------------------------------------------------------- helpers

_HELPERS = {
    "round_f16": '''
{decorator}
def round_f16(x):
    """x rounded to the nearest float16 (ties to even), as a float32."""
    a = abs(x)
    if a != a:
        return x
    if not a < f32(65520.0):
        return math.copysign(f32(math.inf), x)
    if a < f32(6.103515625e-05):
        # float16 subnormals are multiples of 2**-24: the ulp of float32 0.5
        return math.copysign((a + f32(0.5)) - f32(0.5), x)
    c = a * f32(8193.0)  # Veltkamp split: keep 24 - 13 = 11 significant bits
    return math.copysign(c - (c - a), x)
''',
    "round_bf16": '''
{decorator}
def round_bf16(x):
    """x rounded to the nearest bfloat16 (ties to even), as a float32."""
    a = abs(x)
    if a != a or a == f32(math.inf):
        return x
    if a < f32(1.1754943508222875e-38):
        # bfloat16 subnormals are multiples of 2**-133: the ulp of float32 2**-110
        return math.copysign((a + f32(7.703719777548943e-34)) - f32(7.703719777548943e-34), x)
    scale = f32(1.0)
    if a > f32(1e30):  # keep a * 65537 finite; powers of two scale exactly
        a = a * f32(5.421010862427522e-20)
        scale = f32(1.8446744073709552e19)
    c = a * f32(65537.0)  # Veltkamp split: keep 24 - 16 = 8 significant bits
    return math.copysign((c - (c - a)) * scale, x)
''',
}


#: cpu-only helpers (they build on ``fma32``, a Numba CPU intrinsic).
_HELPERS["fma32"] = '''
from numba.extending import intrinsic


def _fma_codegen(context, builder, signature, args):
    return builder.fma(*args)


@intrinsic
def fma32(typingctx, a, b, c):
    """a * b + c rounded once (LLVM fma: one vfmadd on x86-64, vectorisable)."""
    return numba.float32(numba.float32, numba.float32, numba.float32), _fma_codegen
'''
_HELPERS["opaque_count"] = '''
from numba.extending import intrinsic
from llvmlite import ir as llvm_ir


def _opaque_count_codegen(context, builder, signature, args):
    fnty = llvm_ir.FunctionType(llvm_ir.IntType(64), [llvm_ir.IntType(64)])
    return builder.asm(fnty, "", "=r,0", [args[0]], side_effect=False)


@intrinsic
def opaque_count(typingctx, n):
    """n, through an empty asm LLVM cannot see into: a loop of opaque_count(16)
    iterations is vectorised, where range(16) is unrolled into scalar code first."""
    return numba.int64(numba.int64), _opaque_count_codegen
'''
_HELPERS["exp_poly_f32"] = '''
{decorator}
def exp_poly_f32(r):
    """e ** r for |r| <= ln2 / 2 (a little beyond is fine): Cephes expf's degree-7
    polynomial, the core of exp_f32 and erfc_f32."""
    p = fma32(f32(1.9875691500e-4), r, f32(1.3981999507e-3))
    p = fma32(p, r, f32(8.3334519073e-3))
    p = fma32(p, r, f32(4.1665795894e-2))
    p = fma32(p, r, f32(1.6666665459e-1))
    p = fma32(p, r, f32(5.0000001201e-1))
    return fma32(p, r * r, r) + f32(1.0)
'''
_HELPERS["exp_f32"] = '''
{decorator}
def exp_f32(x):
    """e ** x in float32 arithmetic that vectorises (math.exp is a scalar libm call).

    Cody-Waite: x = n ln2 + r with |r| <= ln2 / 2, e ** r by a degree-7
    polynomial (Cephes expf), times 2 ** n built from exponent bits in two
    halves so that subnormal results round once and large ones overflow to inf.
    The clamps keep n in range and let NaN through; under 1 ulp everywhere.
    """
    xc = f32(89.0) if x > f32(89.0) else x
    xc = f32(-104.0) if xc < f32(-104.0) else xc
    t = fma32(xc, f32(1.4426950408889634), f32(12582912.0))  # 1.5 * 2**23 rounds to an integer
    n = t - f32(12582912.0)
    r = fma32(n, f32(-0.693359375), xc)  # ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite)
    r = fma32(n, f32(2.12194440e-4), r)
    p = exp_poly_f32(r)
    k = f32(t).view(np.int32) - np.int32(0x4B400000)  # n as an integer, -150 <= n <= 128
    k1 = k >> np.int32(1)
    s1 = np.int32((k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    s2 = np.int32((k - k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    return p * s1 * s2
'''
_HELPERS["exp_nonpos_f32"] = '''
{decorator}
def exp_nonpos_f32(x):
    """e ** x for x <= 0 (softmax's x - max): exp_f32's method with fewer operations.

    x = n ln2 + r (Cody-Waite, |r| <= ln2 / 2); e ** r by a degree-5 polynomial
    (relative error 9.2e-8, fitted to the relative error on [-ln2/2, ln2/2]) in
    Horner form, five fmas; times 2 ** n, whose bits are n << 23 plus those of
    1.0 (n is the low bits of t). With n >= -125 that scale is a normal float, so
    no overflow or two-step scaling is needed: results below e ** -86.5 (< 3e-38)
    are flushed to 0, which no softmax output can tell from the exact value at
    float32 tolerance. NaN stays NaN (the product carries it; the compare is false).
    15 vector operations against exp_f32's 22; under 2 ulp on [-86.5, 0] (degree 6:
    under 1.1 ulp, 13% slower in softmax's exp-and-sum loop).
    """
    t = fma32(x, f32(1.4426950408889634), f32(12582912.0))  # 1.5 * 2**23 rounds to an integer
    n = t - f32(12582912.0)
    r = fma32(n, f32(-0.693359375), x)  # ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite)
    r = fma32(n, f32(2.12194440e-4), r)
    p = fma32(f32(0.00829029455780983), r, f32(0.041897960007190704))
    p = fma32(p, r, f32(0.1666763722896576))
    p = fma32(p, r, f32(0.4999914765357971))
    p = fma32(p, r, f32(0.9999997019767761))
    p = fma32(p, r, f32(1.0))
    scale = np.int32((f32(t).view(np.int32) << np.int32(23)) + np.int32(0x3F800000))
    y = p * scale.view(np.float32)
    return f32(0.0) if x < f32(-86.5) else y
'''
_HELPERS["erfc_f32"] = '''
{decorator}
def erfc_f32(x):
    """erfc(x) in float32 arithmetic that vectorises (math.erfc is a scalar libm call,
    ~5-20 ns an element: the exact GELU's cost in a matmul epilogue).

    erfc(a) = t exp(-a^2 + q(t)), t = 1 / (1 + a/2), a = |x|, q a degree-9
    polynomial (Numerical Recipes' erfcc, fractional error < 1.2e-7); erfc(x) =
    2 - erfc(-x) for x < 0. The exponential is exp_f32's, taking -a^2 as the
    exact pair hi + lo (an fma) so the large argument loses no bits. Results
    below the smallest normal float32 (a >= 9.1875) are flushed to 0: subnormal
    arithmetic takes microcode assists on Intel cores (a GELU epilogue on
    activations of a few units ran 3x slower), and with n >= -125 the scale 2 ** n
    is one normal float. Under 7 ulp on [-9.1875, 9.1875] (relative 8e-7), exact 2
    below -9.1875 and 1 at 0; NaN stays NaN.
    """
    a = abs(x)
    a = f32(9.1875) if a > f32(9.1875) else a
    t = f32(1.0) / fma32(a, f32(0.5), f32(1.0))
    q = fma32(t, f32(0.17087277), f32(-0.82215223))
    q = fma32(q, t, f32(1.48851587))
    q = fma32(q, t, f32(-1.13520398))
    q = fma32(q, t, f32(0.27886807))
    q = fma32(q, t, f32(-0.18628806))
    q = fma32(q, t, f32(0.09678418))
    q = fma32(q, t, f32(0.37409196))
    q = fma32(q, t, f32(1.00002368))
    q = fma32(q, t, f32(-1.26551223))
    hi = a * a
    lo = q - fma32(a, a, -hi)  # q - a^2 = lo - hi, lo small
    e = fma32(lo - hi, f32(1.4426950408889634), f32(12582912.0))  # n = round((lo - hi) / ln2)
    n = e - f32(12582912.0)
    r = fma32(n, f32(-0.693359375), -hi)  # exact: Cody-Waite's short ln2 high part
    r = fma32(n, f32(2.12194440e-4), r) + lo
    p = exp_poly_f32(r)
    scale = np.int32((f32(e).view(np.int32) << np.int32(23)) + np.int32(0x3F800000))  # 2 ** n
    v = (t * p) * scale.view(np.float32)
    v = f32(0.0) if a == f32(9.1875) else v
    return f32(2.0) - v if x < f32(0.0) else v
'''
_HELPERS.update(_quant.HELPERS)
_REQUIRES = {
    **_quant.REQUIRES,
    "exp_poly_f32": ("fma32",),
    "exp_f32": ("fma32", "exp_poly_f32"),
    "exp_nonpos_f32": ("fma32",),
    "erfc_f32": ("fma32", "exp_poly_f32"),
}


def helper_source(names: Iterable[str], decorator: str) -> str:
    """Source of the helper functions ``names`` (and those they call), each under ``decorator``.

    ``decorator`` is the target's device-function decorator line, e.g.
    ``@numba.njit(error_model="numpy")`` or ``@cuda.jit(device=True)``.
    """
    names = set(names)
    names |= {dep for n in names for dep in _REQUIRES.get(n, ())}
    return "".join(_HELPERS[n].format(decorator=decorator) for n in sorted(names))
