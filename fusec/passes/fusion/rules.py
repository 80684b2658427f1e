"""The fusion policy as data: a small rule language, parsed with lark.

The planner never asks "is this a matmul followed by a softmax?" in code; it
asks the rules whether an op may join a group of some kind in some role
(prologue, epilogue, body) and, if not, why. The default policy lives in
``default.rules`` beside this module; read it for the syntax. A user extends
the policy by editing a copy (``fuse-epilogue{rules="my.rules"}``) and, for a
new condition, by adding a predicate or a quantity to the registries below.
"""

from __future__ import annotations

import hashlib
import operator
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.dialect.facts import FUSED_KINDS
from fusec.errors import FusecError, SourceLocation, line_of
from fusec.passes.fusion.classify import Pattern, fmt_shape, pattern_of, result_shape, short_name
from fusec.passes.fusion.rules_model import (
    _OP_NAMES,
    _PATTERNS,
    Atom,
    Clause,
    KindRules,
    Located,
    Param,
    RawKind,
    Rules,
)

if TYPE_CHECKING:
    from lark import Lark, Token


_T = TypeVar("_T")

ROLES = ("anchor", "prologue", "epilogue", "body")

GRAMMAR = r"""
start: item*
?item: param | kind
param: "param" NAME "=" INT STRING?
kind: "kind" NAME STRING? "{" clause* "}"
clause: ROLE selectors option* condition?
selectors: selector ("," selector)*
selector: NAME
option: "duplicate"            -> duplicate
      | "max" limit            -> max_count
condition: "where" atom ("," atom)*
atom: NAME                     -> predicate
    | NAME CMP limit           -> compare
limit: INT | NAME
ROLE: "anchor" | "prologue" | "epilogue" | "body"
CMP: "<=" | ">=" | "==" | "<" | ">"
NAME: /[A-Za-z_][A-Za-z0-9_.]*/
STRING: /"[^"\n]*"/
COMMENT: /#[^\n]*/
%import common.INT
%import common.WS
%ignore WS
%ignore COMMENT
"""

