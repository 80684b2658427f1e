"""No C++ source of more than 20 lines in a Python string (issue 27): a template's Python
writes the includes of the cuda kernel layer's headers (``fusec/targets/cuda/include``), its
constants and functors, and an ``extern "C"`` wrapper; the static C++ lives in the headers,
where NVRTC (``tests/targets/cuda/test_cuda_headers.py``) and clang-format check it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FUSEC = ROOT / "fusec"

_CPP = re.compile(
    r"__device__|__global__|asm(?: volatile)?\(|template <|#pragma unroll|for \(int "
    r"|const (?:int|u32|float|bool) |__syncthreads|__shfl"
)
#: the longest C++ source a Python string may hold
MAX_LINES = 20
#: C++ strings longer than MAX_LINES that may stay, by file and function, with their line
#: counts (issue 27 moved the last ones, conv's, into headers: a new one fails)
KNOWN_LONG: dict[tuple[str, str], int] = {}


def _long_cpp_strings() -> dict[tuple[str, str], int]:
    """(file, enclosing function) -> lines of the longest C++-looking string constant or
    f-string there, for those over MAX_LINES."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted(FUSEC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for owner, node in _strings(tree):
            text = _literal_text(node)
            lines = text.count("\n") + 1
            if lines > MAX_LINES and _CPP.search(text) and ";\n" in text:
                key = (str(path.relative_to(ROOT)), owner)
                found[key] = max(found.get(key, 0), lines)
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes (prose about the C++, not C++)."""
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _strings(tree: ast.AST) -> list[tuple[str, ast.expr]]:
    out: list[tuple[str, ast.expr]] = []
    docstrings = _docstrings(tree)

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if id(child) in docstrings:
                continue
            name = owner
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{owner}.{child.name}" if owner else child.name
            if isinstance(child, ast.JoinedStr) or (
                isinstance(child, ast.Constant) and isinstance(child.value, str)
            ):
                out.append((owner or "<module>", child))
                continue
            visit(child, name)

    visit(tree, "")
    return out


def _literal_text(node: ast.expr) -> str:
    """The literal text of a string constant or an f-string (its placeholders as ``{}``)."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    assert isinstance(node, ast.JoinedStr)
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def test_no_long_cpp_source_in_python_strings() -> None:
    found = _long_cpp_strings()
    new = {k: v for k, v in found.items() if k not in KNOWN_LONG}
    grown = {k: v for k, v in found.items() if k in KNOWN_LONG and v > KNOWN_LONG[k]}
    assert not new, f"C++ of more than {MAX_LINES} lines in a Python string (use a header): {new}"
    assert not grown, f"C++ strings that grew: {grown}"
    gone = sorted(k for k in KNOWN_LONG if k not in found or found[k] < KNOWN_LONG[k])
    assert not gone, f"shorter or gone, lower KNOWN_LONG: {[(k, found.get(k)) for k in gone]}"


def test_the_long_string_finder_skips_docstrings() -> None:
    """A docstring that describes C++ (``__global__`` kernels...) is prose, not source."""
    body = "\n".join(f"for (int k{k} = 0;\n" for k in range(MAX_LINES))
    tree = ast.parse(f'def f():\n    """__global__ {body}"""\n    return "x;\\n"\n')
    assert [_literal_text(node) for _, node in _strings(tree)] == ["x;\n"]


def test_the_long_string_finder_finds_one() -> None:
    """The finder sees an f-string of C++ past the limit (a test that can fail)."""
    body = "\n".join(f"  x{k} += 1;" for k in range(MAX_LINES))
    tree = ast.parse(f'def f(n):\n    return f"""__device__ void g() {{{{\n{body}\n}}}}"""\n')
    ((owner, node),) = _strings(tree)
    assert owner == "f" and _literal_text(node).count("\n") + 1 > MAX_LINES
