"""The cpu target's environment defaults (``fusec.targets.cpu.threads``): the OpenBLAS
kernel choice by CPU, and that values the user has set are kept."""

from __future__ import annotations

import pytest

from fusec.targets.cpu import threads


def _cpuinfo(vendor: str, family: int, flags: str) -> str:
    block = f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nflags\t\t: {flags}\n"
    return block + "\n" + block.replace("processor\t: 0", "processor\t: 1")


@pytest.mark.parametrize(
    "vendor, family, flags, expected",
    [
        ("AuthenticAMD", 25, "fpu sse2 avx2 fma avx512f avx512bw", "ZEN"),  # Zen 4
        ("AuthenticAMD", 25, "fpu sse2 avx2 fma", None),  # Zen 3: OpenBLAS picks Zen itself
        ("AuthenticAMD", 26, "fpu sse2 avx2 fma avx512f", None),  # Zen 5: not measured
        ("GenuineIntel", 6, "fpu sse2 avx2 fma avx512f", None),
        ("AuthenticAMD", 25, "fpu avx512fp16", None),  # a flag that only starts alike
    ],
)
def test_openblas_coretype(vendor, family, flags, expected):
    assert threads.openblas_coretype(_cpuinfo(vendor, family, flags)) == expected


@pytest.mark.parametrize("text", ["", "processor\t: 0\n", "cpu family\t: x86\n"])
def test_openblas_coretype_without_a_usable_cpuinfo(text):
    assert threads.openblas_coretype(text) is None


def test_configure_sets_the_coretype_and_keeps_the_users(monkeypatch):
    zen4 = _cpuinfo("AuthenticAMD", 25, "avx2 avx512f")
    monkeypatch.setattr(threads, "read_cpuinfo", lambda: zen4)
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    threads.configure()
    assert threads.os.environ["OPENBLAS_CORETYPE"] == "ZEN"
    monkeypatch.setenv("OPENBLAS_CORETYPE", "SKYLAKEX")
    threads.configure()
    assert threads.os.environ["OPENBLAS_CORETYPE"] == "SKYLAKEX"


def test_configure_leaves_other_cpus_to_openblas(monkeypatch):
    intel = _cpuinfo("GenuineIntel", 6, "avx2 avx512f")
    monkeypatch.setattr(threads, "read_cpuinfo", lambda: intel)
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    threads.configure()
    assert "OPENBLAS_CORETYPE" not in threads.os.environ


def test_num_threads_is_numbas_count_for_the_calling_thread():
    """``tasks.num_threads`` (the launch code's cheap read) agrees with
    ``numba.get_num_threads()`` after ``set_num_threads`` and in another thread."""
    import threading

    import numba

    from fusec.targets.cpu.tasks import num_threads

    default = numba.get_num_threads()
    try:
        for n in sorted({1, default}):
            numba.set_num_threads(n)
            assert num_threads() == numba.get_num_threads() == n
        numba.set_num_threads(1)
        seen = []

        def read() -> None:
            seen.append((num_threads(), numba.get_num_threads()))

        worker = threading.Thread(target=read)
        worker.start()
        worker.join()
        assert seen[0][0] == seen[0][1]  # the other thread's own count
        assert num_threads() == 1
    finally:
        numba.set_num_threads(default)


def test_configure_sets_a_short_openmp_spin_and_keeps_the_users(monkeypatch):
    """A passive OpenMP pool whose workers spin ``GOMP_SPINCOUNT`` before they sleep (the
    next kernel's region comes microseconds later); a value the user set is kept."""
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    threads.configure()
    assert threads.os.environ["GOMP_SPINCOUNT"] == threads.DEFAULTS["GOMP_SPINCOUNT"]
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    threads.configure()
    assert threads.os.environ["GOMP_SPINCOUNT"] == "0"
