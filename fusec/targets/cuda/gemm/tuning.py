"""``fusec tune``: time a few tile configurations of each GEMM group, record the winner.

A record is keyed by everything the kernel specialises on except the tile
(operand types and layouts, the epilogue, the LayerNorm/softmax parts), the
problem sizes and the device (name and SM count). It lives in the kernel
cache folder (``tuning/<key>.json``) with the timings of every candidate, and
the ``tile-gemm`` pass reads it back (``choice = "tuned"`` on the attribute).
Timing: the whole group (pre-pass, GEMM, finalise) on fresh random inputs,
CUDA events on one stream around each call, median of ``reps`` after warm-up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusec.dialect import ops as ai
from fusec.errors import FusecError
from fusec.targets.cuda.caps import DeviceCaps, current_device
from fusec.targets.cuda.gemm.config import TileConfig


def problem_key(fused: ai.FusedOp, p: Any, device: DeviceCaps) -> str:
    """The tuning key of a planned group (see the module docstring)."""
    from fusec.targets.cuda.gemm import template

    base = template.fit_operands(p, TileConfig())  # tf32 operands: a BK = 32 tile
    spec, sources, finalise, prep = template.gemm_spec(fused, p, base)
    parts = (
        repr(dataclasses.replace(spec, config=base)),
        repr(finalise),
        repr(prep),
        repr(sources),
        f"{p.m}x{p.n}x{p.k}x{p.batches}",
        device.name,
        str(device.sms),
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _folder(cache: Any = None) -> Path:
    from fusec.runtime.cache import default_cache

    cache = cache if cache is not None else default_cache()
    return Path(cache.root) / "tuning"


def lookup(fused: ai.FusedOp, p: Any, device: DeviceCaps, cache: Any = None) -> TileConfig | None:
    """The recorded winner for this group on ``device``, or None."""
    path = _folder(cache) / f"{problem_key(fused, p, device)}.json"
    try:
        data = json.loads(path.read_text())
        return TileConfig.parse(data["best"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no record, or an unreadable one: the heuristic decides


def record(key: str, best: TileConfig, timings: dict[str, float], cache: Any = None) -> Path:
    from fusec.runtime.cache import _atomic_write

    path = _folder(cache) / f"{key}.json"
    data = {"best": best.text, "timings_ms": timings}
    try:
        _atomic_write(path, json.dumps(data, indent=1).encode(), exclusive=False)
    except OSError as err:
        raise FusecError(f"cannot write the tuning record {path}: {err}") from None
    return path


@dataclass
class TuneResult:
    """One group's candidates and the winner."""

    group: int
    problem: str
    timings: dict[str, float]
    best: str
    path: str


def tune(module: Any, entry: str | None = None, reps: int = 20, cache: Any = None) -> list:
    """Time the candidates of every GEMM group of the entry function on this GPU and
    record each winner; returns one ``TuneResult`` per group."""
    from fusec.runtime.reference import entry_function
    from fusec.targets.cuda.env import gpu_available
    from fusec.targets.cuda.gemm import template
    from fusec.targets.cuda.gemm.config import candidates, to_attr
    from fusec.targets.cuda.program import CudaBackend

    if not gpu_available():
        raise FusecError("fusec tune needs a usable NVIDIA GPU (it times kernels)")
    backend = CudaBackend(cache)
    device = current_device()
    function = entry_function(module, entry)
    results = []
    groups = [op for op in function.body.block.ops if isinstance(op, ai.FusedOp)]
    for index, fused in enumerate(groups):
        p = template.plan(fused) if fused.kind_name == "matmul" else "not a matmul group"
        if isinstance(p, str):
            continue
        full_rows = p.softmax_mode == "row"
        timings: dict[str, float] = {}
        inputs = _random_inputs(fused)
        for candidate in candidates(p.m, p.n, p.batches, device.sms, full_rows, p.k):
            config = template.fit_operands(p, candidate)  # tf32 operands: a BK = 32 tile
            fused.attributes[template.TILE_ATTR] = to_attr(config, "tune candidate")
            kernel = template.generate(fused, f"tune{index}")
            try:
                fn = backend.load(kernel)
            except FusecError as err:  # a candidate that does not build is skipped
                timings[config.text] = float("nan")
                print(f"  {config.text}: not built ({err})")
                continue
            timings[config.text] = _time(fn, inputs, kernel, reps)
        finite = {t: ms for t, ms in timings.items() if ms == ms}
        if not finite:
            raise FusecError(f"no tile configuration of group #{index} could be built")
        best = TileConfig.parse(min(finite, key=finite.__getitem__))
        fused.attributes[template.TILE_ATTR] = to_attr(best, "tuned")
        key = problem_key(fused, p, device)
        path = record(key, best, timings, cache)
        problem = f"{p.m}x{p.n}x{p.k}" + (f" x{p.batches}" if p.batches > 1 else "")
        results.append(TuneResult(index, problem, timings, best.text, str(path)))
    return results


def _random_inputs(fused: ai.FusedOp) -> list:
    import numpy as np

    from fusec.dialect.ops import spec_of
    from fusec.targets.cuda.env import numba_cuda

    cuda = numba_cuda()
    rng = np.random.default_rng(0)
    arrays = []
    for value in fused.inputs:
        spec = spec_of(value.type)
        data = rng.standard_normal(spec.shape).astype(np.float32)
        if spec.dtype == "f16":
            data = data.astype(np.float16).view(np.int16)
        elif spec.dtype == "bf16":
            data = (data.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
        arrays.append(cuda.to_device(np.ascontiguousarray(data).reshape(-1)))
    return arrays


class _Ptr:
    __slots__ = ("ptr",)

    def __init__(self, array: Any) -> None:
        self.ptr = int(array.__cuda_array_interface__["data"][0])


def _time(fn: Any, inputs: list, kernel: Any, reps: int) -> float:
    import numpy as np

    from fusec.targets.cuda.env import numba_cuda
    from fusec.targets.cuda.streams import stream_ptr

    cuda = numba_cuda()
    stream = cuda.stream()
    handle = stream_ptr(stream)
    size = int(np.prod(kernel.outputs[0].shape))
    storage = np.float32 if kernel.outputs[0].dtype == "f32" else np.int16
    out = cuda.device_array(max(size, 1), storage)
    bufs, outs = [_Ptr(a) for a in inputs], [_Ptr(out)]
    for _ in range(3):
        fn.direct(handle, bufs, outs)
    times = []
    for _ in range(5):  # back-to-back launches: the host's launch cost overlaps the GPU's work
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record(stream)
        for _ in range(reps):
            fn.direct(handle, bufs, outs)
        end.record(stream)
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) / reps)
    times.sort()
    return times[len(times) // 2]
