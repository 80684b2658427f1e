"""Optional dependencies ("extras") and the one-line error that names a missing one.

A plain ``pip install fusec`` has no ONNX, no numba-cuda and no PyTorch. A
command that needs one of them must say which extra to install, not fail
somewhere inside with an ImportError. Each extra is probed without importing
anything heavy when it is absent.

numba still ships its own old, deprecated ``numba.cuda`` module: importing
``numba.cuda`` succeeds without numba-cuda and then fails later with
unrelated errors (``numba.cuda.types`` lacks ``void``). The probe therefore
asks for the ``numba_cuda`` distribution itself and, once imported, checks
that ``numba.cuda`` is its implementation.
"""

from __future__ import annotations

import importlib.util

from fusec.errors import FusecError

#: extra -> (what it gives, the import names it must provide)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "onnx": ("ONNX import", ("onnx",)),
    "cuda": ("CUDA kernels (numba-cuda)", ("numba_cuda",)),
    "gpu": ("the PyTorch fallback for conv/matmul groups on the GPU", ("numba_cuda", "torch")),
    "torch": ("the PyTorch front end (torch.compile backend, torch.export import)", ("torch",)),
}


def absent(name: str) -> bool:
    """True when the import name ``name`` is not installed (nothing is imported)."""
    return _absent(name)


def _absent(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):  # a parent package missing, or sys.modules[name] is None
        return True


def missing(extra: str) -> list[str]:
    """The import names of ``extra`` that are not installed (empty: all there)."""
    return [name for name in EXTRAS[extra][1] if _absent(name)]


def install_hint(extra: str) -> str:
    return f"install the '{extra}' extra: pip install 'fusec[{extra}]'"


def require(extra: str, purpose: str) -> None:
    """Raise a FusecError naming ``extra`` when any of its packages is missing."""
    absent = missing(extra)
    if absent:
        packages = ", ".join(name.replace("_", "-") for name in absent)
        raise FusecError(f"{purpose} needs {packages}: {install_hint(extra)}")
