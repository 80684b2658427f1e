"""Thread-pool and BLAS-kernel settings for the cpu kernels, applied as environment variables.

A cpu kernel alternates Numba parallel loops (OpenMP threads) with numpy's
BLAS (OpenBLAS threads). Both pools busy-wait after finishing a job, so each
steals the cores the other needs next: measured on a 2-core machine, a
matmul + fused epilogue took 8.2 ms with the defaults, 3.9 ms with a passive
OpenMP wait policy and 2.3 ms with OpenBLAS's spinning shortened too.

The settings are environment variables read when the libraries start:
``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` when Numba first starts its OpenMP pool (fusec's cpu
runtime calls ``configure()`` before that), ``OPENBLAS_THREAD_TIMEOUT`` and
``OPENBLAS_CORETYPE`` only when numpy is first imported (so only entry points
that run before numpy, such as the ``fusec`` command and the benchmarks, can
apply them). Values the user has set are kept.

``FUSEC_CPU_PIN=0`` keeps Numba's worker threads unpinned (by default each runs
on a CPU of its own: ``fusec.targets.cpu.affinity`` says why).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULTS = {
    "OMP_WAIT_POLICY": "PASSIVE",
    # ... but a worker spins this long before it sleeps (libgomp honours it beside the
    # passive policy, ~75-250 us): a model's next kernel starts microseconds after the
    # last one ends, and a sleeping worker's futex wake cost more than a small kernel's
    # parallel half gained (on a 2-vCPU Zen 4 guest most of MobileNetV3's b1 kernels were
    # slower on two threads than on one). Quiet machine, 2 threads, fusec and onnxruntime
    # alternated, ort / fusec by median, without / with: MobileNetV3-L b1 0.80-0.83 ->
    # 0.95-1.01, b8 0.81 -> 0.95; EfficientNet-B0 b1 0.88-0.89 -> 1.09-1.12; ResNet-50 b1
    # 0.74-0.89 -> 1.01, b8 1.05 -> 1.10; ViT-B/16 b4 and BERT b1 level; onnxruntime's own
    # times level (benchmarks/results/cpu-notes.md).
    "GOMP_SPINCOUNT": "10000",
    # OpenBLAS workers spin 2**N cycles before sleeping (default N = 28, ~0.1 s)
    "OPENBLAS_THREAD_TIMEOUT": "4",
}
#: AMD's CPU family of Zen 3 and Zen 4 (Zen 3 has no AVX-512: OpenBLAS picks Zen there).
ZEN3_4_FAMILY = 0x19


def configure() -> None:
    """Set the variables the user has not set (see the module docstring)."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    if "OPENBLAS_CORETYPE" not in os.environ:
        coretype = openblas_coretype(read_cpuinfo())
        if coretype is not None:
            os.environ["OPENBLAS_CORETYPE"] = coretype


def openblas_coretype(cpuinfo: str) -> str | None:
    """The OpenBLAS kernels to ask for on the CPU that ``cpuinfo`` (the text of
    /proc/cpuinfo) describes: ``ZEN`` on Zen 4, else None (OpenBLAS's own choice)."""
    fields = cpuinfo_fields(cpuinfo)
    try:
        family = int(fields.get("cpu family", ""))
    except ValueError:
        return None
    amd = fields.get("vendor_id") == "AuthenticAMD"
    if amd and family == ZEN3_4_FAMILY and "avx512f" in fields.get("flags", "").split():
        return "ZEN"
    return None


def cpuinfo_fields(cpuinfo: str) -> dict[str, str]:
    """The fields of the first processor's block of ``cpuinfo`` (the text of /proc/cpuinfo)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def read_cpuinfo() -> str:
    """The start of /proc/cpuinfo: the first processor's block is all ``cpuinfo_fields``
    reads (the whole file is generated per processor, slow to read on large machines)."""
    try:
        with Path("/proc/cpuinfo").open() as f:
            return f.read(16384)
    except OSError:  # not Linux: no fields
        return ""
