"""A quantized ``ai.conv2d`` on the cpu int8 GEMM (issue 31): ``conv_method`` "q8".

What a QDQ convolution is after ``recognize-patterns`` (``ScalesAfterQuantizedConv``):
``conv2d(dequantize(codes, 1, zero), W) * scales``, the input the codes of uint8 (or
int8) activations less their zero point (as float32; the ``dequantize`` is the last op
of the group that writes it: the previous layer's requantizing epilogue, or the input's
quantize / dequantize pair) and ``W`` a constant of integers in -128..127 (a weight's
codes, ``canonicalize`` folded their ``dequantize``). Such a convolution (one group,
K a multiple of 16, a target with AVX-512 VNNI) runs as blocks of output rows of one
image, each:

* im2row of the block's ``P`` pixels: ``rows[p, (c*R + r)*S + s]`` the input under tap
  ``(r, s)`` of pixel ``p``'s window, 0.0 in the padding, which is the code of the zero
  point (``v + zero``), the value the reference's zero padding of the dequantized input
  stands for;
* ``gemm_q8_packed`` (``_amx`` where AMX-INT8 is granted) of those rows, as uint8
  codes, by the weight's int8 codes packed once by the Program (layout "q8_kcrs": the
  K x C*R*S weight as B^T), exact int32 sums less the zero point's share, into ``ct``
  (P x K, float32 of the exact integer);
* ``ct`` transposed into ``cbuf``'s K channel rows of the block's pixels for the
  epilogue (scales, bias, activation, requantization), as the im2col blocks' are.

The products and sums are exact integers (each below 2**31), so the result before the
epilogue is the float32 rounding of the exact sum, as onnxruntime's QLinearConv has it;
the float path rounded every partial sum of the dequantized values.
"""

from __future__ import annotations

import math

from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi
from fusec.targets.cpu.blocked import MIN_BLOCKS, Workspace
from fusec.targets.cpu.conv.gemm import ConvBlocks
from fusec.targets.cpu.entry import EntryScratch

#: Target bytes of a block's workspace (im2row rows as float32 and as bytes, the GEMM's
#: P x K result and its transpose): A and C of the GEMM stay in L2.
Q8_BLOCK_BYTES = 1 << 20
#: Fewest output pixels a block holds when the plane has them (the AMX form computes
#: blocks of 32 rows; a block of fewer rows reads all of the packed weight for little).
Q8_MIN_PIXELS = 64


def q8_zero(op) -> int | None:
    """For a convolution the int8 GEMM computes: ``zero``, the integer that makes the
    input's values uint8 codes (``v + zero``: the activation's zero point, plus 128 for
    int8 codes); else None. Needs one group, an f32 result, K a multiple of 16, a
    constant weight of integers in -128..127, an input that is the result of
    ``dequantize(codes, 1, zero_point)`` of int8 or uint8 codes with one constant zero
    point (in the group that writes it), and AVX-512 VNNI."""
    if op.attr("groups") != 1 or ai.spec_of(op.results[0].type).dtype != "f32":
        return None
    k = shape_of(op.operands[1])[0]
    dq = _producer(op.operands[0])
    if not isinstance(dq, ai.DequantizeOp) or dq.attr("block_size"):
        return None
    codes = ai.spec_of(dq.input.type).dtype
    if codes not in ("i8", "ui8"):
        return None
    from fusec.targets.cpu import gemm_int8  # (numba: only for a quantized conv)
    from fusec.targets.cpu.matmul import _outer_constant

    if not gemm_int8.fits(k) or not gemm_int8.available():
        return None
    scale, zero_point = _outer_constant(dq.scale), _outer_constant(dq.zero_point)
    if scale is None or zero_point is None or zero_point.size != 1:
        return None
    if not bool((scale == 1).all()):
        return None
    weight = _outer_constant(op.operands[1])
    if (
        weight is None
        or not ((weight == weight.round()) & (weight >= -128) & (weight <= 127)).all()
    ):
        return None
    return int(zero_point.reshape(-1)[0]) + (128 if codes == "i8" else 0)


