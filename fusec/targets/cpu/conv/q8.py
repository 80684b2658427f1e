"""A quantized ``ai.conv2d`` on the cpu int8 GEMM (issue 31): ``conv_method`` "q8".

What a QDQ convolution is after ``recognize-patterns`` (``ScalesAfterQuantizedConv``):
``conv2d(dequantize(codes, 1, zero), W) * scales``, the input the codes of uint8 (or
int8) activations less their zero point (as float32; the ``dequantize`` is the last op
of the group that writes it: the previous layer's requantizing epilogue, or the input's
quantize / dequantize pair) and ``W`` a constant of integers in -128..127 (a weight's
codes, ``canonicalize`` folded their ``dequantize``). Such a convolution (one group,
K a multiple of 16, a target with AVX-512 VNNI) runs as blocks of output rows of one
image, each:

* the block's input rows as uint8 codes ``v + zero``, channels-last (``xq``), then
  im2row of bytes: A's row ``p`` (``q8buf``, ``padded_k(C*R*S)`` bytes) the ``C`` codes
  under tap ``(r, s)`` of pixel ``p``'s window, tap after tap, and in the padding the
  code of the zero point (``zero``), which the reference's zero padding of the
  dequantized input stands for; a 1x1, stride-1, unpadded conv writes its pixels'
  codes into A's rows directly;
* ``gemm_q8_bytes`` (``_amx`` where AMX-INT8 is granted and the rows are long,
  ``Q8_AMX_MIN_K``) of those rows by the weight's
  int8 codes packed once by the Program (layout "q8_krsc": the K x R*S*C weight as B^T),
  exact int32 sums less the zero point's share, into ``ct`` (P x K, float32 of the
  exact integer);
* ``ct`` transposed (tiles of ``TRANSPOSE_PIXELS``) into ``cbuf``'s K channel rows of
  the block's pixels for the epilogue (scales, bias, activation, requantization), as
  the im2col blocks' are.

The products and sums are exact integers (each below 2**31), so the result before the
epilogue is the float32 rounding of the exact sum, as onnxruntime's QLinearConv has it;
the float path rounded every partial sum of the dequantized values.
"""

from __future__ import annotations

import math

from fusec.targets.cpu import abi
from fusec.targets.cpu.blocked import MIN_BLOCKS, Workspace
from fusec.targets.cpu.conv.choice import q8_zero
from fusec.targets.cpu.conv.gemm import ConvBlocks
from fusec.targets.cpu.entry import EntryScratch

#: Target bytes of a block's workspace (A's rows of bytes, the GEMM's P x K result and
#: its transpose): A and C of the GEMM stay in L2.
Q8_BLOCK_BYTES = 1 << 20
#: Fewest bytes of A's rows (C*R*S padded to 64) for the AMX form: it stores its int32
#: tiles by a scalar loop, which shorter rows do not pay back (448 rows by 256 columns,
#: 1 thread, load ~6: K 64 VNNI 30 us / AMX 118, K 128 51 / 120, K 256 91 / 135; 448 x 64,
#: K 320 27 / 35, K 576 47 / 39).
Q8_AMX_MIN_K = 512
#: Output pixels a tile of the transpose of the GEMM's result takes (its rows stay in L1
#: while their columns go to the channel rows; row by row, the reads K floats apart
#: missed L1 at every one: 3136 x 256 pixels 4.6 of a conv's 6.5 ms).
TRANSPOSE_PIXELS = 16
#: Fewest output pixels a block holds when the plane has them (the AMX form computes
#: blocks of 32 rows; a block of fewer rows reads all of the packed weight for little).
Q8_MIN_PIXELS = 64


