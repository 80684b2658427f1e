"""The Python front end: trace a Python function on tracer tensors into ``ai`` IR.

A ``Trace`` gives each array argument a ``TracedTensor`` (a block argument of
the function being built) and records every operation done on it as an op of
the ``ai`` dialect, built with the op builders so the shared shape functions
infer the result types. Each op is located at the user's own source line (the
first stack frame outside fusec), so shape errors, unsupported Python and
numpy usage are reported where the user wrote them.

Two kinds of lazy views exist: ``x[None, :, ...]`` (unit dims inserted) and
``x.T``/``x.mT``/``transpose`` (dims permuted). A view becomes the op that
expresses it best where it is used: a bias (``ai.bias_add``), broadcasting
(leading unit dims), a matmul transpose flag, a reshaped constant, and
otherwise ``ai.reshape`` / ``ai.transpose`` (zero-copy views or copy kernels
for the back ends).

This module builds IR and stops: compiling and running is ``fusec.fuse``'s job.
"""

from __future__ import annotations

import linecache
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FunctionType,
    ModuleOp,
)
from xdsl.ir import Block, Operation, Region, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of, tensor_type
from fusec.dialect.shapes import MAX_RANK, ShapeError, TensorSpec, shape_problem
from fusec.errors import FusecError, SourceLocation
from fusec.ir.constants import stored_bytes
from fusec.ir.diagnostics import file_location, verify_module
from fusec.ir.dtypes import element_type_of, numpy_dtype

_FUSEC_DIRS = tuple(
    {str(Path(__file__).parents[1]) + os.sep, str(Path(__file__).resolve().parents[1]) + os.sep}
)
_NAME_HINT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# ------------------------------------------------------------------ locations


def user_frame(depth: int = 1):
    """The innermost stack frame that is not fusec's own code (None if there is none)."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith(_FUSEC_DIRS):
        frame = frame.f_back
    return frame


def frame_location(frame) -> tuple[SourceLocation, str | None, int]:
    """(location, source line, underline length) of the instruction ``frame`` is running."""
    code = frame.f_code
    line, col, length = frame.f_lineno, 1, 1
    index = frame.f_lasti // 2
    for i, pos in enumerate(code.co_positions()):
        if i == index:
            start_line, end_line, start_col, end_col = pos
            if start_line is not None and start_col is not None:
                line, col = start_line, start_col + 1
                if end_line == start_line and end_col is not None:
                    length = max(1, end_col - start_col)
            break
    source = linecache.getline(code.co_filename, line).rstrip("\n") or None
    return SourceLocation(code.co_filename, line, col), source, length


def user_error(message: str) -> FusecError:
    """A FusecError located at the user's line that is running now."""
    frame = user_frame(2)
    if frame is None:
        return FusecError(message)
    location, source, length = frame_location(frame)
    return FusecError(message, location, source, length)


class TracedAttributeError(FusecError, AttributeError):
    """A missing tensor method (``x.sum()``): located like every tracer error, and still
    an AttributeError, so ``hasattr``/``getattr(x, name, default)`` keep working."""


# --------------------------------------------------------------- active traces

_ACTIVE = threading.local()


def current_trace() -> Trace | None:
    """The innermost trace running on this thread, if any."""
    stack = getattr(_ACTIVE, "stack", None)
    return stack[-1] if stack else None


# ------------------------------------------------------------ tracer objects


def _ufuncs(base: type[ai.AiOp]) -> dict[str, type[ai.AiOp]]:
    """numpy ufunc name -> op, from the ops' own facts (``FRONTEND.ufuncs``)."""
    return {u: op for op in ai.TENSOR_OPS if issubclass(op, base) for u in op.FRONTEND.ufuncs}


_UNARY_UFUNCS = _ufuncs(ai.UnaryOp)
_BINARY_UFUNCS = _ufuncs(ai.BinaryOp)
_SUPPORTED_UFUNCS = (*_UNARY_UFUNCS, *_BINARY_UFUNCS, "positive", "matmul")


