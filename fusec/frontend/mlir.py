"""The .mlir text front end: parse and verify, with located diagnostics.

Every operation gets a ``FileLineColLoc`` pointing at its first token so that
verifier and pass errors can say ``file:line:col`` like parse errors do.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    AnyFloat,
    FileLineColLoc,
    IntAttr,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Operation
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer

from fusec.errors import FusecError, SourceLocation, line_of
from fusec.ir.diagnostics import error_at, verify_module
from fusec.ir.memory import check_bytes


class _Lexer(MLIRLexer):
    """xDSL's lexer with a string-literal pattern that cannot backtrack.

    xDSL's ``"(?:[^"\\...]+|\\...)*"`` nests a ``+`` in a ``*``: on a string with no
    closing quote, matching takes time exponential in the rest of the line (a
    100-byte file ran for minutes). One character per repetition (the fix before this
    one) is linear in time but keeps a backtracking point per character: a dense
    constant's 24 MB of hex (a 12 MB weight, as a traced function's cached IR holds it)
    took 3.3 GB to lex. Possessive quantifiers (Python 3.11) give back nothing, so runs
    of plain characters match in one step, in linear time and constant memory (the same
    22 MB literal: 0.04 s, no growth).
    """

    _unescaped_characters_regex = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')


class LocatedParser(Parser):
    """An xDSL parser that records where each operation starts."""

    current_op_span: Span | None = None

    def __init__(self, ctx, text: str, name: str = "<unknown>") -> None:
        super().__init__(ctx, "", name)
        self._parser_state = ParserState(_Lexer(Input(text, name)))
        # Where each not-yet-defined value is first used: xDSL reports values
        # that stay undefined only at the end of the input, with no position.
        self.first_uses: dict[str, Span] = {}
        self._location_end = -1
        self._written: set[Operation] = set()  # ops whose text gave their location

    def parse_optional_location(self):
        location = super().parse_optional_location()
        if location is not None:
            self._location_end = self.pos  # where the op that ends in it ends
        return location

    def resolve_operand(self, operand, type):  # noqa: A002 - xDSL's parameter name
        if self.ssa_values.get(operand.operand_name) is None:
            self.first_uses.setdefault(operand.operand_name, operand.span)
        return super().resolve_operand(operand, type)

    def resolve_operands(self, args, input_types, error_pos):
        # A count mismatch is the op's fault: point at it, not at the token after it.
        if self.current_op_span is not None and len(args) != len(list(input_types)):
            error_pos = self.current_op_span.start
        return super().resolve_operands(args, input_types, error_pos)

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        try:
            module = super().parse_module(allow_implicit_module)
        except ParseError as err:
            undefined = [n for n in self.forward_ssa_references if n in self.first_uses]
            if not err.msg.startswith("values used but not defined") or not undefined:
                raise
            name = undefined[0]
            raise ParseError(self.first_uses[name], f"use of undefined value '%{name}'") from None
        if module not in self._written and not isinstance(module.location, FileLineColLoc):
            # the implicit module (an explicit one was located by parse_operation)
            name_attr = StringAttr(self.lexer.input.name)
            module.location = FileLineColLoc(name_attr, IntAttr(1), IntAttr(1))
        return module

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        outer, self.current_op_span = self.current_op_span, span
        try:
            op = super().parse_operation()
        except VerifyException as err:  # an attribute built while parsing (i64 out of range)
            raise ParseError(span, str(err)) from None
        finally:
            self.current_op_span = outer
        # A location the text writes (even `loc(unknown)`) is kept, so that printed IR
        # with locations parses back to the same module; otherwise: where the op starts.
        written = self._location_end == self.pos
        if written:
            self._written.add(op)
        elif not isinstance(op.location, FileLineColLoc):
            loc = span.get_location()
            op.location = FileLineColLoc(
                StringAttr(self.lexer.input.name), IntAttr(loc.line), IntAttr(loc.col)
            )
        return op

    def _parse_tensor_literal_element(self):
        # MLIR reads `0x7FC00000` in a float dense literal as the element's bit pattern
        # (how NaN and infinities print); xDSL would read the integer's value.
        hex_literal = self._current_token.text[:2] in ("0x", "0X")
        element = super()._parse_tensor_literal_element()
        if hex_literal and type(element.value) is int:
            return _HexElement(element.is_negative, element.value, element.span)
        return element

    def _parse_dense_literal_type(self):
        # xDSL expands a splat (dense<1.0> : T) into one list entry per element: refuse
        # a type too big for memory before that happens (a line could ask for 40 GB)
        start = self.pos
        dense_type = super()._parse_dense_literal_type()
        count = 1
        for d in dense_type.get_shape():
            count *= max(d, 0)
        try:
            check_bytes(count * 16, f"the dense constant {dense_type}")
        except FusecError as err:
            self.raise_error(err.message, start, self.pos)
        return dense_type

    def parse_dense_int_or_fp_elements_attr(self, type):  # noqa: A002 - xDSL's parameter name
        start = self._current_token.span.start
        keyword = self.lexer.input.content.rfind("dense", 0, start)
        start = keyword if keyword >= 0 else start
        try:
            return super().parse_dense_int_or_fp_elements_attr(type)
        except OverflowError:
            self.raise_error(
                "a value of the dense literal is out of range for its element type", start, self.pos
            )
        except ParseError as err:
            if err.span.start < self.pos:  # located inside the literal already
                raise
            # a check after the literal (element count, shape): point at the literal
            self.raise_error(err.msg, start, self.pos)

    def _get_op_by_name(self, name: str) -> type[Operation]:
        stack = self._parser_state.dialect_stack
        if (op_type := self.ctx.get_optional_op(name, dialect_stack=stack)) is not None:
            return op_type
        # Point at the op name just consumed, not at the token after it.
        end = self._current_token.span.start
        start = self.lexer.input.content.rfind(name, 0, end)
        self.raise_error(f"Operation {name} is not registered", start, start + len(name))


@dataclass
class _HexElement(Parser._TensorLiteralElement):
    """A hexadecimal dense-literal element: the bits of a float, the value of an integer."""

    def to_type(self, parser, type):  # noqa: A002 - xDSL's parameter name
        if not isinstance(type, AnyFloat):
            return super().to_type(parser, type)
        if self.is_negative or self.value.bit_length() > type.bitwidth:
            parser.raise_error("hexadecimal float constant out of range for type", self.span)
        raw = self.value.to_bytes(type.compile_time_size, "little")
        return next(iter(type.iter_unpack(raw)))


def read_source(text_or_path: str | Path) -> tuple[str, str]:
    """(text, name): a path to an existing file is read, anything else is IR text."""
    if not isinstance(text_or_path, str | Path):
        what = type(text_or_path).__name__
        raise FusecError(f"expected IR text or a file path (str or pathlib.Path), got {what}")
    if isinstance(text_or_path, Path) or (
        text_or_path.strip()
        and "\n" not in text_or_path
        and not text_or_path.lstrip().startswith(("func.", "builtin."))
        and ("{" not in text_or_path)
    ):
        path = Path(text_or_path)
        try:  # utf-8-sig: a byte-order mark some editors write is not a syntax error
            if path.stat().st_size > MAX_SOURCE_BYTES:  # before reading it
                where = SourceLocation(_shown(str(text_or_path)), 0, 0)
                message = f"the file is larger than {MAX_SOURCE_BYTES} bytes (1 GiB), fusec's limit"
                raise FusecError(message, where)
            return path.read_text(encoding="utf-8-sig"), str(text_or_path)
        except FileNotFoundError:
            where = SourceLocation(_shown(str(text_or_path)), 0, 0)
            raise FusecError("no such file", where) from None
        except (OSError, UnicodeDecodeError, ValueError) as err:  # a directory, a NUL, ...
            message = f"cannot read the file: {getattr(err, 'strerror', None) or err}"
            raise FusecError(message, SourceLocation(_shown(str(text_or_path)), 0, 0)) from None
    return text_or_path.removeprefix("\ufeff"), "<string>"


def _shown(name: str, limit: int = 200) -> str:
    """A file name as diagnostics show it: at most ``limit`` characters."""
    return name if len(name) <= limit else f"{name[: limit - 3]}..."


#: Limits of the IR fusec reads, refused with a located error before parsing: a
#: deeper nesting of brackets ``( [ { <`` (real IR needs a few; a dense literal of
#: rank r needs r) and a larger text.
MAX_NESTING = 64
MAX_SOURCE_BYTES = 1 << 30
#: Python frames the parser may use while parsing MAX_NESTING levels (the worst
#: construct, nested attribute dictionaries, takes about 20 frames a level).
_PARSE_RECURSION = 5000

_BRACKETS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|->|[\[\](){}<>]')


def check_limits(text: str, name: str) -> None:
    """FusecError when ``text`` is longer than MAX_SOURCE_BYTES or nests brackets deeper
    than MAX_NESTING (located at the bracket that goes too deep)."""
    if len(text) > MAX_SOURCE_BYTES:
        raise FusecError(
            f"the input has {len(text)} characters; fusec reads at most {MAX_SOURCE_BYTES} "
            "(1 GiB) of IR text",
            SourceLocation(name, 0, 0),
        )
    if sum(text.count(c) for c in "([{<") <= MAX_NESTING:
        return  # cannot nest deeper than it opens
    depth = 0
    for match in _BRACKETS.finditer(text):
        token = match.group()
        if token in "([{<":
            depth += 1
            if depth > MAX_NESTING:
                line = text.count("\n", 0, match.start()) + 1
                col = match.start() - text.rfind("\n", 0, match.start())
                raise FusecError(
                    f"brackets nested deeper than {MAX_NESTING} levels (fusec's limit)",
                    SourceLocation(name, line, col),
                    line_of(text, line),
                )
        elif token in ")]}>":
            depth = max(0, depth - 1)


def parse_module(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify ``text``; raise FusecError with a location on any problem."""
    from fusec.dialect import make_context

    check_limits(text, name)
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(limit, _PARSE_RECURSION))
        module = LocatedParser(make_context(), text, name).parse_module()
    except RecursionError:  # a backstop: check_limits keeps nesting far below this
        location = SourceLocation(name, 0, 0)
        raise FusecError("the input is nested too deeply to parse", location) from None
    except ParseError as err:
        loc = err.span.get_location()
        location = SourceLocation(name, loc.line, loc.col)
        message = _clean_parse_message(err.msg)
        if not _strip_comments(text[err.span.start :]).strip():
            message = (
                f"unexpected end of input ({message.strip()}; is a '}}' missing?)"
                if _strip_comments(text).strip()
                else "empty input: expected a func.func or a builtin.module"
            )
        raise FusecError(message, location, line_of(text, loc.line), len(err.span)) from None
    finally:
        sys.setrecursionlimit(limit)
    verify_module(module, text)
    check_input_language(module, text)
    return module


