"""The one place that prepares the process for Numba CUDA, before its first import.

Two traps of numba-cuda, found on the H200 (numba-cuda 0.30, numpy 2.5, CUDA 13),
are handled here, and only here:

* numba-cuda 0.30 with numpy >= 2.5 fails every kernel compile with
  ``module 'numpy' has no attribute 'row_stack'``: alias it to ``np.vstack``
  when it is missing.
* NVRTC cannot find ``crt/mma.h`` unless ``NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS``
  names the CUDA toolkit's include folder: set it (when unset) to the folder
  beside ``nvcc``.

Every fusec module that needs ``numba.cuda`` gets it from ``numba_cuda()``; no
other module imports ``numba.cuda`` at top level.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from fusec.errors import FusecError

_SEARCH_PATH_VAR = "NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS"
_prepared = False


def _cuda_include_dir() -> str | None:
    """The CUDA toolkit's include folder (the one beside nvcc), if there is one."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for folder in candidates:
        if (folder / "cuda_runtime.h").is_file():
            return str(folder)
    return None


def prepare() -> None:
    """Apply the numpy shim and the NVRTC include path (idempotent)."""
    global _prepared
    if _prepared:
        return
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    if not os.environ.get(_SEARCH_PATH_VAR):
        include = _cuda_include_dir()
        if include:
            os.environ[_SEARCH_PATH_VAR] = include
    _prepared = True


def numba_cuda() -> ModuleType:
    """``numba.cuda``, imported after ``prepare()``; ImportError when numba-cuda is absent."""
    prepare()
    from numba import cuda

    return cuda


def simulator_enabled() -> bool:
    """True when Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1`` before import)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def launch_bounds(threads: int, min_blocks: int) -> dict[str, Any]:
    """``cuda.jit``'s options that ask for ``min_blocks`` blocks of ``threads`` threads to
    fit a multiprocessor (PTX ``.maxntid`` / ``.minnctapersm``: ptxas caps the registers to
    fit, spilling if it must); none under the simulator, whose ``cuda.jit`` takes no launch
    bounds and which allocates no registers."""
    return {} if simulator_enabled() else {"launch_bounds": (threads, min_blocks)}


def cuda_support() -> str | None:
    """Why the CUDA compiler stack is unusable here, or None when numba-cuda imports.

    numba's own deprecated ``numba.cuda`` does not count (see ``fusec.extras``).
    """
    return numba_cuda_problem()


def numba_cuda_problem() -> str | None:
    """Why numba-cuda's ``numba.cuda`` is not usable here, or None when it is.

    Imports ``numba.cuda`` only when the numba-cuda distribution is installed,
    so the old built-in module is never mistaken for it.
    """
    from fusec.extras import absent

    if absent("numba_cuda"):
        return "numba-cuda is not installed"
    try:
        cuda = numba_cuda()
    except Exception as err:  # ImportError, or a broken cuda-bindings install
        return f"numba-cuda is not usable: {type(err).__name__}: {err}"
    if getattr(cuda, "implementation", None) != "NVIDIA":
        return "numba.cuda is numba's deprecated built-in CUDA target, not numba-cuda"
    return None


def require_cuda_compiler(purpose: str) -> None:
    """Raise a one-line FusecError naming the ``cuda`` extra when numba-cuda is not usable."""
    from fusec.extras import install_hint

    reason = cuda_support()
    if reason is not None:
        raise FusecError(f"{purpose}: {reason} ({install_hint('cuda')})")


def driver_present() -> bool:
    """Whether the CUDA driver library loads: a cheap test before importing numba.cuda.

    Without ``libcuda`` there is no GPU to find, and importing numba.cuda would
    cost a fifth of a second of every ``fusec compile`` on a CPU-only machine. On
    Linux the library is loaded as numba-cuda loads it (``dlopen`` by name, then in
    the usual folders), which takes microseconds; ``ctypes.util.find_library`` runs
    ``ldconfig`` and then ``gcc`` when it finds none (~30-60 ms, issue #26).
    """
    if not sys.platform.startswith("linux"):
        import ctypes.util

        return ctypes.util.find_library("cuda") is not None
    import ctypes

    names = ("libcuda.so.1", "libcuda.so")
    paths = [os.path.join(folder, name) for folder in _DRIVER_FOLDERS for name in names]
    for path in [*names, *filter(os.path.exists, paths)]:  # the loader's search first
        try:
            ctypes.CDLL(path)
        except OSError:
            continue
        return True
    return False


#: Where ``driver_present`` looks for libcuda after the loader's own search.
_DRIVER_FOLDERS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
)


def gpu_available() -> bool:
    """True when a real CUDA GPU can run kernels (never under the simulator)."""
    if simulator_enabled() or not driver_present() or cuda_support() is not None:
        return False
    try:
        return bool(numba_cuda().is_available())
    except Exception:  # driver missing or broken: no GPU for us
        return False


# --------------------------------------------------------------------------- device


def device_key() -> str:
    """The compiled code's device in cache keys: ``sm_90`` on an H100/H200, ``sim`` under the
    simulator."""
    if simulator_enabled():
        return "sim"
    major, minor = numba_cuda().get_current_device().compute_capability
    return f"sm_{major}{minor}"


def sm_count() -> int:
    if simulator_enabled():
        return 1
    return int(numba_cuda().get_current_device().MULTIPROCESSOR_COUNT)
