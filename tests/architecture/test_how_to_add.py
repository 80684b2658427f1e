"""docs/architecture.md's "How to add ..." tables are checked against the code, as
``tests/dialect/test_op_facts.py`` checks the ops.

* Every file a table names exists (a ``<kind>``, ``<target>`` or ``<name>`` placeholder:
  at least one file matches it), and every registry a row says to add a line to (``in
  `NAME```) is defined in that row's file.
* What the fused-kind table says a kind needs, every kind of ``FUSED_KINDS`` has: a
  clause in the shipped rules, a template on every target that generates kernels, and a
  FileCheck test that pins a group of it.
* What the target table says: every registered target is a package whose ``target``
  module defines ``TARGET``, named in the "back ends are independent" contract.
* What the cuda template table says: each Numba template with a ``plan_problem`` has
  the ``accepts`` fusion asks and the ``Template`` line that passes it on.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
FILECHECK = [
    ROOT / "tests" / "passes" / "filecheck",
    ROOT / "tests" / "targets" / "cuda" / "filecheck",
]


def tables() -> dict[str, list[tuple[str, str]]]:
    """Each "How to add" section's rows: (file cell, what cell)."""
    text = DOC.read_text().split("## How to add", 1)[1]
    found: dict[str, list[tuple[str, str]]] = {}
    for section in re.split(r"^### ", text, flags=re.M)[1:]:
        title = section.splitlines()[0].strip()
        rows = []
        for line in section.splitlines():
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if len(cells) == 2 and cells[0] not in ("file", "---"):
                rows.append((cells[0], cells[1]))
        found[title] = rows
    return found


def paths(cell: str) -> list[str]:
    """The file paths of a file cell (its backticked words with a / or a dot)."""
    return [p for p in re.findall(r"`([^`]+)`", cell) if "/" in p or p.endswith(".toml")]


def matches(path: str) -> list[Path]:
    pattern = re.sub(r"<\w+>", "*", path.rstrip("/"))
    return [p for p in ROOT.glob(pattern) if p.exists()]


def test_every_section_is_read() -> None:
    sections = tables()
    assert len(sections) == 5, list(sections)
    assert all(rows for rows in sections.values()), sections


def test_every_named_file_exists() -> None:
    for title, rows in tables().items():
        for file_cell, _ in rows:
            for path in paths(file_cell):
                assert matches(path), f"How to add {title}: {path} matches no file"


def test_every_constant_a_row_names_is_in_its_file() -> None:
    for title, rows in tables().items():
        for file_cell, what in rows:
            files = [p for path in paths(file_cell) for p in matches(path) if p.is_file()]
            if not files:
                continue
            text = "\n".join(p.read_text() for p in files)
            for name in re.findall(r"\bin `([A-Z][A-Z_]{2,})`", what):
                assert re.search(rf"^\s*{name}\b", text, re.M), (
                    f"How to add {title}: {name} is not defined in {file_cell}"
                )


def _target_names() -> list[str]:
    from fusec.target import REGISTRY, get_target

    return [name for name in REGISTRY if get_target(name).generates_kernels]


def test_every_fused_kind_has_what_the_table_asks() -> None:
    """One test for every kind: the default lane's budget counts a test, not a kind."""
    from fusec.dialect.facts import FUSED_KINDS
    from fusec.passes.fusion.rules import default_rules
    from fusec.target import get_target

    texts = [p.read_text() for root in FILECHECK for p in root.rglob("*.mlir")]
    for kind in FUSED_KINDS:
        assert default_rules().kind(kind) is not None, f"default.rules has no kind {kind}"
        for name in _target_names():
            assert kind in get_target(name).templates, f"target {name} has no {kind} template"
        pinned = [t for t in texts if f'ai.fused "{kind}"' in t]
        assert pinned, f'no FileCheck test pins an ai.fused "{kind}" group'


def test_every_target_is_a_package_in_the_independence_contract() -> None:
    from fusec.target import REGISTRY

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (independent,) = [
        c for c in contracts["contracts"] if c["name"] == "back ends are independent of each other"
    ]
    for name, module in REGISTRY.items():
        package = module.rsplit(".", 1)[0]
        assert module == f"fusec.targets.{name}.target", module
        assert hasattr(importlib.import_module(module), "TARGET"), module
        assert package in independent["modules"], package


def test_every_numba_cuda_template_with_a_plan_has_its_accepts() -> None:
    from fusec.targets.cuda.target import TARGET

    planned = 0
    for kind, template in TARGET.templates.items():
        module = template.load()
        if not hasattr(module, "plan_problem"):
            continue
        planned += 1
        assert hasattr(module, "generate") and hasattr(module, "accepts"), template.module
        assert template.accepts is not None, f"the cuda {kind} Template passes no accepts"
        assert "accepts" in template.accepts.__qualname__, template.accepts
    assert planned >= 2  # pool and reduce, the models the table names