def _producer(value):
    """The op that computes ``value`` (a group's block argument: the op its group input
    is yielded by, through the group that yields it), or None."""
    from xdsl.ir import BlockArgument

    if isinstance(value, BlockArgument):
        group = value.block.parent_op()
        if not isinstance(group, ai.FusedOp):
            return None
        value = group.operands[value.index]
    owner = value.owner
    if isinstance(owner, ai.FusedOp):
        value = owner.block.last_op.operands[value.index]
        owner = value.owner
    return owner


class Q8Blocks(ConvBlocks):
    """Blocks of ``bh`` output rows of one image of a quantized convolution (``q8_zero``):
    im2row, the int8 GEMM by the weight packed once, transpose, epilogue (module
    docstring)."""

    def __init__(self, op, reads, workspace: Workspace, a_array, c_array, c_local, weights):
        self._read_op(op, reads, c_array, c_local, True)
        zero = q8_zero(op)
        assert zero is not None and weights is not None and c_local
        self.zero = zero
        from fusec.targets.cpu.gemm_int8 import amx_available, scratch_floats

        self.q8_gemm = "gemm_q8_packed" + ("_amx" if amx_available() else "")
        self.imports = (abi.import_line(self.q8_gemm),)
        self.prepared = ((weights, "q8_kcrs"),)
        # a pixel's bytes: rows (f32 and uint8), ct and cbuf (f32)
        per_pixel = 5 * self.crs + 8 * self.k
        fit = max(1, Q8_BLOCK_BYTES // per_pixel // self.ow)
        bh = max(1, min(self.oh, max(fit, -(-Q8_MIN_PIXELS // self.ow))))
        if self.n < MIN_BLOCKS:  # split further so that every thread has blocks
            bh = min(bh, max(1, math.ceil(self.oh * self.n / MIN_BLOCKS)))
        self.bh, self.nrb = bh, math.ceil(self.oh / bh)
        self.count = self.n * self.nrb
        self.pixels = bh * self.ow
        workspace.add("rows", self.pixels * self.crs)
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
        return (
            f"conv2d {self.n}x{self.c}x{self.h}x{self.w} * {self.k}x{self.c}x{self.r}x{self.s}"
            f" in {self.count} blocks of {self.bh} output rows: im2row, {self.q8_gemm} "
            "(uint8 x int8 -> int32, weight packed once), transpose, epilogue per block"
        )

    def compute(self) -> list[str]:
        """``rows[q, (c*R + r)*S + s]`` for the block's pixels ``q`` (0.0, the zero point's
        code, in the padding); the int8 GEMM into ``ct``; ``cbuf[kk, q] = ct[q, kk]``."""
        x, w = (self.reads[v] for v in self.op.operands)
        h, wd, crs, k = self.h, self.w, self.crs, self.k
        gemm = (
            f"{self.q8_gemm}(pw, {k}, {crs}, rows, 0, {crs}, np.int32({self.zero}), q8buf, "
            f"{w}, {k}, 0, ct, 0, {k})"
        )
        return [
            "for q in range(pw):",
            f"    oy = (p0 + q) // {self.ow} * {self.sh} - {self.pt}",
            f"    ox = (p0 + q) % {self.ow} * {self.sw} - {self.pl}",
            f"    for c in range({self.c}):",
            f"        plane = (n * {self.c} + c) * {h * wd}",
            f"        for r in range({self.r}):",
            f"            ih = oy + r * {self.dh}",
            f"            d = q * {crs} + (c * {self.r} + r) * {self.s}",
            f"            for s in range({self.s}):",
            f"                iw = ox + s * {self.dw}",
            f"                inside = ih >= 0 and ih < {h} and iw >= 0 and iw < {wd}",
            f"                rows[d + s] = {x}[plane + ih * {wd} + iw] if inside else f32(0.0)",
            gemm,
            f"for kk in range({k}):",
            "    for q in range(pw):",
            f"        cbuf[kk * pw + q] = ct[q * {k} + kk]",
        ]