_NON_AI_OPS = ("builtin.module", "func.func", "func.return", "func.call", "arith.constant")


def check_input_language(module: ModuleOp, text: str | None = None) -> None:
    """Reject valid MLIR that fusec cannot run: foreign ops, non-ai-tensor types.

    The context loads all of func and arith, so e.g. ``arith.addf`` or an f64
    function argument would verify and only fail later, deep in a back end.
    """
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
    from xdsl.dialects.func import FuncOp

    from fusec.dialect import ShapeError, spec_of
    from fusec.ir.constants import is_constant

    for op in module.walk():
        if not op.name.startswith("ai.") and op.name not in _NON_AI_OPS:
            raise error_at(
                op,
                f"is not supported by fusec (use the ai dialect; outside it only "
                f"{', '.join(_NON_AI_OPS[1:])} are accepted)",
                text,
            )
        types: list[tuple[str, Attribute]] = []
        if isinstance(op, FuncOp):
            fn_type = op.function_type
            types += [(f"argument #{i}: ", t) for i, t in enumerate(fn_type.inputs.data)]
            types += [(f"result #{i}: ", t) for i, t in enumerate(fn_type.outputs.data)]
        elif is_constant(op):
            if not isinstance(op.value, DenseIntOrFPElementsAttr):
                raise error_at(op, "only dense tensor constants are supported", text)
            types = [("", op.result.type)]
        for what, t in types:
            try:
                spec_of(t)
            except ShapeError as err:
                raise error_at(op, f"{what}{err}", text) from None
        _check_structure(op, text)


