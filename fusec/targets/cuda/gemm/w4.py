"""The matmul template's weight-only int4 route (W4A16, issue 31): a few rows of
activations times a weight held as 4-bit codes, on CUDA cores at the speed of memory.

A decoder's layers at batch 1..16 read each weight once per token: the product is
memory-bound, and the bytes are the weight's. Held as int4 codes (ONNX's
``DequantizeLinear`` of an INT4 initializer with per-block scales along K -> ``MatMul``)
a weight is a quarter of its f16 bytes, but only if the kernel reads the codes: the
Tensor Core GEMM reads f16, so a weight dequantized first (the route of larger M: a
pointwise kernel, then the GEMM) moves 4.5 times the codes' bytes. This route computes
``epilogue(x @ dequantize(codes, scale, zero_point))`` straight from the codes:

* the codes (a constant: the model's weight) are packed once, at load, two a byte into
  32-bit words along K, row n of the weight (output column n) contiguous (the Program's
  ``prepared_inputs``: ``constant_layouts.pack_int4``); a code ``q`` is stored
  as the nibble ``q + 8`` (i4) or ``q`` (ui4), so the zero point ``z`` becomes ``z + 8``;
* one warp a few output columns (``warp_shape``: 1 to 4 by M): its lanes read consecutive
  words of each column's codes (128 bytes a warp a load, 8 or 16 loads a column in flight a
  lane), x's loads shared by the columns, each word 8 values of K
  in one block of the scale (the block size a multiple of 8); per word and row of x the
  lane sums ``x_k * q_k`` and ``x_k`` over the word's 8 values and adds ``s * (sum_xq -
  z * sum_x)``, so the scale and zero point cost two multiply-adds a word, not one a code;
* the lanes' f32 partials are summed by shuffles, then lane 0 runs the group's
  elementwise epilogue (``anchored.Epilogue``: bias, activation, residual, the store) on
  each of the column's ``M`` outputs.

Scales and zero points are read where they are ([K/g, N] or [N, K/g], the dequantize's
own layout). The values multiplied are ``(q - z) * s`` in f32, where the reference rounds
the dequantized weight to its 16-bit type first: within a rounding of the weight (rel
L2 ~1e-3), the bound of every 16-bit kernel here being 1e-2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue

from fusec.codegen import KernelSource, io_specs, outer_constant
from fusec.codegen.expr import ELEMENTWISE_OPS, leaf_shapes, literal, shape_of
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.ir.dtypes import INT4_TYPES
from fusec.targets.cuda.anchored import FORMATS, AnchorEmitter
from fusec.targets.cuda.common import (
    Source,
    as_packed,
    block_tile_launch,
    body_ops,
    kernel_name,
    storage_signature,
)
from fusec.targets.cuda.constant_layouts import WORD, int4_layout

#: Rows of x (the product's M, batch dims folded) at most: a lane keeps one f32 sum a row,
#: and past a few rows the Tensor Core GEMM of the dequantized weight wins (where exactly
#: is not measured yet).
MAX_ROWS = 16
THREADS = 256
WARPS = THREADS // 32
#: (rows of x at most, output columns a warp, words of each column a lane loads before it
#: computes with the first): a warp's columns share each load of x (read 1 / columns as often
#: from L1/L2). The H200 (2026-12-06, x 1..16 x 4096 bf16 times 4096 x 4096 int4 codes in
#: blocks of 128; ``.dev``-style sweep, GPU time of a CUDA-graph replay), columns x unroll:
#: M = 1: 1 x 4 0.0116 ms, 1 x 16 0.0101, 4 x 8 0.0112; M = 4: 1 x 4 0.0184, 4 x 8 0.0148,
#: 1 x 16 0.0331; M = 16: 1 x 4 0.0464, 2 x 8 0.0363, 4 x 8 0.0607 (spills); the
#: dequantize + GEMM road 0.042-0.046 ms at every M up to 16.
SHAPES = ((1, 1, 16), (4, 4, 8), (MAX_ROWS, 2, 8))


def warp_shape(m: int) -> tuple[int, int]:
    """(output columns a warp, words of each in flight a lane) for ``m`` rows of x."""
    return next((cols, unroll) for rows, cols, unroll in SHAPES if m <= rows)


#: Blocks per multiprocessor at most; the grid-stride loop covers the rest.
BLOCKS_PER_SM = 8
_DTYPES = ("f16", "bf16")


@dataclass(frozen=True)
class W4Plan:
    """The kernel's view of a group: ``x`` (M x K rows, group input ``x``) times the weight
    ``dequantize(codes, scale, zero)`` (group inputs; K x N, or N x K with ``transpose_b``),
    scales per blocks of ``block`` values along K (per column or tensor: one block of K),
    then the elementwise epilogue."""

    matmul: ai.MatmulOp
    dequantize: ai.DequantizeOp
    m: int
    n: int
    k: int
    block: int
    scale_index: str  # where a word's scale and zero point are (``scale_layout``)
    x: int
    codes: int
    scale: int
    zero: int
    k_major: bool  # the codes stored N x K (transpose_b), else K x N
    signed: bool  # i4 codes (else ui4)

    @property
    def words(self) -> int:
        return self.k // WORD

    @property
    def layout(self) -> str:
        """The prepared layout of the codes (``constant_layouts.pack_int4``)."""
        return int4_layout(self.k_major, self.signed)


def is_four_bit(op: Operation) -> bool:
    """Whether ``op`` dequantizes 4-bit codes."""
    return isinstance(op, ai.DequantizeOp) and spec_of(op.input.type).dtype in INT4_TYPES


def plan_ops(ops: Sequence[Operation], args: Mapping[SSAValue, int], results: int) -> W4Plan | str:
    """The plan of a group of ``ops`` (block order; inputs ``args``: value -> group input
    index; ``results`` values written), or why this route cannot compute it."""
    ops = list(ops)
    dequantized = [op for op in ops if isinstance(op, ai.DequantizeOp)]
    matmuls = [op for op in ops if isinstance(op, ai.MatmulOp)]
    if len(dequantized) != 1 or len(matmuls) != 1 or ops[:2] != [dequantized[0], matmuls[0]]:
        return "the group is not dequantize(4-bit codes) -> matmul -> elementwise ops"
    dq, matmul = dequantized[0], matmuls[0]
    if matmul.rhs is not dq.output or matmul.lhs is dq.output or len(list(dq.output.uses)) != 1:
        return "the dequantized weight is not the matmul's right operand alone"
    tail = ops[2:]
    out_shape = shape_of(matmul.output)
    for op in tail:
        if not isinstance(op, ELEMENTWISE_OPS) or shape_of(op.results[0]) != out_shape:
            return f"{op.name} is not an elementwise op over the product's shape"
        if isinstance(op, ai.QuantizationOp) and op.blocks() is not None:
            return f"{op.name} has per-block scales in the epilogue"
        if any(v is dq.output for v in op.operands):
            return f"{op.name} reads the dequantized weight"
        dtypes = {spec_of(v.type).dtype for v in (*op.operands, *op.results)}
        if not dtypes <= set(FORMATS):  # the epilogue loads and stores floats
            return f"{op.name} has {', '.join(sorted(dtypes - set(FORMATS)))} values"
    if results != 1:
        return f"{results} results (the kernel stores one)"
    return _operand_problem(dq, matmul, args) or _plan(dq, matmul, args)


def _operand_problem(
    dq: ai.DequantizeOp, matmul: ai.MatmulOp, args: Mapping[SSAValue, int]
) -> str | None:
    codes, lhs = spec_of(dq.input.type), spec_of(matmul.lhs.type)
    if codes.dtype not in INT4_TYPES:
        return f"a dequantize of {codes.dtype} codes (the route reads 4-bit codes)"
    if any(v not in args for v in (dq.input, dq.scale, dq.zero_point, matmul.lhs)):
        return "an operand of the dequantize or the matmul is computed inside the group"
    if outer_constant(dq.input) is None:
        return "the codes are no constant (they are packed once, at load)"
    if lhs.dtype not in _DTYPES or spec_of(matmul.output.type).dtype not in _DTYPES:
        return f"{lhs.dtype} activations (the route takes f16 or bf16)"
    if len(codes.shape) != 2 or matmul.attr("transpose_a") or len(lhs.shape) < 2:
        return "a batched weight, or activations stored K x M"
    k_axis = 1 if matmul.attr("transpose_b") else 0
    layout = scale_layout(dq, k_axis)
    if isinstance(layout, str):
        return layout
    k, block = codes.shape[k_axis], layout[1]
    if k % WORD or block % WORD:
        return f"K = {k} or a block of {block}: not multiples of {WORD} (a word of codes)"
    m = math.prod(lhs.shape[:-1])
    if m > MAX_ROWS:
        return f"{m} rows of activations (the route takes at most {MAX_ROWS})"
    for value in (matmul.output,):
        if spec_of(value.type).dtype not in FORMATS:
            return f"a {spec_of(value.type).dtype} product"
    return None


def scale_layout(dq: ai.DequantizeOp, k_axis: int) -> tuple[str, int] | str:
    """(where a word's scale and zero point are read: an expression of ``n``, ``blk`` and
    ``N``; the block along K they hold for) when the scales are per block along K, per
    output column or per tensor; else why the route cannot read them."""
    codes = spec_of(dq.input.type).shape
    k, n = codes[k_axis], codes[1 - k_axis]
    shape = spec_of(dq.scale.type).shape
    axis = int(dq.attr("axis")) % 2
    if dq.blocks() is not None:
        if axis != k_axis:
            return "the scales are per block along N, not along K"
        block = int(dq.attr("block_size"))
        return ("blk * N + n" if k_axis == 0 else f"n * {-(-k // block)} + blk"), block
    if math.prod(shape) == 1:
        return "0", k  # per tensor
    if math.prod(shape) == n and axis == 1 - k_axis:
        return "n", k  # per output column (one block of K, or block_size 0)
    return f"scales of shape {shape} along axis {axis} (not per block of K, column or tensor)"


def _plan(dq: ai.DequantizeOp, matmul: ai.MatmulOp, args: Mapping[SSAValue, int]) -> W4Plan:
    codes = spec_of(dq.input.type)
    k_major = bool(matmul.attr("transpose_b"))
    n, k = codes.shape if k_major else codes.shape[::-1]
    m = math.prod(spec_of(matmul.lhs.type).shape[:-1])
    layout = scale_layout(dq, 1 if k_major else 0)
    assert not isinstance(layout, str), layout  # _operand_problem passed
    return W4Plan(
        matmul,
        dq,
        m,
        n,
        k,
        layout[1],
        layout[0],
        args[matmul.lhs],
        args[dq.input],
        args[dq.scale],
        args[dq.zero_point],
        k_major,
        codes.dtype == "i4",
    )


def plan(fused_op: ai.FusedOp) -> W4Plan | str:
    """``plan_ops`` of a packed group."""
    args: dict[SSAValue, int] = {arg: i for i, arg in enumerate(fused_op.block.args)}
    return plan_ops(body_ops(fused_op), args, len(fused_op.results))


def members_problem(members: Sequence[Operation]) -> str | None:
    """Why fusion may not pack ``members`` (flat ops) as this route's group, or None."""
    ordered, inputs, results = as_packed(members)
    found = plan_ops(ordered, inputs, results)
    return found if isinstance(found, str) else None


