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
* a block's warps cover a tile of output columns in groups of ``cols`` columns; the
  ``ksplit`` warps of a group take turns over K's steps (a step: 32 lanes x ``vw``
  consecutive words of each column, one 4/8/16-byte load a column a lane), and their
  partial sums meet in shared memory; the warp's columns share each load of x (16-byte
  loads, L1-cached: every warp of the multiprocessor reads the same few KB);
* a word's eight codes are not converted: the first form of this kernel shifted, masked
  and converted (``I2FP``) each code, ~54 integer instructions a word by its SASS, so
  that instruction issue, not memory, set its time; ``w4_device.unpack_i4x8`` ORs each
  4-bit field, in place, into the mantissa of ``2**23`` (one ``LOP3`` a code, giving
  ``2**23 + q 16**E``), and one ``FFMA`` by ``16**-E`` minus ``z + 2**(23 - 4E)`` gives
  ``q - z`` exactly (its one rounding is of an exact small integer), then one ``FFMA`` a
  code and row of x; the scale, constant over a lane's words of a step (``vw`` words stay
  inside a block of the scale), multiplies the step's sum once;
* the lanes' f32 partials are summed by shuffles, a K split's through shared memory, then
  a thread an output runs the group's elementwise epilogue (``anchored.Epilogue``: bias,
  activation, residual, the store).

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
    kernel_def,
    kernel_name,
    storage_signature,
)
from fusec.targets.cuda.constant_layouts import FIELD_EXPONENTS as EXPONENTS
from fusec.targets.cuda.constant_layouts import WORD, int4_layout

#: Rows of x (the product's M, batch dims folded) at most: a lane keeps one f32 sum a row
#: and column, and past a few rows the Tensor Core GEMM of the dequantized weight wins.
MAX_ROWS = 16
THREADS = 256
WARPS = THREADS // 32
#: (rows of x at most, output columns a warp, warps splitting K for one group of columns,
#: words of each column a lane loads at once at most): a warp's columns share each of its
#: loads of x; the warps of a K split sum their partials through shared memory. From
#: ``gemm_bench.py --w4-sweep`` (H100, 2026-12-06, 15aaaba; x M x 4096 bf16 times 4096 x
#: 4096 int4 codes in blocks of 128; GPU time of a CUDA-graph replay, warm / cold L2, ms):
#: M = 1: 4x2x4 0.0074 / 0.0122, 4x2x2 0.0077 / 0.0118, 4x1x4 0.0082, 4x4x4 0.0084,
#: 2x2x4 0.0086, 2x4x2 0.0103 (the kernel before, one column a warp: 0.0101 / 0.0148);
#: M = 4: 4x2x4 0.0126, 4x2x2 0.0125, 2x2x4 0.0147, 2x4x4 0.0167; M = 16: 2x2x2 0.0339 /
#: 0.0396, 4x1x4 0.0339 / 0.0413, 2x1x4 0.0416, 2x2x4 0.0456; the dequantize + GEMM road
#: 0.047 at every M up to 16 (benchmarks/results/gemm-w4.md: the same order at f4987cc).
#: What limits M = 1 (ncu, cold caches, f4987cc): 9.3 us, 28% of DRAM peak, 16 warps a
#: multiprocessor (125 registers), stalled on memory: the loads of all warps go out first,
#: their arithmetic issues after the data is back, the two phases add up.
SHAPES = ((1, 4, 2, 4), (4, 4, 2, 4), (MAX_ROWS, 2, 2, 2))


@dataclass(frozen=True)
class WarpShape:
    """How a block's warps cover a tile of output columns (``SHAPES``)."""

    cols: int  # output columns a warp
    ksplit: int  # warps summing one group of columns, each a share of K's steps
    vw: int  # words of a column a lane loads at once (16-byte loads: 4)

    @property
    def groups(self) -> int:
        return WARPS // self.ksplit


