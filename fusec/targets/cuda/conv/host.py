"""Host side of the conv kernels: load the cubin, tensor maps, scratch, launch on a stream.

Per call of the implicit GEMM, on the caller's stream and in this order:

1. the weights are re-laid out (``fusec_convw_*``, KCRS -> [K][R*S][CGP]; not with
   ``spec.weight == "krsc"``: the group takes them so, ``conv-layout``) and
2. the input is made channels-last (``fusec_convx_*``, NCHW -> [N][H][W][G][CGP];
   ``fusec_convxs_*``, its 2-byte-load twin, for an input not 16-byte aligned), or
   for an im2col input its im2col matrix is written (``fusec_convi_*``)
   into scratch buffers kept per stream (a later call on the same stream runs
   after this one, so reusing them is ordered; another stream has its own);
3. the conv kernel: a persistent grid of ``min(tiles x splits, SMs)`` blocks (split-K's
   workspace allocated per stream, ``fusec.targets.cuda.split_k``).

With ``spec.input == "nchw"`` step 2 is gone: the conv kernel's tensor map is over
the NCHW input itself; with ``"nchw-ld"`` the kernel gets the input's address (either
way an input not 16-byte aligned is first copied to an aligned scratch buffer by
``cuMemcpyDtoDAsync``).

Tensor maps are cached by everything they encode (``tensormaps``' cache).
"""

from __future__ import annotations

import ctypes
from typing import Any

from fusec.errors import FusecError
from fusec.targets.cuda import split_k
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.conv.config import (
    CHUNK,
    nchw_box,
    needs_element_strides,
    nhwc_box,
    nhwc_element_strides,
)
from fusec.targets.cuda.conv.cpp import DIRECT_THREADS, ConvSpec, DirectConvSpec
from fusec.targets.cuda.conv.im2col import THREADS as IM2COL_THREADS
from fusec.targets.cuda.conv.transpose import THREADS, RelayoutSpec
from fusec.targets.cuda.tensormaps import LinkedKernel
from fusec.targets.cuda.tensormaps import _check as check
from fusec.targets.cuda.tensormaps import tensor_map_nd as tensor_map

_RELAYOUT_THREADS = 256


class ConvKernelBase(LinkedKernel):
    """What ``ConvLaunch`` calls, the implicit GEMM's kernel or the direct conv's:
    ``kernel(x, w, out, extras, stream, sms)`` queues the conv of input ``x`` and weights ``w``
    into ``out``, its epilogue reading ``extras``, on ``stream`` (a GPU of ``sms`` SMs)."""

    def __call__(
        self,
        x: int,
        w: int,
        out: int,
        extras: tuple[int, ...],
        stream: int = 0,
        sms: int = H200.sms,
    ) -> None:
        # one call's scratch buffers and launches stay together: another thread's call on
        # the same stream must not queue between them
        with self.lock:
            self.queue(x, w, out, extras, stream, sms)

    def queue(
        self, x: int, w: int, out: int, extras: tuple[int, ...], stream: int, sms: int
    ) -> None:
        """Queue the launches of one call (the lock held)."""
        raise NotImplementedError


