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

Each thread gathers 8 columns of one pixel and stores them as one 16-byte vector (H200:
ResNet-50's batch-32 stem 876 -> 204 us with the GEMM). A "tiled" form that staged 64
pixels x all columns in shared memory, gathered with a warp's lanes along neighbouring
pixels, was measured against it and removed: 245 vs 210 us for the batch-32 7x7/2 stem,
68.6 vs 56.2 us for a 3x3/2 one (``fusec profile``, same H200 call, 2026-12-03).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.targets.cuda.conv.config import ConvGeometry, cdiv
from fusec.targets.cuda.headers import enumerators, include

THREADS = 256
#: at most this many blocks an SM (a grid-stride loop past it)
BLOCKS_PER_SM = 16


def im2col_problem(geo: ConvGeometry) -> str | None:
    """Why ``geo`` cannot run as a 1x1 conv over its im2col matrix (None when it can)."""
    if geo.groups != 1:
        return f"{geo.groups} groups: the im2col matrix folds the channels of one group"
    if geo.r * geo.s == 1 and geo.stride_h == geo.stride_w == 1:
        return "a 1x1 conv of stride 1 is its own im2col matrix"
    if geo.n * geo.p * geo.q * geo.im2col().cgp >= 2**31:
        return "an im2col matrix beyond 32-bit coordinates"
    return None


@dataclass(frozen=True)
class Im2col:
    """The im2col matrix ``[N][P][Q][CKP]`` of the conv ``source`` (one group)."""

    source: ConvGeometry

    def __post_init__(self) -> None:
        why = im2col_problem(self.source)
        if why:
            raise ValueError(why)

    @property
    def gemm(self) -> ConvGeometry:
        """The 1x1 conv the implicit GEMM runs: ``CK`` channels, ``P x Q`` pixels."""
        return self.source.im2col()

    @property
    def groups(self) -> int:
        """Threads' worth of work: one 16-byte group of 8 columns each."""
        g = self.gemm
        return g.n * g.h * g.w * g.cgp // 8

    def grid(self, sms: int) -> int:
        return max(1, min(cdiv(self.groups, THREADS), BLOCKS_PER_SM * sms))

    def config(self, name: str) -> str:
        """``struct name``: the constants of ``fusec::im2col`` (im2col.cuh)."""
        geo = self.source
        values = {
            "C": geo.c, "H": geo.h, "W": geo.w, "R": geo.r, "S": geo.s, "SH": geo.stride_h,
            "SW": geo.stride_w, "PT": geo.pad_top, "PL": geo.pad_left, "DH": geo.dil_h,
            "DW": geo.dil_w, "P": geo.p, "Q": geo.q, "CK": self.gemm.c, "CKP": self.gemm.cgp,
        }  # fmt: skip
        ints = enumerators([f"{k} = {v}" for k, v in values.items()])
        return (
            f"struct {name} {{\n  enum : int {{\n{ints}\n  }};\n"
            f"  static constexpr long long GROUPS = {self.groups}ll;\n}};\n"
        )

    def kernel(self, name: str) -> str:
        """The header, ``struct Im2col`` and the ``__global__`` kernel ``name(x, xt)``."""
        return f"""{include("im2col")}{self.config("Im2col")}
// Input NCHW -> its im2col matrix [N][P][Q][CKP], column (c * R + r) * S + s: the
// channels-last input of the 1x1 conv below.
extern "C" __global__ void __launch_bounds__({THREADS})
{name}(const u16* __restrict__ x, u16* __restrict__ xt) {{
  fusec::im2col<Im2col>(x, xt);
}}
"""