_COMPARE: dict[str, Callable[[int, int], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}


# ------------------------------------------------------------------ conditions


@dataclass(frozen=True)
class RuleContext:
    """What a condition sees: the op, its role, the group's kind, anchor and shape."""

    op: Operation
    role: str
    kind: str
    anchor: Operation | None
    domain: tuple[int, ...]
    rules: Rules = field(repr=False)


def _same_shape(ctx: RuleContext) -> str | None:
    shape = result_shape(ctx.op)
    if shape == ctx.domain:
        return None
    return (
        f"{ctx.op.name} result {fmt_shape(shape)} differs from the {ctx.kind} group's "
        f"shape {fmt_shape(ctx.domain)}"
    )


def _reduced_axis(op: Operation) -> int:
    rank = len(result_shape(op))
    axis = op.attr("axis") if isinstance(op, ai.SoftmaxOp) else -1
    return axis % rank


def _last_axis(ctx: RuleContext) -> str | None:
    rank = len(result_shape(ctx.op))
    axis = _reduced_axis(ctx.op)
    return None if axis == rank - 1 else f"{ctx.op.name} reduces axis {axis}, not the last"


def _feeds_lhs(ctx: RuleContext) -> str | None:
    anchor = ctx.anchor
    if anchor is not None and anchor.operands and anchor.operands[0] is ctx.op.results[0]:
        return None
    target = anchor.name if anchor is not None else "the anchor"
    return f"{ctx.op.name} does not feed the lhs (A operand) of {target}"


def _views_operand(ctx: RuleContext) -> str | None:
    """The op is a view (layout op) that the anchor reads through: a chain of layout ops
    (and broadcasts by ``ai.expand``, the head repeat of GQA) leads from it to an operand
    of the anchor."""
    anchor = ctx.anchor
    seen: set[Operation] = set()
    frontier = [ctx.op]
    while frontier:
        op = frontier.pop()
        for use in op.results[0].uses:
            user = use.operation
            if user is anchor:
                return None
            layout = pattern_of(user) is Pattern.INJECTIVE or isinstance(user, ai.ExpandOp)
            if layout and user not in seen:
                seen.add(user)
                frontier.append(user)
    target = anchor.name if anchor is not None else "the anchor"
    return f"{ctx.op.name} is not a view of an operand of {target}"


def _plain_lhs(ctx: RuleContext) -> str | None:
    anchor = ctx.anchor
    if isinstance(anchor, ai.MatmulOp) and anchor.attr("transpose_a"):
        return f"the lhs of {anchor.name} is transposed (transpose_a)"
    return None


def _row(ctx: RuleContext) -> tuple[int, str]:
    n = result_shape(ctx.op)[_reduced_axis(ctx.op)]
    return n, f"{short_name(ctx.op)} row of {n}"


PREDICATES: dict[str, Callable[[RuleContext], str | None]] = {
    "same_shape": _same_shape,
    "last_axis": _last_axis,
    "feeds_lhs": _feeds_lhs,
    "plain_lhs": _plain_lhs,
    "views_operand": _views_operand,
}
"""Named conditions: each returns None when it holds, else the reason it fails."""

QUANTITIES: dict[str, Callable[[RuleContext], tuple[int, str]]] = {
    "row": _row,
}
"""Numbers a condition can compare: (value, how a message names it)."""


def evaluate(atom: Atom, ctx: RuleContext) -> str | None:
    """None when ``atom`` holds for ``ctx``, else the reason it does not."""
    if atom.cmp is None:
        return PREDICATES[atom.name](ctx)
    value, subject = QUANTITIES[atom.name](ctx)
    assert atom.limit is not None
    limit = ctx.rules.limit(atom.limit)
    if _COMPARE[atom.cmp](value, limit):
        return None
    described = ctx.rules.describe_limit(atom.limit)
    if atom.cmp in ("<=", "<"):
        return f"{subject} exceeds {described}"
    return f"{subject} is not {atom.cmp} {described}"


def clause_failure(clause: Clause, ctx: RuleContext) -> str | None:
    """The first condition of ``clause`` that fails for ``ctx`` (None: all hold)."""
    for atom in clause.atoms:
        reason = evaluate(atom, ctx)
        if reason is not None:
            return reason
    return None


# ---------------------------------------------------------------- selectors


def _known_selector(selector: str) -> bool:
    return selector in _PATTERNS or selector in _OP_NAMES or f"ai.{selector}" in _OP_NAMES


_ANCHOR_OPS = {op.name for op in ai.TENSOR_OPS if op.PATTERN is Pattern.ANCHOR}


def _selects_anchor(selector: str) -> bool:
    if selector == "anchor":
        return True
    name = selector if selector.startswith("ai.") else f"ai.{selector}"
    return name in _ANCHOR_OPS


# ------------------------------------------------------------------ parsing


@cache
def _parser() -> Lark:
    """The rules parser: loaded from its tables built ahead (``rules_tables``, ~10 ms)
    when they are GRAMMAR's for this lark, else built from GRAMMAR (~0.2 s of every
    ``fusec compile``, issue #26)."""
    import lark

    from fusec.passes.fusion import rules_tables

    if rules_tables.GRAMMAR_SHA256 == grammar_digest() and rules_tables.LARK == lark.__version__:
        return lark.Lark.load(rules_tables.TABLES)
    return build_parser()


def build_parser() -> Lark:
    """The LALR parser of ``GRAMMAR``, built from the grammar (the slow way)."""
    from lark import Lark

    return Lark(GRAMMAR, parser="lalr", propagate_positions=True)


def grammar_digest() -> str:
    return hashlib.sha256(GRAMMAR.encode()).hexdigest()


def tables_source() -> str:
    """The text of ``rules_tables.py``: the tables of ``build_parser()`` as Python literals
    (imported as code, never unpickled), with the grammar and the lark they are for.
    Written by ``python -m fusec.passes.fusion.rules`` after a change to GRAMMAR."""
    import pprint

    import lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    data, memo = build_parser().memo_serialize([TerminalDef, Rule])
    # one line: the tables are data, and their many alike rows are no code to read
    text = pprint.pformat({"data": data, "memo": memo}, width=10**9, sort_dicts=True)
    return (
        '"""The fusion rules parser\'s LALR tables, built ahead from ``rules.GRAMMAR``.\n\n'
        "Generated by ``python -m fusec.passes.fusion.rules``: do not edit. ``rules._parser``\n"
        'uses them only while their digest is GRAMMAR\'s and their lark is the one installed."""\n'
        "\n# fmt: off\n"
        f"GRAMMAR_SHA256 = {grammar_digest()!r}\n"
        f"LARK = {lark.__version__!r}\n"
        f"TABLES = {text}  # noqa: E501\n"
    )


def parse_rules(text: str, source: str = "<rules>") -> Rules:
    """Parse and check a rules text; raise a located FusecError if it is bad."""
    from lark.exceptions import LarkError, UnexpectedInput, VisitError

    from fusec.passes.fusion.rules_tree import Build

    def fail(message: str, token: Token | None) -> FusecError:
        line = getattr(token, "line", 0) or 0
        col = getattr(token, "column", 0) or 0
        return FusecError(message, SourceLocation(source, line, col), line_of(text, line))

    try:
        items = Build().transform(_parser().parse(text))
    except UnexpectedInput as err:
        location = SourceLocation(source, err.line, err.column)
        message = f"bad fusion rules: {str(err).splitlines()[0]}"
        raise FusecError(message, location, line_of(text, err.line)) from None
    except (LarkError, VisitError) as err:
        raise FusecError(f"bad fusion rules: {err}", SourceLocation(source, 0, 0)) from None
    params: dict[str, Param] = {}
    kinds: list[KindRules] = []
    for item, token in items:
        if isinstance(item, Param):
            if item.name in params:
                raise fail(f"parameter '{item.name}' is defined twice", token)
            params[item.name] = item
        else:
            if any(k.name == item.name for k in kinds):
                raise fail(f"kind '{item.name}' is defined twice", token)
            kinds.append(_check_kind(item, params, fail))
            if item.name not in FUSED_KINDS:
                raise fail(
                    f"unknown kind '{item.name}': an ai.fused kind must be registered "
                    f"(registered: {', '.join(FUSED_KINDS)})",
                    token,
                )
    return Rules(params, tuple(kinds), source)


def _check_kind(kind: RawKind, params: Mapping[str, Param], fail) -> KindRules:
    clauses: list[Clause] = []
    anchors = 0
    for clause in kind.clauses:
        selectors = []
        for sel in clause.selectors:
            if not _known_selector(sel.value):
                raise fail(
                    f"unknown selector '{sel.value}': expected a pattern "
                    f"({', '.join(_PATTERNS)}) or an ai op name",
                    sel.token,
                )
            if clause.duplicate and _selects_anchor(sel.value):
                raise fail(f"'{sel.value}' is an anchor: anchors are never duplicated", sel.token)
            selectors.append(sel.value)
        atoms = []
        for located in clause.atoms:
            atom = located.value
            table = PREDICATES if atom.cmp is None else QUANTITIES
            if atom.name not in table:
                what = "predicate" if atom.cmp is None else "quantity"
                raise fail(
                    f"unknown {what} '{atom.name}' (known: {', '.join(table)})", located.token
                )
            if atom.cmp is not None:
                atom = replace(atom, limit=_check_limit(atom.limit, params, fail))
            atoms.append(atom)
        max_count = None
        if clause.max_count is not None:
            max_count = _check_limit(clause.max_count, params, fail)
        anchors += clause.role == "anchor"
        clauses.append(
            Clause(
                clause.role,
                tuple(selectors),
                clause.duplicate,
                max_count,
                tuple(atoms),
                clause.line,
            )
        )
    if anchors > 1:
        raise fail(f"kind '{kind.name}' has {anchors} anchor clauses; list the ops in one", None)
    if anchors == 0 and any(c.role in ("prologue", "epilogue") for c in clauses):
        raise fail(f"kind '{kind.name}' has prologue/epilogue clauses but no anchor", None)
    return KindRules(kind.name, kind.description, tuple(clauses))


def _check_limit(limit: object, params: Mapping[str, Param], fail) -> int | str:
    """The value of a parsed limit (an int or a parameter name), checked."""
    located = limit if isinstance(limit, Located) else None
    value = located.value if located is not None else limit
    if isinstance(value, str) and value not in params:
        raise fail(f"unknown parameter '{value}'", located.token if located else None)
    assert isinstance(value, int | str)
    return value


DEFAULT_RULES_FILE = "default.rules"


def default_rules_text() -> str:
    # pkgutil reads it through the package's loader, without importing zipfile and the
    # resource readers as importlib.resources does (issue #26)
    data = pkgutil.get_data("fusec.passes.fusion", DEFAULT_RULES_FILE)
    if data is None:  # a loader without get_data
        from importlib import resources

        return resources.files("fusec.passes.fusion").joinpath(DEFAULT_RULES_FILE).read_text()
    return data.decode()


def default_rules_digest(text: str) -> str:
    """What ``rules_default`` is valid for: the policy's text and the grammar it is in."""
    return hashlib.sha256(f"{grammar_digest()}\n{text}".encode()).hexdigest()


@cache
def default_rules() -> Rules:
    """The policy shipped with fusec (``default.rules``): parsed ahead (``rules_default``,
    no lark to import, issue #26) while that is this text's, else parsed now."""
    from fusec.passes.fusion import rules_default

    text = default_rules_text()
    if rules_default.RULES_SHA256 == default_rules_digest(text):
        return rules_default.RULES
    return parse_rules(text, DEFAULT_RULES_FILE)


def default_rules_source() -> str:
    """The text of ``rules_default.py``: ``default.rules`` parsed, as the Python expression
    that builds it, with the digest it is for. Written by ``python -m
    fusec.passes.fusion.rules`` after a change to the policy or the grammar."""
    text = default_rules_text()
    rules = parse_rules(text, DEFAULT_RULES_FILE)
    # one parameter, one kind a line: the dataclasses' own reprs (a pretty-printed tree
    # ran each field onto a line of its own, 300 lines of it)
    params = "".join(f"        {name!r}: {param!r},\n" for name, param in rules.params.items())
    kinds = "".join(f"        {kind!r},\n" for kind in rules.kinds)
    fields = "".join(f"    {name}={getattr(rules, name)!r},\n" for name in ("source", "target"))
    parsed = f"Rules(\n    params={{\n{params}    }},\n    kinds=(\n{kinds}    ),\n{fields})"
    return (
        '"""The shipped fusion policy (``default.rules``) parsed ahead: ``fusec compile``\n'
        "under it imports no lark (issue #26).\n\n"
        "Generated by ``python -m fusec.passes.fusion.rules``: do not edit.\n"
        "``rules.default_rules`` uses it only while its digest is that of ``default.rules``\n"
        'and ``rules.GRAMMAR``."""\n'
        "\nfrom fusec.passes.fusion.rules_model import Atom, Clause, KindRules, Param, Rules\n"
        "\n# fmt: off\n# ruff: noqa: E501  (a kind a line, as generated)\n"
        f"RULES_SHA256 = {default_rules_digest(text)!r}\n"
        f"RULES = {parsed}\n"
    )


#: The largest rules file read (the shipped policy is about 2 KiB).
MAX_RULES_BYTES = 1 << 20


def load_rules(path: str | Path | None = None, **params: int | None) -> Rules:
    """Rules from ``path`` (default: the shipped policy), with parameters overridden."""
    if path is None:
        rules = default_rules()
    else:
        location = SourceLocation(str(path), 0, 0)
        if not str(path):
            raise FusecError('the fusion rules path is empty (rules="FILE")')
        try:
            if Path(path).stat().st_size > MAX_RULES_BYTES:  # a policy is a page or two
                raise FusecError(
                    f"the fusion rules file is larger than {MAX_RULES_BYTES} bytes", location
                )
            text = Path(path).read_text()
        except OSError as err:
            raise FusecError(f"cannot read the fusion rules: {err.strerror}", location) from None
        except UnicodeDecodeError as err:
            message = f"cannot read the fusion rules: not UTF-8 text ({err})"
            raise FusecError(message, location) from None
        rules = parse_rules(text, str(path))
    return rules.with_params(**params)


def regenerate() -> None:
    """Write ``rules_default.py``, and ``rules_tables.py`` where it is stale (lark numbers
    the LALR states differently from one build to the next: fresh tables are a churn)."""
    import lark

    from fusec.passes.fusion import rules_tables

    if (rules_tables.GRAMMAR_SHA256, rules_tables.LARK) != (grammar_digest(), lark.__version__):
        Path(__file__).with_name("rules_tables.py").write_text(tables_source())
    Path(__file__).with_name("rules_default.py").write_text(default_rules_source())


if __name__ == "__main__":
    # Through the imported module: ``rules_tree`` builds that module's classes, not this
    # ``__main__`` copy's.
    from fusec.passes.fusion import rules

    rules.regenerate()