class ConvKernel(ConvKernelBase):
    """The implicit-GEMM conv of ``spec``: a call queues the re-layout and the conv."""

    def __init__(self, spec: ConvSpec, cubin: bytes) -> None:
        super().__init__(cubin, spec.tile.smem_bytes, spec.named_kernels)
        self.spec = spec
        self.relayout = self.named[spec.relayout_name] if spec.relayouts_weights else None
        #: the im2col matrix's description (built once, not per launch) and its kernel
        self.matrix = spec.im2col
        self.im2col = self.named[spec.im2col_name] if self.matrix else None
        self.transpose = self.transpose_scalar = None
        if spec.copies_input:
            self.transpose = self.named[spec.transpose_name]
            scalar = spec.transpose_scalar_name
            self.transpose_scalar = self.named[scalar] if scalar else self.transpose

    def transpose_for(self, x: int) -> Any:
        """The channels-last copy that can read ``x``: 16-byte loads need it 16-byte aligned."""
        return self.transpose if x % 16 == 0 else self.transpose_scalar

    def queue(
        self, x: int, w: int, out: int, extras: tuple[int, ...], stream: int, sms: int
    ) -> None:
        spec, geo, tile = self.spec, self.spec.geo, self.spec.tile
        if len(extras) != len(spec.epilogue.extras):
            raise FusecError(
                f"epilogue takes {len(spec.epilogue.extras)} inputs, got {len(extras)}"
            )
        handle = self.stream(stream)
        wp = self.weights(w, stream, handle, sms)
        map_x = self.input_map(x, stream, handle, sms)
        row = geo.cgp * 2
        taps = geo.r * geo.s
        map_w = tensor_map(
            spec.dtype,
            wp,
            (geo.cg, taps, geo.kg, geo.groups),
            (row, row * taps, row * taps * geo.kg),
            (CHUNK, 1, tile.bm, 1),
            stream,
        )
        split: tuple[int, ...] = ()
        if tile.split_k > 1:  # every split's partial tile, a counter per tile
            split = split_k.workspace(
                self.drv, self.scratch, stream, spec.tiles, tile.split_k, tile.bm * tile.bn
            )
        args = [(ctypes.c_uint64, v) for v in (map_w, map_x, out, *extras, *split)]
        grid = min(spec.tiles * tile.split_k, sms)
        self.launch(self.function, grid, tile.threads, tile.smem_bytes, handle, args)

    def weights(self, w: int, stream: int, handle: Any, sms: int) -> int:
        """The address of the ``[K][R*S][CGP]`` weights: ``w`` itself when given KRSC, else
        their re-layout (queued here) in a scratch buffer."""
        geo = self.spec.geo
        if not self.spec.relayouts_weights:
            if w % 16:  # TMA reads from a 16-byte aligned base
                raise FusecError("KRSC conv weights must be 16-byte aligned")
            return w
        total = geo.k * geo.r * geo.s * geo.cgp
        wp = self.buffer((stream, "w"), total * 2)
        blocks = min(-(-total // _RELAYOUT_THREADS), 4 * sms)
        u64 = ctypes.c_uint64
        self.launch(self.relayout, blocks, _RELAYOUT_THREADS, 0, handle, [(u64, w), (u64, wp)])
        return wp

    def input_map(self, x: int, stream: int, handle: Any, sms: int = H200.sms) -> int:
        """The tensor map of the B operand: over the channels-last copy of ``x`` or its
        im2col matrix (queued here), or over NCHW ``x`` itself for ``input == "nchw"``; for
        ``"nchw-ld"`` the address of ``x`` (16-byte aligned)."""
        spec, geo = self.spec, self.spec.geo
        u64 = ctypes.c_uint64
        if self.matrix is not None:  # 2-byte loads: any alignment
            xt = self.buffer((stream, "x"), geo.nhwc_elements * 2)
            grid = self.matrix.grid(sms)
            self.launch(self.im2col, grid, IM2COL_THREADS, 0, handle, [(u64, x), (u64, xt)])
            return self.channels_last_map(spec, xt, stream)
        # TMA and 16-byte loads need 16-byte alignment
        if spec.input in ("nchw", "nchw-ld") and x % 16:
            size = geo.n * geo.c * geo.h * geo.w * 2
            aligned = self.buffer((stream, "x"), size)
            check(self.drv.cuMemcpyDtoDAsync(aligned, x, size, handle))
            x = aligned
        if spec.input == "nchw-ld":
            return x  # the producer warpgroup loads it
        if spec.input == "given":  # the previous conv group wrote it channels-last
            if x % 16:
                raise FusecError("a channels-last conv input must be 16-byte aligned")
            return self.channels_last_map(spec, x, stream)
        if spec.input == "nchw":
            plane = geo.h * geo.w * 2
            return tensor_map(
                spec.dtype,
                x,
                (geo.w, geo.h, geo.cg, geo.groups, geo.n),
                (geo.w * 2, plane, plane * geo.cg, plane * geo.c),
                nchw_box(geo),
                stream,
            )
        xt = self.buffer((stream, "x"), geo.nhwc_elements * 2)
        copy = spec.transposing
        self.launch(self.transpose_for(x), copy.grid, THREADS, 0, handle, [(u64, x), (u64, xt)])
        return self.channels_last_map(spec, xt, stream)

    @staticmethod
    def channels_last_map(spec: ConvSpec, x: int, stream: int) -> int:
        """The tensor map of a channels-last input ``[N][H][W][G][CGP]`` at ``x``: dims
        (CG, G, W, H, N), one strip's box (``config.nhwc_box``), every stride_w-th pixel."""
        geo = spec.geo
        pixel = geo.groups * geo.cgp * 2  # bytes per channels-last pixel
        return tensor_map(
            spec.dtype,
            x,
            (geo.cg, geo.groups, geo.w, geo.h, geo.n),
            (geo.cgp * 2, pixel, pixel * geo.w, pixel * geo.w * geo.h),
            nhwc_box(geo),
            stream,
            nhwc_element_strides(geo) if needs_element_strides(geo) else None,
        )


class DirectConvKernel(ConvKernelBase):
    """The direct conv of ``spec``: one grid-stride launch (the NHWC depthwise kernel: a
    block-stride loop over its tiles, ``DepthwiseTile``, at most 8 blocks an SM)."""

    def __init__(self, spec: DirectConvSpec, cubin: bytes) -> None:
        super().__init__(cubin, spec.smem_bytes)
        self.spec = spec

    def queue(
        self, x: int, w: int, out: int, extras: tuple[int, ...], stream: int, sms: int
    ) -> None:
        geo, tile = self.spec.geo, self.spec.tile
        if tile is None:
            total = geo.n * geo.k * geo.p * geo.q
            blocks = max(1, min(-(-total // DIRECT_THREADS), 16 * sms))
        else:
            if (x | out) % 4 and tile.cv == 2:  # channel pairs: 32-bit loads and stores
                raise FusecError("the NHWC depthwise conv reads and writes 4-byte aligned buffers")
            blocks = max(1, min(tile.tiles(geo), 8 * sms))
        args = [(ctypes.c_uint64, v) for v in (x, w, out, *extras)]
        threads, smem = self.spec.threads, self.spec.smem_bytes
        self.launch(self.function, blocks, threads, smem, self.stream(stream), args)


class RelayoutKernel(LinkedKernel):
    """A standalone channels-last transpose (``transpose.RelayoutSpec``): one launch."""

    def __init__(self, spec: RelayoutSpec, cubin: bytes) -> None:
        super().__init__(cubin, 0)
        self.spec = spec

    def __call__(self, x: int, xt: int, stream: int = 0) -> None:
        if xt % 16:  # 16-byte stores
            raise FusecError("the channels-last transpose writes a 16-byte aligned buffer")
        args = [(ctypes.c_uint64, v) for v in (x, xt)]
        with self.lock:
            self.launch(self.function, self.spec.grid, THREADS, 0, self.stream(stream), args)