def warp_shape(m: int, k: int, block: int) -> WarpShape:
    """The warp shape for ``m`` rows of x, K = ``k`` and scale blocks of ``block`` values:
    the load width is the widest whose words stay inside one scale block and divide K's
    words (so that a lane's load is aligned)."""
    _, cols, ksplit, vw = next(shape for shape in SHAPES if m <= shape[0])
    if WARPS % ksplit:  # (a group's warps must tile the block's)
        raise ValueError(f"a K split of {ksplit} warps does not divide a block's {WARPS}")
    while vw > 1 and (k % (8 * vw) or block % (8 * vw)):
        vw //= 2
    return WarpShape(cols, ksplit, vw)


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


def route_plan(fused_op: ai.FusedOp) -> W4Plan | None:
    """This route's plan of a matmul group that dequantizes 4-bit codes (``w4_mma.generate``
    serves it, ``tile-gemm`` writes its loop), or None: no 4-bit dequantize, or one the
    route does not take (past ``MAX_ROWS`` rows: the Tensor Core GEMM's int4 B)."""
    if not any(is_four_bit(op) for op in body_ops(fused_op)):
        return None
    p = plan(fused_op)
    return None if isinstance(p, str) else p


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
        return "n", k  # per output column (ONNX's per-axis form, block_size 0)
    if math.prod(shape) == n and axis == k_axis and int(dq.attr("block_size")) >= k:
        return "n", k  # per output column: blocks along K, one of them covering K
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


#: ``$FUSEC_W4_GEMM``: how a weight-only int4 layer of more than ``MAX_ROWS`` rows runs on
#: cuda: "auto" (the default: "producer" up to ``PRODUCER_MAX_ROWS`` rows, "consumer" past
#: them), "separate" (a pointwise kernel dequantizes the codes each call, then the Tensor
#: Core GEMM multiplies), "producer" (one GEMM whose producer warpgroup dequantizes the
#: codes into each B stage, ``gemm_w4.cuh``) or "consumer" (one GEMM whose consumer
#: warpgroups dequantize them into wgmma's A registers, ``gemm_w4_rs.cuh``).
GEMM_ROUTE_ENV = "FUSEC_W4_GEMM"
GEMM_ROUTES = ("auto", "separate", "producer", "consumer")
#: Rows of activations up to which "auto" takes the producer route, the consumer route
#: past them. Measured on an H100 (``gemm_bench.py --w4-routes`` at 5404718,
#: benchmarks/results/gemm-w4-routes.md; bf16, blocks of 128; separate / producer /
#: consumer / fusec's bf16 GEMM of the dequantized weight, ms): 4096 x 4096 at 32 rows
#: 0.0354 / 0.0175 / 0.0218 / 0.0166, 64 0.0335 / 0.0177 / 0.0195 / 0.0118, 128 0.0369 /
#: 0.0285 / 0.0181 / 0.0144, 256 0.0442 / 0.0404 / 0.0244 / 0.0171, 1024 0.0637 / 0.0852 /
#: 0.0476 / 0.0461, 4096 0.1984 / 0.3329 / 0.1941 / 0.1784; 14336 x 4096 at 64 rows 0.1212
#: / 0.0479 / 0.0430 / 0.0459, 256 0.1569 / 0.1301 / 0.0749 / 0.0506, 1024 0.2188 / 0.2893 /
#: 0.1553 / 0.1483. The producer skips the dequantize kernel's 16-bit weight, which
#: dominates few rows, but its one warpgroup (an instruction every ~10 cycles a warp by
#: ncu) and the shared memory its B tiles cross set the pace of many; the consumers' tile
#: is 128 weight columns wide (split K where few tiles are deep), which few rows of a
#: narrow layer leave under-filled. At 64 rows the two are 10% apart either way (the
#: square layer the producer's, the deep one the consumer's).
PRODUCER_MAX_ROWS = 64