def _check_structure(op: Operation, text: str | None) -> None:
    """Function bodies fusec can run: one block, no declarations, ai ops only in groups."""
    from xdsl.dialects.func import CallOp, FuncOp

    from fusec.dialect import AiOp, FusedOp, YieldOp

    if isinstance(op, FuncOp):
        if not op.body.blocks:
            raise error_at(op, "without a body (a declaration) is not supported", text)
        if len(op.body.blocks) > 1:
            raise error_at(op, "must have a single block (fusec has no control flow)", text)
    parent = op.parent_op()
    if isinstance(parent, FusedOp) and not isinstance(op, AiOp | YieldOp):
        raise error_at(
            op, "cannot be inside an 'ai.fused' body (only ai tensor ops and ai.yield)", text
        )
    if isinstance(op, CallOp):
        _check_not_recursive(op, text)


def _check_not_recursive(call: func.CallOp, text: str | None) -> None:
    """A call that can reach its own function again would never finish."""
    from xdsl.dialects.func import CallOp, FuncOp
    from xdsl.traits import SymbolTable

    caller = call.parent_op()
    while caller is not None and not isinstance(caller, FuncOp):
        caller = caller.parent_op()
    module = caller.parent_op() if caller is not None else None
    if caller is None or module is None:
        return
    seen: set[str] = set()
    pending = [call.callee.root_reference.data]
    while pending:
        name = pending.pop()
        if name == caller.sym_name.data:
            raise error_at(call, f"makes a recursive call to '@{name}' (not supported)", text)
        if name in seen:
            continue
        seen.add(name)
        callee = SymbolTable.lookup_symbol(module, name)
        if isinstance(callee, FuncOp):
            pending += [
                c.callee.root_reference.data for c in callee.walk() if isinstance(c, CallOp)
            ]


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def _clean_parse_message(msg: str) -> str:
    msg = msg.strip().rstrip(".")
    msg = msg.replace("{first_char}", "'%', '@', '^' or '#'")  # an unformatted xDSL message
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
