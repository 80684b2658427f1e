"""FusecError: the one exception users see for bad input, and source locations.

Every diagnostic fusec prints has the form ``FILE:LINE:COL: error: MESSAGE``,
followed (when the source text is known) by the offending line and a caret.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """The exit statuses of ``fusec`` and ``fusec-opt``: each tells one kind of
    outcome apart, so that scripts and CI can act on it."""

    OK = 0
    #: The input is wrong: a FusecError, printed as a located diagnostic.
    BAD_INPUT = 1
    #: The command line is wrong (argparse's own status): an unknown option or choice.
    USAGE = 2
    #: The work ran but a result did not match (``run --check``, ``conformance``).
    CHECK_FAILED = 3
    #: A bug in fusec: an unexpected exception (BSD's EX_SOFTWARE).
    INTERNAL = 70
    #: Stopped by Ctrl-C (128 + SIGINT, as shells report it).
    INTERRUPTED = 130


def internal_error(program: str, err: Exception) -> ExitCode:
    """Say plainly on stderr that ``err`` is a bug in fusec, not bad input, and give the
    status of one (``FUSEC_DEBUG=1``: raise it, with its traceback): the last handler of
    ``fusec`` and ``fusec-opt``."""
    if os.environ.get("FUSEC_DEBUG"):
        raise err
    sys.stderr.write(
        f"{program}: internal error: {type(err).__name__}: {err}\n"
        "  (this is a bug in fusec; rerun with FUSEC_DEBUG=1 for the traceback)\n"
    )
    return ExitCode.INTERNAL


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
        """The full diagnostic: header line, then source line and caret when known.

        Control characters from the input (terminal escape sequences, bidi
        overrides) are shown escaped, never sent to the user's terminal.
        """
        prefix = f"{_escaped(str(self.location))}: " if self.location else ""
        lines = [f"{prefix}error: {_escaped(self.message, keep=chr(10) + chr(9))}"]
        if self.location and self.source_line is not None:
            text = _CONTROL.sub("?", self.source_line.rstrip("\n"))  # one column each: the
            lines.append(text)  # caret stays under the column
            caret_col = min(self.location.col - 1, len(text))
            lines.append(" " * caret_col + "^" * self.length)
        return "\n".join(lines)


#: C0 and C1 control characters, DEL, and Unicode's bidirectional formatting characters.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(text: str, keep: str = "") -> str:
    """``text`` with control characters (but those in ``keep``) as ``\\xNN``/``\\uNNNN``."""

    def escape(match: re.Match) -> str:
        char = match.group()
        if char in keep:
            return char
        return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"

    return _CONTROL.sub(escape, text)


def line_of(text: str, line: int) -> str | None:
    """Return the 1-based ``line`` of ``text`` (without newline), or None."""
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None
