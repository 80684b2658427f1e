"""Diagnostics on IR: where an op is, one located error, verification in program order.

Every front end records where each op came from as an MLIR location: a
``FileLineColLoc`` (``.mlir`` text, traced Python lines), or a ``NameLoc``
(an ONNX node, ``"name"("model.onnx":0:0)``), possibly fused. ``location_of``
turns any of them into a ``SourceLocation``; ``error_at`` is the one way to
report a problem with an op (parser, verifier, passes and code generators
alike), so every diagnostic says ``file:line:col`` or ``model.onnx: node
"name"`` the same way.
"""

from __future__ import annotations

import json
import re

from xdsl.dialects.builtin import (
    ArrayAttr,
    FileLineColLoc,
    FusedLoc,
    IntAttr,
    ModuleOp,
    NameLoc,
    StringAttr,
)
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException

from fusec.errors import FusecError, SourceLocation, line_of


def location_of(op: Operation) -> SourceLocation | None:
    """The source location of ``op`` (or of its nearest located ancestor)."""
    current: Operation | None = op
    while current is not None:
        if (found := source_location(current.location)) is not None:
            return found
        current = current.parent_op()
    return None


def source_location(loc: Attribute) -> SourceLocation | None:
    """A ``SourceLocation`` from an MLIR location attribute, or None if it has none.

    ``"name"("file":0:0)`` (a named node of a file without lines, e.g. an ONNX
    node) becomes ``file: node "name"``; a fused location reports its first part.
    """
    if isinstance(loc, FileLineColLoc):
        return SourceLocation(loc.filename.data, loc.line.data, loc.column.data)
    if isinstance(loc, NameLoc):
        inner = source_location(loc.location)
        if inner is not None and inner.line > 0:
            return inner
        return named_location(inner.file if inner else None, loc.desc.data)
    if isinstance(loc, FusedLoc):
        parts = loc.locations.data if isinstance(loc.locations, ArrayAttr) else ()
        for part in parts:
            if (found := source_location(part)) is not None:
                return found
    return None


def file_location(where: SourceLocation) -> FileLineColLoc:
    """The MLIR location ``"file":line:col`` of ``where`` (``source_location`` reads it)."""
    return FileLineColLoc(StringAttr(where.file), IntAttr(where.line), IntAttr(where.col))


def node_location(name: str, where: SourceLocation) -> NameLoc:
    """The MLIR location ``"name"("file":line:col)`` of a named node (an ONNX node, an FX
    node) at ``where``; line 0 for a file without lines (``source_location`` reads it)."""
    return NameLoc(StringAttr(name), file_location(where))


def named_location(file: str | None, name: str) -> SourceLocation:
    """The location of a named item (an ONNX node) of a file without line numbers."""
    label = f"node {json.dumps(name)}"  # escaped: the name is user text
    return SourceLocation(f"{file}: {label}" if file else label, 0, 0)


def error_at(
    op: Operation,
    message: str,
    text: str | None = None,
    *,
    error: type[FusecError] = FusecError,
) -> FusecError:
    """A FusecError (or subclass ``error``) ``'NAME' op MESSAGE`` located at ``op``,
    quoting its source line when the source ``text`` is known."""
    location = location_of(op)
    source = line_of(text, location.line) if (text and location) else None
    length = 1
    if (
        source is not None and location is not None
    ):  # underline the token the op starts with (%r, func.func, ...)
        token = re.match(r"[^\s,=(){}<>:]+", source[location.col - 1 :])
        length = len(token.group()) if token else 1
    return error(f"'{op.name}' op {message}", location, source, length)


def verify_module(module: ModuleOp, text: str | None = None) -> None:
    """Verify every op in program order (an op before the ops of its regions); report the
    first failure with its location."""
    order = {op: i for i, op in enumerate(module.walk(reverse=False))}
    for op in module.walk(reverse=False):
        _check_defined_before_use(op, order, text)
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as err:
            message = _clean_verify_message(str(err), op.name)
            redefined = re.fullmatch(r'Redefinition of symbol "(.+)"', message)
            if redefined:  # point at the second definition, not at the module
                raise _redefinition(op, redefined.group(1), text) from None
            raise error_at(op, message, text) from None


def _check_defined_before_use(op: Operation, order: dict[Operation, int], text: str | None) -> None:
    """An operand made by a later op of the same block (xDSL checks no dominance)."""
    block = op.parent_block()
    for value in op.operands:
        owner = value.owner
        if isinstance(owner, Operation) and block is not None and owner.parent_block() is block:
            if order[owner] > order[op]:
                name = f"'%{value.name_hint}' " if value.name_hint else ""
                raise error_at(op, f"uses the value {name}before its definition", text)


def _redefinition(scope: Operation, symbol: str, text: str | None) -> FusecError:
    defs = [
        o
        for o in scope.walk()
        if o is not scope and getattr(o.properties.get("sym_name"), "data", None) == symbol
    ]
    where = defs[1] if len(defs) > 1 else scope
    return error_at(where, f"redefinition of symbol '@{symbol}'", text)


def _clean_verify_message(msg: str, op_name: str) -> str:
    msg = msg.strip()
    for prefix in (f"{op_name}: ", f"'{op_name}' op "):
        msg = msg.removeprefix(prefix)
    return msg
