"""cpu template for "matmul" groups: the blocked kernel (``fusec.targets.cpu.blocked``)
over blocks of rows (and columns) of one matrix of a (batched) ``ai.matmul``.

Blocks are sized so that a task's workspace stays under ``WORKSPACE_BYTES``
(L3-resident next to the other tasks') and so that the GEMM of a block still runs
near BLAS speed: a block of fewer rows repacks the B operand more often (measured
single-threaded on the benchmark machine, 2048x1024x1024: 79 GFLOP/s at 64 rows, 87
at 128, 92 at 256, 98 at 512 of 100 for one call on the whole matrix).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from xdsl.ir import BlockArgument, Operation, SSAValue

from fusec.codegen import KernelSource, outer_constant
from fusec.codegen.expr import broadcast_offset, broadcast_shapes, shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi, host
from fusec.targets.cpu.blocked import (
    MIN_BLOCKS,
    BlockedCore,
    CoreArgs,
    EpilogueRows,
    decode_row_block,
    generate_core_group,
    row_loop,
)
from fusec.targets.cpu.rows import RowBlock

#: Most bytes of one task's workspace (its A block, C block, im2col columns, row buffer).
WORKSPACE_BYTES = 4 << 20
#: A matmul runs in ``gemm_nn`` when K or N is at most this (and the operands suit it):
#: there OpenBLAS's packing on every call costs most (single-threaded GFLOP/s, gemm_nn
#: against sgemm: 256x512x64 113 / 93, 256x64x512 117 / 98, 64x256x64 113 / 96). With K
#: and N in the hundreds the two are level (MLP 1024x512x2048 and LN -> matmul
#: 2048x1024x1024, whole graphs: within 2% either way, benchmarks/results/cpu-notes.md).
NN_MAX_NARROW = 128
#: Most bytes of a task's workspace when the blocks run in ``gemm_nn`` (which packs
#: nothing, so small blocks cost no repacking): A and C blocks that stay in L2.
NN_WORKSPACE_BYTES = 512 << 10
#: Rows of a matmul block: at most, and at least when the workspace allows.
MAX_ROWS, MIN_ROWS = 512, 32
#: Most rows of a block when B is a constant packed once (``gemm_packed``): blocks
#: this small repack nothing and keep A's and C's blocks in L2 (MLP 1024x512x2048 at
#: 2 threads, both matmuls: 48 rows 20.7 ms, 96 rows 21.4, by median; cpu-notes.md).
PACKED_ROWS = 48
#: Bytes of a packed B beyond which it is taken to stream from memory (it does not stay
#: in a core's L2 between blocks). Blocks of ``PACKED_ROWS`` rows then read all of B
#: once each: 65x768 @ 768x3072 (ViT's MLP, weights rotated through L3, 1 thread,
#: thread-time medians) 3.70 ms in blocks of 48 rows, 2.90 with all 65 rows in one
#: block, 2.38 with the next strip prefetched too (cpu-notes.md).
PACKED_CACHED_BYTES = 1 << 20
#: Most bytes of a block's A and C in the workspace when B streams: all of a short
#: matrix's rows against each strip of B, A and C still in L2.
PACKED_STREAM_BYTES = 3 << 19
#: Most column parts of a streaming B's split (each computes its rows' prologue).
STREAM_PARTS = 8
#: Most rows of a matmul whose constant B is packed although its columns are not whole
#: strips (the last one a window on B's last columns, ``microkernel.pack_strips``): the
#: CNN classifiers (1000 classes) at batch 1-16, where sgemm repacked all of the 5-8 MB
#: weight on every call for a few rows of A. nn.Linear(2048, 1000) alone, 1 thread,
#: least CPU time, sgemm -> gemm_packed (onnxruntime): batch 1 1.20 -> 0.38 ms (0.35),
#: batch 8 1.46 -> 0.53 (0.47), batch 16 1.68 -> 0.76 (0.62); cpu-notes.md. Not measured
#: past 16 rows, where sgemm's packing is shared by more rows.
GEMV_ROWS = 16


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "matmul", ai.MatmulOp, MatmulBlocks)


class MatmulBlocks(BlockedCore):
    """Tiles of rows (and columns) of one matrix of a (batched, broadcast) ``ai.matmul``.

    The matmul is taken as (batch..., M, K) @ (batch..., K, N) -> (batch..., M, N):
    a 1-D A is one row (M = 1), a 1-D B one column (N = 1, and then a block
    is a whole matrix, so that the epilogue's rows, along M, are whole).
    Block ``blk`` is batch ``b = blk // (nrb * ncb)``, rows ``r0 <= i < r1`` and,
    when the columns are split too (``ncb`` > 1), columns ``c0 <= j < c1``.

    A block's GEMM is ``gemm_nn`` (``fusec.targets.cpu.microkernel``: register tiles,
    B read in place) when K or N is small (``NN_MAX_NARROW``), A and B are row-major
    and N is whole vectors of its tiles; its blocks are then small
    (``NN_WORKSPACE_BYTES``). A wider GEMM whose B is a constant read by nothing else
    (a layer's weights) runs in ``gemm_packed``, on B laid out in column strips once by
    the ``Program`` (``prepared_inputs``), in blocks of up to ``PACKED_ROWS`` rows whose A
    and C stay in L2 (single-threaded, MLP 1024x512x2048: 41.3 -> 38.5 ms for both
    matmuls, the two GEMMs at 110 and 115 GFLOP/s against OpenBLAS's 107 and 105;
    cpu-notes.md). Otherwise it is OpenBLAS's
    sgemm, which packs the block's rows of A and its columns of B again on every
    call, so the tiles are chosen to pack the fewest elements per multiply-add,
    ``1/rows + 1/cols`` (``_tiles``): a short, wide result (few rows, a large B) is
    split by columns, so that each thread packs only its part of B.
    """

    block_prologue = True

    @staticmethod
    def strided_views(core_op, views: Sequence[Operation]) -> dict[int, list[Operation]]:
        """An A that merges heads, (B, H, S, E) -> transpose -> (B, S, H, E) -> reshape ->
        (B, S, H*E) from a group input (attention's result before the output projection),
        is gathered per block into ``gbuf`` (H pieces of E floats a row): no full-size
        copy before the kernel, and the gather runs in the blocks' threads."""
        chain = _head_merge(core_op, views)
        return {0: chain} if chain else {}

    def __init__(self, args: CoreArgs) -> None:
        super().__init__(args)
        op, reads, workspace = args.op, args.reads, args.workspace
        a_array, c_array, c_local = args.a_array, args.c_array, args.c_local
        assert isinstance(op, ai.MatmulOp)
        a_shape, b_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
        self.result = shape_of(op.results[0])
        self.ta, self.tb = bool(op.attr("transpose_a")), bool(op.attr("transpose_b"))
        a2 = a_shape if len(a_shape) > 1 else (1, a_shape[0])
        b2 = b_shape if len(b_shape) > 1 else (b_shape[0], 1)
        self.m, self.k = (a2[-1], a2[-2]) if self.ta else (a2[-2], a2[-1])
        self.n = b2[-2] if self.tb else b2[-1]
        self.a_batch, self.b_batch = a2[:-2], b2[:-2]
        self.batch = broadcast_shapes(self.a_batch, self.b_batch)
        self.b_is_vector = len(b_shape) == 1
        # B one matrix shared by the batch (a Linear layer's weight): one product of all
        # of A's rows, not one a matrix each reading all of B (ConvNeXt, issue #30)
        if self.a_batch and not (self.b_batch or self.ta or self.b_is_vector):
            if _merged_heads(op, reads) is None:  # (a head-merged A is gathered per matrix)
                self.m *= math.prod(self.a_batch)
                self.a_batch = self.batch = ()
        a_row_major = bool(a_array) or not self.ta  # a prologue writes row-major blocks
        narrow = min(self.k, self.n) <= NN_MAX_NARROW
        b_input = args.constant_operand(1)  # a constant B is packed
        #: (the zero point's array, its offset to uint8) when the GEMM runs on integer codes
        #: (``gemm_q8_packed``), else None
        self.q8 = None
        if b_input is not None and a_array and not (self.b_batch or self.b_is_vector):
            self.q8 = _int8_operands(op, reads)
        self.nn = (
            narrow
            and a_row_major
            and not (self.tb or self.b_is_vector or self.q8)
            and host.fits(self.n)
        )
        self.packed = bool(self.q8) or (
            not self.nn
            and b_input is not None
            and a_row_major
            and not (self.b_batch or self.b_is_vector)
            and (host.packs(self.n) or (self.m <= GEMV_ROWS and self.n >= host.STRIP))
        )
        layout = ("q8_strips" if self.q8 else "strips") + ("_t" if self.tb else "")
        self.prepared = ((b_input, layout),) if self.packed else ()
        if self.nn:
            self.imports = (abi.import_line("gemm_nn_call as gemm_nn"),)
        #: the int8 GEMM's name: on AMX tiles where the process may use them
        self.q8_gemm = "gemm_q8_packed"
        if self.q8:
            from fusec.targets.cpu.gemm_int8 import amx_available

            self.q8_gemm += "_amx" if amx_available() else ""
        if self.packed:
            gemm = self.q8_gemm if self.q8 else "gemm_packed_call as gemm_packed"
            self.imports = (abi.import_line(gemm),)
        # column tiles compute A's prologue again each: not worth it unless B streams
        split_columns = not (args.whole_rows or (a_array and not self.streams) or self.b_is_vector)
        row_blocks = math.prod(self.batch) * math.ceil(self.m / MIN_ROWS)
        if (self.nn or (self.packed and not self.streams)) and row_blocks >= MIN_BLOCKS:
            split_columns = False  # no packing to share out: row blocks, when there are enough
        self.mb, self.nb = self._tiles(a_array is not None, c_local, split_columns)
        self.nrb, self.ncb = math.ceil(self.m / self.mb), math.ceil(self.n / self.nb)
        self.count = math.prod(self.batch) * self.nrb * self.ncb
        #: (H, S, E) of an A gathered from heads (``strided_views``), else None
        self.heads = _merged_heads(op, reads) if not (a_array or self.ta) else None
        if self.heads:
            self.mb, self.nb = self._tiles(True, c_local, split_columns)
            self.nrb, self.ncb = math.ceil(self.m / self.mb), math.ceil(self.n / self.nb)
            self.count = math.prod(self.batch) * self.nrb * self.ncb
            workspace.add("gbuf", self.mb * self.k)
        if a_array:
            workspace.buffers[[n for n, _ in workspace.buffers].index(a_array)] = (
                a_array,
                self.mb * self.k,
            )
        if c_local:
            workspace.add(c_array, self.mb * self.nb)
        if self.q8:  # A's block as bytes, rows of K rounded up to 4
            from fusec.targets.cpu.gemm_int8 import scratch_floats

            workspace.add("q8buf", scratch_floats(self.mb, self.k))

    @property
    def streams(self) -> bool:
        """Whether B is packed and too large to stay in L2 (``PACKED_CACHED_BYTES``)."""
        return self.packed and (1 if self.q8 else 4) * self.k * self.n > PACKED_CACHED_BYTES

    def arrays(self) -> list[str]:
        return [*super().arrays(), *([self.q8[0]] if self.q8 else [])]

    def _rows(self, workspace_row_floats: int, tiles_per_matrix: int = 1) -> int:
        if self.b_is_vector:
            return self.m  # the epilogue's rows run along M: whole matrices
        budget = NN_WORKSPACE_BYTES if self.nn or self.packed else WORKSPACE_BYTES
        most = PACKED_ROWS if self.packed else MAX_ROWS
        if self.streams:
            budget, most = PACKED_STREAM_BYTES, self.m
        fit = budget // (4 * max(1, workspace_row_floats))
        mb = min(self.m, most, max(PACKED_ROWS if self.streams else MIN_ROWS, fit))
        tiles = math.prod(self.batch) * tiles_per_matrix
        if tiles < MIN_BLOCKS:  # split further so that every thread has blocks
            mb = min(mb, max(MIN_ROWS, math.ceil(self.m * tiles / MIN_BLOCKS)))
        return max(1, min(mb, self.m))

    def _tiles(self, a_rows: bool, c_local: bool, split_columns: bool) -> tuple[int, int]:
        """Rows and columns of a tile: for each split of the columns into up to
        ``MIN_BLOCKS`` parts, the rows ``_rows`` gives; the split packing the fewest
        elements of A and B per multiply-add (``1/rows + 1/cols``) wins, fewer column
        parts on a tie. A packed B (``gemm_packed``) is packed nowhere per block: there
        the columns are split only as far as needed for ``MIN_BLOCKS`` blocks. A packed B
        that streams from memory (``streams``) is read once per block of rows: there the
        split with enough blocks that reads it the fewest times wins (narrower column
        tiles leave room for more rows), then the one whose blocks the threads share
        evenly (``_uneven``), fewer column parts on a tie (each part computes the prologue
        of its rows again)."""
        best: tuple[float, int, int] | None = None
        most_parts = MIN_BLOCKS if split_columns else 1
        if self.streams and split_columns:
            most_parts = max(MIN_BLOCKS, min(STREAM_PARTS, self.n // host.STRIP))
        for parts in range(1, most_parts + 1):
            unit = host.STRIP if self.packed else 16  # whole strips, or 64-byte lines
            nb = min(self.n, -(-math.ceil(self.n / parts) // unit) * unit)
            if parts > 1 and nb == self.n:
                break
            ncb = math.ceil(self.n / nb)
            mb = self._rows((self.k if a_rows else 0) + nb * c_local, ncb)
            if self.streams:  # row blocks of equal size: B is read once per block
                mb = math.ceil(self.m / math.ceil(self.m / mb))
            rows = self.m / math.ceil(self.m / mb)  # the mean tile, ragged ones included
            cost = 1 / rows + ncb / self.n
            if self.packed:
                blocks = math.prod(self.batch) * math.ceil(self.m / mb) * ncb
                cost = max(0, MIN_BLOCKS - blocks)
                if self.streams:  # then the fewest reads of B (row blocks), then blocks
                    cost = cost * self.m + math.ceil(self.m / mb) + _uneven(blocks)
            if best is None or cost < best[0] - 1e-12:
                best = (cost, mb, nb)
        assert best is not None
        return best[1], best[2]

    def describe(self) -> str:
        batch = "x".join(map(str, self.batch))
        columns = f" x {self.nb} columns" if self.ncb > 1 else ""
        return (
            f"matmul {batch + ' x ' if batch else ''}({self.m}x{self.k} @ {self.k}x{self.n}) in "
            f"{self.count} blocks of up to {self.mb} rows{columns}: prologue, "
            f"{self._gemm()}, epilogue per block"
        )

    def _gemm(self) -> str:
        if self.q8:
            return f"{self.q8_gemm} (uint8 x int8 -> int32, B packed once)"
        if self.packed:
            return "gemm_packed (B packed once)"
        return "gemm_nn" if self.nn else "sgemm"

    def decode(self) -> list[str]:
        if self.ncb == 1:
            return decode_row_block(self.nrb, self.mb, self.m, self.batch)
        tiles = self.nrb * self.ncb  # a row block's column tiles are consecutive blocks
        lines = decode_row_block(tiles, self.mb, self.m, self.batch)
        lines[1] = f"r0 = blk % {tiles} // {self.ncb} * {self.mb}"
        return [
            *lines,
            f"c0 = blk % {self.ncb} * {self.nb}",
            f"c1 = min(c0 + {self.nb}, {self.n})",
        ]

    def _batch_index(self, shape: Sequence[int]) -> str:
        """The matrix number, in an operand of batch shape ``shape``, of batch ``b``."""
        index = [f"bi{d}" for d in range(len(self.batch))]
        return broadcast_offset(self.batch, shape, index)

    def prologue_rows(self) -> EpilogueRows:
        """The rows of A the block needs, into ``abuf``: A's own row space."""
        a_shape = shape_of(self.op.operands[0])
        space = a_shape if len(a_shape) > 1 else (1, a_shape[0])
        first = self._batch_index(self.a_batch)
        first = f"({first}) * {self.m}" if first != "0" else ""
        start = " + ".join(t for t in (first, "r0") if t)
        end = " + ".join(t for t in (first, "r1") if t)
        loops = row_loop(space, f"{start}, {end}")
        loops.append(f"    la = (row - ({start})) * {self.k}")
        reshape = None
        if len(a_shape) == 1:
            reshape = _insert_unit(1, 0)  # a 1-D A is one row
        return EpilogueRows(loops, "    ", tuple(space), RowBlock({"abuf": "la"}, None, reshape))

    def _gather_heads(self) -> list[str]:
        """Lines copying the block's rows of a head-merged A into ``gbuf``: one loop over a
        row's ``h * e`` values. Nested loops over the heads and their elements (constant
        trip counts, 12 and 64 in BERT) were unrolled by LLVM inside the ``prange`` into a
        module that took 13.7 CPU s to compile (BERT-base's attention output GEMM, the
        largest of its cold compile; 2.1 s in one loop), and copied no faster (128 rows of
        12 x 64: 42 against 31 us)."""
        assert self.heads is not None
        h, s, e = self.heads
        x = self.reads[self.op.operands[0]]
        base = self._batch_index(self.a_batch)
        base = f"({base}) * {h * s * e} + " if base != "0" else ""
        return [
            "for i in range(r1 - r0):",
            f"    for j in range({h * e}):",
            f"        gbuf[i * {self.k} + j] = {x}[{base}j // {e} * {s * e} + (r0 + i) * {e}"
            f" + j % {e}]",
        ]

    def compute(self) -> list[str]:
        m, k, n = self.m, self.k, self.n
        gather: list[str] = []
        if self.a_array:
            a, a_off, lda, ta = self.a_array, "0", k, 0
        elif self.heads:
            gather = self._gather_heads()
            a, a_off, lda, ta = "gbuf", "0", k, 0
        else:
            a = self.reads[self.op.operands[0]]
            base = self._batch_index(self.a_batch)
            base = f"({base}) * {m * k} + " if base != "0" else ""
            a_off = f"{base}r0" if self.ta else f"{base}r0 * {k}"
            lda, ta = (m if self.ta else k), int(self.ta)
        b = self.reads[self.op.operands[1]]
        b_off = self._batch_index(self.b_batch)
        b_off = f"({b_off}) * {k * n}" if b_off != "0" else "0"
        ldb = 1 if self.b_is_vector else (k if self.tb else n)
        c_off = "0" if self.c_local else f"(b * {m} + r0) * {n}"
        cols, ldc = str(n), n
        if self.ncb > 1:  # this tile's columns: B's from column c0 (row c0 of a B^T)
            b_off = f"{b_off} + c0{f' * {k}' if self.tb else ''}"
            c_off = c_off if self.c_local else f"{c_off} + c0"
            cols, ldc = "c1 - c0", (self.nb if self.c_local else n)
        if self.q8:  # A's codes less their zero point, as uint8 again, by B's int8 codes
            zero_point, offset = self.q8
            zero = f"np.int32({zero_point}[0]){f' + {offset}' if offset else ''}"
            c0 = "c0" if self.ncb > 1 else "0"
            a_args, c_args = f"{a}, {a_off}, {lda}", f"{self.c_array}, {c_off}, {ldc}"
            b_args = f"q8buf, {b}, {n}, {c0}"
            call = f"{self.q8_gemm}(r1 - r0, {cols}, {k}, {a_args}, {zero}, {b_args}, {c_args})"
            return [*gather, call]
        if self.packed:  # strip s of B starts at s * STRIP * k: column c0 at c0 * k
            b_off = f"c0 * {k}" if self.ncb > 1 else "0"
            a_args, c_args = f"{a}, {a_off}, {lda}", f"{self.c_array}, {c_off}, {ldc}"
            call = f"gemm_packed(r1 - r0, {cols}, {k}, {a_args}, {b}, {b_off}, {c_args})"
            if n % host.STRIP:  # named in the source, so in the kernel cache's key: kernels
                # cached with a gemm_packed of the zero-padded last strip (b7dc5da) miss
                call += "  # B's last strip: a window on its last columns"
            return [*gather, call]
        operands = f"{a}, {a_off}, {lda}, {b}, {b_off}, {ldb}, {self.c_array}, {c_off}, {ldc}"
        if self.nn:
            return [*gather, f"gemm_nn(r1 - r0, {cols}, {k}, {operands})"]
        return [
            *gather,
            "prev = threads_begin(1)",
            f"sgemm({ta}, {int(self.tb)}, r1 - r0, {cols}, {k}, {operands})",
            "threads_end(prev)",
        ]

    def epilogue_rows(self, shapes: Sequence[tuple[int, ...]], reduces: bool) -> EpilogueRows:
        """The block's rows of the result: numbers ``q0 <= row < q1`` of its row space."""
        space = self.result if self.result else (1,)
        length = space[-1]
        q0 = f"(b * {self.m} + r0) * {self.n} // {length}"
        q1 = f"(b * {self.m} + r1) * {self.n} // {length}"
        loops = [f"q0 = {q0}", *row_loop(space, f"q0, {q1}")]
        local = {}
        if self.c_local:
            loops.append(f"    lc = (row - q0) * {self.nb if self.ncb > 1 else length}")
            local[self.c_array] = "lc"
        reshape = None if self.result else (lambda shape: (1,))
        segment = ("c0", "c1 - c0") if self.ncb > 1 else None
        return EpilogueRows(loops, "    ", tuple(space), RowBlock(local, segment, reshape))


def _int8_operands(op: Operation, reads: Mapping[SSAValue, str]) -> tuple[str, int] | None:
    """For ``gemm_q8_packed``: when A is ``dequantize(codes, 1, zero_point)`` of int8 or
    uint8 codes with one zero point (its values ``v`` have ``v + zero_point`` (+ 128 for
    int8) in 0..255), B a constant of integers in -128..127 (a weight's codes, its scales
    moved after the product by ``recognize-patterns``), C float32 of whole vectors of 16
    columns and the target has AVX-512 VNNI: the zero point's array and that offset."""
    dq = op.operands[0].owner
    if not isinstance(dq, ai.DequantizeOp) or dq.attr("block_size"):
        return None
    codes = spec_dtype(dq.input)
    if codes not in ("i8", "ui8") or spec_dtype(op.results[0]) != "f32":
        return None
    from fusec.targets.cpu import gemm_int8  # (numba: only for a quantized GEMM)

    n = shape_of(op.results[0])[-1] if shape_of(op.results[0]) else 1
    if not gemm_int8.fits(n) or not gemm_int8.available():
        return None
    if math.prod(shape_of(dq.zero_point)) != 1 or dq.zero_point not in reads:
        return None
    scale, b = outer_constant(dq.scale), outer_constant(op.operands[1])
    if scale is None or b is None or not bool((scale == 1).all()):
        return None
    if not ((b == b.round()) & (b >= -128) & (b <= 127)).all():
        return None
    return reads[dq.zero_point], 128 if codes == "i8" else 0


def spec_dtype(value: SSAValue) -> str:
    return ai.spec_of(value.type).dtype


def _head_merge(core_op, views: Sequence[Operation]) -> list[Operation] | None:
    """A's chain transpose (0, 2, 1, 3) -> reshape merging the last two dims, from a group
    input of rank 4, each op in the group's views and used once; else None."""
    reshape = core_op.operands[0].owner
    if not isinstance(reshape, ai.ReshapeOp) or reshape not in views:
        return None
    transpose = reshape.operands[0].owner
    if not isinstance(transpose, ai.TransposeOp) or transpose not in views:
        return None
    if [int(p) for p in transpose.attr("perm")] != [0, 2, 1, 3]:
        return None
    if not isinstance(transpose.operands[0], BlockArgument):
        return None
    if any(sum(1 for _ in v.uses) != 1 for v in (reshape.results[0], transpose.results[0])):
        return None
    b, s, h, e = shape_of(transpose.results[0])
    if tuple(shape_of(reshape.results[0])) != (b, s, h * e):
        return None
    return [transpose, reshape]


def _merged_heads(op, reads) -> tuple[int, int, int] | None:
    """(H, S, E) when A is read as its head-merge chain's source (``strided_views``)."""
    reshape = op.operands[0].owner
    if not isinstance(reshape, ai.ReshapeOp):
        return None
    transpose = reshape.operands[0].owner
    if not isinstance(transpose, ai.TransposeOp):
        return None
    source = transpose.operands[0]
    if reads.get(op.operands[0]) is None or reads.get(op.operands[0]) != reads.get(source):
        return None
    _, h, s, e = shape_of(source)
    return h, s, e


def _insert_unit(rank: int, where: int) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """Map shapes of a rank-``rank`` space into the space with a unit dim added at ``where``."""

    def reshape(shape: tuple[int, ...]) -> tuple[int, ...]:
        padded = (1,) * (rank - len(shape)) + tuple(shape)
        cut = len(padded) + where + 1 if where < 0 else where
        return padded[:cut] + (1,) + padded[cut:]

    return reshape


def _uneven(blocks: int) -> float:
    """The threads' idle share when ``blocks`` blocks of equal work are shared by
    ``MIN_BLOCKS`` threads (0: a multiple of them). ViT-B/16 b4's MLP up projection (260 x
    768 @ 768 x 3072, B streaming) split its columns in 5 parts, the fewest with all 260
    rows in a block: on two threads one of them ran 3 blocks to the other's 2."""
    return math.ceil(blocks / MIN_BLOCKS) * MIN_BLOCKS / blocks - 1
