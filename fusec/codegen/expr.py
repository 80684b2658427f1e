"""The one expression generator shared by every template and both targets.

A fused group's elementwise/broadcast ops become straight-line scalar Python
statements (``t0 = l0 * l1``) that a template places inside its loops: the
pointwise body, a row reduction's prologue and epilogue, a matmul or conv
epilogue. The statements are valid in a Numba CPU kernel and in a Numba CUDA
kernel alike, because they use only

* ``math.exp``, ``math.sqrt``, ``math.tanh``, ``math.erfc``, ``math.copysign`` and plain
  arithmetic/comparisons (no ``min``/``max`` builtins: NaN must propagate),
* ``f32(...)`` (``numpy.float32``) around every literal, so arithmetic stays in
  float32 instead of being promoted to float64 by a Python float literal,
* the helpers ``round_f16``/``round_bf16`` (source from ``helper_source``) for
  a mid-chain ``ai.cast`` to a 16-bit type, which round to nearest-even exactly
  like numpy/ml_dtypes do, using float32 arithmetic only (Veltkamp splitting).

A cpu template may ask for ``ExprGenerator(fast_exp=True)``: ``exp`` (and the
sigmoid, silu and tanh-gelu forms built on it) then calls the helper
``exp_f32``, a float32 exponential in plain arithmetic (Cody-Waite range
reduction, a degree-7 polynomial, exponent bits built by integer shifts) that
LLVM vectorises inside a loop, where ``math.exp`` is a scalar libm call that
keeps the whole loop scalar (Numba has no SVML by default). It is faithfully
rounded (under 1 ulp from the exact value over every float32, checked
exhaustively) and exact at the edges (NaN, +-inf, overflow, subnormal results).
It needs ``fma32`` (an LLVM ``fma`` intrinsic), so it is cpu only; the CUDA
templates keep ``math.exp``, which is a fast device function there.

The module holding the generated code must therefore bind ``math``, ``f32`` and
the helpers ``gen.helpers`` names (see ``PRELUDE_NAMES`` and ``helper_source``).

Nothing spliced into generated source comes from user text: identifiers are
generated (``t0``, ``l0``, ``in0``), op names come from the dialect's classes,
numbers go through ``literal`` and attribute strings are only compared against
the dialect's fixed choices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence

from xdsl.dialects.builtin import FileLineColLoc
from xdsl.ir import Operation, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError, SourceLocation

#: Names the generated statements refer to; the kernel module must bind them.
PRELUDE_NAMES = ("math", "f32")

#: Elementwise ops the generator knows (a fused group's non-core ops).
ELEMENTWISE_OPS: tuple[type[ai.AiOp], ...] = (
    ai.AddOp,
    ai.SubOp,
    ai.MulOp,
    ai.DivOp,
    ai.MaximumOp,
    ai.ReluOp,
    ai.SigmoidOp,
    ai.TanhOp,
    ai.ExpOp,
    ai.SqrtOp,
    ai.SiluOp,
    ai.GeluOp,
    ai.CastOp,
    ai.BiasAddOp,
)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SQRT1_2 = 0.7071067811865476
_GELU_TANH_2C = 2.0 * math.sqrt(2.0 / math.pi)  # 2 * sqrt(2/pi): x*sigmoid(2u) form


class CodegenError(FusecError):
    """A group the templates cannot lower (located at the offending op)."""


def error_at(op: Operation, message: str) -> CodegenError:
    """A CodegenError located at ``op`` (its FileLineColLoc when it has one)."""
    loc = op.location
    where = None
    if isinstance(loc, FileLineColLoc):
        where = SourceLocation(loc.filename.data, loc.line.data, loc.column.data)
    return CodegenError(f"'{op.name}' op {message}", where)


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


def shape_of(value: SSAValue) -> tuple[int, ...]:
    return spec_of(value.type).shape


def dtype_of(value: SSAValue) -> str:
    return spec_of(value.type).dtype


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
    return shape


def leaf_shapes(ops: Sequence[Operation]) -> dict[SSAValue, tuple[int, ...]]:
    """Broadcast shape of every value ``ops`` use but do not define.

    A template indexes such a leaf with ``broadcast_offset(space, shape, idx)``.
    A value used under two different shapes (a bias that is also added as a
    plain broadcast operand) cannot be one load: that is reported.
    """
    defined = {r for op in ops for r in op.results}
    shapes: dict[SSAValue, tuple[int, ...]] = {}
    for op in ops:
        for index, value in enumerate(op.operands):
            if value in defined:
                continue
            shape = operand_shape(op, index)
            previous = shapes.setdefault(value, shape)
            if _strip_ones(previous) != _strip_ones(shape):
                raise error_at(
                    op,
                    "uses a group input both as a bias and as a broadcast operand; "
                    "the code generator needs one indexing per input",
                )
    return shapes


def _strip_ones(shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


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


#: Binary ops that are one Python operator (bias_add is an add once broadcast).
_ARITHMETIC: dict[type[Operation], str] = {
    ai.AddOp: "+",
    ai.BiasAddOp: "+",
    ai.SubOp: "-",
    ai.MulOp: "*",
    ai.DivOp: "/",
}


class ExprGenerator:
    """Scalar float32 expressions for elementwise ops, and straight-line chains of them.

    One instance per generated kernel module: it numbers temporaries (``t0``,
    ``t1``, ... and ``l0``, ... for bound leaf loads) uniquely within the
    module and records the helpers the statements call (``helpers``).
    """

    def __init__(
        self, temp_prefix: str = "t", leaf_prefix: str = "l", *, fast_exp: bool = False
    ) -> None:
        if not (is_identifier(temp_prefix) and is_identifier(leaf_prefix)):
            raise ValueError("prefixes must be identifiers")
        self.temp_prefix = temp_prefix
        self.leaf_prefix = leaf_prefix
        #: Exponentials call the vectorisable ``exp_f32`` helper (cpu) instead of ``math.exp``.
        self.fast_exp = fast_exp
        self.helpers: set[str] = set()
        self._counters: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        """A new generated identifier ``<prefix><n>``."""
        n = self._counters.get(prefix, 0)
        self._counters[prefix] = n + 1
        return f"{prefix}{n}"

    # ----------------------------------------------------------------- ops
    def scalar(self, op: Operation, args: list[str]) -> str:
        """A float32 expression computing ``op`` on scalar operand expressions ``args``.

        Operands are evaluated more than once in a few forms (maximum, relu),
        so pass names or other side-effect-free expressions.
        """
        if (symbol := _ARITHMETIC.get(type(op))) is not None:
            return f"({args[0]} {symbol} {args[1]})"
        if isinstance(op, ai.MaximumOp):
            # numpy's maximum: a NaN operand wins; on a tie (-0.0 vs 0.0) the second one
            a, b = args
            return f"({a} if {a} > {b} or {a} != {a} else {b})"
        if isinstance(op, ai.ReluOp):
            (a,) = args  # maximum(a, 0): relu(NaN) is NaN, relu(-0.0) is 0.0
            zero = literal(0.0)
            return f"({a} if {a} > {zero} or {a} != {a} else {zero})"
        if isinstance(op, ai.SigmoidOp):
            (a,) = args
            return f"({literal(1.0)} / ({literal(1.0)} + {self.exp(f'-{a}')}))"
        if isinstance(op, ai.TanhOp):
            return f"math.tanh({args[0]})"
        if isinstance(op, ai.ExpOp):
            return self.exp(args[0])
        if isinstance(op, ai.SqrtOp):
            return f"math.sqrt({args[0]})"
        if isinstance(op, ai.SiluOp):
            (a,) = args
            return _at_minus_inf(a, f"({a} / ({literal(1.0)} + {self.exp(f'-{a}')}))")
        if isinstance(op, ai.GeluOp):
            return self._gelu(op, args[0])
        if isinstance(op, ai.CastOp):
            return self._cast(op, args[0])
        raise error_at(op, "is not an elementwise op the code generator knows")

    def exp(self, a: str) -> str:
        """A float32 ``e ** a``: ``exp_f32`` with ``fast_exp`` (recorded in ``helpers``)."""
        if not self.fast_exp:
            return f"math.exp({a})"
        self.helpers.add("exp_f32")
        return f"exp_f32({a})"

    def _gelu(self, op: ai.GeluOp, a: str) -> str:
        if op.attr("approximate") == "tanh":
            # 0.5*x*(1 + tanh(u)) == x * sigmoid(2u): exact, and no cancellation
            u2 = f"{literal(_GELU_TANH_2C)} * ({a} + {literal(0.044715)} * {a} * {a} * {a})"
            return _at_minus_inf(a, f"({a} / ({literal(1.0)} + {self.exp(f'-({u2})')}))")
        # 0.5*x*(1 + erf(x/sqrt2)) == 0.5*x*erfc(-x/sqrt2): no cancellation for x < 0
        return _at_minus_inf(a, f"({literal(0.5)} * {a} * math.erfc(-{a} * {literal(_SQRT1_2)}))")

    def _cast(self, op: ai.CastOp, a: str) -> str:
        to = dtype_of(op.results[0])
        if to == "f32":
            return a
        helper = {"f16": "round_f16", "bf16": "round_bf16"}[to]
        self.helpers.add(helper)
        return f"{helper}({a})"

    # --------------------------------------------------------------- chains
    def chain(self, ops: Sequence[Operation], leaf: Leaf) -> tuple[list[str], dict[SSAValue, str]]:
        """Statements ``tN = <expr>`` computing ``ops`` in order.

        Operands that ``ops`` do not define are resolved by ``leaf(value)``
        (the template's load expression or accumulator variable); a leaf that
        is not a plain name is bound once to an ``lN`` temporary before its
        first use. Returns the statements and the name of every value (leaves
        and results).
        """
        names: dict[SSAValue, str] = {}
        stmts: list[str] = []
        for op in ops:
            args = []
            for value in op.operands:
                if value not in names:
                    expr = leaf(value)
                    if not is_identifier(expr):
                        name = self.fresh(self.leaf_prefix)
                        stmts.append(f"{name} = {expr}")
                        expr = name
                    names[value] = expr
                args.append(names[value])
            name = self.fresh(self.temp_prefix)
            stmts.append(f"{name} = {self.scalar(op, args)}")
            names[op.results[0]] = name
        return stmts, names


def _at_minus_inf(a: str, expr: str) -> str:
    """``expr`` (an ``x * f(x)`` activation of ``a`` with f(-inf) = 0), but -0.0 at
    ``a = -inf``, its limit, as the reference has it (``-inf * 0`` would be NaN)."""
    return f"({expr} if {a} != {literal(-math.inf)} else {literal(-0.0)})"


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
    p = fma32(f32(1.9875691500e-4), r, f32(1.3981999507e-3))
    p = fma32(p, r, f32(8.3334519073e-3))
    p = fma32(p, r, f32(4.1665795894e-2))
    p = fma32(p, r, f32(1.6666665459e-1))
    p = fma32(p, r, f32(5.0000001201e-1))
    p = fma32(p, r * r, r) + f32(1.0)
    k = f32(t).view(np.int32) - np.int32(0x4B400000)  # n as an integer, -150 <= n <= 128
    k1 = k >> np.int32(1)
    s1 = np.int32((k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    s2 = np.int32((k - k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    return p * s1 * s2
'''
_REQUIRES = {"exp_f32": ("fma32",)}


def helper_source(names: Iterable[str], decorator: str) -> str:
    """Source of the helper functions ``names`` (and those they call), each under ``decorator``.

    ``decorator`` is the target's device-function decorator line, e.g.
    ``@numba.njit(error_model="numpy")`` or ``@cuda.jit(device=True)``.
    """
    names = set(names)
    names |= {dep for n in names for dep in _REQUIRES.get(n, ())}
    return "".join(_HELPERS[n].format(decorator=decorator) for n in sorted(names))


# ------------------------------------------------------------------ C++ rendering

#: C++ helpers the rendered statements may call (``cpp_helper_source`` defines them).
_CPP_ROUND = {
    "f16": (
        "static __device__ __forceinline__ float fs_round_f16(float x) {\n"
        "  unsigned short h; float y;\n"
        '  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));\n'
        '  asm("cvt.f32.f16 %0, %1;" : "=f"(y) : "h"(h));\n'
        "  return y;\n}\n"
    ),
    "bf16": (
        "static __device__ __forceinline__ float fs_round_bf16(float x) {\n"
        "  unsigned short h;\n"
        '  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));\n'
        "  return __uint_as_float(((unsigned int)h) << 16);\n}\n"
    ),
}


def cpp_literal(x: float) -> str:
    """A float32 C++ literal; inf/nan through their bit patterns (no user text)."""
    value = float(x)
    if math.isnan(value):
        return "__int_as_float(0x7fc00000)"
    if math.isinf(value):
        return "__int_as_float(0x7f800000)" if value > 0 else "__int_as_float(0xff800000)"
    return f"{value!r}f"


def _cpp_at_minus_inf(a: str, expr: str) -> str:
    """``expr``, but -0.0 at ``a = -inf`` (see ``_at_minus_inf``)."""
    return f"(({a} != {cpp_literal(-math.inf)}) ? {expr} : -0.0f)"


class CppExprGenerator:
    """The C++ rendering of ``ExprGenerator``: float32 statements for a generated kernel's
    epilogue (``const float t0 = (acc + l0);``), with the same NaN and rounding rules."""

    def __init__(self, temp_prefix: str = "t", leaf_prefix: str = "l") -> None:
        if not (is_identifier(temp_prefix) and is_identifier(leaf_prefix)):
            raise ValueError("prefixes must be identifiers")
        self.temp_prefix = temp_prefix
        self.leaf_prefix = leaf_prefix
        self.helpers: set[str] = set()
        self._counters: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        n = self._counters.get(prefix, 0)
        self._counters[prefix] = n + 1
        return f"{prefix}{n}"

    def scalar(self, op: Operation, args: list[str]) -> str:
        """A float C++ expression computing ``op`` on operand names ``args``."""
        one = cpp_literal(1.0)
        if (symbol := _ARITHMETIC.get(type(op))) is not None:
            return f"({args[0]} {symbol} {args[1]})"
        if isinstance(op, ai.MaximumOp):
            a, b = args  # numpy's maximum, as ExprGenerator
            return f"(({a} > {b} || {a} != {a}) ? {a} : {b})"
        if isinstance(op, ai.ReluOp):
            (a,) = args
            return f"(({a} > 0.0f || {a} != {a}) ? {a} : 0.0f)"
        if isinstance(op, ai.SigmoidOp):
            return f"({one} / ({one} + expf(-{args[0]})))"
        if isinstance(op, ai.TanhOp):
            return f"tanhf({args[0]})"
        if isinstance(op, ai.ExpOp):
            return f"expf({args[0]})"
        if isinstance(op, ai.SqrtOp):
            return f"sqrtf({args[0]})"
        if isinstance(op, ai.SiluOp):
            (a,) = args
            return _cpp_at_minus_inf(a, f"({a} / ({one} + expf(-{a})))")
        if isinstance(op, ai.GeluOp):
            (a,) = args
            if op.attr("approximate") == "tanh":
                cube = f"{cpp_literal(0.044715)} * {a} * {a} * {a}"
                u2 = f"{cpp_literal(_GELU_TANH_2C)} * ({a} + {cube})"
                return _cpp_at_minus_inf(a, f"({a} / ({one} + expf(-({u2}))))")
            erfc = f"erfcf(-{a} * {cpp_literal(_SQRT1_2)})"
            return _cpp_at_minus_inf(a, f"({cpp_literal(0.5)} * {a} * {erfc})")
        if isinstance(op, ai.CastOp):
            to = dtype_of(op.results[0])
            if to == "f32":
                return args[0]
            self.helpers.add(to)
            return f"fs_round_{to}({args[0]})"
        raise error_at(op, "is not an elementwise op the code generator knows")

    def chain(self, ops: Sequence[Operation], leaf: Leaf) -> tuple[list[str], dict[SSAValue, str]]:
        """``const float tN = <expr>;`` statements for ``ops`` (as ``ExprGenerator.chain``)."""
        names: dict[SSAValue, str] = {}
        stmts: list[str] = []
        for op in ops:
            args = []
            for value in op.operands:
                if value not in names:
                    expr = leaf(value)
                    if not is_identifier(expr):
                        name = self.fresh(self.leaf_prefix)
                        stmts.append(f"const float {name} = {expr};")
                        expr = name
                    names[value] = expr
                args.append(names[value])
            name = self.fresh(self.temp_prefix)
            stmts.append(f"const float {name} = {self.scalar(op, args)};")
            names[op.results[0]] = name
        return stmts, names

    def helper_source(self) -> str:
        """C++ definitions of the helpers the statements call."""
        return "".join(_CPP_ROUND[name] for name in sorted(self.helpers))
