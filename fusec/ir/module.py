"""The entry function of a module, its arguments and its constants.

What every consumer of a compiled module needs (the reference executor, the
launch planner, the API): which function runs, whether the arguments match
its signature (one located message naming the bad one), and the values of
its dense constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from fusec.errors import FusecError
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.tensors import ShapeError, spec_of

if TYPE_CHECKING:
    import numpy as np


def entry_function(module: ModuleOp, entry: str | None = None) -> func.FuncOp:
    """The function to run: ``entry`` by name, or the module's single public function."""
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if entry is not None:
        for f in funcs:
            if f.sym_name.data == entry:
                return f
        names = ", ".join(f"@{f.sym_name.data}" for f in funcs) or "none"
        raise FusecError(f"no function named '@{entry}' in the module (functions: {names})")
    public = [f for f in funcs if f.sym_visibility is None or f.sym_visibility.data == "public"]
    if len(public) != 1:
        names = ", ".join(f"@{f.sym_name.data}" for f in public) or "none"
        raise FusecError(
            f"cannot pick the entry function: {len(public)} public functions ({names}); "
            "pass entry=NAME"
        )
    return public[0]


def check_arguments(
    fn: func.FuncOp, args: Sequence[Any], *, allow_float64: bool = False
) -> list[np.ndarray]:
    """Arguments as numpy arrays of the signature's shapes, or a FusecError naming the bad one."""
    import numpy as np

    params = fn.function_type.inputs.data
    name = fn.sym_name.data
    if len(args) != len(params):
        raise FusecError(f"@{name} takes {len(params)} argument(s), got {len(args)}")
    arrays = []
    for index, (arg, param) in enumerate(zip(args, params, strict=True)):
        try:
            spec = spec_of(param)
        except ShapeError as err:
            raise FusecError(f"@{name}: parameter #{index}: {err}") from None
        array = np.asarray(arg)
        if array.shape != spec.shape:
            raise FusecError(
                f"@{name}: argument #{index} has shape {array.shape}, "
                f"expected {spec.shape} ({spec})"
            )
        want = numpy_dtype(spec.dtype)
        if array.dtype != want and not (allow_float64 and array.dtype == np.float64):
            raise FusecError(
                f"@{name}: argument #{index} has dtype {array.dtype}, expected {want} ({spec})"
            )
        arrays.append(array)
    return arrays


#: The maths of f32 matmul, conv and attention (``fusec.compile(..., precision=)``, issue
#: 28): "ieee" (the default) computes them in IEEE f32; "tf32" lets the cuda target run
#: them on the Tensor Cores with tf32 operands (10-bit mantissas) and f32 accumulation, the
#: counterpart of ``torch.set_float32_matmul_precision("high")``. 16-bit graphs and the
#: cpu and reference targets are unaffected.
PRECISIONS = ("ieee", "tf32")
#: The module attribute that carries a precision other than "ieee" (``set_precision``).
PRECISION_ATTR = "fusec.precision"


def check_precision(precision: object) -> str:
    """``precision`` when it is one of ``PRECISIONS``, else a FusecError that says which
    values are accepted."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise FusecError(
            f"precision={precision!r} is not a precision: use 'ieee' (IEEE f32 maths, the "
            "default) or 'tf32' (f32 matmul, conv and attention on the Tensor Cores in tf32)"
        )
    return precision


def set_precision(module: ModuleOp, precision: str) -> None:
    """Record ``precision`` on ``module`` (``PRECISION_ATTR``; "ieee" removes it)."""
    from xdsl.dialects.builtin import StringAttr

    check_precision(precision)
    if precision == "ieee":
        module.attributes.pop(PRECISION_ATTR, None)
    else:
        module.attributes[PRECISION_ATTR] = StringAttr(precision)


def precision_of(op: Any, text: str | None = None) -> str:
    """The precision of the module ``op`` is in ("ieee" for an op of no module): the
    outermost module's ``PRECISION_ATTR``. A value other than ``PRECISIONS`` is a
    FusecError located at the module (quoting its line of ``text`` when given)."""
    from xdsl.dialects.builtin import StringAttr

    from fusec.ir.diagnostics import error_at

    top, node = None, op
    while node is not None:
        if isinstance(node, ModuleOp):
            top = node
        node = node.parent_op()
    if top is None:
        return "ieee"
    attr = top.attributes.get(PRECISION_ATTR)
    if attr is None:
        return "ieee"
    value = attr.data if isinstance(attr, StringAttr) else str(attr)
    try:
        return check_precision(value)
    except FusecError as err:
        raise error_at(top, f"has a bad {PRECISION_ATTR} attribute: {err.message}", text) from None
