"""docs/architecture.md's list of layers is the import-linter contract of pyproject.toml.

The contract is what ``tests/architecture/test_architecture.py`` enforces; the document is what a
reader learns the layers from. Here every line of the document's first code block
(``MODULES  description``, modules separated by `` | ``, ``a.{b,c}`` for ``a.b | a.c``)
must be the contract's layer at the same place.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = (c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [{m.strip() for m in layer.split("|")} for layer in contract["layers"]]


def expand(modules: str) -> set[str]:
    """``fusec.ir.{dtypes,memory} | fusec.extras`` -> the module names."""
    names: set[str] = set()
    for part in modules.split(" | "):
        braces = re.fullmatch(r"([\w.]+)\.\{([\w,]+)\}", part.strip())
        if braces:
            names |= {f"{braces.group(1)}.{leaf}" for leaf in braces.group(2).split(",")}
        else:
            names.add(part.strip())
    return names


def documented_layers(text: str) -> list[set[str]]:
    block = re.search(r"^```\n(.*?)^```", text, re.S | re.M)
    assert block, "docs/architecture.md lost its list of layers"
    layers = []
    for line in block.group(1).splitlines():
        match = re.match(r"^(fusec[\w.{},]*(?: \| fusec[\w.{},]*)*)\s{2,}\S", line)
        assert match, f"not a layer line (MODULES, two spaces, description): {line!r}"
        layers.append(expand(match.group(1)))
    return layers


def test_documented_layers_are_the_contract():
    assert documented_layers(DOC.read_text()) == contract_layers()


def test_braces_expand():
    assert expand("fusec.ir.{dtypes,memory} | fusec.extras") == {
        "fusec.ir.dtypes",
        "fusec.ir.memory",
        "fusec.extras",
    }
