"""The channels-last copy of the conv input, NCHW -> ``[N][H][W][G][CGP]``, at copy bandwidth.

Each thread moves one 8 x 8 block: 8 consecutive padded channels (``cp`` in
``0 .. G*CGP-1``; channels ``cg >= CG`` of a group are zeros) x 8 consecutive
pixels of one image. It reads the 8 channel rows, transposes the block in
registers (byte permutes) and writes 8 pixels of 8 channels as 16-byte stores,
which always fit: ``G*CGP`` is a multiple of 8 (``CGP`` is) and the scratch
buffer is 256-byte aligned. Two ways to read:

* vector (``H*W % 8 == 0`` and the input 16-byte aligned, checked at launch):
  one 16-byte non-coherent load of 8 pixels per channel row;
* scalar (otherwise): 8 two-byte loads per channel row, pixels past ``H*W`` zero.

No shared memory: the 32 lanes of a warp are ``LC`` channel lanes (``8*LC``
channels, ``LC = 8`` once there are 64 padded channels) times ``32 / LC``
consecutive pixel groups, so a store instruction writes whole pixel rows of
``16*LC`` bytes and a load instruction reads ``16*32/LC`` contiguous bytes per
channel row: full 32-byte sectors on both sides, nothing to bank-conflict.
A block is ``WARPS`` warps along the pixels: ``8*LC`` channels x ``PIXELS``
pixels (64 x 128 from 64 channels on).
"""

from __future__ import annotations

from dataclasses import dataclass

from fusec.targets.cuda.conv.config import ConvGeometry, cdiv
from fusec.targets.cuda.headers import enumerators, expand, include
from fusec.targets.cuda.linked import LinkedSpec

WARPS = 4
THREADS = 32 * WARPS
SMALL_PIXELS = 16  # RelayoutSpec.few_pixels below this many pixels


