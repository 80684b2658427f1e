"""FusecError: the one exception users see for bad input, and source locations.

Every diagnostic fusec prints has the form ``FILE:LINE:COL: error: MESSAGE``,
followed (when the source text is known) by the offending line and a caret.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A 1-based position in a named source (a file path, ``<string>``, ...)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        if self.line <= 0:  # the whole file (e.g. it does not exist)
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


class FusecWarning(UserWarning):
    """Something fusec works around but the user should know (e.g. an unusable cache
    folder); the command line prints it as ``fusec: warning: MESSAGE``."""


class FusecError(Exception):
    """Bad input to fusec: a syntax, type, shape or usage error.

    ``location`` is where the problem is (``None`` when there is no source
    position, e.g. a missing file); ``source_line`` is the text of that line,
    used to draw a caret under the column.
    """

    def __init__(
        self,
        message: str,
        location: SourceLocation | None = None,
        source_line: str | None = None,
        length: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.source_line = source_line
        self.length = max(1, length)

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        """The full diagnostic: header line, then source line and caret when known."""
        prefix = f"{self.location}: " if self.location else ""
        lines = [f"{prefix}error: {self.message}"]
        if self.location and self.source_line is not None:
            text = self.source_line.rstrip("\n")
            lines.append(text)
            caret_col = min(self.location.col - 1, len(text))
            lines.append(" " * caret_col + "^" * self.length)
        return "\n".join(lines)


def line_of(text: str, line: int) -> str | None:
    """Return the 1-based ``line`` of ``text`` (without newline), or None."""
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None