class W4Emitter(AnchorEmitter):
    """The source of one W4A16 kernel module (module docstring)."""

    def __init__(self, fused_op: ai.FusedOp, p: W4Plan, name: str) -> None:
        super().__init__(fused_op, p.matmul, name)
        self.p = p
        epi = self.epilogue  # the ops after the product: not the dequantize
        epi.ops = [op for op in epi.ops if op is not p.dequantize]
        epi.leaves = leaf_shapes(epi.ops)  # (derived again, without the dequantize's)
        epi.leaves.pop(p.matmul.output, None)
        self.sdtype = spec_of(p.dequantize.scale.type).dtype
        self.cols, self.unroll = warp_shape(p.m)
        self.helpers |= {f"load_{self.dtype}x8", f"ld_{self.sdtype}", "warp_sum"}

    def emit(self) -> str:
        code = Source([])
        params = self.epilogue.params()
        code.add(0, "@cuda.jit", f"def {self.name}({', '.join(params)}):")
        code.add(1, '"""COLS output columns a warp: their codes word by word, x rows, shuffles."""')
        code.add(1, "scratch = cuda.shared.array(THREADS, f32)  # (the simulator's warp_sum)")
        code.add(1, "xs = cuda.local.array(8, f32)", "acc = cuda.local.array(SUMS, f32)")
        code.add(1, "lane = cuda.threadIdx.x % 32", "warp = cuda.threadIdx.x // 32")
        code.add(1, "t = cuda.blockIdx.x", "while t < TILES:  # uniform across the block")
        code.add(2, "n0 = (t * WARPS + warp) * COLS", "live = n0 < N")
        code.add(2, "for i in range(SUMS):", f"    acc[i] = {literal(0.0)}")
        code.add(2, "if live:")
        # a column past N (the last warp's) reads column N - 1's codes; never stored
        rows = [f"row{c} = min(n0 + {c}, N - 1) * WORDS" for c in range(self.cols)]
        code.add(3, *rows, "w = lane")
        ahead = 32 * (self.unroll - 1)
        code.add(3, f"while w + {ahead} < WORDS:  # {self.unroll} words a column in flight")
        loads = [
            f"c{u}_{c} = {self._codes}[row{c} + w + {32 * u}]"
            for u in range(self.unroll)
            for c in range(self.cols)
        ]
        code.add(4, *loads)
        for u in range(self.unroll):
            self._word(code, 4, [f"c{u}_{c}" for c in range(self.cols)], f"w + {32 * u}")
        code.add(4, f"w += {32 * self.unroll}")
        code.add(3, "while w < WORDS:")
        code.add(4, *[f"c0_{c} = {self._codes}[row{c} + w]" for c in range(self.cols)])
        self._word(code, 4, [f"c0_{c}" for c in range(self.cols)], "w")
        code.add(4, "w += 32")
        code.add(2, "for r in range(M):", "    for c in range(COLS):")
        code.add(4, "total = warp_sum(acc[r * COLS + c], scratch)")
        code.add(4, "if lane == 0 and n0 + c < N:")
        code.add(5, "o = r * N + n0 + c")
        self.epilogue.emit(code, 5, "total", "o")
        code.add(2, "t += cuda.gridDim.x")
        return self.module(code, params)

    @property
    def _codes(self) -> str:
        return f"in{self.p.codes}"

    def _word(self, code: Source, indent: int, words: list[str], index: str) -> None:
        """The statements adding the words ``words`` (word ``index`` of each of the warp's
        columns) to ``acc``: x's 8 values loaded once a row for all the columns."""
        p = self.p
        scale = p.scale_index
        code.add(indent, f"kk = ({index}) * 8")
        if "blk" in scale:
            code.add(indent, f"blk = kk // {p.block}")
        for c, word in enumerate(words):
            code.add(indent, f"n = min(n0 + {c}, N - 1)")
            code.add(indent, f"s{c} = ld_{self.sdtype}(in{p.scale}, {scale})")
            code.add(indent, f"z{c} = f32(in{p.zero}[{scale}]){' + f32(8.0)' if p.signed else ''}")
            code.add(indent, *[f"u{c}_{j} = f32(({word} >> {4 * j}) & 15)" for j in range(WORD)])
        code.add(indent, "for r in range(M):")
        code.add(indent + 1, f"load_{self.dtype}x8(in{p.x}, r * K + kk, xs, 0)")
        code.add(indent + 1, f"sx = {' + '.join(f'xs[{j}]' for j in range(WORD))}")
        for c in range(len(words)):
            dot = " + ".join(f"xs[{j}] * u{c}_{j}" for j in range(WORD))
            code.add(indent + 1, f"acc[r * COLS + {c}] += s{c} * (({dot}) - z{c} * sx)")

    def module(self, code: Source, params: list[str]) -> str:
        p = self.p
        notes = [
            "target: cuda (Numba CUDA), template: matmul, weight-only int4 route (W4A16: "
            f"{p.m} row(s) of activations, the weight read as 4-bit codes on CUDA cores)",
            f"M={p.m} N={p.n} K={p.k}; codes {'N x K' if p.k_major else 'K x N'} "
            f"({'i4' if p.signed else 'ui4'}) packed at load into int32 words [N][K/8], "
            "scales and zero points "
            + (
                f"per block of {p.block} along K"
                if "blk" in p.scale_index
                else ("per output column" if p.scale_index == "n" else "per tensor")
            ),
            f"layout: {self.cols} output column(s) a warp, {self.unroll} words of each in "
            "flight a lane, f32 "
            f"partials summed by shuffles; epilogue: "
            + (" -> ".join(op.name for op in self.epilogue.ops) or "none"),
        ]
        ins, outs = self.io_names()
        tiles = -(-p.n // (WARPS * self.cols))
        constants = [
            ("M", p.m),
            ("N", p.n),
            ("K", p.k),
            ("WORDS", p.words),
            ("WARPS", WARPS),
            ("COLS", self.cols),
            ("SUMS", p.m * self.cols),  # a lane's f32 sums: a row and column each
            ("TILES", tiles),
            ("THREADS", THREADS),
        ]
        dtypes = self.epilogue.dtypes()
        signature = storage_signature(dtypes)
        # the codes arrive packed: int32 words (``pack``), not bytes
        parts = signature[len("void(") : -1].split(", ")
        parts[len(self.epilogue.results) + p.codes] = "int32[::1]"
        signatures = [f"SIGNATURE = {'void(' + ', '.join(parts) + ')'!r}"]
        tail = block_tile_launch(self.name, "TILES", BLOCKS_PER_SM, ins + outs, params)
        return self.kernel_module(notes, constants, code, tail, signatures=signatures)


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The W4A16 kernel module of a group this route planned (a fallback's, with the
    reason, otherwise: fusion forms no such group)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    p = plan(fused_op)
    if isinstance(p, str):
        return torch_fallback.generate(fused_op, name, reason=f"the W4A16 route: {p}")
    source = W4Emitter(fused_op, p, name).emit()
    inputs, outputs = io_specs(fused_op)
    return KernelSource(
        name,
        "matmul",
        "cuda",
        source,
        inputs,
        outputs,
        array_dtype=None,
        prepared_inputs=((p.codes, p.layout),),
    )