def gemm_route(rows: int) -> str:
    """The route of a layer of ``rows`` rows of activations past ``MAX_ROWS``:
    ``$FUSEC_W4_GEMM`` (validated), "auto" resolved by ``PRODUCER_MAX_ROWS``."""
    from fusec.environ import switch

    route = switch(GEMM_ROUTE_ENV, GEMM_ROUTES)
    if route == "auto":
        return "producer" if rows <= PRODUCER_MAX_ROWS else "consumer"
    return route


@dataclass(frozen=True)
class GemmWeight:
    """An int4 weight as the Tensor Core GEMM's B (``gemm_w4.cuh``: the producer
    dequantizes it into each stage), for groups of more rows than this route takes: the
    dequantize, the group inputs of its codes (packed at load, ``layout``), scales and
    zero points, and the spec's ``W4B`` facts (block along K, signedness, scale index)."""

    dequantize: ai.DequantizeOp
    codes: int
    scale: int
    zero: int
    block: int
    signed: bool
    index: str
    #: the codes are stored N x K (else K x N)
    k_major: bool
    #: the consumers dequantize it into wgmma's A registers (``gemm_w4_rs.cuh``; codes
    #: packed "w4rs"), not the producer into each B stage ("w4gemm")
    in_registers: bool = False

    @property
    def layout(self) -> str:
        """The constant layout the codes are packed in at load for the kernel that reads
        them."""
        from fusec.targets.cuda.constant_layouts import int4_gemm_layout, int4_rs_layout

        packed = int4_rs_layout if self.in_registers else int4_gemm_layout
        return packed(self.k_major, self.signed)