class Q8Blocks(ConvBlocks):
    """Blocks of ``bh`` output rows of one image of a quantized convolution (``q8_zero``):
    the block's input rows as channels-last codes, im2row of bytes, the int8 GEMM by the
    weight packed once, transpose, epilogue (module docstring)."""

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local, weights):
        self._read_op(op, reads, c_array, c_local, True)
        zero = q8_zero(op)
        assert zero is not None and weights is not None and c_local
        self.zero = zero
        from fusec.targets.cpu.gemm_int8 import amx_available, padded_k, scratch_floats

        self.kp = padded_k(self.crs)
        amx = amx_available() and self.kp >= Q8_AMX_MIN_K
        self.q8_gemm = "gemm_q8_bytes" + ("_amx" if amx else "")
        self.imports = (abi.import_line(self.q8_gemm),)
        self.prepared = ((weights, "q8_krsc"),)
        #: a 1x1, stride-1, unpadded conv: its A rows are the input's pixels as they are
        self.pointwise = (self.r, self.s, self.sh, self.sw) == (1, 1, 1, 1) and not any(
            (self.pt, self.pl, self.h - self.oh, self.w - self.ow)
        )
        # a pixel's bytes: A's row, ct and cbuf (f32)
        per_pixel = self.kp + 8 * self.k
        fit = max(1, Q8_BLOCK_BYTES // per_pixel // self.ow)
        bh = max(1, min(self.oh, max(fit, -(-Q8_MIN_PIXELS // self.ow))))
        if self.n < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * self.n / MIN_BLOCKS)))
        self.bh, self.nrb = bh, math.ceil(self.oh / bh)
        self.count = self.n * self.nrb
        self.pixels = bh * self.ow
        #: input rows a block reads (its output rows' windows)
        self.in_rows = (bh - 1) * self.sh + (self.r - 1) * self.dh + 1
        if not self.pointwise:
            workspace.add("xq", -(-self.in_rows * self.w * self.c // 4))
        workspace.add("q8buf", scratch_floats(self.pixels, self.crs))
        workspace.add("ct", self.pixels * self.k)
        workspace.add(c_array, self.k * self.pixels)

    def launch_lines(self) -> list[str]:
        return []

    def entry_lines(self, scratch: EntryScratch) -> list[str] | None:
        return []

    def arrays(self) -> list[str]:
        return [self.reads[v] for v in self.op.operands]

    def describe(self) -> str:
        how = "codes as bytes" if self.pointwise else "codes channels-last, im2row of bytes"
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.c}x{self.r}x{self.s}"
            f" in {self.count} blocks of {self.bh} output rows: {how}, {self.q8_gemm} "
            "(uint8 x int8 -> int32, weight packed once), transpose, epilogue per block"
        )

    def compute(self) -> list[str]:
        """A's rows as uint8 codes in ``q8buf`` (rows of ``kp`` bytes, columns in the
        packed weight's (r, s, c) order; the zero point's code in the padding); the int8
        GEMM into ``ct``; ``cbuf[kk, q] = ct[q, kk]``."""
        x, w = (self.reads[v] for v in self.op.operands)
        h, wd, c, k, kp, zero = self.h, self.w, self.c, self.k, self.kp, self.zero
        gemm = (
            f"{self.q8_gemm}(pw, {k}, {self.crs}, q8buf, np.int32({zero}), {w}, {k}, 0, ct, 0, {k})"
        )
        lines = ["ab = q8buf.view(np.uint8)"]
        if self.pointwise:  # pixel p0 + q of the plane is A's row q
            lines += [
                f"for cc in range({c}):",
                f"    src = (n * {c} + cc) * {h * wd} + p0",
                "    for q in range(pw):",
                f"        ab[q * {kp} + cc] = np.uint8(np.int32({x}[src + q]) + {zero})",
            ]
        else:
            lines += [
                "xb = xq.view(np.uint8)",
                f"iy0 = oh0 * {self.sh} - {self.pt}",  # the block's first input row
                f"for cc in range({c}):",
                f"    plane = (n * {c} + cc) * {h * wd}",
                f"    for i in range({self.in_rows}):",
                "        iy = iy0 + i",
                f"        if iy >= 0 and iy < {h}:",
                f"            src = plane + iy * {wd}",
                f"            dst = i * {wd * c} + cc",
                f"            for j in range({wd}):",
                f"                xb[dst + j * {c}] = np.uint8(np.int32({x}[src + j]) + {zero})",
                "for q in range(pw):",
                f"    oy = (p0 + q) // {self.ow} * {self.sh} - {self.pt}",
                f"    ox = (p0 + q) % {self.ow} * {self.sw} - {self.pl}",
                f"    for r in range({self.r}):",
                f"        iy = oy + r * {self.dh}",
                f"        for s in range({self.s}):",
                f"            ix = ox + s * {self.dw}",
                f"            d = q * {kp} + (r * {self.s} + s) * {c}",
                f"            if iy >= 0 and iy < {h} and ix >= 0 and ix < {wd}:",
                f"                at = ((iy - iy0) * {wd} + ix) * {c}",
                f"                ab[d:d + {c}] = xb[at:at + {c}]",
                "            else:",
                f"                ab[d:d + {c}] = np.uint8({zero})",
            ]
        return [
            *lines,
            gemm,
            f"for qa in range(0, pw, {TRANSPOSE_PIXELS}):",
            f"    qb = min(qa + {TRANSPOSE_PIXELS}, pw)",
            f"    for kk in range({k}):",
            "        for q in range(qa, qb):",
            f"            cbuf[kk * pw + q] = ct[q * {k} + kk]",
        ]
