"""The fusec sources a generated kernel module runs besides its own text, as one digest.

A generated module imports its target's ABI (``fusec.targets.<target>.abi``), and
Numba compiles the helpers it calls (``gemm_packed``, ``next_block``, ...) *into* the
module's cached machine code. The kernel cache keys a module by its text; were that
all, an edit of a helper that leaves the generated text alone (a packing layout, a
tile loop) would load the old machine code from the cache: a wrong answer, silently.
So the key also holds ``kernel_layer_digest(target)``: the SHA-256 of every fusec
source file the ABI module reaches through its imports, transitively (``import`` and
``from`` statements, absolute and relative, and the ``"fusec.x.y"`` module names the
ABI resolves lazily). A release keys by its version anyway; this matters to an
edited checkout, where an edit to any of those files recompiles the target's kernels.

Read with a regular expression, not imported and not parsed: a process pays ~1 ms a
file once, and a module named here that is not a file of the package (a name in a
docstring) is skipped.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

#: the ``fusec`` package folder
PACKAGE = Path(__file__).resolve().parents[1]

_FROM = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+\(?([^)#\n]*)", re.MULTILINE)
_IMPORT = re.compile(r"^\s*import\s+(fusec(?:\.\w+)*)", re.MULTILINE)
_NAMED = re.compile(r"[\"'](fusec(?:\.\w+)+)[\"']")


def _file(module: str) -> Path | None:
    """The source file of a fusec module name, or None when it is not one."""
    parts = module.split(".")
    if parts[0] != "fusec":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _module_of(path: Path) -> str:
    """``fusec.a.b`` for ``<package>/a/b.py`` (``fusec.a`` for ``a/__init__.py``)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """The fusec module names ``path`` imports or names (candidates: some are not
    modules, e.g. ``from fusec.a import name``; ``_file`` tells)."""
    text = path.read_text(encoding="utf-8")
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set(_IMPORT.findall(text)) | set(_NAMED.findall(text))
    for dots, module, imported in _FROM.findall(text):
        if dots:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (len(dots) - 1)]
            module = ".".join([*anchor, module] if module else anchor)
        if not module.startswith("fusec"):
            continue
        names.add(module)
        for name in imported.replace("\\", " ").split(","):
            if name.split():
                names.add(f"{module}.{name.split()[0]}")
    return names


def import_closure(module: str) -> list[Path]:
    """Every fusec source file ``module`` reaches through its imports, sorted."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        path = _file(todo.pop())
        if path is None or path in seen:
            continue
        seen.add(path)
        todo.extend(_imported(path))
    return sorted(seen)


@functools.cache
def kernel_layer_digest(target: str) -> str:
    """SHA-256 over the names and bytes of the files generated ``target`` modules run
    (``import_closure`` of its ABI module; empty for a target without one)."""
    digest = hashlib.sha256()
    for path in import_closure(f"fusec.targets.{target}.abi"):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