def gemm_weight(
    four_bit: Sequence[ai.DequantizeOp], args: Mapping[SSAValue, int]
) -> GemmWeight | str:
    """The int4 weight of a GEMM group (the one dequantize of 4-bit codes in it), or why
    the GEMM cannot read it: constant 2-D codes (packed once, at load), the matmul's right
    operand alone, scales of the activations' 16-bit type per block of a multiple of 64
    along K (or per column or tensor), K a multiple of 64."""
    if len(four_bit) != 1:
        return "more than one dequantize of 4-bit codes"
    dq = four_bit[0]
    uses = list(dq.output.uses)
    if len(uses) != 1 or not isinstance(uses[0].operation, ai.MatmulOp) or uses[0].index != 1:
        return "the dequantized 4-bit weight is not a matmul's right operand alone"
    matmul = uses[0].operation
    if any(v not in args for v in (dq.input, dq.scale, dq.zero_point)):
        return "an operand of the dequantize is computed inside the group"
    codes = spec_of(dq.input.type)
    if outer_constant(dq.input) is None or len(codes.shape) != 2:
        return "the 4-bit codes are no 2-D constant (they are packed once, at load)"
    out = spec_of(dq.output.type).dtype
    if out not in _DTYPES or spec_of(matmul.lhs.type).dtype != out:
        return f"a {out} weight times {spec_of(matmul.lhs.type).dtype} activations"
    k_major = bool(matmul.attr("transpose_b"))
    layout = scale_layout(dq, 1 if k_major else 0)
    if isinstance(layout, str):
        return layout
    index, block = layout
    k = codes.shape[1 if k_major else 0]
    if k % 64 or block % 64:
        return f"K = {k} or a block of {block}: not multiples of 64 (the GEMM's K step)"
    return GemmWeight(
        dq, args[dq.input], args[dq.scale], args[dq.zero_point], block, codes.dtype == "i4",
        index, k_major,
    )  # fmt: skip


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
        self.shape = warp_shape(p.m, p.k, p.block)
        self.helpers |= self.kernel_helpers()

    @property
    def layout(self) -> str:
        """The prepared layout of the codes this kernel reads."""
        return self.p.layout

    def kernel_helpers(self) -> set[str]:
        """The device helpers the kernel's own code calls."""
        vw = self.shape.vw
        return self.scale_helpers() | {
            f"load_{self.dtype}x8", f"load_words{vw}", "unpack_i4x8", "w4_magic", "warp_sum"
        }  # fmt: skip

    def scale_helpers(self) -> set[str]:
        return {f"{self.sdtype}_bits"} if self.sdtype in ("f16", "bf16") else set()

    def scale_value(self, raw: str) -> str:
        """The float32 value of a scale read raw into ``raw`` (16-bit floats as bits)."""
        return f"{self.sdtype}_bits({raw})" if self.scale_helpers() else raw

    def emit(self) -> str:
        code = Source([])
        params = self.epilogue.params()
        sh = self.shape
        kernel_def(
            code,
            self.name,
            params,
            "A tile of GROUPS x COLS output columns a block (module notes).",
        )
        code.add(1, "red = cuda.shared.array(RED, f32)  # the K split's partials")
        code.add(1, "scratch = cuda.shared.array(THREADS, f32)  # (the simulator's warp_sum)")
        code.add(1, "acc = cuda.local.array(SUMS, f32)", "part = cuda.local.array(SUMS, f32)")
        code.add(1, "words = cuda.local.array(WS, int32)", "nwords = cuda.local.array(WS, int32)")
        code.add(1, "nb = cuda.local.array(8, f32)", "xv = cuda.local.array(8, f32)")
        code.add(1, "d = cuda.local.array(DS, f32)")
        code.add(1, "lane = cuda.threadIdx.x % 32", "warp = cuda.threadIdx.x // 32")
        code.add(1, "group = warp // KSPLIT", "kslice = warp % KSPLIT")
        code.add(1, "magic = w4_magic()  # 2**23's bits, in a register")
        p = self.p
        for c in range(sh.cols):  # a step's scale and zero point bits (typed by a first read)
            code.add(1, f"sr{c} = nsr{c} = in{p.scale}[0]", f"zr{c} = nzr{c} = in{p.zero}[0]")
        code.add(1, "t = cuda.blockIdx.x", "while t < TILES:  # uniform across the block")
        code.add(2, "n0 = (t * GROUPS + group) * COLS")
        # a column past N (the last group's) reads column N - 1's codes; never stored
        code.add(2, *[f"row{c} = min(n0 + {c}, N - 1) * WORDS" for c in range(sh.cols)])
        code.add(2, "for i in range(SUMS):", f"    acc[i] = {literal(0.0)}")
        # the codes, scales and zero points of a warp's next step are loaded before it
        # sums this step's: one step's loads always in flight
        code.add(2, "s = kslice", "w0 = s * STEP + lane * VW", "if w0 < WORDS:")
        self._fetch(code, 3, "w0", "")
        code.add(2, "while s < STEPS:")
        code.add(3, "sn = s + KSPLIT", "wn = sn * STEP + lane * VW", "if wn < WORDS:")
        self._fetch(code, 4, "wn", "n")
        code.add(3, "if w0 < WORDS:")
        self._step(code, 4)
        code.add(3, "for i in range(WS):", "    words[i] = nwords[i]")
        for c in range(sh.cols):
            code.add(3, f"sr{c} = nsr{c}", f"zr{c} = nzr{c}")
        code.add(3, "s = sn", "w0 = wn")
        self._finish(code)
        code.add(2, "t += cuda.gridDim.x")
        return self.module(code, params)

    def _fetch(self, code: Source, indent: int, w: str, prefix: str) -> None:
        """The loads of the step at word ``w``: each column's ``VW`` words into
        ``<prefix>words``, its scale's and zero point's bits into ``<prefix>sr<c>`` and
        ``<prefix>zr<c>`` (converted where they are used, so that nothing waits for them
        before the current step's sums)."""
        p, sh = self.p, self.shape
        if "blk" in p.scale_index:
            code.add(indent, f"blk = ({w} * 8) // {p.block}")
        for c in range(sh.cols):
            code.add(
                indent,
                f"load_words{sh.vw}(in{p.codes}, row{c} + {w}, {prefix}words, {c * sh.vw})",
            )
        for c in range(sh.cols):
            code.add(indent, f"n = min(n0 + {c}, N - 1)")
            code.add(indent, f"{prefix}sr{c} = in{p.scale}[{p.scale_index}]")
            code.add(indent, f"{prefix}zr{c} = in{p.zero}[{p.scale_index}]")

    def _step(self, code: Source, indent: int) -> None:
        """The sums of the step at word ``w0`` (its loads ``_fetch``'s): the codes unpacked
        to ``q - z``, times x's rows, times the scale."""
        p, sh = self.p, self.shape
        code.add(indent, "kk = w0 * 8")
        for c in range(sh.cols):
            code.add(indent, f"s{c} = {self.scale_value(f'sr{c}')}")
            code.add(indent, f"z{c} = f32(zr{c}){' + f32(8.0)' if p.signed else ''}")
            # -(z + 2**(23 - 4e)): with unpack_i4x8's field times 16**-e, one rounding of q - z
            code.add(
                indent,
                *[f"c{c}_{e} = -(z{c} + f32({2.0 ** (23 - 4 * e)}))" for e in range(5)],
            )
        code.add(indent, "for i in range(SUMS):", f"    part[i] = {literal(0.0)}")
        for u in range(sh.vw):
            for c in range(sh.cols):
                code.add(indent, f"unpack_i4x8(words[{c * sh.vw + u}], magic, nb, 0)")
                code.add(
                    indent,
                    *[
                        f"d[{c * 8 + j}] = nb[{j}] * f32({16.0**-e}) + c{c}_{e}"
                        for j, e in enumerate(EXPONENTS)
                    ],
                )
            code.add(indent, "for r in range(M):")
            code.add(indent + 1, f"load_{self.dtype}x8(in{p.x}, r * K + kk + {8 * u}, xv, 0)")
            for c in range(sh.cols):
                dot = " + ".join(f"d[{c * 8 + j}] * xv[{j}]" for j in range(WORD))
                # (part first: one chain of FFMAs)
                code.add(indent + 1, f"part[r * COLS + {c}] = part[r * COLS + {c}] + {dot}")
        code.add(indent, "for r in range(M):")
        code.add(
            indent + 1,
            *[f"acc[r * COLS + {c}] += s{c} * part[r * COLS + {c}]" for c in range(sh.cols)],
        )

    def _finish(self, code: Source) -> None:
        """The warps' sums: each warp's by shuffles, then the K split's through ``red``,
        then the epilogue, a thread an output."""
        code.add(2, "for r in range(M):", "    for c in range(COLS):")
        code.add(4, "total = warp_sum(acc[r * COLS + c], scratch)", "if lane == 0:")
        code.add(5, "red[kslice * PAIRS + (group * M + r) * COLS + c] = total")
        terms = " + ".join(f"red[{s} * PAIRS + i]" for s in range(self.shape.ksplit))
        index = ["g = i // (M * COLS)", "r = (i // COLS) % M"]
        self.store_outputs(code, "PAIRS", terms, index, "(t * GROUPS + g) * COLS + i % COLS")

    def store_outputs(
        self, code: Source, count: str, terms: str, index: Sequence[str], column: str
    ) -> None:
        """After the partial sums are in ``red``: thread ``i`` of ``count`` sums its output's
        ``terms``, finds its row ``r`` (``index``'s lines) and column ``n`` (``column``),
        and runs the epilogue where ``n < N``."""
        code.add(2, "cuda.syncthreads()", "i = cuda.threadIdx.x", f"while i < {count}:")
        code.add(3, *index, f"total = {terms}")
        code.add(3, f"n = {column}", "if n < N:")
        code.add(4, "o = r * N + n")
        self.epilogue.emit(code, 4, "total", "o")
        code.add(3, "i += THREADS")
        code.add(2, "cuda.syncthreads()  # red is read before the next tile writes it")

    def module(self, code: Source, params: list[str]) -> str:
        p, sh = self.p, self.shape
        notes = [
            *route_notes(p, "the weight read as 4-bit codes on CUDA cores", "int32 words [N][K/8]"),
            f"layout: {sh.groups} group(s) of {sh.cols} output column(s) a block, "
            f"{sh.ksplit} warp(s) a group splitting K, {sh.vw} word(s) of a column a lane "
            "a load; codes unpacked as float bits (w4_device.unpack_i4x8); epilogue: "
            + (" -> ".join(op.name for op in self.epilogue.ops) or "none"),
        ]
        ins, outs = self.io_names()
        step = 32 * sh.vw
        constants = [
            ("M", p.m),
            ("N", p.n),
            ("K", p.k),
            ("WORDS", p.words),
            ("COLS", sh.cols),
            ("KSPLIT", sh.ksplit),
            ("GROUPS", sh.groups),
            ("VW", sh.vw),
            ("STEP", step),  # words of a column a warp's step covers
            ("STEPS", -(-p.words // step)),
            ("SUMS", p.m * sh.cols),  # a lane's f32 sums: a row and column each
            ("DS", sh.cols * WORD),  # a word's q - z of each column
            ("WS", sh.cols * sh.vw),  # a lane's words of a step
            ("PAIRS", sh.groups * p.m * sh.cols),  # a tile's outputs
            ("RED", sh.ksplit * sh.groups * p.m * sh.cols),  # their partials, a K slice each
            ("TILES", -(-p.n // (sh.groups * sh.cols))),
            ("THREADS", THREADS),
        ]
        dtypes = self.epilogue.dtypes()
        signature = storage_signature(dtypes)
        # the codes arrive packed: int32 words (``pack``), not bytes
        parts = signature[len("void(") : -1].split(", ")
        parts[len(self.epilogue.results) + p.codes] = "int32[::1]"
        signatures = [f"SIGNATURE = {'void(' + ', '.join(parts) + ')'!r}"]
        tail = block_tile_launch(self.name, "TILES", BLOCKS_PER_SM, ins + outs, params)
        imports = ["from numpy import int32", ""]
        return self.kernel_module(
            notes, constants, code, tail, imports=imports, signatures=signatures
        )


def route_notes(p: W4Plan, engine: str, packing: str) -> list[str]:
    """A W4A16 kernel header's first two lines: the route and what multiplies (``engine``),
    then the shapes, the codes' layout (``packing``) and where the scales are."""
    if "blk" in p.scale_index:
        scales = f"per block of {p.block} along K"
    else:
        scales = "per output column" if p.scale_index == "n" else "per tensor"
    return [
        "target: cuda (Numba CUDA), template: matmul, weight-only int4 route (W4A16: "
        f"{p.m} row(s) of activations, {engine})",
        f"M={p.m} N={p.n} K={p.k}; codes {'N x K' if p.k_major else 'K x N'} "
        f"({'i4' if p.signed else 'ui4'}) packed at load into {packing}, scales and zero "
        f"points {scales}",
    ]


def generate(fused_op: ai.FusedOp, name: str, p: W4Plan | str | None = None) -> KernelSource:
    """The CUDA-core W4A16 kernel module of a group this route planned (``p``, planned
    here when not given; a fallback's, with the reason, otherwise: fusion forms no such
    group)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    p = plan(fused_op) if p is None else p
    if isinstance(p, str):
        return torch_fallback.generate(fused_op, name, reason=f"the W4A16 route: {p}")
    return kernel_source(fused_op, W4Emitter(fused_op, p, name))


def kernel_source(fused_op: ai.FusedOp, emitter: W4Emitter) -> KernelSource:
    """The kernel module ``emitter`` writes, its codes a prepared input of its layout."""
    inputs, outputs = io_specs(fused_op)
    return KernelSource(
        emitter.name,
        "matmul",
        "cuda",
        emitter.emit(),
        inputs,
        outputs,
        array_dtype=None,
        prepared_inputs=((emitter.p.codes, emitter.layout),),
    )
