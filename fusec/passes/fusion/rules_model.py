"""The fusion policy's data: what a rules text parses to (``Rules``, its kinds, clauses,
conditions and parameters) and the parser's located intermediate forms.

Apart from ``rules`` (the parser, the conditions and the loading) so that the generated
``rules_default`` and the lark tree builder ``rules_tree`` import these classes without
importing the module that imports them (no import circle)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from xdsl.ir import Operation

from fusec.dialect import ops as ai
from fusec.errors import FusecError
from fusec.passes.fusion.classify import Pattern, pattern_of

if TYPE_CHECKING:
    from lark import Token

    from fusec.target import Target

_T = TypeVar("_T")

_PATTERNS = {p.label: p for p in Pattern}
_OP_NAMES = {op.name for op in ai.TENSOR_OPS}


def _selector_matches(selector: str, op: Operation) -> bool:
    if selector in _PATTERNS:
        return pattern_of(op) == _PATTERNS[selector]
    return op.name in (selector, f"ai.{selector}")


# ------------------------------------------------------------------ data model


@dataclass(frozen=True)
class Param:
    """A named limit (``softmax_tile_limit``) and how messages call it ("tile limit")."""

    name: str
    value: int
    description: str


@dataclass(frozen=True)
class Atom:
    """One condition: a predicate name, or ``quantity CMP limit``."""

    name: str
    cmp: str | None = None
    limit: int | str | None = None

    def __str__(self) -> str:
        return self.name if self.cmp is None else f"{self.name} {self.cmp} {self.limit}"


@dataclass(frozen=True)
class Clause:
    """``ROLE selectors [duplicate] [max N] [where atoms]`` inside a kind."""

    role: str
    selectors: tuple[str, ...]
    duplicate: bool = False
    max_count: int | str | None = None
    atoms: tuple[Atom, ...] = ()
    line: int = 0

    def selects(self, op: Operation) -> bool:
        return any(_selector_matches(s, op) for s in self.selectors)

    def describe(self) -> str:
        return ", ".join(self.selectors)


@dataclass(frozen=True)
class KindRules:
    """The clauses of one kernel kind."""

    name: str
    description: str
    clauses: tuple[Clause, ...]

    @property
    def anchor(self) -> Clause | None:
        return next((c for c in self.clauses if c.role == "anchor"), None)

    def clauses_for(self, role: str) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if c.role == role)


@dataclass(frozen=True)
class Rules:
    """A parsed policy: named parameters and the kinds in file order."""

    params: Mapping[str, Param]
    kinds: tuple[KindRules, ...]
    source: str = "<rules>"
    #: The back end the groups are for: a group is legal only where it generates
    #: the group and gains by fusing it (``Target.can_fuse``). None: rules only.
    target: Target | None = None

    def param(self, name: str) -> int:
        return self.params[name].value

    def limit(self, value: int | str) -> int:
        return value if isinstance(value, int) else self.param(value)

    def describe_limit(self, value: int | str) -> str:
        if isinstance(value, int):
            return str(value)
        return f"{self.params[value].description} {self.param(value)}"

    def kind(self, name: str) -> KindRules | None:
        return next((k for k in self.kinds if k.name == name), None)

    def kind_anchored_by(self, op: Operation) -> KindRules | None:
        """The first kind whose anchor clause selects ``op``."""
        for kind in self.kinds:
            if kind.anchor is not None and kind.anchor.selects(op):
                return kind
        return None

    def anchorless_kind(self) -> KindRules | None:
        return next((k for k in self.kinds if k.anchor is None), None)

    def for_target(self, target: Target | None) -> Rules:
        """The same rules, applied for ``target``."""
        return replace(self, target=target)

    def with_params(self, **values: int | None) -> Rules:
        """A copy with some parameters overridden (``None`` keeps the file's value)."""
        params = dict(self.params)
        for name, value in values.items():
            if value is None:
                continue
            if name not in params:
                raise FusecError(f"fusion rules have no parameter '{name}'")
            if int(value) < 0:  # a limit: a negative one would silently mean "never"
                raise FusecError(f"fusion parameter '{name}' must be >= 0, got {value}")
            params[name] = replace(params[name], value=int(value))
        return replace(self, params=params)


@dataclass(frozen=True)
class Located(Generic[_T]):
    """A value and the token it came from (for located errors)."""

    value: _T
    token: Token


@dataclass(frozen=True)
class RawClause:
    """A clause as parsed: every name still with its token, limits unchecked."""

    role: str
    selectors: tuple[Located[str], ...]
    duplicate: bool
    max_count: Located[int | str] | None
    atoms: tuple[Located[Atom], ...]
    line: int


@dataclass(frozen=True)
class RawKind:
    """A kind as parsed (see ``_check_kind``)."""

    name: str
    description: str
    clauses: tuple[RawClause, ...]


def unquote(token: Token) -> str:
    return str(token)[1:-1]
