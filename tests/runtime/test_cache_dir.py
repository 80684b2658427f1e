"""Where fusec caches: ``$FUSEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/fusec``, else
``~/.cache/fusec`` (the XDG Base Directory rule), for the kernel cache and for the
traces of ``@fusec.fuse``, which live in the same folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import ops
from fusec.runtime.cache import cache_root, default_cache


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh home folder, no cache setting."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FUSEC_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return tmp_path / "home"


def test_default_is_dot_cache_in_home(home):
    assert cache_root() == home / ".cache" / "fusec"


def test_xdg_cache_home_is_followed(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "fusec"


def test_fusec_cache_dir_wins_over_xdg(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


@pytest.mark.parametrize("value", ["", "relative/cache"])
def test_empty_or_relative_xdg_cache_home_is_ignored(home, monkeypatch, value):
    # the specification: such a value is invalid and the default is used
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    assert cache_root() == home / ".cache" / "fusec"


def test_traces_are_cached_under_xdg_cache_home(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "xdg" / "fusec"
    assert default_cache().root == folder

    @fusec.fuse(target="reference")
    def relu_mul(x, y):
        return ops.relu(x * y)

    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((2, 3), np.float32), rng.standard_normal(3, np.float32)
    np.testing.assert_array_equal(relu_mul(x, y), np.maximum(x * y, 0))
    assert list((folder / "traces").glob("*.json")), "no trace written under XDG_CACHE_HOME"
    assert not (home / ".cache").exists()
