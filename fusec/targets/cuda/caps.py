"""What the cuda templates need to know of a GPU: ``DeviceCaps``, resolved once.

Tile choices depend on the device: the GEMM heuristic sizes its persistent grid and
its waves by the SM count, the conv tile too, and every block is limited by the
shared memory one block may use. Those choices are written into the IR by the
``tile-gemm`` pass (``fusec.tile`` on each Tensor Core group), so the device must be
known there, and only there: ``fusec.compile`` resolves it once (``resolve_device``:
the ``sms``/``arch`` the caller gives, else the usable GPU's, else an H200's) and
``build_pipeline`` hands it to the pass. Code generation reads the attribute, never
the machine, so ``fusec compile --target cuda --sms 132 --emit cuda`` writes the same
text on every machine. Launches size their grids by the GPU they run on
(``CudaProgram``), which is a run-time fact, not a code-generation one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

#: Shared memory one block may use on an H100/H200 (227 KB).
SMEM_PER_BLOCK_SM90 = 227 * 1024


@dataclass(frozen=True)
class DeviceCaps:
    """A GPU as the tile heuristics see it."""

    name: str
    sms: int
    smem_per_block: int = SMEM_PER_BLOCK_SM90
    arch: str = "sm_90a"


#: The device tiles are chosen for when no GPU is usable and none is named.
H200 = DeviceCaps("H200 (default)", 132)


@functools.cache
def probe_device() -> DeviceCaps | None:
    """The usable GPU's caps (asked once a process), or None without one."""
    from fusec.targets.cuda.env import driver_present, gpu_available, numba_cuda

    if not driver_present() or not gpu_available():
        return None
    gpu = numba_cuda().get_current_device()
    name = gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name)
    major, minor = gpu.compute_capability
    arch = f"sm_{major}{minor}a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"
    return DeviceCaps(name, int(gpu.MULTIPROCESSOR_COUNT), arch=arch)


def resolve_device(sms: int = 0, arch: str = "") -> DeviceCaps:
    """The device to generate for: ``sms``/``arch`` when given (the rest an H200's: the
    same answer on every machine), else the usable GPU's, else ``H200``."""
    if sms < 0:
        raise ValueError(f"the SM count must be positive, got {sms}")
    if sms or arch:
        sms, arch = sms or H200.sms, arch or H200.arch
        return DeviceCaps(f"{sms} SMs, {arch} (given)", sms, arch=arch)
    return probe_device() or H200


def current_device(sms: int = 0) -> DeviceCaps:
    """This machine's device as ``fusec tune`` records it: ``sms`` when given
    (``caps.resolve_device``), else the usable GPU, else the H200."""
    return resolve_device(sms)


def given_device(sms: int = 0) -> DeviceCaps:
    """The device the pass tiles for: ``sms`` SMs when given, else an H200; never the
    machine's (the caller resolved it, ``caps.resolve_device``)."""
    return resolve_device(sms) if sms else H200


def tuning_device(sms: int = 0) -> DeviceCaps:
    """The device whose ``fusec tune`` records a ``tuned=true`` pass reads: this machine's
    as ``fusec tune`` keyed them (``current_device()``) when it has ``sms`` SMs (or ``sms``
    is 0), else the given one (whose records only a tune for it could have written)."""
    machine = current_device()
    return machine if sms in (0, machine.sms) else given_device(sms)
