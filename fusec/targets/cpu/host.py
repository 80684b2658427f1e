"""What the cpu code generators need to know about the machine, without starting Numba.

Generating a kernel is writing text: the tile width of ``gemm_nn`` (``W``, from the
CPU features Numba compiles for) and the thread count the blocks are split for
(``matmul.MIN_BLOCKS``) are all it reads of the host. Importing Numba and llvmlite for them
took ~0.4 s of a ``fusec compile`` (issue #26), so they are read here the way Numba
reads them, from its environment variables and the host: the runtime helpers
(``microkernel``) take ``W`` from this module too, so a kernel and the GEMM it calls
always agree on it.
"""

from __future__ import annotations

import os
import sys
from functools import cache

from fusec.targets.cpu.threads import cpuinfo_fields, read_cpuinfo


def target_features() -> str:
    """The CPU features Numba compiles for, as LLVM writes them (``+avx2,+avx512f,...``):
    ``NUMBA_CPU_FEATURES`` when ``NUMBA_CPU_NAME`` is set (none if unset, as Numba
    reads them), else the host's."""
    if os.environ.get("NUMBA_CPU_NAME"):
        return os.environ.get("NUMBA_CPU_FEATURES", "")
    return host_features()


@cache
def host_features() -> str:
    """The host's CPU features: the flags of /proc/cpuinfo on Linux, which the kernel
    clears for a vector extension the OS does not save (LLVM's host detection checks
    the same, and names the AVX-512 features as the kernel does); elsewhere LLVM's own
    detection, through llvmlite."""
    flags = cpuinfo_fields(read_cpuinfo()).get("flags")
    if flags is not None:
        return ",".join(f"+{flag}" for flag in flags.split())
    from llvmlite import binding  # not Linux: no cpuinfo to read

    return str(binding.get_host_cpu_features().flatten())


def vector_lanes(features: str) -> int:
    """float32 lanes of one ``gemm_nn`` tile vector for a target with ``features``."""
    return 16 if "+avx512f" in features.split(",") else 8


def numba_threads() -> int:
    """The threads of Numba's pool: ``numba.config.NUMBA_NUM_THREADS`` once Numba is
    imported, else what it will read (``NUMBA_NUM_THREADS``, or the CPUs this process
    may run on)."""
    numba = sys.modules.get("numba")
    if numba is not None:
        return int(numba.config.NUMBA_NUM_THREADS)
    try:
        return int(os.environ["NUMBA_NUM_THREADS"])
    except (KeyError, ValueError):  # unset, or unparsable (Numba warns and takes its default)
        pass
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


#: Lanes per vector, rows per tile and vectors per tile row of ``gemm_nn`` on this target.
W = vector_lanes(target_features())
MR = 6
NV = 4 if W == 16 else 2
#: Columns of one strip of a packed B (``microkernel.pack_strips``): one tile's width.
STRIP = NV * W


def packs(n: int) -> bool:
    """Whether ``gemm_packed`` runs a C of ``n`` columns (whole strips)."""
    return n > 0 and n % STRIP == 0


#: ``gemm_nn_staged`` for a B whose rows are a multiple of this many floats (2 KiB: at most
#: 2 of L1's 64 sets for a strip's rows; 1 KiB, 16x16 planes, measured level: C40 16x16
#: K120 44 / 43 us, C512 16x16 K128 420-487 / 421-424, C128 16x16 K512 409-436 / 404-410)...
STAGE_LDB = 512
#: ... and a C of at least this many rows: the strip's copy serves ``m / MR`` tiles. One
#: AMD EPYC core (AVX2), GEMM alone, GFLOP/s gemm_nn / staged: 64 x 1024 x 16 with B rows
#: 16 KiB apart 26-34 / 59, 4 KiB apart 35 / 59; 64 x 1024 x 256 44 / 75; 96 x 1024 x 16
#: 28-47 / 62-67; but 16 x 2048 x 27 (a stem's im2col) 45 / 41 and 24 x 1024 x 72 57 / 54.
#: A whole 1x1 conv + bias + relu, C16 64x64 K64: 224-227 -> 192-199 us.
STAGE_MIN_ROWS = 32
#: ... and AVX2's 8-float vectors: with AVX-512's 16 (a strip of 4 cache lines a row) the
#: copy measured slower on a Zen 4 core, whole 1x1 convs, one thread, medians, us, staged /
#: in place: C16 64x64 K64 + relu 163 / 132 (batch 8: 1957 / 1550), C24 32x32 K72 + relu
#: 71 / 58 (batch 8: 487 / 349), C16 64x64 K96 + silu 313 / 280, C24 32x32 K144 + silu
#: 146 / 131, C64 32x32 K64 level (benchmarks/results/cpu-notes.md).
STAGE_LANES = 8


def staging_pays(ldb: int, m: int) -> bool:
    """Whether ``gemm_nn_staged`` is the GEMM for ``m`` rows of C from a B whose rows are
    ``ldb`` floats apart: those rows fall in at most 2 of L1's 64 sets (4 KiB a way), and a
    tile's K loop evicts them (``microkernel.gemm_nn_staged``); on 8-lane vectors only
    (``STAGE_LANES``)."""
    return W == STAGE_LANES and ldb > 0 and ldb % STAGE_LDB == 0 and m >= STAGE_MIN_ROWS


def fits(n: int) -> bool:
    """Whether ``gemm_nn`` runs a C of ``n`` columns in whole vectors (no scalar edge):
    the attention template uses it only then, and OpenBLAS's sgemm otherwise."""
    return n > 0 and n % W == 0


#: The L2 cache of one core assumed where the host does not say (1 MiB: a server core's).
DEFAULT_L2_BYTES = 1 << 20
_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"


@cache
def l2_bytes() -> int:
    """The level-2 cache of one core in bytes (Linux: cpu0's in sysfs; elsewhere, or
    unreadable, ``DEFAULT_L2_BYTES``)."""
    try:
        for index in sorted(os.listdir(_CACHE_DIR)):
            path = os.path.join(_CACHE_DIR, index)
            with open(os.path.join(path, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            if level == "2" and kind in ("Unified", "Data"):
                with open(os.path.join(path, "size")) as f:
                    return parse_cache_size(f.read())
    except (OSError, ValueError):
        pass
    return DEFAULT_L2_BYTES


def parse_cache_size(text: str) -> int:
    """Bytes of a sysfs cache size (``512K``, ``2M``, ``1048576``)."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale
