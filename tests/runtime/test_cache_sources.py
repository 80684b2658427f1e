"""A kernel module's cache key holds the fusec sources it runs besides its text.

Numba compiles the kernel layer's helpers (``gemm_packed``, ``next_block``, ...) into a
generated module's cached machine code, so an edit of a helper that leaves the
generated text alone must not load the old code (it did: a changed packing layout of
``gemm_packed`` gave ResNet-50 a rel L2 of 0.26 from kernels cached before the edit).
``fusec.runtime.source_digest`` reads the ABI module's import closure;
``cache.module_key`` holds its digest.
"""

from __future__ import annotations

import textwrap

import pytest

from fusec.runtime import cache as cache_module
from fusec.runtime import source_digest
from fusec.runtime.cache import KernelCache, module_key


def test_the_cpu_closure_holds_the_abi_providers_and_nothing_of_the_front_ends():
    closure = {
        str(p.relative_to(source_digest.PACKAGE))
        for p in source_digest.import_closure("fusec.targets.cpu.abi")
    }
    names = ("abi", "microkernel", "gemm_int8", "tasks", "winograd", "blas_calls")
    names += ("depthwise_tiles",)
    for name in names:
        assert f"targets/cpu/{name}.py" in closure
    assert "runtime/numba_cache.py" in closure
    assert not any(p.startswith(("frontend/", "passes/")) for p in closure), closure


def _package(root, helper_body: str):
    """A package ``fusec`` under ``root``: an ABI naming a helper lazily (a string, as
    the real ABI does), the helper importing a sibling relatively, and a module that
    nothing imports."""
    files = {
        "__init__.py": "",
        "targets/__init__.py": "",
        "targets/cpu/__init__.py": "",
        "targets/cpu/abi.py": '_PROVIDERS = {"h": ("fusec.targets.cpu.helper", "h")}\n',
        "targets/cpu/helper.py": "from .inner import (\n    k,\n)\n",
        "targets/cpu/inner.py": helper_body,
        "targets/cpu/unused.py": "x = 1\n",
    }
    for name, text in files.items():
        path = root / "fusec" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "fusec"


def test_the_digest_follows_lazy_names_and_relative_imports(tmp_path, monkeypatch):
    package = _package(tmp_path, "k = 1\n")
    monkeypatch.setattr(source_digest, "PACKAGE", package)
    closure = [
        p.relative_to(package).as_posix()
        for p in source_digest.import_closure("fusec.targets.cpu.abi")
    ]
    assert closure == ["targets/cpu/abi.py", "targets/cpu/helper.py", "targets/cpu/inner.py"]
    before = source_digest.kernel_layer_digest.__wrapped__("cpu")
    (package / "targets/cpu/unused.py").write_text("x = 2\n")
    assert source_digest.kernel_layer_digest.__wrapped__("cpu") == before
    (package / "targets/cpu/inner.py").write_text("k = 2\n")
    assert source_digest.kernel_layer_digest.__wrapped__("cpu") != before


SMALL = """\
from fusec.targets.cpu.abi import cached_njit


@cached_njit()
def twice(a):
    return a * 2
"""


def test_an_edited_kernel_layer_misses_the_cached_module(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path / "cache")
    cache.load_module(SMALL)
    assert cache.stats["module_files_written"] == 1
    assert cache.has_module(SMALL)
    monkeypatch.setattr(source_digest, "kernel_layer_digest", lambda target: "edited")
    assert module_key(SMALL, "cpu") != cache_module.cache_key(SMALL, "cpu")
    assert not cache.has_module(SMALL)
    fresh = KernelCache(tmp_path / "cache")
    fresh.load_module(SMALL)
    assert fresh.stats["module_files_written"] == 1  # a module of its own, not reused


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_every_abi_provider_is_in_the_closure(target):
    abi = __import__(f"fusec.targets.{target}.abi", fromlist=["_PROVIDERS"])
    closure = set(source_digest.import_closure(f"fusec.targets.{target}.abi"))
    for provider in abi._PROVIDERS.values():
        module = provider if isinstance(provider, str) else provider[0]
        path = source_digest._file(module)
        assert path is not None and path in closure, module
