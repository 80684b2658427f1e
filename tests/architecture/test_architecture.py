"""The architecture is checked, not just described: import layers and types.

``lint-imports`` checks the contracts in ``pyproject.toml`` (the layers of
docs/architecture.md, independent back ends, a CLI that goes through the API, the
cpu templates and the cuda Tensor Core templates as siblings over their kernel layers,
no import circle in any package of fusec, none of its imports ignored);
``mypy`` type-checks the package. Both run here so that the README's one test
command (and so ``.ci/run``) runs them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed: it is part of the 'test' extra")
    return path


def test_import_contracts_are_kept():
    done = subprocess.run(
        [_tool("lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout and "Contracts: 7 kept, 0 broken." in done.stdout


def test_no_import_circle_is_ignored():
    """The no-circle contract ignores no import: a circle is removed (docs/architecture.md
    "Import circles" says how), never listed as an exception."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    acyclic = [c for c in contracts["contracts"] if c["type"] == "acyclic_siblings"]
    assert len(acyclic) == 1
    assert acyclic[0].get("ignore_imports", []) == []


def test_the_package_type_checks(tmp_path):
    done = subprocess.run(  # files and settings: pyproject.toml [tool.mypy]
        [_tool("mypy"), "--no-incremental", "--cache-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
