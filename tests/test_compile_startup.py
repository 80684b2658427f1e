"""What keeps ``fusec compile`` from importing numpy (issue #26), checked for meaning.

The import hygiene itself (which modules a compile loads) is pinned by
``test_cli_usability.test_a_plain_compile_imports_no_module_it_does_not_need``; these
tests check that what replaced numpy on the compile path answers as numpy would:
the broadcast of shapes, and the BLAS mode remembered in the kernel cache.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusec.codegen.expr import broadcast_shapes
from fusec.runtime.cache import KernelCache
from fusec.targets.cpu import blas, blas_abi, blas_mode

# ------------------------------------------------------------ broadcast_shapes

_dims = st.sampled_from([0, 1, 1, 2, 3])
_shapes = st.lists(st.lists(_dims, max_size=4).map(tuple), max_size=4)


@given(_shapes)
def test_broadcast_shapes_is_numpys(shapes):
    try:
        expected: tuple[int, ...] | None = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError, match="do not broadcast"):
            broadcast_shapes(*shapes)
    else:
        assert broadcast_shapes(*shapes) == expected


def test_broadcast_shapes_examples():
    assert broadcast_shapes((2, 1, 3), (4, 1)) == (2, 4, 3)
    assert broadcast_shapes((1,), (0,)) == (0,)  # 1 stretches to 0 (the ai shape rules do not)
    assert broadcast_shapes() == ()
    with pytest.raises(ValueError):
        broadcast_shapes((2,), (3,))


# ------------------------------------------------------------------ blas_mode


class _Probe:
    """A probe that counts its calls and answers ``mode``."""

    def __init__(self, mode: str) -> None:
        self.mode, self.calls = mode, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.mode


def _entry_name() -> str:
    return f"probes/cpu-blas-{blas_mode.installation_key()}.json"


def test_the_mode_is_probed_once_then_read_from_the_cache(tmp_path):
    cache = KernelCache(tmp_path)
    probe = _Probe("blas-lp64-local")
    assert blas_mode.remembered_mode(cache, probe) == "blas-lp64-local"
    assert blas_mode.remembered_mode(KernelCache(tmp_path), probe) == "blas-lp64-local"
    assert probe.calls == 1  # the second process read the sealed record


@pytest.mark.parametrize(
    "body",
    [
        b'{"mode": "blas-ilp64-local\\nimport os"}',  # would be spliced into kernel source
        b'{"mode": "mkl"}',
        b'["numba"]',
        b"not json",
    ],
)
def test_a_record_that_is_not_a_known_mode_is_probed_again(tmp_path, body):
    cache = KernelCache(tmp_path)
    assert cache.write_entry(_entry_name(), body)
    probe = _Probe("numba")
    assert blas_mode.remembered_mode(cache, probe) == "numba"
    assert probe.calls == 1
    assert json.loads(cache.read_entry(_entry_name()) or b"") == {"mode": "numba"}


def test_a_forged_record_is_not_read(tmp_path):
    cache = KernelCache(tmp_path)
    assert blas_mode.remembered_mode(cache, _Probe("numba")) == "numba"
    (cache.root / _entry_name()).write_bytes(b'{"mode": "blas-lp64-global"}')  # unsealed
    probe = _Probe("numba")
    assert blas_mode.remembered_mode(cache, probe) == "numba"
    assert probe.calls == 1


def test_an_untrusted_cache_folder_is_left_alone_without_a_warning(tmp_path, monkeypatch):
    import warnings

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # (mkdir's mode is masked by the umask)
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(shared))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert blas_mode.usable_cache() is None
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "mine"))
    cache = blas_mode.usable_cache()
    assert cache is not None and cache.root == (tmp_path / "mine").resolve()


def test_the_key_follows_the_gemm_setting(monkeypatch):
    monkeypatch.delenv(blas_abi.ENV_VAR, raising=False)
    blas_default = blas_mode.installation_key()
    monkeypatch.setenv(blas_abi.ENV_VAR, "numba")
    assert blas_mode.installation_key() != blas_default


def test_with_numpy_loaded_the_mode_is_this_process_own(monkeypatch):
    assert blas_mode.mode() == blas.mode()
    assert blas_mode.import_line() == blas.import_line()
    monkeypatch.setattr(blas, "BLAS", None)  # what tests and FUSEC_CPU_GEMM=numba do
    assert blas_mode.mode() == "numba"
    assert "sgemm_numba as sgemm" in blas_mode.import_line()


@pytest.mark.parametrize("mode", ["numba", "blas-lp64-local", "blas-ilp64-global"])
def test_every_import_line_names_abi_functions(mode):
    from fusec.targets.cpu import abi

    assert blas_abi.MODES.fullmatch(mode)
    line = blas_abi.import_line_for(mode)
    names = line.split(" import ", 1)[1].split("  #")[0].split(", ")
    assert all(name.split(" as ")[0] in abi._PROVIDERS for name in names)


# ------------------------------------------------------------ the cuda driver test


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dlopen names are Linux's")
def test_the_cuda_driver_test_starts_no_program(monkeypatch):
    """``auto`` asks it on every compile: ``ctypes.util.find_library`` would run ldconfig
    and gcc (~30-60 ms without a GPU); loading the library as numba-cuda does takes
    microseconds and answers the same."""
    import ctypes.util
    import subprocess

    from fusec.targets.cuda import env

    def refuse(*args, **kwargs):
        raise AssertionError("driver_present started a program")

    monkeypatch.setattr(ctypes.util, "find_library", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    present = env.driver_present()  # answers without starting a program
    by_name = []
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            by_name.append(ctypes.CDLL(name))
        except OSError:
            continue
    if by_name:  # the loader finds it by name: present (else a usual folder may hold it)
        assert present


# ------------------------------------------------------------------ arith, lazily


def test_is_constant_is_isinstance_of_arith_constant():
    from xdsl.dialects import arith

    from fusec import parse
    from fusec.ir.constants import dense_constant, is_constant

    const = dense_constant(np.ones((2,), np.float32), "f32")
    assert isinstance(const, arith.ConstantOp) and is_constant(const)
    module = parse(
        "func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %c = arith.constant dense<2.0> : tensor<2xf32>\n"
        "  %r = ai.add %x, %c : tensor<2xf32> * tensor<2xf32>\n"
        "  return %r : tensor<2xf32>\n}\n"
    )
    ops = list(module.walk())
    assert [is_constant(op) for op in ops] == [isinstance(op, arith.ConstantOp) for op in ops]
    assert sum(map(is_constant, ops)) == 1
