"""Makes numba-cuda (the ``cuda`` extra) look not installed in this interpreter.

Imported by the ``tests.without_numba_cuda`` pytest plugin, and by Python itself at
start-up in the processes that tests start (the plugin puts this folder first on
their ``PYTHONPATH``, where ``site`` looks for ``sitecustomize``).

numba-cuda installs ``_numba_cuda_redirector.pth``, a finder that sends
``numba.cuda`` to the ``numba_cuda`` package: it is removed, and ``numba_cuda``
made unimportable, so ``numba.cuda`` is numba's own deprecated built-in module,
as on a machine where only numba is installed.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

HIDDEN = "numba_cuda"


class HideNumbaCuda(importlib.abc.MetaPathFinder):
    """Says ``numba_cuda`` is not installed (``find_spec`` raising ModuleNotFoundError
    is what ``importlib.util.find_spec`` reports for a missing parent package)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == HIDDEN or fullname.startswith(HIDDEN + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden)", name=fullname)
        return None


def hide() -> None:
    if "numba.cuda" in sys.modules or HIDDEN in sys.modules:
        raise RuntimeError("numba.cuda is imported already: numba-cuda cannot be hidden now")
    if not any(isinstance(finder, HideNumbaCuda) for finder in sys.meta_path):
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "NumbaCudaFinder"]
        sys.meta_path.insert(0, HideNumbaCuda())


hide()
