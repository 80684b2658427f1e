"""Which parametrizations of a test run in the default lane (README "Test lanes").

A test over many similar cases (every op, every dtype, every edge case) keeps a
sample of them in the default lane, so ``python -m pytest`` still reaches every
area quickly, and marks the rest ``slow``: ``python -m pytest -m slow`` runs
them (CI runs both lanes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

SLOW = pytest.mark.slow


def sampled(
    values: Iterable[Any],
    keep: int | Callable[[int, Any], bool],
    ids: Sequence[str] | None = None,
    *,
    unpack: bool = False,
) -> list[Any]:
    """``values`` as ``pytest.param``s: those ``keep`` selects stay in the default lane,
    the others are marked ``slow``. ``keep=n`` keeps every n-th value (the first, the
    (n+1)-th, ...); a function is asked ``keep(index, value)``. ``unpack``: each value
    is a tuple of several argument names' values (``"geo, tile, grid"``)."""
    chosen = keep if callable(keep) else (lambda index, _value: index % keep == 0)
    params = []
    for index, value in enumerate(values):
        marks = () if chosen(index, value) else (SLOW,)
        id_ = ids[index] if ids is not None else None
        args = tuple(value) if unpack else (value,)
        params.append(pytest.param(*args, marks=marks, id=id_))
    return params


def one_per_group(
    values: Sequence[str], group: Callable[[str], str], every: int = 1
) -> Callable[[int, str], bool]:
    """A ``keep`` for ``sampled``: one value of each group (``group(value)``, e.g. an op
    of several dtypes), the k-th group's (k mod its size)-th member, so that successive
    groups keep successive members (every dtype appears, spread over the ops); with
    ``every=k`` only every k-th group keeps one."""
    members: dict[str, list[str]] = {}
    for value in values:
        members.setdefault(group(value), []).append(value)
    groups = list(members.values())[::every]
    kept = {names[ordinal % len(names)] for ordinal, names in enumerate(groups)}
    return lambda _index, value: value in kept


def selected_params(request: pytest.FixtureRequest, test: str, name: str) -> list[Any]:
    """The values of parameter ``name`` of the module's ``test`` that this session runs
    (after ``-m``/``-k`` deselection): a module fixture that prepares every case in one
    subprocess prepares only those."""
    return [
        item.callspec.params[name]
        for item in request.session.items
        if getattr(item, "originalname", None) == test
        and getattr(item, "module", None) is request.module
    ]