def _operators(op_type: type[ai.AiOp] | None) -> tuple[Callable, Callable]:
    """A binary operator's method and its reflected one (``__add__``, ``__radd__``):
    ``op_type`` of (self, other), and of (other, self); ``None``: ``@``, a matmul."""

    def apply(trace: Trace, a: Any, b: Any) -> Traced:
        return trace.matmul(a, b) if op_type is None else trace.binary(op_type, a, b)

    def method(self: Traced, other: Any) -> Traced:
        return apply(self.trace, self, other)

    def reflected(self: Traced, other: Any) -> Traced:
        return apply(self.trace, other, self)

    return method, reflected


class Traced:
    """Common behaviour of tracer values: Python operators become ``ai`` ops.

    Everything that would need the tensor's data (branching, conversion to a
    number or a numpy array, comparisons, in-place updates) is a located
    error, because while tracing there is no data, only types.
    """

    __slots__ = ()
    __array_priority__ = 1000
    trace: Trace
    shape: tuple[int, ...]
    dtype_name: str

    # ------------------------------------------------------------ metadata
    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the elements (float16, bfloat16 or float32)."""
        return numpy_dtype(self.dtype_name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise user_error("len() of a 0-d traced tensor")
        return self.shape[0]

    # ----------------------------------------------------------- arithmetic
    __add__, __radd__ = _operators(ai.AddOp)
    __sub__, __rsub__ = _operators(ai.SubOp)
    __mul__, __rmul__ = _operators(ai.MulOp)
    __truediv__, __rtruediv__ = _operators(ai.DivOp)
    __matmul__, __rmatmul__ = _operators(None)

    def __neg__(self):
        return self.trace.emit(ai.NegOp, (self,))

    def __pos__(self):
        return self

    def _unsupported_operator(self, symbol: str, hint: str = ""):
        raise user_error(f"operator '{symbol}' is not supported on traced tensors{hint}")

    def __pow__(self, other):
        self._unsupported_operator("**", " (the ai dialect has no power op; write x * x)")

    __rpow__ = __pow__

    def __floordiv__(self, other):
        self._unsupported_operator("//")

    __rfloordiv__ = __floordiv__

    def __mod__(self, other):
        self._unsupported_operator("%")

    __rmod__ = __mod__

    def __abs__(self):
        return self.trace.emit(ai.AbsOp, (self,))

    # ---------------------------------------------------------- comparisons
    def _compare(self, other):
        raise user_error("comparison of traced tensors is not supported (the ai dialect has none)")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = object.__hash__

    # -------------------------------------------------- no data while tracing
    def __bool__(self):
        raise user_error(
            "cannot branch on a traced tensor: its value is not known while tracing "
            "(use Python values that do not depend on tensor data, or ops.maximum / ops.relu)"
        )

    def _to_number(self):
        raise user_error(
            "cannot convert a traced tensor to a Python number: its value is not known "
            "while tracing (use fusec.ops functions instead of math functions)"
        )

    __float__ = __int__ = __index__ = __complex__ = _to_number

    def __iter__(self):
        raise user_error("iterating over a traced tensor is not supported")

    def __format__(self, spec: str) -> str:
        if not spec:
            return repr(self)
        raise user_error("cannot format a traced tensor's value: it is not known while tracing")

    def __getattr__(self, name: str):
        if name.startswith("_"):  # protocol probes (__cuda_array_interface__, ...)
            raise AttributeError(name)
        err = user_error(
            f"traced tensors have no attribute or method '{name}' (the ai dialect's ops are "
            "in fusec.ops; tensors support + - * / @, .T, .mT, .astype and None indexing)"
        )
        raise TracedAttributeError(err.message, err.location, err.source_line, err.length)

    def __setitem__(self, index, value):
        raise user_error("in-place assignment to a traced tensor is not supported")

    def __array__(self, dtype=None, copy=None):
        raise user_error(
            "cannot convert a traced tensor to a numpy array: its value is not known while tracing"
        )

    # ------------------------------------------------------------- numpy
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        if method != "__call__" or ufunc.__name__ not in _SUPPORTED_UFUNCS:
            raise user_error(
                f"{name} is not supported on traced tensors; supported numpy functions: "
                f"{', '.join('numpy.' + n for n in _SUPPORTED_UFUNCS)} (or use fusec.ops)"
            )
        if kwargs:
            raise user_error(f"{name}: keyword arguments ({', '.join(kwargs)}) are not supported")
        trace = self.trace
        if ufunc.__name__ in _UNARY_UFUNCS:
            return trace.emit(_UNARY_UFUNCS[ufunc.__name__], inputs)
        if ufunc.__name__ in _BINARY_UFUNCS:
            return trace.binary(_BINARY_UFUNCS[ufunc.__name__], *inputs)
        if ufunc.__name__ == "positive":
            return inputs[0]
        return trace.matmul(*inputs)

    def __array_function__(self, function, types, args, kwargs):
        module = getattr(function, "__module__", None) or "numpy"
        raise user_error(
            f"{module}.{function.__name__} is not supported on traced tensors "
            "(use fusec.ops or tensor operators)"
        )

    # ---------------------------------------------------------------- views
    def __getitem__(self, index):
        return index_view(self, index)

    @property
    def T(self):
        """The transpose of a 2-D tensor (a matmul transpose flag when used by ``@``)."""
        if self.ndim != 2:
            raise user_error(
                f".T of a rank-{self.ndim} traced tensor reverses all its dims, which is not "
                "supported; use .mT to swap the last two dims"
            )
        return transpose_view(self)

    @property
    def mT(self):
        """The last two dims swapped (a matmul transpose flag when used by ``@``)."""
        if self.ndim < 2:
            raise user_error(f".mT needs rank >= 2, got a rank-{self.ndim} traced tensor")
        return transpose_view(self)

    def transpose(self, *axes):
        """numpy's ``transpose(axes)`` (all dims, or none: reversed), or torch's
        ``transpose(d0, d1)`` (a swap): ``ai.transpose``, or a matmul transpose flag for a
        swap of the last two dims that a matmul consumes."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        rank = self.ndim
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
            raise user_error(f"transpose axes must be ints, got {axes!r}")
        if not all(-rank <= a < rank for a in axes):
            raise user_error(f"transpose axes {axes} are out of range for rank {rank}")
        perm = list(range(rank))
        if not axes:
            perm.reverse()
        elif len(axes) == 2 and rank != 2:
            a, b = (x % rank for x in axes)
            perm[a], perm[b] = perm[b], perm[a]
        elif len(axes) == rank:
            perm = [a % rank for a in axes]
        elif len(axes) == 2:  # rank 2: a swap and a full permutation read alike
            perm = [a % rank for a in axes] if len(set(axes)) == 2 else perm
        else:
            raise user_error(f"transpose{tuple(axes)} of a rank-{rank} traced tensor: give "
                             "all the dims, or two dims to swap")  # fmt: skip
        if sorted(perm) != list(range(rank)):
            raise user_error(f"transpose{tuple(axes)} is not a permutation of {rank} dims")
        if rank >= 2 and perm == [*range(rank - 2), rank - 1, rank - 2]:
            return transpose_view(self)
        if perm == list(range(rank)):
            return self
        return self.trace.transpose(self, tuple(perm))

    def swapaxes(self, axis1: int, axis2: int):
        return self.transpose(axis1, axis2)

    def astype(self, dtype):
        """Element type conversion (``ai.cast``)."""
        return self.trace.emit(ai.CastOp, (self,), to=dtype_name(dtype))


