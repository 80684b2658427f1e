"""The reference executor: a numpy interpreter of the ``ai`` dialect.

It is the ground truth of every numerics test. It runs on xDSL's
``Interpreter`` with one ``@impl`` per op, each a call of the op's own
``reference`` (the vectorised kernels of ``fusec.dialect.numpy_ops``);
``ai.fused`` runs its body, so IR before and after fusion can be compared
directly.

Two precisions: ``"float64"`` computes in float64, ``"native"`` computes in
each op's declared element type (float16/bfloat16 reductions accumulate in
float32).

In float64, ``rounding`` says where a value is rounded to its declared element
type, so that the reference can reproduce each way of running the IR:

* ``"none"``: nowhere; casts are the identity (the exact maths).
* ``"casts"``: at every ``ai.cast`` result only. This is what one fused kernel
  does: 16-bit intermediates stay float32 inside it, and only the IR's explicit
  casts round.
* ``"every-op"``: at every op result. This is what running op by op does
  (unfused ops, PyTorch eager, the cuda target's PyTorch fallback groups):
  each 16-bit result is stored, so rounded, before the next op reads it.
* ``"groups"``: at ``ai.cast`` results and at ``ai.fused`` results, for fused
  IR: what a compiled program of fused kernels does (f32 inside each group,
  rounding at the group boundaries, where values are stored). Groups listed
  in ``op_by_op_groups`` (a target's fallback that runs a group's ops one by
  one, e.g. through PyTorch) round after every op inside instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.ir.constants import constant_value
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.memory import check_bytes, tensor_bytes
from fusec.ir.module import check_arguments, entry_function

PRECISIONS = ("float64", "native")
ROUNDINGS = ("none", "casts", "every-op", "groups")


def _out_dtype(interpreter: Interpreter, value) -> np.dtype:
    if _precision(interpreter) == "float64":
        return np.dtype(np.float64)
    return numpy_dtype(spec_of(value.type).dtype)


def _precision(interpreter: Interpreter) -> str:
    return interpreter.get_data(AiFunctions, "precision", lambda: "float64")


def _rounding(interpreter: Interpreter) -> str:
    return interpreter.get_data(AiFunctions, "rounding", lambda: "none")


def round_to(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` (float64) rounded to the element type ``dtype``, back in float64."""
    return np.asarray(array).astype(numpy_dtype(dtype)).astype(np.float64)


def _op_by_op(interpreter: Interpreter, op) -> bool:
    """Whether ``op`` is inside a group that the ``groups`` rounding runs op by op."""
    groups = interpreter.get_data(AiFunctions, "op_by_op_groups", frozenset)
    return bool(groups) and id(op.parent_op()) in groups


def _result(interpreter: Interpreter, op, array: np.ndarray) -> tuple[np.ndarray]:
    value = np.asarray(array).astype(_out_dtype(interpreter, op.results[0]), copy=False)
    if _precision(interpreter) == "float64":
        rounding = _rounding(interpreter)
        stored = isinstance(op, (ai.CastOp, arith.ConstantOp))  # a constant is stored typed
        if rounding == "groups" and _op_by_op(interpreter, op):
            stored = True
        if rounding == "every-op" or (rounding in ("casts", "groups") and stored):
            value = round_to(value, spec_of(op.results[0].type).dtype)
    return (value,)


@register_impls
class AiFunctions(InterpreterFunctions):
    """The ai ops (each through its own numpy ``reference``), ``ai.fused`` and dense
    ``arith.constant``."""

    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: tuple[Any, ...]):
        return _result(interpreter, op, constant_value(op))

    @impl(ai.FusedOp)
    def run_fused(self, interpreter: Interpreter, op: ai.FusedOp, args: tuple[Any, ...]):
        results = interpreter.run_ssacfg_region(op.body, args, "ai.fused")
        if _precision(interpreter) == "float64" and _rounding(interpreter) == "groups":
            results = tuple(
                round_to(r, spec_of(v.type).dtype) for r, v in zip(results, op.results, strict=True)
            )
        return results

    @impl_terminator(ai.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: ai.YieldOp, args: tuple[Any, ...]):
        return ReturnedValues(args), ()


def _run_tensor_op(self, interpreter: Interpreter, op: ai.AiOp, args: tuple[Any, ...]):
    return _result(interpreter, op, op.reference(*args))


def _register_tensor_ops() -> None:
    """One impl per ai op, all the same: the op carries its numpy implementation."""
    for op_type in ai.TENSOR_OPS:
        name = f"run_{op_type.name.removeprefix('ai.')}"
        setattr(AiFunctions, name, impl(op_type)(_run_tensor_op))
    register_impls(AiFunctions)


_register_tensor_ops()


def _is_tensor(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType)


def run_reference(
    module: ModuleOp,
    args: Sequence[Any],
    *,
    entry: str | None = None,
    precision: str = "float64",
    rounding: str = "none",
    op_by_op_groups: Sequence[int] = (),
) -> tuple[np.ndarray, ...]:
    """Run the entry function of ``module`` on numpy ``args``; return all its results.

    ``rounding`` (float64 only) places the roundings to declared element types:
    see the module docstring. ``op_by_op_groups`` are indices, in program
    order, of the entry function's ``ai.fused`` groups that round every op
    under ``rounding="groups"``.
    """
    if precision not in PRECISIONS:
        raise FusecError(f"precision must be one of {PRECISIONS}, got '{precision}'")
    if rounding not in ROUNDINGS:
        raise FusecError(f"rounding must be one of {ROUNDINGS}, got '{rounding}'")
    fn = entry_function(module, entry)
    arrays = check_arguments(fn, args, allow_float64=True)
    shapes = [spec_of(r.type).shape for op in fn.walk() for r in op.results if _is_tensor(r)]
    check_bytes(tensor_bytes(shapes, 8), f"the reference run of @{fn.sym_name.data}")
    params = fn.function_type.inputs.data
    if precision == "float64" and rounding != "none":  # arguments are stored typed
        arrays = [round_to(a, spec_of(p).dtype) for a, p in zip(arrays, params, strict=True)]
    elif precision == "float64":
        arrays = [a.astype(np.float64) for a in arrays]
    else:
        arrays = [
            a.astype(numpy_dtype(spec_of(p).dtype), copy=False)
            for a, p in zip(arrays, params, strict=True)
        ]
    # Imported here: xdsl.interpreters loads every interpreter (~0.15 s), which
    # `fusec compile` (that only needs entry_function) should not pay for.
    from xdsl.interpreters.func import FuncFunctions

    interpreter = Interpreter(module)
    interpreter.register_implementations(FuncFunctions())
    interpreter.register_implementations(AiFunctions())
    interpreter.set_data(AiFunctions, "precision", precision)
    interpreter.set_data(AiFunctions, "rounding", rounding)
    groups = [op for op in fn.body.block.ops if isinstance(op, ai.FusedOp)]
    chosen = frozenset(id(groups[k]) for k in op_by_op_groups)
    interpreter.set_data(AiFunctions, "op_by_op_groups", chosen)
    return tuple(interpreter.call_op(fn, tuple(arrays)))
