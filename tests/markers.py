"""Locate expected errors by marker comments: ``# <- NAME`` at the end of a test line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import fusec


class Markers:
    """The marked lines of one test file, and an assertion that an error points at one."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.source = Path(path).read_text().splitlines()

    def line_of(self, marker: str) -> int:
        """The 1-based line of the file that ends with ``# <- marker``."""
        (line,) = [i + 1 for i, text in enumerate(self.source) if text.endswith(f"# <- {marker}")]
        return line

    @contextlib.contextmanager
    def raises_at(self, marker: str, match: str) -> Iterator[pytest.ExceptionInfo]:
        """Expect a FusecError matching ``match`` located at the line marked ``marker``."""
        with pytest.raises(fusec.FusecError, match=match) as info:
            yield info
        err = info.value
        line = self.line_of(marker)
        assert err.location is not None, err
        assert (err.location.file, err.location.line) == (self.path, line), err.format()
        assert err.format().startswith(f"{self.path}:{line}:")
