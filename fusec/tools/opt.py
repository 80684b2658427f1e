"""``fusec-opt FILE -p PIPELINE``: xDSL's opt driver with fusec's dialect and passes.

As ``mlir-opt``/``xdsl-opt``: parse the ``ai`` IR of FILE (``-`` or nothing:
stdin), run the pass pipeline, print the result. Every xDSL option works
(``--split-input-file``, ``--print-between-passes``, ``--verify-diagnostics``,
``--print-op-generic``, ``-o``...), the named pipelines (``fusec-default``,
``fusec-cuda``) expand in ``-p``, and the input goes through fusec's own
parser, so a bad input is reported as ``fusec compile`` reports it
(``FILE:LINE:COL: error: ...``, exit 1). A bad option (an unknown ``-t``
target, a ``-p`` pipeline that does not parse or names an unknown pass or
option) is one ``fusec-opt: error: ...`` line naming the option, exit 2. The
exit statuses are those of ``fusec`` (``fusec.errors.ExitCode``). The lit tests
under ``tests/passes/filecheck`` run passes through it and check the result with
FileCheck.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException
from xdsl.xdsl_opt_main import xDSLOptMain

from fusec._version import __version__
from fusec.errors import ExitCode, FusecError, SourceLocation, internal_error

#: The only output format of ai IR. xDSL's other targets (llvm, x86-asm, wgsl, mps...)
#: print IR of lowered dialects that fusec never produces: on ai IR they failed with a
#: traceback or printed nothing at all.
TARGETS = ("mlir",)


class FusecOptMain(xDSLOptMain):
    """The opt driver over fusec's dialects, passes and output format only."""

    version_format = f"fusec-opt {__version__} (xDSL {{xdsl_version}})"

    def register_all_dialects(self) -> None:
        from fusec.dialect import make_context

        self.ctx = make_context()

    def register_all_passes(self) -> None:
        from fusec.passes import available_passes

        for name, factory in available_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        from xdsl.targets import get_all_targets

        every = get_all_targets()
        self.available_targets = {name: every[name] for name in TARGETS}

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        from fusec.passes import named_pipelines

        super().register_all_arguments(arg_parser)
        arg_parser.prog = "fusec-opt"
        arg_parser.epilog = (
            f"named pipelines (in -p): {', '.join(named_pipelines())}. "
            "Exit status: 0 ok, 1 bad input, 2 bad command line, 70 a fusec bug."
        )
        self._arg_parser = arg_parser  # to report a bad -p as argparse reports a bad -t

    def setup_pipeline(self) -> None:
        from fusec.passes import build_pipeline, expand_spec

        try:
            build_pipeline(self.args.passes)  # fusec's own check: one located message
        except FusecError as err:
            self._arg_parser.error(f"argument -p/--passes: {err.message}{_hint(err.message)}")
        self.args.passes = expand_spec(self.args.passes)
        super().setup_pipeline()

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        """xDSL's input, with ``-`` for stdin (as nothing) and a file it cannot open
        reported as ``fusec compile`` reports it (``FILE: error: no such file``)."""
        if self.args.input_file == "-":
            return sys.stdin.buffer, "mlir"
        try:
            return super().get_input_stream()
        except FileNotFoundError:
            raise FusecError("no such file", self._whole(self.get_input_name())) from None
        except OSError as err:  # a directory, no permission, ...
            message = f"cannot read the file: {err.strerror or err}"
            raise FusecError(message, self._whole(self.get_input_name())) from None

    def get_input_name(self) -> str:
        """The input's name in diagnostics: its path, or ``<stdin>`` as ``fusec`` says."""
        return self.args.input_file if self.args.input_file not in (None, "-") else "<stdin>"

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except ValueError as err:  # xDSL's only one: a file extension it has no parser for
            message = f"{err}: fusec-opt reads .mlir files (or - for stdin)"
            raise FusecError(message, self._whole(self.get_input_name())) from None

    def prepare_output(self) -> IO[str]:
        try:
            return super().prepare_output()
        except OSError as err:
            message = f"cannot write the output: {err.strerror or err}"
            raise FusecError(message, self._whole(self.args.output_file)) from None

    @staticmethod
    def _whole(name: str) -> SourceLocation:
        """A diagnostic's location that is a whole file."""
        return SourceLocation(name, 0, 0)

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        from fusec.frontend.mlir import parse_module

        text = chunk.read().decode()
        # keep line numbers of a --split-input-file chunk those of the file
        return parse_module("\n" * start_offset + text, self.get_input_name())


def _hint(message: str) -> str:
    """What to do about a pipeline xDSL's lexer could not read (an unquoted path)."""
    if message.endswith("Unknown token"):
        return ' (a value that is not a plain word or number needs quotes: rules="my.rules")'
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fusec-opt`` command; its exit status is an ``ExitCode``."""
    try:
        FusecOptMain("fusec-opt: run passes over ai IR", args=argv).run()
    except FusecError as err:
        sys.stderr.write(err.format() + "\n")
        return ExitCode.BAD_INPUT
    except DiagnosticException as err:  # a pass that failed (xDSL's own diagnostic)
        sys.stderr.write(f"error: pass failed: {err}\n")
        return ExitCode.BAD_INPUT
    except (OSError, ValueError) as err:  # left by xDSL (its inputs and outputs are above)
        sys.stderr.write(f"fusec-opt: error: {err}\n")
        return ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("fusec-opt: interrupted\n")
        return ExitCode.INTERRUPTED
    except Exception as err:  # a bug in fusec or xDSL, not bad input: say so plainly
        return internal_error("fusec-opt", err)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
