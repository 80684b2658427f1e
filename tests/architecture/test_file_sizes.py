"""No source file of the package grows past 1000 lines (issue 27: a file, one concern; the
next template lands in a module of its own, not at the end of the last one's)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fusec"
#: The most lines a source file of ``fusec/`` may have.
MAX_LINES = 1000
SOURCES = ("*.py", "*.cuh", "*.h", "*.cu", "*.lark")


def long_files(root: Path, limit: int) -> dict[str, int]:
    """The source files under ``root`` longer than ``limit`` lines, with their lengths."""
    found = {}
    for pattern in SOURCES:
        for path in root.rglob(pattern):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                found[str(path.relative_to(root))] = lines
    return found


def test_no_source_file_is_over_a_thousand_lines() -> None:
    assert long_files(PACKAGE, MAX_LINES) == {}


def test_the_finder_names_a_long_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * 12)
    (tmp_path / "short.cuh").write_text("// a\n" * 3)
    assert long_files(tmp_path, 10) == {"sub/long.py": 12}