@dataclass(frozen=True)
class TransposeTiling:
    """How the channels-last copy of ``geo`` splits into blocks and lanes."""

    geo: ConvGeometry

    @property
    def channels(self) -> int:
        """Padded channels of the copy, ``G * CGP`` (a multiple of 8)."""
        return self.geo.groups * self.geo.cgp

    @property
    def pixels(self) -> int:
        return self.geo.h * self.geo.w

    @property
    def lc(self) -> int:
        """Channel lanes of a warp: the fewest powers of two covering the channels, <= 8."""
        lanes = 1
        while lanes < 8 and 8 * lanes < self.channels:
            lanes *= 2
        return lanes

    @property
    def block_channels(self) -> int:
        return 8 * self.lc

    @property
    def block_pixels(self) -> int:
        return 8 * (32 // self.lc) * WARPS

    @property
    def vectorizable(self) -> bool:
        """Whether every channel row starts 16-byte aligned (given an aligned input)."""
        return self.pixels % 8 == 0

    @property
    def grid(self) -> tuple[int, int, int]:
        return (
            cdiv(self.pixels, self.block_pixels),
            cdiv(self.channels, self.block_channels),
            self.geo.n,
        )

    def thread_block(self, bx: int, by: int, t: int) -> tuple[int, int]:
        """(first padded channel, first pixel) of thread ``t`` of block ``(bx, by)``."""
        lane, warp = t % 32, t // 32
        c0 = by * self.block_channels + (lane % self.lc) * 8
        p0 = bx * self.block_pixels + (warp * (32 // self.lc) + lane // self.lc) * 8
        return c0, p0


def transpose_config(name: str, tiling: TransposeTiling) -> str:
    """``struct name``: the constants of ``fusec::relayout_blocks`` (relayout.cuh) for
    ``tiling``. Emitted before any ``#define`` of the including source (the conv template
    defines ``CG``, ``CGP``... as macros)."""
    geo = tiling.geo
    values = {
        "CHANNELS": geo.c, "CG": geo.cg, "CGP": geo.cgp, "HW": tiling.pixels,
        "CT": tiling.channels, "LC": tiling.lc, "BC": tiling.block_channels,
        "BP": tiling.block_pixels,
    }  # fmt: skip
    items = enumerators([f"{k} = {v}" for k, v in values.items()])
    return f"struct {name} {{\n  enum : int {{\n{items}\n  }};\n}};\n"


def transpose_kernel(name: str, config: str, tiling: TransposeTiling, vector: bool) -> str:
    """The ``__global__`` kernel ``name(x, xt)``: ``fusec::relayout_blocks`` of ``config``
    (``transpose_config``)."""
    if vector and not tiling.vectorizable:
        raise ValueError("the vector path needs H*W % 8 == 0")
    kind = "16-byte" if vector else "2-byte"
    return f"""// Input NCHW -> [NB][H][W][G][CGP] ({kind} loads): one 8 channels x 8 pixels block
// per thread, transposed in registers, written as 8 16-byte pixel rows.
extern "C" __global__ void __launch_bounds__({THREADS})
{name}(const u16* __restrict__ x, u16* __restrict__ xt) {{
  fusec::relayout_blocks<{config}, {str(vector).lower()}>(x, xt);
}}
"""


@dataclass(frozen=True)
class RelayoutSpec(LinkedSpec):
    """A standalone channels-last transpose ``[A][B][P] -> [A][P][B]`` of 16-bit elements
    with ``B % 8 == 0``: the ``conv-layout`` conversions NCHW -> NHWC (``A = N, B = C, P =
    H*W``) and KCRS -> KRSC (``A = K, B = C, P = R*S``) as one linked kernel, the copy
    above (``[A][B][P]`` is the input of a 1x1 conv of A images of 1 x P pixels). The
    16-byte loads serve an input whose base is 16-byte aligned (tested per call), the
    2-byte ones any other; the stores need ``xt`` 16-byte aligned."""

    outer: int
    channels: int
    pixels: int

    def __post_init__(self) -> None:
        if self.channels % 8 or min(self.outer, self.channels, self.pixels) < 1:
            raise ValueError(f"a relayout of [{self.outer}][{self.channels}][{self.pixels}]")

    @property
    def tiling(self) -> TransposeTiling:
        geo = ConvGeometry(self.outer, self.channels, 1, self.pixels, self.channels, 1, 1)
        return TransposeTiling(geo)

    @property
    def few_pixels(self) -> bool:
        """Fewer pixels than two 8-pixel groups (conv weights: R*S of 1, 4 or 9): the 8 x 8
        blocks would leave most lanes of a 128-pixel block idle (3x3 weights: 16 of 128 busy,
        about 4 us for 74 KB on the H200), so a thread gathers one 16-byte group of 8
        channels of one pixel instead (2-byte loads, ``P`` elements apart)."""
        return self.pixels < SMALL_PIXELS

    @property
    def groups(self) -> int:
        """Threads of the few-pixels copy: one per (a, p, 8 channels)."""
        return self.outer * self.pixels * (self.channels // 8)

    @property
    def grid(self) -> tuple[int, int, int]:
        if self.few_pixels:
            return (cdiv(self.groups, THREADS), 1, 1)
        return self.tiling.grid

    def thread_group(self, i: int) -> tuple[int, int, int]:
        """(a, p, first channel) of few-pixels thread ``i``; it writes ``xt[8 i: 8 i + 8]``."""
        per_pixel = self.channels // 8
        ap, b8 = divmod(i, per_pixel)
        a, p = divmod(ap, self.pixels)
        return a, p, 8 * b8

    PREFIX = "relayout"

    threads = THREADS

    def arg_count(self) -> tuple[int, int]:
        return 2, 0

    def cpp_source(self) -> str:
        return expand(self.generate())

    def generate(self) -> str:
        """The C++ as the template writes it: the kernel layer's ``relayout.cuh``, the
        instantiation's constants and the ``extern "C"`` wrapper."""
        a, b, p = self.outer, self.channels, self.pixels
        head = f"// fusec generated channels-last copy: [{a}][{b}][{p}] -> [{a}][{p}][{b}], 16-bit"
        if self.few_pixels:
            return f"""{head}
// ({p} pixels: a thread gathers 8 channels of one pixel, one 16-byte store)
{include("relayout")}
struct Few {{
  enum : long long {{ GROUPS = {self.groups}, B = {b}, P = {p} }};
}};
extern "C" __device__ __attribute__((always_inline))
int {self.function_name}(int* ret, u64 smem_raw, u64 x, u64 xt) {{
  return fusec::relayout_few_pixels<Few>(x, xt);
}}
"""
        call = "fusec::relayout_blocks<Xt, false>((const u16*)x, (u16*)xt);"
        if self.tiling.vectorizable:
            vector = "fusec::relayout_blocks<Xt, true>((const u16*)x, (u16*)xt);"
            call = f"if ((x & 15ull) == 0) {vector}\n  else {call}"
        return f"""{head}
{include("relayout")}
{transpose_config("Xt", self.tiling)}
extern "C" __device__ __attribute__((always_inline))
int {self.function_name}(int* ret, u64 smem_raw, u64 x, u64 xt) {{
  {call}
  return 0;
}}
"""