class TracedTensor(Traced):
    """A value of the function being traced: an SSA value of a static tensor type."""

    __slots__ = ("trace", "value", "shape", "dtype_name", "leaf")

    def __init__(self, trace: Trace, value: SSAValue, leaf: tuple[str, Any] | None = None):
        spec = spec_of(value.type)
        self.trace = trace
        self.value = value
        self.shape = spec.shape
        self.dtype_name = spec.dtype
        self.leaf = leaf  # ("arg", leaf index) or ("const", ndarray): reshaping it is free

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype_name)

    def __repr__(self) -> str:
        return f"TracedTensor({self.spec})"


class UnitDimView(Traced):
    """``source[None, :, ...]``: ``source`` with unit dims inserted (no data movement)."""

    __slots__ = ("trace", "source", "shape", "dtype_name", "positions")

    def __init__(self, source: TracedTensor, shape: tuple[int, ...], positions: tuple[int, ...]):
        self.trace = source.trace
        self.source = source
        self.shape = shape
        self.dtype_name = source.dtype_name
        self.positions = positions  # the view axis of each source axis

    def leading_only(self) -> bool:
        """True when every inserted dim is leading: broadcasting makes it the source."""
        rank, src = len(self.shape), len(self.positions)
        return self.positions == tuple(range(rank - src, rank))

    def __repr__(self) -> str:
        return f"UnitDimView({self.source.spec} as {TensorSpec(self.shape, self.dtype_name)})"


