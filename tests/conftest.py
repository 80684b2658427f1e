"""Shared pytest machinery: golden-file snapshots, the ``gpu`` marker, hypothesis profiles.

- Hypothesis runs under the derandomised ``ci`` profile unless
  ``--hypothesis-profile slow`` (or ``HYPOTHESIS_PROFILE=slow``) asks for a
  deeper random search: see ``tests/profiles.py``.

- ``pytest --update-golden`` rewrites golden snapshots on purpose; without it a
  mismatch fails with a unified diff (expected -> actual).
- Tests marked ``@pytest.mark.gpu`` are skipped when no CUDA GPU is usable. The
  probe (``numba.cuda.is_available()``) runs once, and only when the first such
  test runs, so CPU-only runs never import numba.cuda.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from pathlib import Path

import profiles  # noqa: F401  (registers and loads the hypothesis profiles)
import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden snapshot files with the actual output instead of comparing",
    )


@dataclass(frozen=True)
class Golden:
    """Compare text with a stored snapshot, or rewrite the snapshot when ``update``."""

    update: bool = False

    def __call__(self, path: str | Path, actual: str) -> None:
        path = Path(path)
        if self.update:
            if not path.exists() or path.read_text() != actual:
                path.write_text(actual)
            return
        if not path.exists():
            pytest.fail(
                f"golden file {path} does not exist; run pytest with --update-golden to create it",
                pytrace=False,
            )
        expected = path.read_text()
        if expected != actual:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    fromfile=f"{path} (expected)",
                    tofile=f"{path} (actual)",
                )
            )
            pytest.fail(
                f"output differs from golden file {path}:\n{diff}\n"
                "(if the change is intended, rerun pytest with --update-golden)",
                pytrace=False,
            )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """``golden(path, actual_text)``: snapshot check honouring ``--update-golden``."""
    return Golden(update=bool(request.config.getoption("--update-golden")))


@functools.cache
def cuda_usable() -> bool:
    """True when numba can see a working CUDA GPU (evaluated once, on first use).

    fusec's own probe comes first when it exists: it prepares the process before
    numba.cuda's first import (see fusec/targets/cuda/env.py) and says no under the
    CUDA simulator.
    """
    try:
        from fusec.targets.cuda.env import gpu_available
    except ImportError:
        gpu_available = None
    try:
        if gpu_available is not None:
            return bool(gpu_available())
        try:
            from numba import cuda
        except ImportError:
            return False
        return bool(cuda.is_available())
    except Exception:  # a broken driver or toolkit means: no usable GPU
        return False


@pytest.fixture(autouse=True)
def _skip_gpu_tests_without_cuda(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("gpu") is not None and not cuda_usable():
        pytest.skip("needs a usable CUDA GPU (none found by numba.cuda)")


@pytest.fixture
def rng():
    """A fresh, seeded numpy Generator per test (reproducible, never zeros)."""
    import numpy as np

    return np.random.default_rng(20240611)


@pytest.fixture
def random_args(rng):
    """``random_args(module, entry=None)``: standard-normal arrays for the entry's parameters."""
    from fusec.dialect import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function

    def make(module, entry: str | None = None) -> list:
        fn = entry_function(module, entry)
        arrays = []
        for param in fn.function_type.inputs.data:
            spec = spec_of(param)
            data = rng.standard_normal(spec.shape)
            arrays.append(data.astype(numpy_dtype(spec.dtype)))
        return arrays

    return make
