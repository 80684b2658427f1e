"""The kernel and trace caches load only what this user wrote.

What the caches load is executed (generated modules are imported, Numba's
cache files are pickles, traces are compiled), so a cache another user can
write is a way to run code as whoever loads it. The cache folder must be
ours alone (else a ``FusecWarning`` and a private per-process folder), and
every entry carries an HMAC under a per-user key (else it is rebuilt).

The payloads below would create a marker file if anything executed them.
The last tests use real second users (``useradd``; skipped where that is not
possible, e.g. when not root).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import site
import stat
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest
from cpu_check import poison, wrap_group

import fusec
from fusec.errors import FusecWarning
from fusec.runtime.cache import KernelCache, untrusted_reason
from fusec.runtime.launch import Program

REPO = Path(__file__).parents[2]
TEXT = """
func.func @f(%x: tensor<8x16xf32>, %y: tensor<16xf32>) -> tensor<8x16xf32> {
  %a = ai.mul %x, %y : tensor<8x16xf32> * tensor<16xf32>
  %b = ai.sigmoid %a : tensor<8x16xf32>
  return %b : tensor<8x16xf32>
}"""
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to chown to another uid)")


class Payload:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _run(cache: KernelCache) -> None:
    program = Program(wrap_group(TEXT, "pointwise"), target="cpu", cache=cache)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal(16).astype(np.float32)
    (out,) = program([x, y], alloc=poison)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-(x * y))), rtol=1e-5)


def _fallback(cache: KernelCache, pattern: str) -> None:
    """``cache`` refuses its folder with a warning matching ``pattern`` and still works."""
    with pytest.warns(FusecWarning, match=pattern):
        root = cache.root
    assert root != cache.requested_root
    assert re.search(pattern, cache.fallback_reason or "")
    _run(cache)


# ------------------------------------------------------------------ the folder


def test_a_new_folder_is_private_with_a_private_key(tmp_path):
    cache = KernelCache(tmp_path / "a" / "fusec")
    assert cache.root == tmp_path / "a" / "fusec"
    assert stat.S_IMODE(cache.root.stat().st_mode) == 0o700
    key = cache.root / "key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
    assert KernelCache(cache.root).signer.key == key.read_bytes()  # the next process's


def test_a_folder_writable_by_others_is_not_used(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    _fallback(KernelCache(folder), "writable by other users")


def test_a_folder_in_a_folder_others_can_write_is_not_used(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # not sticky: anyone may rename our folder away and put theirs
    _fallback(KernelCache(parent / "fusec"), "writable by other users .*could replace it")


def test_a_folder_in_a_sticky_shared_folder_is_used(tmp_path):
    parent = tmp_path / "tmp"
    parent.mkdir()
    parent.chmod(0o1777)  # like /tmp: only the owner may rename an entry
    assert untrusted_reason(tmp_path) is None
    cache = KernelCache(parent / "fusec")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.root == parent / "fusec"


@ROOT_ONLY
def test_a_folder_of_another_user_is_not_used(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o755)
    os.chown(folder, 54321, 54321)
    _fallback(KernelCache(folder), "owned by uid 54321, not by you")


@ROOT_ONLY
def test_a_folder_inside_another_users_folder_is_not_used(tmp_path):
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    (parent / "fusec").mkdir(mode=0o700)
    os.chown(parent, 54321, 54321)  # they may rename our folder away
    _fallback(KernelCache(parent / "fusec"), "owned by uid 54321 .*could replace it")


@pytest.mark.parametrize("how", ["readable by others", "a symlink", "too short"])
def test_a_key_that_is_not_ours_alone_is_not_used(tmp_path, how):
    folder = tmp_path / "fusec"
    assert KernelCache(folder).signer is not None  # creates the folder and its key
    key = folder / "key"
    if how == "readable by others":
        key.chmod(0o644)
    elif how == "a symlink":
        target = tmp_path / "elsewhere"
        target.write_bytes(key.read_bytes())
        target.chmod(0o600)
        key.unlink()
        key.symlink_to(target)
    else:
        key.write_bytes(b"short")
    _fallback(KernelCache(folder), "cannot be used")


def test_the_warning_is_given_once_per_folder(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            _run(KernelCache(folder))
    assert len([w for w in caught if issubclass(w.category, FusecWarning)]) == 1


# ---------------------------------------------------------------- the entries


def _numba_files(root: Path) -> list[Path]:
    files = sorted(root.rglob("*.nbi")) + sorted(root.rglob("*.nbc"))
    assert files, f"no Numba cache files under {root}"
    return files


@pytest.mark.skipif(
    bool(os.environ.get("NUMBA_CACHE_DIR")),
    reason="NUMBA_CACHE_DIR sends Numba's index/data files outside the kernel cache folder",
)
@pytest.mark.parametrize("form", ["bare pickle", "numba's own format", "sealed with another key"])
def test_planted_numba_cache_files_are_never_unpickled(tmp_path, form):
    marker = tmp_path / "pwned"
    folder = tmp_path / "cache"
    _run(KernelCache(folder))
    other = KernelCache(tmp_path / "other").signer
    for path in _numba_files(folder):
        payload = pickle.dumps(Payload(marker))
        if form == "numba's own format":  # the version pickle, then the payload
            import numba

            payload = pickle.dumps(numba.__version__) + payload
        elif form == "sealed with another key":
            payload = other.seal(path.name, payload)
        path.write_bytes(payload)
    cache = KernelCache(folder)
    _run(cache)
    assert not marker.exists(), "a planted Numba cache file was unpickled"
    assert cache.stats["corrupt_entries"] >= 1
    for path in _numba_files(folder):  # rewritten, sealed with our key
        assert cache.signer.open(path.name, path.read_bytes()) is not None


def test_a_planted_kernel_module_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    folder = tmp_path / "cache"
    _run(KernelCache(folder))
    (module,) = folder.rglob("k_*.py")
    source = module.read_text()
    module.write_text(f"import os\nos.system('touch {marker}')\n")
    cache = KernelCache(folder)
    _run(cache)
    assert not marker.exists(), "a planted kernel module was executed"
    assert module.read_text() == source  # replaced by what the compiler generated
    assert cache.stats["corrupt_entries"] == 1


def test_a_forged_blob_is_rebuilt(tmp_path):
    cache = KernelCache(tmp_path)
    cache.get_or_build("ptx", lambda: b"genuine")
    forged = KernelCache(tmp_path / "other").signer.seal("blobs/ptx.bin", b"forged")
    (tmp_path / "blobs" / "ptx.bin").write_bytes(forged)
    fresh = KernelCache(tmp_path)
    assert fresh.get_or_build("ptx", lambda: b"rebuilt") == b"rebuilt"


def _exp_instead(record: dict) -> dict:
    return dict(record, ir=record["ir"].replace("ai.relu", "ai.exp"))


@pytest.mark.parametrize("seal", ["none", "another key"])
def test_a_forged_trace_is_not_used(tmp_path, monkeypatch, seal):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)

    def relu(x):
        return fusec.ops.relu(x)

    fusec.fuse(relu, target="reference")(x)
    (entry,) = (tmp_path / "cache" / "traces").glob("*.json")
    genuine = KernelCache(tmp_path / "cache").signer.open(
        f"traces/{entry.name}", entry.read_bytes()
    )
    forged = json.dumps(_exp_instead(json.loads(genuine))).encode()
    if seal == "another key":
        forged = KernelCache(tmp_path / "other").signer.seal(f"traces/{entry.name}", forged)
    entry.write_bytes(forged)
    again = fusec.fuse(relu, target="reference")
    np.testing.assert_array_equal(again(x), np.maximum(x, 0))  # not exp: retraced
    assert again.trace_count == 1


# ----------------------------------------------------------- a second user


def _make_user(name: str) -> bool:
    if shutil.which("useradd") is None:
        return False
    if subprocess.run(["id", name], capture_output=True).returncode == 0:
        return True
    done = subprocess.run(["useradd", "--no-create-home", name], capture_output=True)
    return done.returncode == 0


@pytest.fixture(scope="module")
def users():
    """Two unprivileged users (created here, removed afterwards) and how to run fusec
    as them; skips where that is not possible."""
    if os.geteuid() != 0:
        pytest.skip("creating test users needs root")
    names = [f"fusec{uuid.uuid4().hex[:8]}" for _ in range(2)]
    if not all(_make_user(n) for n in names):
        pytest.skip("useradd is not available or failed")
    try:
        python, env = _interpreter_for(names[0])
        yield names, python, env
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def open_tmp():
    """A folder every user can enter (pytest's own tmp_path is root's alone)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="fusec-users-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _interpreter_for(user: str) -> tuple[str, dict]:
    """A Python that ``user`` can run with fusec and its dependencies importable."""
    paths = [str(REPO), *site.getsitepackages()]
    env = {"PYTHONPATH": os.pathsep.join(paths), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/python{version}"):
        try:
            probe = subprocess.run(
                [python, "-c", "import fusec, numba"], user=user, env=env, capture_output=True
            )
        except OSError:  # e.g. an interpreter inside a folder only root may enter
            continue
        if probe.returncode == 0:
            return python, env
    pytest.skip(f"no Python interpreter with fusec's dependencies that {user} can run")


def _as(user: str, python: str, env: dict, home: Path, *argv: str, **extra: str):
    home.mkdir(parents=True, exist_ok=True)
    shutil.chown(home, user)
    return subprocess.run(
        [python, *argv],
        user=user,
        env={**env, "HOME": str(home), **extra},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=home,
    )


RUN_GRAPH = r"""
import sys
import numpy as np
import fusec
from fusec import ops

compiled = fusec.compile(sys.argv[1], target="cpu")
x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
np.testing.assert_allclose(compiled(x), np.maximum(x, 0) * 2)

@fusec.fuse(target="cpu")
def traced(x):
    return ops.relu(x) * 2

np.testing.assert_allclose(traced(x), np.maximum(x, 0) * 2)

# a conv (Winograd filters) and a matmul: the blocked kernels call fusec's own compiled
# helpers (fusec.targets.cpu.blas, .winograd), whose code is cached too
blocked = fusec.compile(BLOCKED, target="cpu")
rng = np.random.default_rng(1)
xc = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
wc = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
wm = rng.standard_normal((6, 5)).astype(np.float32)
ref = fusec.reference(BLOCKED)(xc, wc, wm)
np.testing.assert_allclose(blocked(xc, wc, wm), ref, rtol=1e-4, atol=1e-4)
print("OK")
"""
BLOCKED = """func.func @b(%x: tensor<1x8x6x6xf32>, %w: tensor<8x8x3x3xf32>, %m: tensor<6x5xf32>)
    -> tensor<1x8x6x5xf32> {
  %c = ai.conv2d %x, %w {padding = array<i64: 1, 1>} : tensor<1x8x6x6xf32> * tensor<8x8x3x3xf32>
  %r = ai.relu %c : tensor<1x8x6x6xf32>
  %y = ai.matmul %r, %m : tensor<1x8x6x6xf32> * tensor<6x5xf32>
  return %y : tensor<1x8x6x5xf32>
}"""
RUN_GRAPH = RUN_GRAPH.replace("import fusec\n", f"import fusec\nBLOCKED = {BLOCKED!r}\n", 1)
GRAPH = """func.func @g(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = arith.constant dense<2.0> : tensor<f32>
  %r = ai.relu %x : tensor<4x8xf32>
  %y = ai.mul %r, %c : tensor<4x8xf32> * tensor<f32>
  return %y : tensor<4x8xf32>
}
"""


def _plant(folder: Path, marker: Path) -> int:
    """Replace every cache entry under ``folder`` by a payload; return how many."""
    count = 0
    for path in folder.rglob("*"):
        if not path.is_file() or path.name == "key":
            continue
        if path.suffix == ".py":
            path.write_text(f"import os\nos.system('touch {marker}')\n")
        else:
            path.write_bytes(pickle.dumps(Payload(marker)))
        count += 1
    return count


@pytest.mark.slow  # two users' processes compiling: half a minute each
@pytest.mark.parametrize("how", ["FUSEC_CACHE_DIR", "XDG_CACHE_HOME"])
def test_another_users_shared_cache_does_not_run_code(users, open_tmp, how):
    tmp_path = open_tmp
    (attacker, victim), python, env = users
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # a shared /tmp
    graph = tmp_path / "g.mlir"
    graph.write_text(GRAPH)
    graph.chmod(0o644)
    marker = shared / "pwned"
    cache = shared / "fusec"
    setting = {how: str(cache if how == "FUSEC_CACHE_DIR" else shared)}
    # the attacker fills the cache folder where the victim will look, then plants payloads
    done = _as(attacker, python, env, tmp_path / "a", "-c", RUN_GRAPH, str(graph), **setting)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr
    # everything the attacker's run cached under the shared folder: fusec's kernel cache
    # and any other compiled-code cache a dependency put there (Numba's user-wide one)
    assert _plant(shared, marker) >= 3
    for path in shared.rglob("*"):
        path.chmod(0o777 if path.is_dir() else 0o666)  # and lets anyone write there
    done = _as(victim, python, env, tmp_path / "v", "-c", RUN_GRAPH, str(graph), **setting)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr
    assert not marker.exists(), "the victim ran code the attacker planted"
    assert "not using the kernel cache folder" in done.stderr
    assert re.search(r"owned by uid \d+, not by you", done.stderr)


def test_a_read_only_cache_folder_degrades_with_one_warning(users, open_tmp):
    tmp_path = open_tmp
    (user, _), python, env = users
    graph = tmp_path / "g.mlir"
    graph.write_text(GRAPH)
    graph.chmod(0o644)
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.chown(folder, user)
    folder.chmod(0o555)
    argv = ["-m", "fusec.cli", "run", str(graph), "--random-inputs", "--check", "--target", "cpu"]
    argv.append("--quiet")  # no progress of the compile on stderr: only the warning
    done = _as(user, python, env, tmp_path / "h", *argv, FUSEC_CACHE_DIR=str(folder))
    assert done.returncode == 0, done.stderr
    assert "PASS" in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusec: warning: not using the kernel cache")
    assert "cannot be used (Permission denied)" in lines[0]
    assert list(folder.iterdir()) == []
