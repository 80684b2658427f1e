"""A pytest plugin: run the tests as if numba-cuda (the ``cuda`` extra) were not installed.

``python -m pytest -p tests.without_numba_cuda tests/targets/cuda`` shows what a plain
``pip install 'fusec[test]'`` sees: numba's own deprecated built-in
``numba.cuda`` imports, numba-cuda does not, and every test needing the cuda
target skips with the Target's reason (``requires_target`` and ``gpu`` in
``tests/conftest.py``) instead of failing. The processes that tests start see
the same (``sitecustomize.py`` here). ``tests/test_test_lanes.py`` runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import sitecustomize  # noqa: F401  (hides numba-cuda in this process)

_here = str(Path(__file__).parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)