class TransposeView(Traced):
    """``source`` with its last two dims swapped; only a matmul can consume it."""

    __slots__ = ("trace", "source", "shape", "dtype_name")

    def __init__(self, source: TracedTensor):
        self.trace = source.trace
        self.source = source
        self.shape = (*source.shape[:-2], source.shape[-1], source.shape[-2])
        self.dtype_name = source.dtype_name

    def __repr__(self) -> str:
        return f"TransposeView({self.source.spec})"


def transpose_view(x: Traced) -> Traced:
    """``x`` with its last two dims swapped: lazily, so a matmul can take it as a flag."""
    if isinstance(x, TransposeView):
        return x.source
    if isinstance(x, UnitDimView):
        x = x.trace.materialise(x)
    assert isinstance(x, TracedTensor)
    return TransposeView(x)


def index_view(x: Traced, index: Any) -> Traced:
    """``x[index]`` for an index of None, ':' and '...' only: unit dims inserted."""
    items = index if isinstance(index, tuple) else (index,)
    if isinstance(x, TransposeView):
        x = x.trace.materialise(x)
    for item in items:
        if item is None or item is Ellipsis:
            continue
        if isinstance(item, slice) and item == slice(None):
            continue
        raise user_error(
            f"indexing traced tensors supports only None, ':' and '...', got {item!r} "
            "(the ai dialect has no slicing or gather op)"
        )
    if sum(item is Ellipsis for item in items) > 1:
        raise user_error("an index can only have a single ellipsis ('...')")
    consumed = sum(item is not None and item is not Ellipsis for item in items)
    if consumed > x.ndim:
        raise user_error(f"too many indices for a traced tensor of rank {x.ndim}")
    if Ellipsis not in items:
        items = (*items, Ellipsis)
    shape: list[int] = []
    positions: list[int] = []
    axis = 0
    for item in items:
        if item is None:
            shape.append(1)
        elif item is Ellipsis:
            for _ in range(x.ndim - consumed):
                positions.append(len(shape))
                shape.append(x.shape[axis])
                axis += 1
        else:
            positions.append(len(shape))
            shape.append(x.shape[axis])
            axis += 1
    if len(shape) == x.ndim:
        return x
    if len(shape) > MAX_RANK:
        raise user_error(f"indexing gives rank {len(shape)}; fusec supports rank <= {MAX_RANK}")
    if isinstance(x, UnitDimView):  # compose: a view of a view
        positions = [positions[p] for p in x.positions]
        x = x.source
    assert isinstance(x, TracedTensor)
    return UnitDimView(x, tuple(shape), tuple(positions))


_DTYPE_NAMES = {
    "f16": "f16",
    "float16": "f16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "f32": "f32",
    "float32": "f32",
}


def dtype_name(dtype: Any) -> str:
    """'f16' | 'bf16' | 'f32' from such a name, a numpy dtype or type, or a torch dtype."""
    text = str(dtype).removeprefix("torch.") if not isinstance(dtype, type) else ""
    name = _DTYPE_NAMES.get(text)
    if name is None:
        try:
            name = element_type_of(np.dtype(dtype))
        except TypeError:
            name = None
    if name is None:
        raise user_error(f"unsupported element type {dtype!r}: expected f16, bf16 or f32")
    return name


# ----------------------------------------------------------------- the trace


@dataclass(frozen=True)
class ArgSpec:
    """One array argument of the traced function: its name and static type."""

    name: str
    spec: TensorSpec


@dataclass(frozen=True)
class TracedFunction:
    """What tracing produced.

    ``params`` says, for each parameter of the IR function, which argument
    (leaf index) to pass and the shape to view it as (None: as it is).
    ``outputs`` is "single", "tuple" or "list": how to return the results.
    """

    module: ModuleOp
    params: tuple[tuple[int, tuple[int, ...] | None], ...]
    outputs: str
    num_results: int


