"""The W4A16 route's Tensor Core kernel (issue 31): a few rows of activations times a
weight held as 4-bit codes, dequantized in registers into ``mma.sync`` A fragments.

The CUDA-core kernel (``w4.py``) spends ~40 instructions on a word of eight codes (a
``LOP3`` and two ``FFMA`` a code, the activations' conversions, index arithmetic), and on an
H100 that issue time, not HBM, set its speed: 54% of HBM bandwidth at M = 1 on an 8192 x
28672 weight (``gemm_bench.py --w4``, 2026-12-06), where cuBLAS's GEMV of the bf16
weight reads at 83%. Here the product goes to the Tensor Cores as ``weight^T x^T``: the
weight's 16 output columns a tile are the A operand's rows, the activations' rows (8 a B
fragment, two fragments for M up to 16) the B operand's columns, so that a lane's word of
codes is its whole A fragment of one ``mma.sync.m16n8k16`` and costs ~15 instructions
(``w4_mma_device``: Marlin's dequantization, two codes a ``LOP3`` and a packed subtract and
multiply, then the ``mma``):

* the codes are packed once, at load, as the fragments (``constant_layouts.pack_int4_mma``):
  for output tile T (16 columns, N padded to 16) and chunk c of K (16 CW values), lane
  ``4 g + t`` reads its CW words at once (16 or 32 bytes), word ``s`` being its fragment of
  K = ``16 CW c + 4 CW t + 4 s + (0..3)`` for columns ``16 T + g`` and ``+ 8``; its
  activations over the chunk are then ``4 CW`` contiguous elements of its row ``g``,
  loaded 16 bytes at a time as the B fragments' words (the fragments' K labels stand for
  those K in A and B alike);
* a block's 8 warps share one tile, each a chunk of K in turn (``c = warp + 8 i``), the
  next chunk's codes, activations, scales and zero points loaded before this chunk's
  ``mma``s; every warp runs the same number of iterations (a chunk past K multiplies zeros),
  which the simulator's emulation of the warp-wide ``mma`` needs;
* scales and zero points are read per chunk (a chunk lies in one scale block) for the
  lane's two columns, as the packed halves ``w4_mma_device`` takes;
* the warps' f32 accumulators meet in shared memory, then a thread an output runs the
  group's elementwise epilogue (as in ``w4.py``).

The weight values multiplied are ``(q - z) * s`` rounded once to the activations' type, as
the reference rounds the dequantized weight; the sums are f32.
"""

from __future__ import annotations

import os

from fusec.codegen import KernelSource, io_specs
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import Source, block_tile_launch, kernel_name, storage_signature
from fusec.targets.cuda.constant_layouts import int4_mma_layout
from fusec.targets.cuda.gemm import w4
from fusec.targets.cuda.gemm.w4 import BLOCKS_PER_SM, THREADS, W4Emitter, W4Plan

#: Warps of a block: all on one 16-column tile, splitting K's chunks.
WARPS = THREADS // 32
#: Output columns a tile (the A operand's rows).
TILE = 16


def chunk_words(p: W4Plan) -> int:
    """Words of codes a lane reads a chunk (16 of them make a chunk of ``16 * words`` K)."""
    return 8 if p.k % 128 == 0 and p.block % 128 == 0 else 4


def mma_problem(p: W4Plan, scale_dtype: str, x_dtype: str) -> str | None:
    """Why the Tensor Core kernel cannot compute plan ``p`` (the CUDA-core one does), or
    None."""
    if scale_dtype != x_dtype:
        return f"{scale_dtype} scales with {x_dtype} activations (the fragments are {x_dtype})"
    if p.k % 64 or p.block % 64:
        return f"K = {p.k} or a scale block of {p.block}: not multiples of 64 (a chunk)"
    return None


