"""Shared pieces of the PyTorch front-end tests (``test_torch_*.py``): random inputs,
the in-process FileCheck run, and conversions (torch is imported by the test files,
which skip without it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


def numpy_of(tensor: Any) -> np.ndarray:
    """A torch tensor as numpy (bfloat16 through ml_dtypes)."""
    from fusec.frontend.torch_fx import to_numpy

    return to_numpy(tensor)


def filecheck(ir: str, checks: str, tmp_path: Path) -> None:
    """Run FileCheck's ``checks`` (lines starting ``CHECK``) over ``ir`` in-process."""
    from filecheck.matcher import Matcher
    from filecheck.options import parse_argv_options

    check_file = tmp_path / "checks.txt"
    ir_file = tmp_path / "ir.mlir"
    check_file.write_text("\n".join(f"// {line.strip()}" for line in checks.strip().splitlines()))
    ir_file.write_text(ir)
    options = parse_argv_options(["filecheck", str(check_file), "--input-file", str(ir_file)])
    status = Matcher.from_opts(options).run()
    assert status == 0, f"FileCheck failed (its report is in the captured output):\n{ir}"


def quiet_torch_trace() -> Iterator[None]:
    """Keep pytest's log capture off PyTorch's structured-trace logger for a test:
    with a capturing handler there, torch renders every graph it traces as a log
    payload (a minute for a small model instead of seconds)."""
    from torch._logging._internal import trace_log

    ours = [h for h in trace_log.handlers if type(h).__module__.startswith("_pytest")]
    for handler in ours:
        trace_log.removeHandler(handler)
    try:
        yield
    finally:
        for handler in ours:
            trace_log.addHandler(handler)
