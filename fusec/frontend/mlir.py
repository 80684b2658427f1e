"""The .mlir text front end: parse and verify, with located diagnostics.

Every operation gets a ``FileLineColLoc`` pointing at its first token so that
verifier and pass errors can say ``file:line:col`` like parse errors do.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from fusec.errors import FusecError, SourceLocation, line_of


class LocatedParser(Parser):
    """An xDSL parser that records where each operation starts."""

    current_op_span: Span | None = None

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        outer, self.current_op_span = self.current_op_span, span
        try:
            op = super().parse_operation()
        finally:
            self.current_op_span = outer
        if not isinstance(op.location, FileLineColLoc):
            loc = span.get_location()
            op.location = FileLineColLoc(
                StringAttr(self.lexer.input.name), IntAttr(loc.line), IntAttr(loc.col)
            )
        return op

    def _get_op_by_name(self, name: str) -> type[Operation]:
        stack = self._parser_state.dialect_stack
        if (op_type := self.ctx.get_optional_op(name, dialect_stack=stack)) is not None:
            return op_type
        # Point at the op name just consumed, not at the token after it.
        end = self._current_token.span.start
        start = self.lexer.input.content.rfind(name, 0, end)
        self.raise_error(f"Operation {name} is not registered", start, start + len(name))


def read_source(text_or_path: str | Path) -> tuple[str, str]:
    """(text, name): a path to an existing file is read, anything else is IR text."""
    if isinstance(text_or_path, Path) or (
        "\n" not in text_or_path and not text_or_path.lstrip().startswith(("func.", "builtin."))
        and ("{" not in text_or_path)
    ):
        path = Path(text_or_path)
        try:
            return path.read_text(), str(text_or_path)
        except FileNotFoundError:
            raise FusecError("no such file", SourceLocation(str(text_or_path), 0, 0)) from None
        except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
            message = f"cannot read the file: {getattr(err, 'strerror', None) or err}"
            raise FusecError(message, SourceLocation(str(text_or_path), 0, 0)) from None
    return text_or_path, "<string>"


def parse_module(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify ``text``; raise FusecError with a location on any problem."""
    from fusec.dialect import make_context

    try:
        module = LocatedParser(make_context(), text, name).parse_module()
    except ParseError as err:
        loc = err.span.get_location()
        location = SourceLocation(name, loc.line, loc.col)
        raise FusecError(
            _clean_parse_message(err.msg), location, line_of(text, loc.line), len(err.span)
        ) from None
    verify_module(module, text)
    return module


def _clean_parse_message(msg: str) -> str:
    msg = msg.strip().rstrip(".")
    unknown = re.fullmatch(r"Operation (\S+) is not registered", msg)
    if unknown:
        return _unknown_op_message(unknown.group(1))
    return msg


def _unknown_op_message(name: str) -> str:
    from fusec.dialect import AI

    known = [op.name for op in AI.operations]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; the ai dialect has: {', '.join(known)}"
    return f"unknown operation '{name}'{hint}"


def location_of(op: Operation) -> SourceLocation | None:
    """The source location of ``op`` (or of its nearest located ancestor)."""
    current: Operation | None = op
    while current is not None:
        loc = current.location
        if isinstance(loc, FileLineColLoc):
            return SourceLocation(loc.filename.data, loc.line.data, loc.column.data)
        current = current.parent_op()
    return None


def error_at(op: Operation, message: str, text: str | None = None) -> FusecError:
    """A FusecError located at ``op``, quoting its source line when ``text`` is known."""
    location = location_of(op)
    source = line_of(text, location.line) if (text and location) else None
    return FusecError(f"'{op.name}' op {message}", location, source, len(op.name))


def verify_module(module: ModuleOp, text: str | None = None) -> None:
    """Verify every op, innermost first, reporting the first failure with its location."""
    for op in module.walk(reverse=False):
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as err:
            raise error_at(op, _clean_verify_message(str(err), op.name), text) from None


def _clean_verify_message(msg: str, op_name: str) -> str:
    msg = msg.strip()
    for prefix in (f"{op_name}: ", f"'{op_name}' op "):
        msg = msg.removeprefix(prefix)
    return msg