class W4MmaEmitter(W4Emitter):
    """The source of one W4A16 Tensor Core kernel module (module docstring)."""

    def __init__(self, fused_op: ai.FusedOp, p: W4Plan, name: str) -> None:
        super().__init__(fused_op, p, name)
        self.words = chunk_words(p)
        self.fragments = 1 if p.m <= 8 else 2
        self.helpers -= {f"load_words{self.shape.vw}", "unpack_i4x8", "w4_magic", "warp_sum"}
        self.helpers -= {"f16_bits", "bf16_bits", f"load_{self.dtype}x8"}
        self.helpers |= {"load_words4", "load_half_words4", self.mma}

    @property
    def mma(self) -> str:
        return f"w4_mma_{self.dtype}x{self.fragments}"

    @property
    def layout(self) -> str:
        return int4_mma_layout(self.p.k_major, self.p.signed, self.words)

    def emit(self) -> str:
        p = self.p
        code = Source([])
        params = self.epilogue.params()
        code.add(0, "@cuda.jit", f"def {self.name}({', '.join(params)}):")
        code.add(1, '"""A tile of 16 output columns a block, its warps over K (module notes)."""')
        code.add(1, "red = cuda.shared.array(RED, f32)  # the warps' sums")
        code.add(1, "acc = cuda.local.array(ACC, f32)")
        code.add(1, "words = cuda.local.array(CW, int32)", "nwords = cuda.local.array(CW, int32)")
        code.add(1, "xw = cuda.local.array(XW, int32)", "nxw = cuda.local.array(XW, int32)")
        code.add(1, "lane = cuda.threadIdx.x % 32", "warp = cuda.threadIdx.x // 32")
        code.add(1, "g = lane // 4", "tq = lane % 4")
        # a row past M (a fragment's unused columns) reads row M - 1; never stored
        rows = range(self.fragments)
        code.add(1, *[f"xrow{j} = min(g + {8 * j}, M - 1) * K + tq * XLANE" for j in rows])
        # the scales' and zero points' raw values (typed by a first read)
        code.add(1, f"sra = srb = nsra = nsrb = in{p.scale}[0]")
        code.add(1, f"zra = zrb = nzra = nzrb = in{p.zero}[0]")
        code.add(1, "t = cuda.blockIdx.x", "while t < TILES:  # uniform across the block")
        code.add(2, "n0 = t * TILE", "na = min(n0 + g, N - 1)", "nb = min(n0 + g + 8, N - 1)")
        code.add(2, "for i in range(ACC):", "    acc[i] = f32(0.0)")
        code.add(2, "c = warp")
        self._fetch_chunk(code, 2, "c")
        code.add(2, "for it in range(ITERS):  # the same count in every warp")
        code.add(3, "for i in range(CW):", "    words[i] = nwords[i]")
        code.add(3, "for i in range(XW):", "    xw[i] = nxw[i]")
        code.add(3, "sra = nsra", "srb = nsrb", "zra = nzra", "zrb = nzrb", "live = c < CHUNKS")
        code.add(3, "cn = c + WARPS")
        self._fetch_chunk(code, 3, "cn")
        self._chunk_mmas(code, 3)
        code.add(3, "c = cn")
        self._finish_tile(code)
        code.add(2, "t += cuda.gridDim.x")
        return self.module(code, params)

    def _fetch_chunk(self, code: Source, indent: int, c: str) -> None:
        """Chunk ``c``'s codes, activations, scales and zero points into the ``n`` registers
        (the activations zero past K: a chunk there adds nothing)."""
        p = self.p
        code.add(indent, f"if {c} < CHUNKS:")
        code.add(indent + 1, f"base = ((t * CHUNKS + {c}) * 32 + lane) * CW", f"kb = {c} * CHUNK")
        for q in range(self.words // 4):
            code.add(indent + 1, f"load_words4(in{p.codes}, base + {4 * q}, nwords, {4 * q})")
        for j in range(self.fragments):
            for q in range(self.words // 2):
                e, d = f"xrow{j} + kb + {8 * q}", 2 * self.words * j + 4 * q
                code.add(indent + 1, f"load_half_words4(in{p.x}, {e}, nxw, {d})")
        if "blk" in p.scale_index:
            code.add(indent + 1, f"blk = kb // {p.block}")
        for column, suffix in (("na", "a"), ("nb", "b")):
            code.add(indent + 1, f"n = {column}")
            code.add(indent + 1, f"nsr{suffix} = in{p.scale}[{p.scale_index}]")
            code.add(indent + 1, f"nzr{suffix} = in{p.zero}[{p.scale_index}]")
        code.add(indent, "else:", "    for i in range(XW):", "        nxw[i] = 0")

    def _chunk_mmas(self, code: Source, indent: int) -> None:
        """The chunk's ``mma``s, a word of codes each: the lane's two columns' zero points
        and scales as the packed halves ``w4_mma_device`` takes (scales 0 past K)."""
        p = self.p
        offset = " + 8" if p.signed else ""
        za, zb = f"(int(zra){offset})", f"(int(zrb){offset})"
        if self.dtype == "f16":  # 1024 + z (row g); -(64 + z) (row g + 8, the 1/16 fma)
            zg, zh = f"0x6400 + {za}", f"0xD400 + 16 * {zb}"
        else:  # 128 + z
            zg, zh = f"0x4300 + {za}", f"0x4300 + {zb}"
        code.add(indent, f"zg = ({zg}) * 0x10001", f"zh = ({zh}) * 0x10001")
        code.add(indent, "sg = sh = 0", "if live:")
        code.add(indent + 1, "sg = (int(sra) & 0xFFFF) * 0x10001")
        code.add(indent + 1, "sh = (int(srb) & 0xFFFF) * 0x10001")
        second = 2 * self.words
        for s in range(self.words):
            regs = [f"xw[{2 * s}]", f"xw[{2 * s + 1}]"]
            if self.fragments == 2:
                regs += [f"xw[{second + 2 * s}]", f"xw[{second + 2 * s + 1}]"]
            code.add(indent, f"{self.mma}(words[{s}], zg, zh, sg, sh, {', '.join(regs)}, acc, 0)")

    def _finish_tile(self, code: Source) -> None:
        """The warps' accumulators through ``red`` (D row g / g + 8: the lane's columns, D
        columns 2t, 2t + 1: rows of x), summed, then the epilogue, a thread an output."""
        for j in range(self.fragments):
            for i, (row, col) in enumerate((("g", 0), ("g", 1), ("g + 8", 0), ("g + 8", 1))):
                at = f"((warp * TILE + {row}) * MP + {8 * j} + 2 * tq + {col})"
                code.add(2, f"red[{at}] = acc[{4 * j + i}]")
        code.add(2, "cuda.syncthreads()", "i = cuda.threadIdx.x", "while i < TILE * M:")
        code.add(3, "col = i % TILE", "r = i // TILE")
        terms = " + ".join(f"red[({w} * TILE + col) * MP + r]" for w in range(WARPS))
        code.add(3, f"total = {terms}")
        code.add(3, "n = n0 + col", "if n < N:")
        code.add(4, "o = r * N + n")
        self.epilogue.emit(code, 4, "total", "o")
        code.add(3, "i += THREADS")
        code.add(2, "cuda.syncthreads()  # red is read before the next tile writes it")

    def module(self, code: Source, params: list[str]) -> str:
        p = self.p
        chunk = 16 * self.words
        notes = [
            "target: cuda (Numba CUDA), template: matmul, weight-only int4 route (W4A16: "
            f"{p.m} row(s) of activations, the weight's 4-bit codes dequantized into mma.sync "
            "fragments on the Tensor Cores)",
            f"M={p.m} N={p.n} K={p.k}; codes {'N x K' if p.k_major else 'K x N'} "
            f"({'i4' if p.signed else 'ui4'}) packed at load as A fragments ({self.layout}), "
            "scales and zero points "
            + (
                f"per block of {p.block} along K"
                if "blk" in p.scale_index
                else ("per output column" if p.scale_index == "n" else "per tensor")
            ),
            f"layout: a tile of {TILE} output columns a block, its {WARPS} warps taking chunks "
            f"of {chunk} K in turn, {self.words} word(s) of codes a lane a chunk, "
            f"{self.fragments} B fragment(s) of 8 activation rows; f32 sums; epilogue: "
            + (" -> ".join(op.name for op in self.epilogue.ops) or "none"),
        ]
        ins, outs = self.io_names()
        chunks = p.k // chunk
        mp = 8 * self.fragments
        constants = [
            ("M", p.m),
            ("N", p.n),
            ("K", p.k),
            ("TILE", TILE),
            ("WARPS", WARPS),
            ("CW", self.words),
            ("CHUNK", chunk),
            ("CHUNKS", chunks),
            ("ITERS", -(-chunks // WARPS)),
            ("XLANE", 4 * self.words),  # a lane's activations of a chunk
            ("XW", 2 * self.words * self.fragments),  # their words (pairs of elements)
            ("ACC", 4 * self.fragments),
            ("MP", mp),  # rows of x a tile's sums hold (the B fragments' columns)
            ("RED", WARPS * TILE * mp),
            ("TILES", -(-p.n // TILE)),
            ("THREADS", THREADS),
        ]
        dtypes = self.epilogue.dtypes()
        parts = storage_signature(dtypes)[len("void(") : -1].split(", ")
        parts[len(self.epilogue.results) + p.codes] = "int32[::1]"  # the packed words
        signatures = [f"SIGNATURE = {'void(' + ', '.join(parts) + ')'!r}"]
        tail = block_tile_launch(self.name, "TILES", BLOCKS_PER_SM, ins + outs, params)
        imports = ["from numpy import int32", ""]
        return self.kernel_module(
            notes, constants, code, tail, imports=imports, signatures=signatures
        )


#: ``FUSEC_W4_KERNEL=cuda-cores`` keeps every W4A16 layer on ``w4.py``'s kernel (the A/B of
#: ``gemm_bench.py --w4``).
KERNEL_CHOICE = "FUSEC_W4_KERNEL"


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The W4A16 kernel module of a group the route planned: this Tensor Core kernel
    where it serves the plan, else ``w4.py``'s (which also answers a plan's refusal)."""
    p = w4.plan(fused_op)
    if isinstance(p, str) or os.environ.get(KERNEL_CHOICE) == "cuda-cores":
        return w4.generate(fused_op, name)
    x_dtype = spec_of(p.matmul.lhs.type).dtype
    if mma_problem(p, spec_of(p.dequantize.scale.type).dtype, x_dtype) is not None:
        return w4.generate(fused_op, name)
    name = kernel_name(name)
    emitter = W4MmaEmitter(fused_op, p, name)
    inputs, outputs = io_specs(fused_op)
    return KernelSource(
        name,
        "matmul",
        "cuda",
        emitter.emit(),
        inputs,
        outputs,
        array_dtype=None,
        prepared_inputs=((p.codes, emitter.layout),),
    )
