"""Host side of the Hopper GEMM: its loaded cubin, launched on the caller's stream.

Tensor maps, parameter blocks and the loaded-cubin plumbing are the kernel layer's
(``fusec.targets.cuda.tensormaps``, whose docstring says how a call stays one dictionary
lookup and one ``cuLaunchKernel``): this module holds what is the GEMM's own, the
``GemmKernel`` that prepares its operands' maps and launches.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from fusec.errors import FusecError
from fusec.targets.cuda import split_k
from fusec.targets.cuda import tensormaps as tm
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.gemm import cpp
from fusec.targets.cuda.gemm.config import tile_count
from fusec.targets.cuda.tensormaps import (
    _PREPARED_LIMIT,
    LoadedKernel,
    Operand,
    Prepared,
    parameter_block,
)


class GemmCall(NamedTuple):
    """One launch's operands and sizes: ``out[z] = epilogue(A[z] @ B[z])`` for z <
    ``batches``, queued on ``stream``, over at most ``sms`` blocks (the key of its
    ``Prepared`` launch); ``groups``: a grouped GEMM's device table (``GemmSpec.grouped``:
    the row tiles in use and each one's B batch), 0 otherwise; ``w4``: an int4 B's scales
    and zero points (``GemmSpec.w4``: ``b`` is then its packed codes), () otherwise."""

    stream: int
    a: Operand
    b: Operand
    out: int
    extras: tuple[int, ...]
    m: int
    n: int
    k: int
    batches: int
    sms: int
    groups: int = 0
    w4: tuple[int, ...] = ()


class GemmKernel(LoadedKernel):
    """A loaded GEMM cubin: launch it with ``__call__``."""

    def __init__(self, spec: cpp.GemmSpec, cubin: bytes) -> None:
        super().__init__(cubin, spec.config.smem_bytes)
        self.spec = spec
        self.staged = spec.config.epilogue == "smem"  # takes the output's tensor map
        self.threads = spec.config.threads
        self.lock = threading.Lock()
        self.prepared: dict[GemmCall, Prepared] = {}
        #: padded copies of operands TMA cannot read in place, per (stream, operand, bytes):
        #: reused across calls, ordered by the stream (copy, then the kernel that reads it)
        self.scratch: dict[tuple, int] = {}

    def __call__(
        self,
        a: Operand,
        b: Operand,
        out: int,
        extras: tuple[int, ...],
        m: int,
        n: int,
        k: int,
        batches: int,
        stream: int = 0,
        sms: int = H200.sms,
        groups: int = 0,
    ) -> None:
        """``out[z] = epilogue(A[z] @ B[z])`` for z < batches, queued on ``stream``
        (``groups``: a grouped GEMM's table, ``GemmCall``)."""
        if m <= 0 or n <= 0 or batches <= 0:
            return
        key = GemmCall(stream, a, b, out, extras, m, n, k, batches, sms, groups)
        prepared = self.prepared.get(key)
        if prepared is None or prepared.generation != tm._maps.generation:
            prepared = self.prepare(key)
            if len(self.prepared) >= _PREPARED_LIMIT:
                self.prepared.clear()
            self.prepared[key] = prepared
        self.launch(prepared)

    def launch(self, prepared: Prepared) -> None:
        """Queue the padded-pitch copies (if any) and the kernel of ``prepared``."""
        if not prepared.copies:
            self.launch_raw(prepared.grid, self.threads, prepared.stream, prepared.params)
            return
        # the padded copies are per stream: another thread's copy must not land between
        # this call's copy and the kernel that reads it
        with self.lock:
            for copy in prepared.copies:
                tm._check(self.drv.cuMemcpy2DAsync(copy, prepared.stream))
            self.launch_raw(prepared.grid, self.threads, prepared.stream, prepared.params)

    def prepare(self, call: GemmCall) -> Prepared:
        """Tensor maps, padded-copy descriptors and the parameter block of one launch."""
        stream, a, b, out, extras, m, n, k, batches, sms, groups, w4 = call
        spec, config, drv = self.spec, self.spec.config, self.drv
        if k <= 0:
            raise FusecError("the GEMM kernel needs K >= 1")
        if spec.grouped != bool(groups):
            raise FusecError("a grouped GEMM kernel and a groups table come together")
        if (spec.w4 is not None) != (len(w4) == 2) or (w4 and (b.ptr % 16 or k % 64)):
            raise FusecError(
                "an int4-B GEMM kernel takes its scales and zero points, 16-byte aligned "
                "codes and K a multiple of 64"
            )
        if len(extras) != len(spec.epilogue.extras):
            raise FusecError(
                f"epilogue takes {len(spec.epilogue.extras)} inputs, got {len(extras)}"
            )
        handle = drv.CUstream(stream)
        # K-major: BK values (one 128-byte row: 64 16-bit or 32 f32) x the tile's rows
        a_box = (config.bk, config.bm, 1) if spec.a_major == "k" else (64, 64, 1)
        b_rows = config.bn // 2 if spec.swiglu else config.bn  # gated: two boxes a stage
        b_box = (config.bk, b_rows, 1) if spec.b_major == "k" else (64, 64, 1)
        with self.lock:
            (a, a_pitch, a_copy) = self._pitched(a, "a", stream)
            b_copy = None  # (an int4 B's codes are read by the producer's threads, no map)
            if not w4:
                (b, b_pitch, b_copy) = self._pitched(b, "b", stream)
            while True:  # until no slab was retired meanwhile (which drops the maps made)
                generation = tm._maps.generation
                map_a = tm.tensor_map(spec.dtype, a, a_pitch, a_box, stream)
                map_b = b.ptr if w4 else tm.tensor_map(spec.dtype, b, b_pitch, b_box, stream)
                out_map = (self._output_map(out, m, n, batches, stream),) if self.staged else ()
                if tm._maps.generation == generation:
                    break
            split: tuple[int, ...] = ()
            if config.split_k > 1:  # every split's partial tile, a counter per tile
                tiles = tile_count(config, m, n, batches)
                split = split_k.workspace(
                    drv, self.scratch, stream, tiles, config.split_k, config.bm * config.bn
                )
            table = (groups,) if spec.grouped else ()
            params, keep = parameter_block(
                (map_a, map_b, out, *out_map, *extras, *w4, *split, *table), (m, n, k, batches)
            )
            n_tiles = 2 * n if spec.swiglu else n  # gated: BN / 2 output columns a tile
            grid = min(tile_count(config, m, n_tiles, batches) * config.split_k, sms)
            copies = tuple(c for c in (a_copy, b_copy) if c is not None)
            return Prepared(tm._maps.generation, handle, grid, params, keep, copies)

    def _output_map(self, out: int, m: int, n: int, batches: int, stream: int) -> int:
        """The "smem" epilogue's output tensor map (batches x M x N, 128-byte swizzled boxes
        of 16 rows x 128 bytes), or 0 when TMA cannot address the output (rows or base not
        16-byte aligned): the kernel then stores from shared memory itself, masked."""
        size = cpp.element_bytes(self.spec.out_dtype)
        pitch = n * size
        if pitch % 16 or out % 16:
            return 0
        box = (128 // size, 16, 1)
        return tm.tensor_map(self.spec.out_dtype, Operand(out, m, n, batches), pitch, box, stream)

    def _pitched(self, op: Operand, role: str, stream: int) -> tuple[Operand, int, Any]:
        """``op``, its row pitch in bytes and the copy (or None) that makes it readable by
        TMA: a padded copy when the pitch is not a multiple of 16 bytes or the base is not
        16-byte aligned (TMA's rules)."""
        drv = self.drv
        pitch = op.cols * cpp.element_bytes(self.spec.dtype)
        if pitch % 16 == 0 and op.ptr % 16 == 0:
            return op, pitch, None
        padded = -(-pitch // 16) * 16
        rows = op.rows * op.batch
        key = (stream, role, padded * rows)
        ptr = self.scratch.get(key)
        if ptr is None:
            ptr = self.scratch[key] = int(tm._check(drv.cuMemAlloc(padded * rows)))
        copy = drv.CUDA_MEMCPY2D()
        copy.srcMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.srcDevice = drv.CUdeviceptr(op.ptr)
        copy.srcPitch = pitch
        copy.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.dstDevice = drv.CUdeviceptr(ptr)
        copy.dstPitch = padded
        copy.WidthInBytes = pitch
        copy.Height = rows
        return Operand(ptr, op.rows, op.cols, op.batch), padded, copy
