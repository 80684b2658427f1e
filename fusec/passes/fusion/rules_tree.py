"""The fusion rules' parse tree as raw rule data: lark's ``Transformer`` for ``rules.GRAMMAR``.

Kept apart from ``rules`` so that lark is imported only when a rules text is parsed:
the shipped policy comes parsed ahead (``rules_default``), and ``fusec compile`` of a
graph under it never imports lark (issue #26). The semantic checks come after
(``rules._check_kind``).
"""

from __future__ import annotations

from lark import Token, Transformer, v_args

from fusec.passes.fusion.rules_model import Atom, Located, Param, RawClause, RawKind, unquote


class Build(Transformer):
    """Parse tree -> Rules data (semantic checks come after)."""

    def start(self, items):
        return items

    @v_args(inline=True)
    def param(self, name: Token, value: Token, text: Token | None = None):
        return Param(str(name), int(value), unquote(text) if text else str(name)), name

    def kind(self, children):
        name, rest = children[0], children[1:]
        description = unquote(rest.pop(0)) if rest and isinstance(rest[0], Token) else ""
        return RawKind(str(name), description, tuple(rest)), name

    def clause(self, children):
        role, selectors, *rest = children
        duplicate = any(r == "duplicate" for r in rest)
        max_count = next((r[1] for r in rest if isinstance(r, tuple) and r[0] == "max"), None)
        atoms = next((r for r in rest if isinstance(r, list)), [])
        return RawClause(str(role), tuple(selectors), duplicate, max_count, tuple(atoms), role.line)

    def selectors(self, children):
        return children

    @v_args(inline=True)
    def selector(self, name: Token):
        return Located(str(name), name)

    def duplicate(self, _children):
        return "duplicate"

    @v_args(inline=True)
    def max_count(self, limit):
        return ("max", limit)

    def condition(self, atoms):
        return list(atoms)

    @v_args(inline=True)
    def predicate(self, name: Token):
        return Located(Atom(str(name)), name)

    @v_args(inline=True)
    def compare(self, name: Token, cmp: Token, limit):
        return Located(Atom(str(name), str(cmp), limit), name)

    @v_args(inline=True)
    def limit(self, token: Token):
        return Located(int(token) if token.type == "INT" else str(token), token)
