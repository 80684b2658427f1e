"""Generated CUDA kernel modules: imported and compiled through the kernel cache, or
compiled to PTX for ``--emit ptx`` (no GPU needed for that)."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

from fusec.codegen import KernelSource
from fusec.errors import FusecError
from fusec.targets.cuda.env import device_key, numba_cuda, require_cuda_compiler, simulator_enabled


def load_kernel_module(kernel: KernelSource, cache: Any = None) -> ModuleType:
    """Import a generated CUDA kernel module and compile its kernels for this GPU.

    The module goes through the kernel cache (written once under the cache
    folder); its kernels are compiled eagerly with their signatures, using
    Numba's own disk cache beside the module file, so a second process loads
    machine code instead of compiling (generated CUDA kernels link no code,
    so Numba can pickle them).
    """
    from fusec.runtime.cache import default_cache
    from fusec.runtime.numba_cache import enable_signed_caching

    cache = cache if cache is not None else default_cache()
    module = cache.load_module(kernel.source, target="cuda", device=device_key())
    if simulator_enabled():
        module.math = _DeviceMath()  # CUDA's results, not Python's math exceptions
        return module
    for dispatcher, signature in module.KERNELS:
        if signature in _compiled.setdefault(id(dispatcher), set()):
            continue
        # Numba's cache files, sealed with the kernel cache's key (they are pickles)
        enable_signed_caching(dispatcher, cache.signer)  # False: compiled in memory only
        dispatcher.compile(signature)
        _compiled[id(dispatcher)].add(signature)
    return module


_compiled: dict[int, set] = {}


#: math functions that raise in Python where CUDA returns inf or NaN, and their numpy forms.
_NUMPY_NAMES = {
    "exp": "exp", "sqrt": "sqrt", "tanh": "tanh", "log": "log", "pow": "power",
    "log1p": "log1p", "expm1": "expm1", "sin": "sin", "cos": "cos", "tan": "tan",
    "sinh": "sinh", "cosh": "cosh", "asin": "arcsin", "acos": "arccos", "atan": "arctan",
    "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh",
}  # fmt: skip


class _DeviceMath:
    """``math`` as a kernel sees it on the GPU, for kernels run by the CUDA simulator.

    The simulator runs a kernel's Python, where ``math.exp(100.0)`` raises
    OverflowError and ``math.sqrt(-1.0)`` ValueError; CUDA's device functions
    return inf and NaN (IEEE), which is what the kernels are written for.
    """

    def __getattr__(self, name: str) -> Any:
        function = getattr(np, _NUMPY_NAMES.get(name, ""), None)
        if function is None:
            return getattr(math, name)

        def ieee(*args: Any) -> Any:
            with np.errstate(all="ignore"):
                return function(*args)

        return ieee


def emit_ptx(kernel: KernelSource, cc: tuple[int, int] = (9, 0), cache: Any = None) -> str:
    """PTX of every kernel in ``kernel``'s module for compute capability ``cc``.

    Compiled with NVVM through ``numba.cuda.compile_ptx``; needs no GPU (only the
    ``cuda`` extra). Stored in the kernel cache's blob store.
    """
    from fusec.runtime.cache import cache_key, default_cache
    from fusec.runtime.source_digest import kernel_layer_digest

    require_cuda_compiler("cannot emit PTX")
    if simulator_enabled():
        raise FusecError("cannot emit PTX under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    cache = cache if cache is not None else default_cache()
    # ("ptx+bounds": PTX with the launch bounds, unlike what this key held before them)
    key = cache_key(kernel.source, "ptx+bounds", f"sm_{cc[0]}{cc[1]}", kernel_layer_digest("cuda"))

    def build() -> bytes:
        cuda = numba_cuda()
        namespace: dict[str, Any] = {"__name__": f"_fusec_ptx_{kernel.name}"}
        exec(compile(kernel.source, f"<fusec kernel {kernel.name}>", "exec"), namespace)
        parts = []
        for dispatcher, signature in namespace["KERNELS"]:
            # (the kernel's launch bounds reach its PTX as its .maxntid / .minnctapersm)
            bounds = dispatcher.targetoptions.get("launch_bounds")
            ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=cc, launch_bounds=bounds)
            parts.append(ptx)
        return "\n".join(parts).encode()

    return cache.get_or_build(key, build).decode()


def parse_arch(arch: str) -> tuple[int, int]:
    """``sm_90`` / ``sm_90a`` / ``90`` -> (9, 0); FusecError otherwise."""
    import re

    match = re.fullmatch(r"(?:sm_|compute_)?(\d)(\d)a?", arch.strip())
    if not match:
        raise FusecError(f"bad --arch '{arch}': expected e.g. sm_90")
    return int(match.group(1)), int(match.group(2))
