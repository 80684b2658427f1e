"""cpu template for "attention" groups: one blocked kernel, the scores never leave cache.

``ai.attention`` (``softmax(q @ key^T * scale + mask) @ v``, q (..., S, D), key
(..., T, D), v (..., T, E), the mask broadcasting to the scores) runs in the
blocked kernel (``fusec.targets.cpu.blocked``). A block is ``mb`` query rows of one matrix
of the batch (``AttentionBlocks``); per block, in its task's workspace:

1. ``sbuf = q[rows] @ key^T``, ``mb x T`` scores: a key the group swapped from a
   (..., D, T) input (a cache's layout) is read as given, with no copy
   (``transposed_views``), by ``gemm_nn`` (``fusec.targets.cpu.microkernel``: register
   tiles, no packing) when T is a whole number of its vectors, else by sgemm with B not
   transposed; a (T, D) key by sgemm, B transposed;
2. per row, while the block is in cache: the max and, in one loop,
   ``exp_nonpos_f32(x * scale + mask - max)`` (IEEE, in the reference's order) and its
   sum. When the mask is constant along the row and ``scale > 0``, ``x -> x * scale +
   mask`` is monotone in float32, so the max of the raw scores, transformed, is the
   reference's max exactly and the scaled scores are never stored (otherwise a pass
   stores them first: always with a ``softcap``, whose scores are ``softcap *
   tanh(x * scale / softcap) + mask``);
3. ``sbuf @ v`` (``gemm_nn`` when E is a whole number of its vectors, else sgemm)
   into the output rows (or the block's ``cbuf`` when an
   elementwise epilogue follows, which the shared machinery runs per block), then each
   output row times its ``1 / sum``: ``E`` multiplies a row instead of ``T``. With
   ``nan_to_zero`` the probabilities are normalised in ``sbuf`` instead, where their
   NaNs are set to 0 before the sgemm.

Both changes remove a pass over the ``mb x T`` scores each (four passes before:
benchmarks/results/cpu-notes.md has the A/B).

So the ``S x T`` scores of a head are never written to memory, and the work is
spread over the threads by blocks (the first version of this template ran three
whole-tensor numpy calls on one thread: CPU 16.4 ms against onnxruntime's 9.0
at B1 H12 S512 D64, benchmarks/results/cpu-notes.md). The head split's layout
ops become contiguous operands first, as for a matmul group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.ir import BlockArgument, Operation, SSAValue

from fusec.codegen import KernelSource
from fusec.codegen.expr import broadcast_offset, shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi, blocked, host
from fusec.targets.cpu.rows import RowBlock

#: Bytes of a block's scores (and its C block, when local): a few hundred KiB stay in
#: L2 between the two sgemms; fewer rows would repack the key and v more often per flop.
BLOCK_BYTES = 512 << 10
#: Query rows per block, at most and at least (unless S is smaller).
MAX_ROWS, MIN_ROWS = 256, 16
#: Widest head (D) whose (T, D) key is transposed per block for gemm_nn (see _packs_key).
KEY_PACK_MAX_D = 32


def generate(fused_op, name: str) -> KernelSource:
    return blocked.generate_core_group(fused_op, name, "attention", ai.AttentionOp, AttentionBlocks)


class AttentionBlocks(blocked.BlockedCore):
    """Blocks of ``mb`` query rows of one matrix of an ``ai.attention``'s batch.

    Block ``blk`` is batch ``b = blk // nrb`` (indices ``bi<d>`` in the output's
    batch dims, which q, the key, v and the mask broadcast to), rows ``r0 <= i < r1``.
    """

    expr_helpers = frozenset({"exp_nonpos_f32"})
    imports = (abi.import_line("gemm_nn_call as gemm_nn"),)
    #: The key given as (..., D, T) (a transpose of a cache's layout) is read as it is.
    transposable = frozenset({1})

    @staticmethod
    def strided_views(core_op, views: Sequence[Operation]) -> dict[int, list[Operation]]:
        """q, key and v given as a head split of a group input (``transpose`` of a
        ``reshape``, (B, S, H*D) -> (B, H, S, D), rows contiguous) are read where they
        are: matrix (b, h) starts at b*S*H*D + h*D, rows H*D apart (no copy)."""
        chains = {}
        for index in range(3):
            chain = _strided_chain(core_op.operands[index], views)
            if chain is not None:
                chains[index] = chain
        return chains

    def __init__(self, args: blocked.CoreArgs) -> None:
        op, workspace, c_array, c_local = args.op, args.workspace, args.c_array, args.c_local
        assert isinstance(op, ai.AttentionOp)
        super().__init__(args)
        q, key, v, mask = (shape_of(x) for x in op.operands)
        self.result = shape_of(op.output)
        self.s, self.d = q[-2:]
        self.t, self.e = key[-2], v[-1]
        self.batch = self.result[:-2]
        self.q_batch, self.k_batch, self.v_batch = q[:-2], key[:-2], v[:-2]
        self.mask = tuple(mask)
        self.scale, self.nan_to_zero = float(op.attr("scale")), bool(op.attr("nan_to_zero"))
        self.softcap = float(op.attr("softcap"))
        #: x -> x * scale + mask is monotone: the exponent takes it (module docstring); a
        #: soft cap's tanh is a libm call per score, stored once like the masked scores
        self.folded = (
            self._mask_row()[1] == "mval" and 0 < self.scale < math.inf and not self.softcap
        )
        exp_sum = "row_exp_sum_affine_inplace" if self.folded else "row_exp_sum_inplace"
        self.row_helpers = frozenset({"row_max", exp_sum})
        fit = BLOCK_BYTES // (4 * (self.t + (self.e if c_local else 0)))
        mb = min(self.s, MAX_ROWS, max(MIN_ROWS, fit))
        batches = math.prod(self.batch)
        if batches < blocked.MIN_BLOCKS:  # split further so that every thread has blocks
            mb = min(mb, max(MIN_ROWS, math.ceil(self.s * batches / blocked.MIN_BLOCKS)))
        self.mb = max(1, min(mb, self.s))
        self.nrb = math.ceil(self.s / self.mb)
        self.count = batches * self.nrb
        workspace.add("sbuf", self.mb * self.t)
        if self._packs_key(op):
            workspace.add("kbuf", self.d * self.t)
        if not self.nan_to_zero:  # 1 / sum of each row, applied to the output rows
            workspace.add("rinv", self.mb)
        if c_local:
            workspace.add(c_array, self.mb * self.e)

    def describe(self) -> str:
        batch = "x".join(map(str, self.batch))
        return (
            f"attention {batch + ' x ' if batch else ''}(S {self.s}, D {self.d}, T {self.t}, "
            f"E {self.e}) in {self.count} blocks of up to {self.mb} query rows: "
            f"{self._scores_name()} scores, softmax rows in cache, "
            f"{_name(host.fits(self.e))} with v, "
            "epilogue per block"
        )

    def decode(self) -> list[str]:
        return blocked.decode_row_block(self.nrb, self.mb, self.s, self.batch)

    def _tiled_scores(self) -> bool:
        """Whether q @ key^T runs in gemm_nn: a (D, T) key read in place, T whole vectors."""
        return 1 in self.transposed and host.fits(self.t)

    def _packs_key(self, op) -> bool:
        """Whether a (T, D) key is transposed into ``kbuf`` per block for gemm_nn: when T
        is whole vectors of its tiles and D is narrow (BERT's 64 x 64 x 16 scores: OpenBLAS
        packs both operands on every call, which costs more than the product there)."""
        return host.fits(self.t) and self.d <= KEY_PACK_MAX_D and not _swaps_last_two(op)

    def _scores_name(self) -> str:
        if self._tiled_scores():
            return "gemm_nn"
        return "gemm_nn (key^T packed)" if self._packs_key(self.op) else "sgemm"

    def _layout(self, index: int, batch_shape: Sequence[int], rows: int, cols: int):
        """Offset of batch ``b``'s matrix of operand ``index`` (``rows x cols``, batch dims
        ``batch_shape``) and its row stride: contiguous, or through ``strided``."""
        if index not in self.strided:
            return self._matrix(batch_shape, rows * cols), cols
        strides = _chain_strides(self.strided[index])
        lead = len(self.batch) - len(batch_shape)
        terms = [
            f"bi{lead + d} * {stride}"
            for d, (size, stride) in enumerate(zip(batch_shape, strides[:-2], strict=True))
            if size != 1
        ]
        return " + ".join(terms) or "0", strides[-2]

    def _matrix(self, batch_shape: Sequence[int], size: int) -> str:
        """Offset of batch ``b``'s matrix (``size`` elements) in an operand of batch
        shape ``batch_shape``."""
        index = broadcast_offset(
            self.batch, batch_shape, [f"bi{d}" for d in range(len(self.batch))]
        )
        return "0" if index == "0" else f"({index}) * {size}"

    def _mask_row(self) -> tuple[list[str], str]:
        """Lines binding the mask's row ``r0 + i`` of batch ``b`` and the term to add for
        column ``j``: a row view, or one value when the mask is constant along T."""
        mask = self.reads[self.op.operands[3]]
        space = (*self.batch, self.s, self.t)
        rank = len(space)
        padded = (1,) * (rank - len(self.mask)) + self.mask
        strides, step = [], 1
        for size in reversed(padded):
            strides.append(step if size != 1 else 0)
            step *= size
        strides.reverse()
        terms = [f"bi{d} * {st}" for d, st in enumerate(strides[:-2]) if st]
        if strides[-2]:
            terms.append(f"(r0 + i) * {strides[-2]}")
        offset = " + ".join(terms) or "0"
        if strides[-1]:
            return [f"mrow = {mask}[{offset}:{offset} + {self.t}]"], "mrow[j]"
        return [f"mval = {mask}[{offset}]"], "mval"

    def compute(self) -> list[str]:
        q, key, v = (self.reads[x] for x in self.op.operands[:3])
        s, d, t, e = self.s, self.d, self.t, self.e
        q_off, ldq = self._layout(0, self.q_batch, s, d)
        q_off = f"{q_off} + r0 * {ldq}" if q_off != "0" else f"r0 * {ldq}"
        k_off, ldk = self._layout(1, self.k_batch, t, d)
        v_off, ldv = self._layout(2, self.v_batch, t, e)
        c_off = "0" if self.c_local else f"(b * {s} + r0) * {e}"
        # key^T: a (D, T) matrix the group swapped, read in place by gemm_nn when its rows
        # are whole vectors; else sgemm, which also reads a (T, D) key transposed (copying
        # that key's transpose into the workspace for gemm_nn measured level: ~19 us a
        # block against ~35 saved, benchmarks/results/cpu-notes.md)
        if self._tiled_scores():
            operands = f"{q}, {q_off}, {ldq}, {key}, {k_off}, {t}, sbuf, 0, {t}"
            scores = [f"gemm_nn(r1 - r0, {t}, {d}, {operands})"]
        elif self._packs_key(self.op):
            scores = [
                f"for dd in range({d}):",
                f"    for j in range({t}):",
                f"        kbuf[dd * {t} + j] = {key}[{k_off} + j * {ldk} + dd]",
                f"gemm_nn(r1 - r0, {t}, {d}, {q}, {q_off}, {ldq}, kbuf, 0, {t}, sbuf, 0, {t})",
            ]
        else:
            tb, ldb = (0, t) if 1 in self.transposed else (1, ldk)
            scores = [
                "prev = threads_begin(1)",
                f"sgemm(0, {tb}, r1 - r0, {t}, {d}, {q}, {q_off}, {ldq}, "
                f"{key}, {k_off}, {ldb}, sbuf, 0, {t})",
                "threads_end(prev)",
            ]
        lines = [
            *scores,
            "for i in range(r1 - r0):",
            f"    srow = sbuf[i * {t}:i * {t} + {t}]",
            *(f"    {line}" for line in self._row_exp()),
        ]
        if self.nan_to_zero:
            lines += [
                f"    for j in range({t}):",
                "        srow[j] = srow[j] * inv",
                "        if srow[j] != srow[j]:",
                "            srow[j] = f32(0.0)",
            ]
        else:
            lines.append("    rinv[i] = inv")
        operands = f"sbuf, 0, {t}, {v}, {v_off}, {ldv}, {self.c_array}, {c_off}, {e}"
        if host.fits(e):
            lines.append(f"gemm_nn(r1 - r0, {e}, {t}, {operands})")
        else:
            lines += [
                "prev = threads_begin(1)",
                f"sgemm(0, 0, r1 - r0, {e}, {t}, {operands})",
                "threads_end(prev)",
            ]
        if not self.nan_to_zero:
            lines += [
                "for i in range(r1 - r0):",
                f"    crow = {self.c_array}[{c_off} + i * {e}:{c_off} + i * {e} + {e}]",
                f"    for j in range({e}):",
                "        crow[j] = crow[j] * rinv[i]",
            ]
        return lines

    def _row_exp(self) -> list[str]:
        """Lines leaving ``exp(x * scale + mask - max)`` (soft-capped: ``exp(softcap *
        tanh(x * scale / softcap) + mask - max)``) of row ``i`` in ``srow`` and the
        reciprocal of its sum in ``inv``."""
        mask_lines, mask_term = self._mask_row()
        scale = f"f32({self.scale!r})"
        if self.folded:
            return [
                *mask_lines,
                f"m = row_max(srow) * {scale} + mval",
                f"inv = f32(1.0 / row_exp_sum_affine_inplace(srow, {scale}, mval, m))",
            ]
        scaled = "srow[j]" if self.scale == 1.0 else f"srow[j] * {scale}"
        if self.softcap:  # cap * tanh(x * scale / cap), in the reference's order
            cap = f"f32({self.softcap!r})"
            scaled = f"{cap} * math.tanh({scaled} / {cap})"
        return [
            *mask_lines,
            f"for j in range({self.t}):",
            f"    srow[j] = {scaled} + {mask_term}",
            "m = row_max(srow)",
            "inv = f32(1.0 / row_exp_sum_inplace(srow, m))",  # x - max <= 0 (or NaN)
        ]

    def epilogue_rows(
        self, shapes: Sequence[tuple[int, ...]], reduces: bool
    ) -> blocked.EpilogueRows:
        """The block's rows of the result: numbers ``q0 <= row < q1`` of its row space."""
        space = self.result
        q0, q1 = f"b * {self.s} + r0", f"b * {self.s} + r1"
        loops = [f"q0 = {q0}", *blocked.row_loop(space, f"q0, {q1}")]
        local = {}
        if self.c_local:
            loops.append(f"    lc = (row - q0) * {self.e}")
            local[self.c_array] = "lc"
        return blocked.EpilogueRows(loops, "    ", tuple(space), RowBlock(local))


