"""Shared pytest machinery: golden-file snapshots, the ``requires_target`` and ``gpu``
markers, hypothesis profiles.

- Hypothesis runs under the derandomised ``ci`` profile unless
  ``--hypothesis-profile slow`` (or ``HYPOTHESIS_PROFILE=slow``) asks for a
  deeper random search: see ``tests/profiles.py``.

- ``pytest --update-golden`` rewrites golden snapshots on purpose; without it a
  mismatch fails with a unified diff (expected -> actual).
- Lanes (README "Test lanes"): ``python -m pytest`` leaves out ``slow`` and ``gpu``
  tests (pyproject.toml's ``addopts``); ``-m slow``, ``-m gpu``, ``-m fuzz`` select
  theirs. A large parametrization keeps a sample in the default lane and marks the
  rest ``slow`` with ``tests/lanes.py``; every file's tests beyond its share of the
  default lane's time budget are marked ``slow`` at collection (``tests/lane_budget.py``,
  from the measured durations in ``tests/lane_durations.json``).
- ``@pytest.mark.requires_target("cuda")``: the test needs the target's software
  (for cuda, numba-cuda: it generates and assembles kernels, builds PTX and cubins,
  runs the CUDA simulator in a subprocess), not a device. Without it the test is
  skipped with the Target's own reason, ``Target.unavailable_reason(device=False)``
  ("numba-cuda is not installed (install the 'cuda' extra: ...)"). Never
  ``importorskip("numba.cuda")``: numba still ships its own deprecated built-in
  ``numba.cuda``, which imports without numba-cuda.
- ``@pytest.mark.gpu``: the test needs a real NVIDIA GPU (never the simulator);
  without one it is skipped with the cuda Target's ``unavailable_reason()`` (the
  missing extra, or no usable GPU).
- Both are decided in ``pytest_runtest_setup``, before any fixture (a module-scoped
  fixture that runs the simulator must not run for a skipped test), once per
  session, when the first such test runs: a run with none never imports
  numba.cuda. ``python -m pytest -p tests.without_numba_cuda`` runs the tests as if
  numba-cuda were not installed (``tests/without_numba_cuda``).
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
def target_unavailable(name: str, *, device: bool) -> str | None:
    """Why the registered target ``name`` cannot be used here, in its own words
    (``Target.unavailable_reason``; ``device=False``: its software only), or None."""
    from fusec.target import get_target

    try:
        return get_target(name).unavailable_reason(device=device)
    except Exception as err:  # a broken driver or toolkit: the target is not usable
        return f"asking target '{name}' failed: {type(err).__name__}: {err}"


def gpu_unavailable() -> str | None:
    """Why no real NVIDIA GPU runs the cuda target here, or None when one does."""
    reason = target_unavailable("cuda", device=True)
    if reason is None:
        from fusec.targets.cuda.env import simulator_enabled

        if simulator_enabled():
            return "NUMBA_ENABLE_CUDASIM=1: Numba's CUDA simulator is no GPU"
    return reason


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marks must be there
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` what does not fit the default lane's budget (``tests/lane_budget.py``)."""
    import lane_budget

    default = [
        i for i in items if not any(i.iter_markers("slow")) and not any(i.iter_markers("gpu"))
    ]
    over = lane_budget.over_budget([i.nodeid for i in default], lane_budget.load())
    for item in default:
        if item.nodeid in over:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before skipif's: a missing extra is the first reason
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a ``requires_target`` or ``gpu`` test that cannot run here (see the module
    docstring), before its fixtures are set up."""
    for marker in item.iter_markers("requires_target"):
        (name,) = marker.args
        if (reason := target_unavailable(name, device=False)) is not None:
            pytest.skip(f"target '{name}' is not usable here: {reason}")
    if item.get_closest_marker("gpu") is not None and (reason := gpu_unavailable()):
        pytest.skip(f"needs an NVIDIA GPU: {reason}")


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
