"""``fusec-opt FILE -p PIPELINE``: xDSL's opt driver with fusec's dialect and passes.

As ``mlir-opt``/``xdsl-opt``: parse the ``ai`` IR of FILE (``-`` or nothing:
stdin), run the pass pipeline, print the result. Every xDSL option works
(``--split-input-file``, ``--print-between-passes``, ``--verify-diagnostics``,
``--print-op-generic``, ``-o``...), the named pipelines (``fusec-default``,
``fusec-cuda``) expand in ``-p``, and the input goes through fusec's own
parser, so a bad input is reported as ``fusec compile`` reports it
(``FILE:LINE:COL: error: ...``, exit 1). The lit tests under
``tests/filecheck`` run passes through it and check the result with FileCheck.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import DiagnosticException
from xdsl.xdsl_opt_main import xDSLOptMain

from fusec.errors import FusecError


class FusecOptMain(xDSLOptMain):
    """The opt driver over fusec's dialects and passes only."""

    def register_all_dialects(self) -> None:
        from fusec.dialect import make_context

        self.ctx = make_context()

    def register_all_passes(self) -> None:
        from fusec.passes import available_passes

        for name, factory in available_passes().items():
            self.register_pass(name, factory)

    def setup_pipeline(self) -> None:
        from fusec.passes import expand_spec

        self.args.passes = expand_spec(self.args.passes)
        super().setup_pipeline()

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        from fusec.frontend.mlir import parse_module

        text = chunk.read().decode()
        # keep line numbers of a --split-input-file chunk those of the file
        return parse_module("\n" * start_offset + text, self.get_input_name())


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fusec-opt`` command: 0 on success, 1 (and one located line) on bad input."""
    try:
        FusecOptMain("fusec-opt: run passes over ai IR", args=argv).run()
    except FusecError as err:
        sys.stderr.write(err.format() + "\n")
        return 1
    except DiagnosticException as err:  # a pass that failed (xDSL's own diagnostic)
        sys.stderr.write(f"error: pass failed: {err}\n")
        return 1
    except (OSError, ValueError) as err:  # an unreadable input, an unknown file extension
        sys.stderr.write(f"error: {err}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