def _swaps_last_two(op) -> bool:
    """Whether the key is a transpose of its last two dims (read as (D, T) when the group
    swaps it: ``transposed_views``)."""
    owner = op.operands[1].owner
    if not isinstance(owner, ai.TransposeOp):
        return False
    perm = [int(p) for p in owner.attr("perm")]
    rank = len(perm)
    return rank >= 2 and perm == [*range(rank - 2), rank - 1, rank - 2]


def _strided_chain(value: SSAValue, views: Sequence[Operation]) -> list[Operation] | None:
    """``value``'s layout chain when it reads a group input through strides with unit
    column stride: a transpose keeping the last dim (after a reshape), each op used once."""
    op = value.owner
    if not isinstance(op, ai.TransposeOp) or op not in views or _use_count(value) != 1:
        return None
    perm = [int(p) for p in op.attr("perm")]
    if perm[-1] != len(perm) - 1 or perm == list(range(len(perm))):
        return None
    chain: list[Operation] = [op]
    source = op.operands[0]
    owner = source.owner
    if isinstance(owner, ai.ReshapeOp) and owner in views and _use_count(source) == 1:
        chain.insert(0, owner)
        source = owner.operands[0]
    return chain if isinstance(source, BlockArgument) else None


def _use_count(value: SSAValue) -> int:
    return sum(1 for _ in value.uses)


def _chain_strides(chain: Sequence[Operation]) -> list[int]:
    """Element strides of the chain's result over its contiguous source."""
    transpose = chain[-1]
    assert isinstance(transpose, ai.TransposeOp)
    shape = shape_of(transpose.operands[0])
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    strides.reverse()
    perm = [int(p) for p in transpose.attr("perm")]
    return [strides[p] for p in perm]


def _name(tiled: bool) -> str:
    """The GEMM a product runs in, as the kernel's description names it."""
    return "gemm_nn" if tiled else "sgemm"