class Trace:
    """The function being built: a block, its arguments and the ops recorded so far."""

    def __init__(self, name: str, location: SourceLocation | None = None) -> None:
        self.name = name
        self.location = location
        self.block = Block()
        self.params: list[tuple[int, tuple[int, ...] | None]] = []
        self.active = False
        self._constants: dict[tuple, TracedTensor] = {}
        self._pinned: list[Any] = []  # keeps constant arrays alive so their ids stay unique
        self._views: dict[tuple[SSAValue, tuple[int, ...]], TracedTensor] = {}
        self._arg_names: list[str] = []

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> Trace:
        stack = getattr(_ACTIVE, "stack", None)
        if stack is None:
            stack = _ACTIVE.stack = []
        stack.append(self)
        self.active = True
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        _ACTIVE.stack.remove(self)

    # ------------------------------------------------------------ arguments
    def argument(self, arg: ArgSpec) -> TracedTensor:
        """A new function parameter for the next array argument."""
        leaf = len(self._arg_names)
        self._arg_names.append(arg.name)
        return self._parameter(arg.name, arg.spec, leaf, None)

    def _parameter(
        self, name: str, spec: TensorSpec, leaf: int, shape: tuple[int, ...] | None
    ) -> TracedTensor:
        value = self.block.insert_arg(tensor_type(spec), len(self.block.args))
        if _NAME_HINT.fullmatch(name):
            value.name_hint = name
        self.params.append((leaf, shape))
        return TracedTensor(self, value, ("arg", leaf) if shape is None else None)

    # ------------------------------------------------------------ constants
    def constant(self, value: Any, dtype: str | None) -> TracedTensor:
        """An ``arith.constant`` for a Python scalar or numpy array.

        Scalars and float64/integer arrays take ``dtype`` (the element type of
        the tensor they meet); f16/bf16/f32 arrays keep their own.
        """
        if isinstance(value, (bool, int, float, np.integer, np.floating, np.bool_)):
            try:
                array = np.asarray(float(value))
            except OverflowError:  # an int beyond any float
                digits = len(str(abs(int(value))))
                raise user_error(
                    f"an integer constant of {digits} digits is out of range"
                ) from None
            key: tuple = ("scalar", float(value).hex(), dtype)  # hex: -0.0 is not 0.0
        else:
            array = np.asarray(value)
            if array.dtype.kind not in "fiub" and element_type_of(array.dtype) is None:
                raise user_error(f"unsupported constant of dtype {array.dtype}")
            key = ("array", id(value), dtype)
            self._pinned.append(value)
        if key in self._constants:
            return self._constants[key]
        own = element_type_of(array.dtype)
        name = own if own is not None else (dtype or "f32")
        result = self._constant_op(array, name)
        self._constants[key] = result
        return result

    def _constant_op(self, array: np.ndarray, name: str) -> TracedTensor:
        source = array
        with np.errstate(over="ignore", invalid="ignore"):
            array = np.array(array, dtype=numpy_dtype(name), order="C")  # a copy: taken now
            overflow = np.isfinite(source) & ~np.isfinite(array)
        if overflow.any():  # as the .mlir front end rejects dense<1.0e10> : tensor<f16>
            example = np.asarray(source)[overflow].flat[0]
            raise user_error(f"constant {example} is out of range of {name}")
        if (problem := shape_problem(array.shape)) is not None:
            raise user_error(f"constant of shape {array.shape} {problem}")
        ttype = tensor_type(TensorSpec(tuple(array.shape), name))
        op = arith.ConstantOp(DenseIntOrFPElementsAttr(ttype, BytesAttr(stored_bytes(array))))
        self._append(op)
        return TracedTensor(self, op.results[0], ("const", array))

    # ---------------------------------------------------------------- ops
    def emit(self, op_cls: type[ai.AiOp], operands: Sequence[Any], **attrs: Any) -> TracedTensor:
        """Build ``op_cls`` on ``operands`` (tracers, constants), located at the user's line."""
        dtype = self._partner_dtype(operands)
        values = [self._value(self._operand(x, dtype)) for x in operands]
        return self._build(op_cls, values, attrs)

    def binary(self, op_cls: type[ai.AiOp], lhs: Any, rhs: Any) -> TracedTensor:
        """An elementwise binary op with numpy broadcasting; ``x + b[None, :, None]`` is a bias."""
        dtype = self._partner_dtype((lhs, rhs))
        a, b = self._operand(lhs, dtype), self._operand(rhs, dtype)
        if op_cls is ai.AddOp:
            for view, other in ((a, b), (b, a)):
                bias = self._as_bias(view, other)
                if bias is not None:
                    return self._build(ai.BiasAddOp, [other.value, bias[0]], {"axis": bias[1]})
        values = [self._broadcast_value(a, b.ndim), self._broadcast_value(b, a.ndim)]
        return self._build(op_cls, values, {})

    def matmul(
        self, lhs: Any, rhs: Any, *, transpose_a: bool = False, transpose_b: bool = False
    ) -> TracedTensor:
        """``lhs @ rhs``; ``.T``/``.mT`` operands become the op's transpose flags."""
        dtype = self._partner_dtype((lhs, rhs))
        a, b = self._operand(lhs, dtype), self._operand(rhs, dtype)
        if isinstance(a, TransposeView):
            a, transpose_a = a.source, not transpose_a
        if isinstance(b, TransposeView):
            b, transpose_b = b.source, not transpose_b
        values = [self._broadcast_value(a, b.ndim), self._broadcast_value(b, a.ndim)]
        attrs = {"transpose_a": transpose_a, "transpose_b": transpose_b}
        return self._build(ai.MatmulOp, values, attrs)

    def _build(self, op_cls: type[ai.AiOp], values: list[SSAValue], attrs: dict) -> TracedTensor:
        try:
            if op_cls is ai.CastOp:
                op: Operation = ai.CastOp(values[0], attrs["to"])
            else:
                op = op_cls(*values, **attrs)
        except ShapeError as err:
            raise user_error(str(err)) from None
        self._append(op)
        return TracedTensor(self, op.results[0])

    def _append(self, op: Operation) -> None:
        frame = user_frame(2)
        if frame is not None:
            op.location = file_location(frame_location(frame)[0])
        self.block.add_op(op)

    # ------------------------------------------------------- operand kinds
    def _partner_dtype(self, operands: Sequence[Any]) -> str | None:
        """The element type constants take: the first traced operand's, a bool one's only
        when no other is traced (``where(mask, x, 0.0)``: 0.0 is x's type)."""
        traced = [x.dtype_name for x in operands if isinstance(x, Traced)]
        return next((d for d in traced if d != "i1"), traced[0] if traced else None)

    def _operand(self, x: Any, dtype: str | None) -> Traced:
        """A tracer for ``x``: tracers pass through, scalars and arrays become constants."""
        if isinstance(x, Traced):
            if x.trace is not self or not self.active:
                raise user_error(
                    "a traced tensor was used outside the trace that made it (it escaped "
                    "its @fusec.fuse function, e.g. through a global variable)"
                )
            return x
        if isinstance(x, (bool, int, float, np.generic, np.ndarray, list, tuple)):
            if isinstance(x, (list, tuple)):
                x = np.asarray(x, dtype=np.float64)
            return self.constant(x, dtype)
        raise user_error(
            f"unsupported operand of type {type(x).__module__}.{type(x).__qualname__}: "
            "expected a traced tensor, a Python number or a numpy array"
        )

    def _value(self, x: Traced) -> SSAValue:
        """The SSA value of a tracer used where no broadcasting rule applies."""
        if isinstance(x, TracedTensor):
            return x.value
        return self.materialise(x).value

    def _broadcast_value(self, x: Traced, partner_rank: int) -> SSAValue:
        """Like ``_value``, but leading unit dims may be dropped: broadcasting restores them."""
        if isinstance(x, UnitDimView) and x.leading_only() and partner_rank >= x.ndim:
            return x.source.value
        return self._value(x)

    def _as_bias(self, x: Traced, other: Traced) -> tuple[SSAValue, int] | None:
        """(bias, axis) when ``x + other`` is ``ai.bias_add(other, bias, axis)``.

        That is when ``x`` is 1-D, or a 1-D tensor indexed with None
        (``b[None, :, None, None]``), whose one dim lines up with a dim of a
        rank >= 2 ``other`` of the same length: a bias along that axis.
        """
        if not isinstance(other, TracedTensor) or other.ndim < 2:
            return None
        if isinstance(x, UnitDimView) and x.source.ndim == 1:
            source, rank, position = x.source, x.ndim, x.positions[0]
        elif isinstance(x, TracedTensor) and x.ndim == 1:
            source, rank, position = x, 1, 0
        else:
            return None
        if other.ndim < rank:
            return None
        axis = other.ndim - rank + position
        if other.shape[axis] != source.shape[0]:
            return None  # not a bias: plain broadcasting (or its shape error) applies
        return source.value, axis

    def materialise(self, view: Traced) -> TracedTensor:
        """A lazy view as a tensor: ``ai.reshape`` (unit dims; a constant is reshaped
        itself) or ``ai.transpose`` (last two dims swapped); the same view once per trace."""
        if isinstance(view, TracedTensor):
            return view
        if isinstance(view, TransposeView):
            rank = view.ndim
            return self.transpose(view.source, (*range(rank - 2), rank - 1, rank - 2))
        assert isinstance(view, UnitDimView)
        source = view.source
        if source.leaf is not None and source.leaf[0] == "const":
            return self._constant_op(source.leaf[1].reshape(view.shape), source.dtype_name)
        key = (source.value, view.shape)
        if key not in self._views:
            self._views[key] = self._build(ai.ReshapeOp, [source.value], {"shape": view.shape})
        return self._views[key]

    def transpose(self, x: Traced, perm: tuple[int, ...]) -> TracedTensor:
        """``ai.transpose`` of ``x`` by ``perm``."""
        value = self.materialise(x).value
        return self._build(ai.TransposeOp, [value], {"perm": perm})

    # ------------------------------------------------------------- results
    def finish(self, result: Any) -> TracedFunction:
        """Close the function: return ``result`` (a tensor, or a tuple or list of them)."""
        if isinstance(result, (tuple, list)):
            kind, items = type(result).__name__, list(result)
        else:
            kind, items = "single", [result]
        values = []
        for i, item in enumerate(items):
            if not isinstance(item, Traced):
                where = f"result #{i}" if kind != "single" else "the result"
                raise FusecError(
                    f"@{self.name}: {where} is a {type(item).__name__}, expected a traced "
                    "tensor (a fused function must return tensors computed from its arguments)",
                    self.location,
                )
            values.append(self._value(self._operand(item, None)))
        self._hoist_constants()
        ret = func.ReturnOp(*values)
        self.block.add_op(ret)
        inputs = [a.type for a in self.block.args]
        fn_type = FunctionType.from_lists(inputs, [v.type for v in values])
        fn = func.FuncOp(symbol_name(self.name), fn_type, Region(self.block))
        if self.location is not None:
            fn.location = ret.location = file_location(self.location)
        module = ModuleOp([fn])
        verify_module(module)
        return TracedFunction(module, tuple(self.params), kind, len(values))

    def _hoist_constants(self) -> None:
        """Move the constants to the top, in order of first use (MLIR's canonical form)."""
        constants = [op for op in self.block.ops if isinstance(op, arith.ConstantOp)]
        for op in reversed(constants):
            op.detach()
            if self.block.first_op is None:
                self.block.add_op(op)
            else:
                self.block.insert_op_before(op, self.block.first_op)


def symbol_name(name: str) -> str:
    """A safe IR symbol name from a Python function name (e.g. '<lambda>' -> '_lambda_')."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name) or "fn"
    return cleaned if not cleaned[0].isdigit() else f"fn_{cleaned}"


def trace_function(
    fn: Callable[..., Any],
    args: Sequence[ArgSpec],
    call: Callable[[list[TracedTensor]], Any],
    name: str | None = None,
) -> TracedFunction:
    """Trace ``fn``: ``call(tracers)`` runs it with one tracer per entry of ``args``."""
    code = getattr(fn, "__code__", None)
    location = SourceLocation(code.co_filename, code.co_firstlineno, 1) if code else None
    trace = Trace(str(name or getattr(fn, "__name__", "fn")), location)
    with trace:
        tracers = [trace.argument(arg) for arg in args]
        try:
            result = call(tracers)
        except RecursionError:  # e.g. a fused function calling itself with no end
            raise FusecError(
                f"@{trace.name}: maximum recursion depth exceeded while tracing (does the "
                "function call itself without a Python-level base case?)",
                location,
            ) from None
        return trace.finish(result)
