"""A few-channel conv as a 1x1 conv over its im2col matrix (``FUSEC_CONV_FEW_CHANNELS``).

A stem conv reads 3 channels of an image through a large window (ResNet's 7x7/2,
MobileNet's and EfficientNet's 3x3/2). The implicit GEMM reduces over taps x 64-channel
chunks, so each of its R*S reduction steps fills a chunk to 3/64 and waits on a TMA load
of 16-byte pixels: ResNet-50's stem took 876 us of a 3.6 ms batch-32 forward on the H200
(1.5% of the Tensor Cores' rate, ``fusec profile``). Folding taps and channels into one
reduction axis, ``j = (c * R + r) * S + s`` of ``CK = C * R * S`` (147 for the 7x7 stem),
makes the conv a 1x1 conv over ``[N][P][Q][CK]`` with the KCRS weights read as
``[K][C*R*S]`` (their own memory order, so the usual re-layout pads them): 3 reduction
chunks instead of 49. The matrix is written per call by a small kernel before the GEMM
(``fusec/im2col.cuh``, 16-byte stores, ``R*S / (SH*SW)`` times the input's bytes: 122 MB
for the batch-32 stem); the GEMM is the template's channels-last path with geometry
``Im2col.gemm``, its epilogue and output unchanged (the same P x Q pixels).

Two forms of the kernel (``FUSEC_CONV_IM2COL``): "threads" (the default, measured on the
H200: ResNet-50's batch-32 stem 876 -> 204 us with the GEMM) has each thread gather 8
columns of one pixel, so a warp's 2-byte loads scatter over about 20 cache lines;
"tiled" (opt-in, to measure against it) stages ``PIX`` pixels x all columns in shared
memory, gathered with a warp's lanes along neighbouring pixels (their input elements
``SW`` apart: one or two cache lines a load), and stores the block's contiguous rows as
16-byte vectors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fusec.targets.cuda.conv.config import ConvGeometry, cdiv
from fusec.targets.cuda.headers import enumerators, include

THREADS = 256
#: at most this many blocks an SM (a grid-stride loop past it)
BLOCKS_PER_SM = 16
#: the tiled form's shared memory (static: at most 48 KB) and pixels a block
TILED_SMEM_BYTES = 48 * 1024
TILED_PIXELS = (64, 32)
IM2COL_ENV = "FUSEC_CONV_IM2COL"
FORMS = ("threads", "tiled")


def im2col_problem(geo: ConvGeometry) -> str | None:
    """Why ``geo`` cannot run as a 1x1 conv over its im2col matrix (None when it can)."""
    if geo.groups != 1:
        return f"{geo.groups} groups: the im2col matrix folds the channels of one group"
    if geo.r * geo.s == 1 and geo.stride_h == geo.stride_w == 1:
        return "a 1x1 conv of stride 1 is its own im2col matrix"
    if geo.n * geo.p * geo.q * geo.im2col().cgp >= 2**31:
        return "an im2col matrix beyond 32-bit coordinates"
    return None


def tiled_pixels(ckp: int) -> int | None:
    """Pixels a block of the tiled form stages for ``ckp`` columns (rows of ``ckp + 2``
    halves), or None when even 32 of them exceed its shared memory."""
    fitting = [pix for pix in TILED_PIXELS if pix * (ckp + 2) * 2 <= TILED_SMEM_BYTES]
    return fitting[0] if fitting else None


@dataclass(frozen=True)
class Im2col:
    """The im2col matrix ``[N][P][Q][CKP]`` of the conv ``source`` (one group), written by
    the "threads" form or, ``tiled``, the shared-memory one."""

    source: ConvGeometry
    tiled: bool = False

    def __post_init__(self) -> None:
        why = im2col_problem(self.source)
        if not why and self.tiled and self.pix is None:
            why = f"{self.gemm.cgp} columns exceed the tiled im2col's shared memory"
        if why:
            raise ValueError(why)

    @property
    def pix(self) -> int | None:
        """Pixels a block of the tiled form holds."""
        return tiled_pixels(self.gemm.cgp)

    @property
    def pixels(self) -> int:
        g = self.gemm
        return g.n * g.h * g.w

    @property
    def gemm(self) -> ConvGeometry:
        """The 1x1 conv the implicit GEMM runs: ``CK`` channels, ``P x Q`` pixels."""
        return self.source.im2col()

    @property
    def groups(self) -> int:
        """Threads' worth of work: one 16-byte group of 8 columns each."""
        return self.pixels * self.gemm.cgp // 8

    def grid(self, sms: int) -> int:
        if self.tiled:
            assert self.pix is not None
            return cdiv(self.pixels, self.pix)
        return max(1, min(cdiv(self.groups, THREADS), BLOCKS_PER_SM * sms))

    def config(self, name: str) -> str:
        """``struct name``: the constants of ``fusec::im2col`` (im2col.cuh)."""
        geo = self.source
        values = {
            "C": geo.c, "H": geo.h, "W": geo.w, "R": geo.r, "S": geo.s, "SH": geo.stride_h,
            "SW": geo.stride_w, "PT": geo.pad_top, "PL": geo.pad_left, "DH": geo.dil_h,
            "DW": geo.dil_w, "P": geo.p, "Q": geo.q, "CK": self.gemm.c, "CKP": self.gemm.cgp,
        }  # fmt: skip
        if self.tiled:
            assert self.pix is not None  # (__post_init__)
            values |= {"PIX": self.pix, "SP": self.gemm.cgp + 2}
        ints = enumerators([f"{k} = {v}" for k, v in values.items()])
        return (
            f"struct {name} {{\n  enum : int {{\n{ints}\n  }};\n"
            f"  static constexpr long long GROUPS = {self.groups}ll;\n"
            f"  static constexpr long long PIXELS = {self.pixels}ll;\n}};\n"
        )

    def kernel(self, name: str) -> str:
        """The header, ``struct Im2col`` and the ``__global__`` kernel ``name(x, xt)``."""
        return f"""{include("im2col")}{self.config("Im2col")}
// Input NCHW -> its im2col matrix [N][P][Q][CKP], column (c * R + r) * S + s: the
// channels-last input of the 1x1 conv below.
extern "C" __global__ void __launch_bounds__({THREADS})
{name}(const u16* __restrict__ x, u16* __restrict__ xt) {{
  fusec::{"im2col_tiled" if self.tiled else "im2col"}<Im2col>(x, xt);
}}
"""


def form_from_env() -> str:
    """``$FUSEC_CONV_IM2COL`` (validated: "threads", the default, or "tiled")."""
    asked = os.environ.get(IM2COL_ENV, "").strip().lower() or "threads"
    if asked not in FORMS:
        raise ValueError(f"${IM2COL_ENV}: {asked!r}, expected one of {FORMS}")
    return asked
