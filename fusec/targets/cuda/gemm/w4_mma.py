"""The W4A16 route's Tensor Core kernel (issue 31): a few rows of activations times a
weight held as 4-bit codes, the codes fed to ``mma.sync`` as 16-bit floats in registers.

The CUDA-core kernel (``w4.py``) spends ~40 instructions on a word of eight codes (a
``LOP3`` and two ``FFMA`` a code, the activations' conversions, index arithmetic), and on an
H100 that issue time, not HBM, set its speed: 54% of HBM bandwidth at M = 1 on an 8192 x
28672 weight (``gemm_bench.py --w4``, 2026-12-06), where cuBLAS's GEMV of the bf16
weight reads at 83%. Here the product goes to the Tensor Cores as ``weight^T x^T``: the
weight's 16 output columns a tile are the A operand's rows, the activations' rows (8 a B
fragment, two fragments for M up to 16) the B operand's columns, so that a lane's word of
codes is its whole A fragment of one ``mma.sync.m16n8k16``:

* the codes are packed once, at load, as the fragments (``constant_layouts.pack_int4_mma``):
  for output tile T (16 columns, N padded to 16) and chunk c of K (16 CW values), lane
  ``4 g + t`` reads its CW words at once (16 or 32 bytes), word ``s`` being its fragment of
  K = ``16 CW c + 4 CW t + 4 s + (0..3)`` for columns ``16 T + g`` and ``+ 8``; its
  activations over the chunk are then ``4 CW`` contiguous elements of its row ``g``,
  loaded 16 bytes at a time as the B fragments' words (the fragments' K labels stand for
  those K in A and B alike);
* a word becomes ``MAGIC + q`` in four registers (``w4_mma_device``: a ``LOP3`` and a
  shift a pair of codes, no dequantizing arithmetic), multiplied into ``tmp``, and an
  all-ones A into ``sx`` (x's sums); once a chunk (it lies in one scale block) the lane's
  two columns take ``acc += s (tmp - (MAGIC + z) sx)`` in f32;
* a block's 8 warps share one tile, each a chunk of K in turn (``c = warp + 8 i``), the
  next chunk's codes, scales and zero points loaded (into the other of two register sets)
  before this chunk's ``mma``s, the activations when they start (L1-resident: 79
  registers, 3 blocks a multiprocessor); every warp runs the same number of iterations (a
  chunk past K multiplies zeros), which the simulator's emulation of the warp-wide ``mma``
  needs;
* the warps' f32 accumulators meet in shared memory, then a thread an output runs the
  group's elementwise epilogue (as in ``w4.py``).

The weight is not rounded to 16 bits as the reference rounds the dequantized weight: the
products are ``(q - z) s x`` in f32 (as the CUDA-core kernel's), within a rounding of the
weight of the reference (rel L2 ~1e-3 against a bound of 1e-2).

Measured (H100, ``gemm_bench.py --w4``, 9654aeb, both kernels in one call): 1 x 8192 x
28672 (123 MB of codes, scales and zero points) 0.0545 ms, 67% of HBM bandwidth (the
CUDA-core kernel 0.0606, 60%; cuBLAS's GEMV of the bf16 weight 85%); 16 x 4096 x 4096
0.0105 ms (CUDA cores 0.0335). With the index arithmetic in 32 bits and no wrap-around of
negative indices (16873c3: 640 SASS instructions against 672 at K = 8192): 52.1-53.4 us,
68.7-70.4% (five calls, 2026-12-06). Tried and measured slower on the way
(``benchmarks/results/gemm-w4.md``): the codes dequantized Marlin's way in registers
(a packed subtract and multiply a pair: 31 instructions a word in the loop against 21.6
now), a ``cp.async`` ring of codes in shared memory (more instructions: the kernel is
issue-bound as much as memory-bound), blocks of 4 warps with three register sets (96
registers: 60.3 us), the next tile's first chunk fetched during a tile's last (94
registers, or 80 with spills: 58.9 us), and both this loop and the ring below in one
kernel, chosen by the grid (81 registers; 56.5 us).

The block ring (``W4RingEmitter``; ``FUSEC_W4_KERNEL=ring`` forces it) brings a step's codes
(a chunk a warp: 8 KB, contiguous) into a ring of ``STAGES`` shared-memory stages with one
``cp.async.bulk`` a step (``fusec.targets.cuda.bulk``), issued ``STAGES - 1`` steps ahead
across the block's tiles. Same H100 calls, warm: 49.0-49.8 us on the 123 MB layer (74-75% of
HBM, 7% ahead of this loop), but behind it where a block has one tile: 1 x 4096 x 4096 7.1
against 6.1 us, 1 x 4096 x 14336 15.3 against 14.8, 1 x 14336 x 4096 16.5 against 13.1 (a
block barrier a step couples the warps; 256 blocks cannot hide it). So ``tile-gemm`` writes
the loop on the group (``LOOP_ATTR``, ``choose_loop``): the ring where the layer has more
tiles than the grid's blocks (8 a multiprocessor), the register sets elsewhere.
A ring a warp (lane 0 copying the warp's next chunks on the warp's own mbarriers, no
block barrier a step) was measured slower than the default on every layer and removed
(H100, ced563f, ``gemm_bench.py --w4-decode``: 7.7 / 18.1 / 16.5 / 58.2 us warm against
6.1 / 14.6 / 13.5 / 48.9 on the four decode layers). The ring's copies start with
``fence.proxy.async.shared::cta``: a stage read by ``ld.shared`` and then refilled by the
copy engine is a write after read across proxies (with it, as ``tile-gemm`` picks it for
the 123 MB layer: 49.1 us, 74.7% of HBM warm, H100, f577e88;
``benchmarks/results/gemm-w4.md``).
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr

from fusec.codegen import KernelSource
from fusec.codegen.expr import error_at
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.environ import switch
from fusec.targets.cuda.common import (
    Source,
    block_tile_launch,
    kernel_def,
    kernel_name,
    storage_signature,
)
from fusec.targets.cuda.constant_layouts import int4_mma_layout
from fusec.targets.cuda.gemm import w4
from fusec.targets.cuda.gemm.w4 import BLOCKS_PER_SM, THREADS, W4Emitter, W4Plan, route_notes

#: Warps of a block: all on one 16-column tile, splitting K's chunks.
WARPS = THREADS // 32
#: Output columns a tile (the A operand's rows).
TILE = 16
#: The two register sets of a chunk's operands (codes, activations, scales, zero points).
REGISTER_SETS = ("0", "1")
#: The block ring's stages of codes in shared memory (a step's codes, a chunk a warp;
#: STAGES - 1 in flight while the block reads one: 3 measured 49.3 us on the 123 MB layer,
#: 4 51.9, 5 55.9, more shared memory leaving less L1 for the activations; again at 28a8243,
#: ``gemm_bench.py --w4-ring-sweep``, H100: 3 stages 50.0 us, 4 53.6, and a persistent grid
#: of the 3 blocks that fit a multiprocessor 55.3-59.2 at 3-6 stages: results/gemm-w4.md).
STAGES = 3
#: Chunks a warp takes a step of the ring (a stage holds ``CHUNKS_PER_STEP`` chunks a warp):
#: the step's fixed cost (its copy's bookkeeping, the stage's wait, the block barrier) is
#: paid once for them. 2 gives ~30% fewer SASS instructions a chunk, yet measured slower at
#: every depth (H200, 3782bcd, ``gemm_bench.py --w4-ring-sweep``: 50.3 us at 2 stages, 56.8 at
#: 3, 65.7 at 4, against 47.8 for the default 1): the kernel is not issue-bound.
CHUNKS_PER_STEP = 1
#: Blocks of ``THREADS`` the kernel asks ptxas to fit a multiprocessor (``launch_bounds``:
#: registers capped to fit, spilling if they must), or None for ptxas's own choice. ptxas
#: 13.5 for sm_90 (on the CPU, M = 1): the ring 66 registers (3 blocks, 24 warps), 61 for 4
#: (no spills), 48 for 5 (44 bytes spilled); the register loop 72, 64 for 4 (64 bytes
#: spilled). Measured slower (H100, 8c53fa9, ``--w4-ring-sweep`` on the 123 MB layer, a ring
#: of 58 registers that fit 4 blocks by itself: 53.8 us; 5 blocks 71.9, 6 81.7; the register
#: loop 52.1, at 4 blocks 70.1): more warps cost the L1 the activations and scales live in.
MIN_BLOCKS_PER_SM: int | None = None
#: The share (0-100) of a multiprocessor's unified L1 / shared memory the kernel asks to be
#: shared memory (``cuda.jit``'s ``shared_memory_carveout``), or None for the driver's
#: choice (the least that fits the blocks: the ring's stages leave the rest to L1, which
#: holds the activations every warp reads). The whole L1 as shared memory measured 7% slower,
#: half of it the same (H100, 8c53fa9: 57.7 and 53.5 us against 53.8).
SHARED_CARVEOUT: int | None = None
#: Whether the ring's lanes of eight words read their two 16-byte halves in turn (lanes 4-7
#: of every 8 the second half first, the halves then swapped back in registers): a lane's
#: words lie 32 bytes apart, so the 8 lanes of one shared-memory wavefront of 16-byte loads
#: hit each bank twice (ncu, H100, 8c53fa9: 7.8 wavefronts a load request against 4). 70
#: registers (3 blocks still fit), 13 more SASS instructions a step; not yet timed on a GPU.
STAGGERED_HALVES = False
#: Whether x's sums over each chunk (``sx``, which the correction ``s (tmp - (MAGIC + z) sx)``
#: needs) come from a table the block computes once into shared memory (``CHUNKS x M``
#: floats) instead of a second ``mma`` a word with an all-ones A: they are the same for every
#: tile. Saves 8 ``HMMA`` a chunk of 8 words (results/gemm-w4.md: the H200 needs fewer
#: instructions a chunk). Every block computes the whole table (K x M elements of x, L2
#: hits) while its ring's first copies are in flight; a kernel before it would compute it
#: once, at a launch's cost. Not yet timed on a GPU.
SHARED_X_SUMS = False
#: Whether the ring's copies come from a warp of their own (a ninth, ``THREADS + 32``
#: threads a block) instead of thread 0 between its chunks: every reader of a stage arrives
#: on the stage's second mbarrier after its shared loads, and the producer waits on it before
#: refilling the stage, so no block barrier ends a step (a warp may run up to ``STAGES - 1``
#: steps ahead of the slowest) and no reading warp spends issue slots on a copy. The
#: ncu profile of the ring (H100, 8c53fa9) had two eligible warps a scheduler and none in 38%
#: of cycles: the barrier a step couples the block's 8 warps to the slowest one's loads.
#: ptxas 13.5 for sm_90 (CPU, M = 1): 76 registers (2 blocks of 9 warps fit), 69 with launch
#: bounds for 3 (``MIN_BLOCKS_PER_SM = 3``, no spills); the readers' loop 194 SASS a step
#: against the default ring's 250. Not yet timed on a GPU.
PRODUCER_WARP = False
#: Whether, with ``PRODUCER_WARP``, a step's scales and zero points come through the ring
#: too: the producer warp's lanes copy the step's 8 chunks' rows of the tile (16-byte
#: ``cp.async``, completing on the stage's mbarrier with the codes' bulk copy) behind its
#: codes, and a reading lane takes its two columns' from the stage (4 shared loads) instead
#: of 4 global loads of 2 and 1 bytes with 64-bit addresses a chunk, one chunk ahead in a
#: second register set. Where the layout allows (``ring_scales_problem``: scales per block
#: of K as ``[K / block, N]`` in 16 bits, 1-byte zero points, N a multiple of 16, one chunk a
#: step); elsewhere the per-lane loads. 70 registers under launch bounds for 3 blocks, the
#: loop 194 SASS a step (as many as without: the loads' addresses go, the fields' shifts
#: come), the scales 2 steps ahead instead of 1 chunk. Not yet timed on a GPU.
RING_SCALES = False


def chunk_words(p: W4Plan) -> int:
    """Words of codes a lane reads a chunk (16 of them make a chunk of ``16 * words`` K)."""
    return 8 if p.k % 128 == 0 and p.block % 128 == 0 else 4


#: Zero-point types stored a byte each (4-bit ones as their value in a byte), and whether
#: signed.
ZERO_BYTES = {"i8": True, "ui8": False, "i4": True, "ui4": False}


def ring_scales_problem(p: W4Plan, sdtype: str, zdtype: str) -> str | None:
    """Why a step's scales and zero points cannot come through the ring (``RING_SCALES``),
    or None: each chunk's row of a tile's 16 scales (32 bytes) and zero points (16 bytes)
    must be 16-byte aligned and contiguous."""
    if p.scale_index != "blk * N + n":
        return "scales not per block of K stored [K / block, N]"
    if sdtype not in ("f16", "bf16") or zdtype not in ZERO_BYTES:
        return f"scales {sdtype} and zero points {zdtype}, not 16-bit and a byte each"
    if p.n % TILE or CHUNKS_PER_STEP != 1:
        return f"N = {p.n} not a multiple of {TILE}, or more than one chunk a step"
    return None


def mma_problem(p: W4Plan) -> str | None:
    """Why the Tensor Core kernel cannot compute plan ``p`` (the CUDA-core one does), or
    None."""
    if p.k % 64 or p.block % 64:
        return f"K = {p.k} or a scale block of {p.block}: not multiples of 64 (a chunk)"
    return None


class W4MmaEmitter(W4Emitter):
    """The source of one W4A16 Tensor Core kernel module (module docstring)."""

    @property
    def words(self) -> int:
        return chunk_words(self.p)

    @property
    def fragments(self) -> int:
        """B fragments of 8 activation rows."""
        return 1 if self.p.m <= 8 else 2

    def kernel_helpers(self) -> set[str]:
        helpers = self.scale_helpers() | {"load_words4", "load_bits", "udiv32", self.mma}
        if SHARED_X_SUMS:
            helpers |= {f"{self.dtype}_bits"}
        return helpers if MIN_BLOCKS_PER_SM is None else helpers | {"launch_bounds"}

    @staticmethod
    def jit_options() -> list[str]:
        """``cuda.jit``'s options (``MIN_BLOCKS_PER_SM``, ``SHARED_CARVEOUT``; none by
        default)."""
        options = (
            [] if MIN_BLOCKS_PER_SM is None else [f"**launch_bounds(THREADS, {MIN_BLOCKS_PER_SM})"]
        )
        if SHARED_CARVEOUT is not None:
            options.append(f"shared_memory_carveout={int(SHARED_CARVEOUT)}")
        return options

    @property
    def mma(self) -> str:
        kind = "w4_mmaq" if SHARED_X_SUMS else "w4_mma"  # (no sums of x)
        return f"{kind}_{self.dtype}x{self.fragments}"

    @property
    def layout(self) -> str:
        return int4_mma_layout(self.p.k_major, self.p.signed, self.words)

    def _kernel_head(self, params: list[str], shared: list[str], sets: tuple[str, ...]) -> Source:
        """The kernel's signature and its arrays (``shared``: more shared ones; ``sets``: the
        register sets of codes), the lane's coordinates, the scales' registers."""
        p = self.p
        code = Source([])
        doc = "A tile of 16 output columns a block, its warps over K (module notes)."
        kernel_def(code, self.name, params, doc, self.jit_options())
        code.add(1, "red = cuda.shared.array(RED, f32)  # the warps' sums", *shared)
        code.add(1, "acc = cuda.local.array(ACC, f32)  # the lane's outputs, f32")
        code.add(1, "tmp = cuda.local.array(ACC, f32)", "sx = cuda.local.array(ACC, f32)")
        for r in sets:
            code.add(1, f"words{r} = cuda.local.array(CW, int32)")
        code.add(1, "xw = cuda.local.array(XW, int32)  # the chunk's activations")
        code.add(1, "lane = cuda.threadIdx.x % 32", "warp = cuda.threadIdx.x // 32")
        code.add(1, "g = lane // 4", "tq = lane % 4")
        # a row past M (a fragment's unused columns) reads row M - 1; never stored
        rows = range(self.fragments)
        code.add(1, *[f"xrow{j} = min(g + {8 * j}, M - 1) * K + tq * XLANE" for j in rows])
        # the scales' and zero points' raw values (typed by a first read)
        code.add(1, f"sra0 = srb0 = sra1 = srb1 = in{p.scale}[0]")
        code.add(1, f"zra0 = zrb0 = zra1 = zrb1 = in{p.zero}[0]")
        if SHARED_X_SUMS:
            self._x_sums(code)
        return code

    def _x_sums(self, code: Source) -> None:
        """``SHARED_X_SUMS``: x's sums over each chunk and row into the shared table ``xs``
        (entry ``c * M + r``), a thread an entry, 8 elements a 16-byte load."""
        bits = f"{self.dtype}_bits"
        code.add(1, "xs = cuda.shared.array(XS, f32)  # x's sums a chunk and row")
        code.add(1, "xi = cuda.threadIdx.x", "while xi < XS:")
        code.add(2, "xsum = f32(0.0)", "xat = (xi % M) * K + (xi // M) * CHUNK")
        code.add(2, "for e in range(CHUNK // 8):")
        code.add(3, f"load_words4(in{self.p.x}, xat + 8 * e, xw, 0)")
        code.add(3, "for q in range(4):")
        code.add(4, f"xsum += {bits}(xw[q]) + {bits}(xw[q] >> 16)  # (the low 16 bits)")
        code.add(2, "xs[xi] = xsum", "xi += THREADS")
        code.add(1, "cuda.syncthreads()")

    @staticmethod
    def _tile_loop(code: Source, *lines: str) -> None:
        """The block's walk over tiles: tile ``t``'s columns (and ``lines``), its sums zeroed."""
        code.add(1, "t = cuda.blockIdx.x", "while t < TILES:  # uniform across the block")
        code.add(2, "n0 = t * TILE", "na = min(n0 + g, N - 1)", "nb = min(n0 + g + 8, N - 1)")
        code.add(2, *lines)
        code.add(2, "for i in range(ACC):")
        code.add(3, "acc[i] = f32(0.0)", "tmp[i] = f32(0.0)", "sx[i] = f32(0.0)")

    def emit(self) -> str:
        params = self.epilogue.params()
        # two chunks' codes, scales, zeros: one set in use, one on its way
        code = self._kernel_head(params, [], REGISTER_SETS)
        code.add(1, "chunk0 = chunk1 = CHUNKS")
        self._tile_loop(
            code, "tile_words = (t * CHUNKS * 32 + lane) * CW  # the lane's words of chunk 0"
        )
        code.add(2, "c = warp")
        self._fetch_chunk(code, 2, "c", "0")
        # two chunks an iteration, the register sets taking turns: no copies between them
        code.add(2, "for it in range(PAIRS):  # the same count in every warp")
        self._fetch_chunk(code, 3, "c + WARPS", "1")
        self._chunk_mmas(code, 3, "0")
        self._fetch_chunk(code, 3, "c + 2 * WARPS", "0")
        self._chunk_mmas(code, 3, "1")
        code.add(3, "c += 2 * WARPS")
        self._finish_tile(code)
        code.add(2, "t += cuda.gridDim.x")
        return self.module(code, params)

    def _fetch_chunk(self, code: Source, indent: int, c: str, r: str, codes: bool = True) -> None:
        """Chunk ``c``'s codes (where ``codes``), scales and zero points into register set
        ``r`` (the activations zero past K: a chunk there adds nothing)."""
        p = self.p
        code.add(indent, f"cn = {c}", "if cn < CHUNKS:")
        if codes:
            code.add(indent + 1, "base = tile_words + cn * (32 * CW)")
            for q in range(self.words // 4):
                code.add(indent + 1, f"load_words4(in{p.codes}, base + {4 * q}, words{r}, {4 * q})")
        if "blk" in p.scale_index:  # a scale block is whole chunks (mma_problem)
            code.add(indent + 1, f"blk = udiv32(cn, {p.block // (16 * self.words)})")
        for column, side in (("na", "a"), ("nb", "b")):
            code.add(indent + 1, f"n = {column}")
            code.add(indent + 1, f"sr{side}{r} = load_bits(in{p.scale}, {p.scale_index})")
            code.add(indent + 1, f"zr{side}{r} = load_bits(in{p.zero}, {p.scale_index})")
        if codes:
            code.add(indent, f"chunk{r} = cn")

    def _load_activations(self, code: Source, indent: int, r: str) -> None:
        """The activations of the chunk in register set ``r`` (zero past K: a chunk there
        adds nothing), loaded when its ``mma``s start: every block reads the same rows of
        x, which stay in L1, and two chunks of them in registers cost the occupancy (118
        registers, 16 warps a multiprocessor, where the codes need memory parallelism)."""
        code.add(indent, f"if chunk{r} < CHUNKS:", f"    kb = chunk{r} * CHUNK")
        for j in range(self.fragments):
            for q in range(self.words // 2):
                e, d = f"xrow{j} + kb + {8 * q}", 2 * self.words * j + 4 * q
                code.add(indent + 1, f"load_words4(in{self.p.x}, {e}, xw, {d})")
        if SHARED_X_SUMS:  # D columns 2 tq, 2 tq + 1 of a fragment: x's rows (module notes)
            code.add(indent + 1, f"xsb = chunk{r} * M")
            for j in range(self.fragments):
                for c in range(2):
                    row = f"min({8 * j + c} + 2 * tq, M - 1)"
                    code.add(indent + 1, f"sx[{4 * j + c}] = sx[{4 * j + c + 2}] = xs[xsb + {row}]")
        code.add(indent, "else:", "    for i in range(XW):", "        xw[i] = 0")
        if SHARED_X_SUMS:  # (a chunk past K adds nothing)
            code.add(indent + 1, "for i in range(ACC):", "    sx[i] = f32(0.0)")

    def _chunk_mmas(self, code: Source, indent: int, r: str) -> None:
        """The ``mma``s of the chunk in register set ``r``, a word of codes each, into ``tmp``
        (the sums of ``(MAGIC + q) x``) and ``sx`` (x's sums), then ``acc += s (tmp - (MAGIC
        + z) sx)`` for the lane's two columns (``w4_mma_device``: the chunk lies in one scale
        block)."""
        p = self.p
        self._load_activations(code, indent, r)
        second = 2 * self.words
        for s in range(self.words):
            regs = [f"xw[{2 * s}]", f"xw[{2 * s + 1}]"]
            if self.fragments == 2:
                regs += [f"xw[{second + 2 * s}]", f"xw[{second + 2 * s + 1}]"]
            sums = "" if SHARED_X_SUMS else "sx, "
            code.add(indent, f"{self.mma}(words{r}[{s}], {', '.join(regs)}, tmp, {sums}0)")
        magic = {"f16": 1024.0, "bf16": 128.0}[self.dtype] + (8.0 if p.signed else 0.0)
        code.add(
            indent, f"sa = {self.scale_value('sra' + r)}", f"sb = {self.scale_value('srb' + r)}"
        )
        code.add(indent, f"za = f32(zra{r}) + f32({magic})", f"zb = f32(zrb{r}) + f32({magic})")
        for j in range(self.fragments):
            for i in range(4):  # D rows g, g, g + 8, g + 8: columns na, na, nb, nb
                k, (scale, zero) = 4 * j + i, (("sa", "za") if i < 2 else ("sb", "zb"))
                code.add(indent, f"acc[{k}] += {scale} * (tmp[{k}] - {zero} * sx[{k}])")
        resets = ["    tmp[i] = f32(0.0)"] + ([] if SHARED_X_SUMS else ["    sx[i] = f32(0.0)"])
        code.add(indent, "for i in range(ACC):", *resets)

    def _finish_tile(self, code: Source) -> None:
        """The warps' accumulators through ``red`` (D row g / g + 8: the lane's columns, D
        columns 2t, 2t + 1: rows of x), summed, then the epilogue, a thread an output."""
        indent = 2
        if self.producer:  # (its warp holds no sums)
            code.add(2, "if warp < WARPS:")
            indent = 3
        for j in range(self.fragments):
            for i, (row, col) in enumerate((("g", 0), ("g", 1), ("g + 8", 0), ("g + 8", 1))):
                at = f"((warp * TILE + {row}) * MP + {8 * j} + 2 * tq + {col})"
                code.add(indent, f"red[{at}] = acc[{4 * j + i}]")
        terms = " + ".join(f"red[({w} * TILE + col) * MP + r]" for w in range(WARPS))
        self.store_outputs(code, "TILE * M", terms, ["col = i % TILE", "r = i // TILE"], "n0 + col")

    numpy_types = "int32"
    #: Whether a warp of its own issues the copies (``PRODUCER_WARP``: the ring's).
    producer = False

    def block_threads(self) -> int:
        """Threads a block: ``THREADS``, and a producer warp's 32."""
        return THREADS + 32 if self.producer else THREADS

    def loop_constants(self, chunks: int) -> list[tuple[str, int]]:
        return [("PAIRS", -(-chunks // (2 * WARPS)))]  # iterations of two chunks a warp

    def module(self, code: Source, params: list[str]) -> str:
        p = self.p
        chunk = 16 * self.words
        engine = "the weight's 4-bit codes fed to mma.sync fragments as 16-bit floats"
        notes = [
            *route_notes(p, engine, f"mma.sync A fragments ({self.layout})"),
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
            *self.loop_constants(chunks),
            ("XLANE", 4 * self.words),  # a lane's activations of a chunk
            ("XW", 2 * self.words * self.fragments),  # their words (pairs of elements)
            ("ACC", 4 * self.fragments),
            ("MP", mp),  # rows of x a tile's sums hold (the B fragments' columns)
            ("RED", WARPS * TILE * mp),
            ("TILES", -(-p.n // TILE)),
            *([("XS", chunks * p.m)] if SHARED_X_SUMS else []),  # its table's entries
            ("THREADS", self.block_threads()),
        ]
        dtypes = self.epilogue.dtypes()
        parts = storage_signature(dtypes)[len("void(") : -1].split(", ")
        parts[len(self.epilogue.results) + p.codes] = "int32[::1]"  # the packed words
        signatures = [f"SIGNATURE = {'void(' + ', '.join(parts) + ')'!r}"]
        tail = block_tile_launch(self.name, "TILES", BLOCKS_PER_SM, ins + outs, params)
        imports = [f"from numpy import {self.numpy_types}", ""]
        return self.kernel_module(
            notes, constants, code, tail, imports=imports, signatures=signatures
        )


class W4RingEmitter(W4MmaEmitter):
    """The Tensor Core kernel with its codes through a ring of shared-memory stages
    (``FUSEC_W4_KERNEL=ring``; module notes): a step is a chunk a warp, the step's 8
    chunks, contiguous in the packed layout, one ``cp.async.bulk`` (``bulk``) issued by
    thread 0 ``STAGES - 1`` steps ahead (across the block's tiles too); a lane reads its
    chunk's codes from the stage (two 16-byte shared loads) after the stage's mbarrier, its
    scales and zero points one step ahead in register set 1; a block barrier ends a step,
    and the stage the last step read is refilled at the top of the next (its words consumed
    by that step's ``mma``s: the copy's proxy fence then waits for no fresh load).

    With ``PRODUCER_WARP`` a ninth warp issues the copies instead: each reader arrives on the
    stage's ``empty`` mbarrier after its shared loads, the producer waits on it before the
    refill, and no block barrier ends a step; with ``RING_SCALES`` too, the producer's
    lanes also copy the step's scale and zero-point rows into the stage."""

    numpy_types = "int32, int64"

    @property
    def producer(self) -> bool:  # type: ignore[override]
        return PRODUCER_WARP

    @property
    def ring_scales(self) -> bool:
        """Whether the step's scales and zero points come through the ring
        (``RING_SCALES``, where ``ring_scales_problem`` finds none)."""
        if not (RING_SCALES and self.producer):
            return False
        return ring_scales_problem(self.p, self.sdtype, self.zero_dtype) is None

    @property
    def zero_dtype(self) -> str:
        return spec_of(self.p.dequantize.zero_point.type).dtype

    def kernel_helpers(self) -> set[str]:
        ring = {"align16", "mbar_init", "bulk_load", "mbar_wait", "lds_words4", "urem32"}
        if self.producer:
            ring.add("mbar_arrive")
        if self.ring_scales:
            ring |= {"cp_async16", "cp_async_arrive", "load_bits", "ufield32"}
            ring.add("sfield32" if ZERO_BYTES[self.zero_dtype] else "ufield32")
        return super().kernel_helpers() | ring

    def loop_constants(self, chunks: int) -> list[tuple[str, int]]:
        code_words = CHUNKS_PER_STEP * WARPS * 32 * self.words  # a step's codes
        # (RING_SCALES: then its chunks' rows of 16 scales, 8 words each, and of 16 zero
        # points, 4 words each)
        scales = [("SCALES_AT", code_words), ("ZEROS_AT", code_words + 8 * WARPS)]
        stage_words = code_words + 12 * WARPS if self.ring_scales else code_words
        return [
            ("STEPS", -(-chunks // (CHUNKS_PER_STEP * WARPS))),  # a tile's steps
            ("STAGES", STAGES),
            ("STAGE_WORDS", stage_words),
            ("RING", STAGES * stage_words + 4),  # (+ 16 bytes to align the first stage)
            *(scales if self.ring_scales else []),
        ]

    def emit(self) -> str:
        params = self.epilogue.params()
        shared = [
            "ring = cuda.shared.array(RING, int32)  # STAGES steps' codes",
            "bars = cuda.shared.array(STAGES, int64)  # a stage's copy completes on one",
        ]
        if self.producer:
            shared.append("empty = cuda.shared.array(STAGES, int64)  # a stage's readers, done")
        # set 0: this step's codes, scales and zero points; set 1: the next step's scales
        code = self._kernel_head(params, shared, ("0",))
        code.add(1, "r0 = align16(ring)")
        self._setup(code)
        self._tile_loop(code)
        indent = 2
        if self.producer:
            self._producer_steps(code)
            code.add(2, "else:")
            indent = 3
        if not self.ring_scales:
            self._fetch_chunk(code, indent, "warp", "1", codes=False)
        code.add(indent, "for st in range(STEPS):  # the same count in every warp")
        for c in range(CHUNKS_PER_STEP):
            self._step_chunk(code, c, indent + 1)
        if self.producer:
            code.add(2, "j += STEPS")
        else:
            code.add(3, "cuda.syncthreads()  # the stage is read: the ring may refill it")
            code.add(3, "j += 1")
        self._finish_tile(code)
        code.add(2, "t += cuda.gridDim.x")
        return self.module(code, params)

    def _producer_steps(self, code: Source) -> None:
        """``PRODUCER_WARP``: the producer warp's lane 0 walks the tile's steps, copying step
        ``j + st + STAGES - 1`` (the block's) once the step ``STAGES`` before it, which read
        the same stage, has every reader's arrival on ``empty``."""
        code.add(2, "if warp == WARPS:  # the producer warp: the ring's copies")
        code.add(3, "for st in range(STEPS):", "    jj = j + st + STAGES - 1")
        # (RING_SCALES: every lane copies scales, lane 0 the codes too)
        code.add(4, "if jj < steps:" if self.ring_scales else "if lane == 0 and jj < steps:")
        code.add(5, "if jj >= STAGES:  # (its phase udiv32(jj, STAGES) - 1)")
        code.add(6, "mbar_wait(empty, urem32(jj, STAGES), (udiv32(jj, STAGES) + 1) % 2)")
        if self.ring_scales:
            self._copy_scales(code, 5)
            code.add(5, "if lane == 0:")
            self._copy_step(code, 6, located=True)
        else:
            self._copy_step(code, 5)

    def _copy_scales(self, code: Source, indent: int) -> None:
        """``RING_SCALES``: the producer warp's lanes copy step ``jj``'s rows of its tile's
        scales (lanes 0-15: a 16-byte half of chunk ``lane // 2``'s 32 bytes) and zero points
        (lanes 16-23: chunk ``lane - 16``'s 16 bytes) behind the stage's codes; then every lane
        arrives on the stage's barrier once its copies have landed. Leaves the step located
        (``tile``, ``first``, ``stage``) for ``_copy_step``."""
        p = self.p
        blocks = p.block // (16 * self.words)  # chunks a scale block
        self._locate_step(code, indent)
        code.add(
            indent,
            "w = lane >> 1 if lane < 16 else lane - 16  # the lane's chunk of the step",
            "if lane < 24 and first + w < CHUNKS:",
        )
        code.add(
            indent + 1,
            f"e = udiv32(first + w, {blocks}) * N + tile * TILE",
            "at = r0 + stage * STAGE_WORDS",
            "if lane < 16:",
            f"    cp_async16(ring, at + SCALES_AT + 8 * w + 4 * (lane & 1), in{p.scale}, "
            "e + 8 * (lane & 1))",
            "else:",
            f"    cp_async16(ring, at + ZEROS_AT + 4 * w, in{p.zero}, e)",
        )
        code.add(indent, "cp_async_arrive(bars, stage)")

    def _step_chunk(self, code: Source, c: int, indent: int) -> None:
        """The step's ``c``-th chunk of the warp (chunk ``c WARPS + warp`` of the step's):
        first in a step, the next copy issued (unless a producer warp does) and the stage
        waited for; then its scales taken from register set 1 (the next chunk's fetched
        there), its codes read from the stage (and, with a producer warp, the stage released
        once the step's last chunk is read), its ``mma``s."""
        if CHUNKS_PER_STEP == 1:
            code.add(indent, "chunk0 = st * WARPS + warp  # the warp's chunk")
        else:
            code.add(
                indent, f"chunk0 = (st * {CHUNKS_PER_STEP} + {c}) * WARPS + warp  # the warp's"
            )
        step = "j + st" if self.producer else "j"  # (the block's steps so far)
        if c == 0 and not self.producer:
            # the stage the last step read: every thread passed its closing barrier
            code.add(indent, "jj = j + STAGES - 1", "if cuda.threadIdx.x == 0 and jj < steps:")
            self._copy_step(code, indent + 1)
        if not self.ring_scales:
            code.add(indent, "sra0, srb0, zra0, zrb0 = sra1, srb1, zra1, zrb1")
            self._fetch_chunk(code, indent, "chunk0 + WARPS", "1", codes=False)
        if c == 0:
            if self.producer:
                code.add(indent, f"js = {step}")
                step = "js"
            code.add(
                indent,
                f"slot = urem32({step}, STAGES)",
                f"mbar_wait(bars, slot, udiv32({step}, STAGES) % 2)",
            )
        lane_words = (
            "(warp * 32 + lane) * CW" if c == 0 else f"(({c} * WARPS + warp) * 32 + lane) * CW"
        )
        code.add(indent, f"at = r0 + slot * STAGE_WORDS + {lane_words}")
        staggered = STAGGERED_HALVES and self.words == 8
        if staggered:
            code.add(indent, "h = (lane >> 2) & 1  # lanes 4-7 of 8: the second half first")
            code.add(indent, "lds_words4(ring, at + 4 * h, words0, 0)")
            code.add(indent, "lds_words4(ring, at + 4 - 4 * h, words0, 4)")
        else:
            for q in range(self.words // 4):
                code.add(indent, f"lds_words4(ring, at + {4 * q}, words0, {4 * q})")
        if self.ring_scales:
            self._stage_scales(code, indent)
        if self.producer and c == CHUNKS_PER_STEP - 1:
            code.add(indent, "mbar_arrive(empty, slot)  # (the words are in registers)")
        if staggered:
            code.add(indent, "if h:  # (the halves back in their places)")
            for q in range(4):
                code.add(indent + 1, f"words0[{q}], words0[{q + 4}] = words0[{q + 4}], words0[{q}]")
        self._chunk_mmas(code, indent, "0")

    def _stage_scales(self, code: Source, indent: int) -> None:
        """``RING_SCALES``: the lane's two columns' scales (16 bits of a word each) and zero
        points (a byte each) from the stage, at the lane's offsets ``sofs`` / ``zofs`` and
        bits ``s16`` / ``z8`` (``_lane_scales``); zeros for a chunk past K (its stage rows
        were never copied)."""
        field = "sfield32" if ZERO_BYTES[self.zero_dtype] else "ufield32"
        code.add(indent, "if chunk0 < CHUNKS:")
        code.add(
            indent + 1,
            "sb = r0 + slot * STAGE_WORDS",
            "sra0 = ufield32(load_bits(ring, sb + sofs), s16, 16)",
            "srb0 = ufield32(load_bits(ring, sb + sofs + 4), s16, 16)",
            f"zra0 = {field}(load_bits(ring, sb + zofs), z8, 8)",
            f"zrb0 = {field}(load_bits(ring, sb + zofs + 2), z8, 8)",
        )
        code.add(indent, "else:", "    sra0 = srb0 = zra0 = zrb0 = int32(0)")

    @staticmethod
    def _lane_scales(code: Source) -> None:
        """``RING_SCALES``: where in a stage the lane's columns ``g`` and ``g + 8`` of its
        warp's chunk have their scales (words ``sofs``, ``+ 4``; bits ``s16``) and zero
        points (words ``zofs``, ``+ 2``; bits ``z8``)."""
        code.add(
            1,
            "sofs = SCALES_AT + warp * 8 + (g >> 1)",
            "s16 = 16 * (g & 1)",
            "zofs = ZEROS_AT + warp * 4 + (g >> 2)",
            "z8 = 8 * (g & 3)",
        )

    def _setup(self, code: Source) -> None:
        code.add(1, "if cuda.threadIdx.x == 0:")
        # (RING_SCALES: the copy's arrival and each producer lane's, its cp.asyncs landed)
        arrivals = "1 + 32" if self.ring_scales else "1"
        code.add(2, "for i in range(STAGES):", f"    mbar_init(bars, i, {arrivals})")
        if self.producer:  # every reading thread arrives
            code.add(3, "mbar_init(empty, i, WARPS * 32)")
        code.add(1, "cuda.syncthreads()")
        code.add(1, "tiles = (TILES - 1 - cuda.blockIdx.x) // cuda.gridDim.x + 1  # the block's")
        code.add(1, "steps = tiles * STEPS")
        if self.ring_scales:
            self._lane_scales(code)
            code.add(1, "if warp == WARPS:  # the ring's first stages")
            code.add(2, "for jj in range(STAGES - 1):", "    if jj < steps:")
            self._copy_scales(code, 4)
            code.add(4, "if lane == 0:")
            self._copy_step(code, 5)
        else:
            code.add(1, "if cuda.threadIdx.x == 0:  # the ring's first stages")
            code.add(2, "for jj in range(STAGES - 1):", "    if jj < steps:")
            self._copy_step(code, 4)
        code.add(1, "j = 0  # the block's steps so far")

    @staticmethod
    def _locate_step(code: Source, indent: int) -> None:
        """Step ``jj``'s tile, its first chunk and its stage (the block's steps walk its
        tiles, ``STEPS`` a tile)."""
        code.add(
            indent,
            "tile = cuda.blockIdx.x + udiv32(jj, STEPS) * cuda.gridDim.x",
            "first = urem32(jj, STEPS) * WARPS"
            + ("" if CHUNKS_PER_STEP == 1 else f" * {CHUNKS_PER_STEP}"),
            "stage = urem32(jj, STAGES)",
        )

    def _copy_step(self, code: Source, indent: int, located: bool = False) -> None:
        """One thread's bulk copy of step ``jj``'s codes (its tile's chunks ``CHUNKS_PER_STEP
        * WARPS`` at a time, contiguous in ``pack_int4_mma``'s layout) into the ring's stage
        ``jj % STAGES`` (``located``: ``_locate_step``'s names already set)."""
        step_chunks = "WARPS" if CHUNKS_PER_STEP == 1 else f"{CHUNKS_PER_STEP} * WARPS"
        if not located:
            self._locate_step(code, indent)
        code.add(
            indent,
            f"bulk_load(ring, r0 + stage * STAGE_WORDS, in{self.p.codes}, "
            "(tile * CHUNKS + first) * (32 * CW), "
            f"min({step_chunks}, CHUNKS - first) * (128 * CW), bars, stage)",
        )


#: The attribute ``tile-gemm`` writes on a W4A16 group this kernel serves: the loop that runs
#: it (``choose_loop``), one of ``LOOPS``; code generation reads it, never the machine.
LOOP_ATTR = "fusec.w4_loop"
LOOPS = ("registers", "ring")
#: ``FUSEC_W4_KERNEL`` overrides the IR's loop for every W4A16 layer (the A/Bs of
#: ``gemm_bench.py --w4-decode``): ``registers``, ``ring`` or ``cuda-cores``
#: (``w4.py``'s kernel); ``auto``, the default, keeps the attribute's.
KERNEL_CHOICE = "FUSEC_W4_KERNEL"
#: Its values, the default first.
KERNELS = ("auto", "registers", "cuda-cores", "ring")


def choose_loop(p: W4Plan, sms: int) -> str:
    """The loop of plan ``p`` on a GPU of ``sms`` multiprocessors: the block ring where the
    grid (``BLOCKS_PER_SM`` blocks a multiprocessor) is smaller than the tiles, so that
    blocks walk several tiles and its copies run ahead across them; else the register
    sets, ahead wherever a block has one tile (module notes: on 132 SMs the 123 MB layer's
    1792 tiles take the ring, 4096 x 14336's 896 and 4096 x 4096's 256 the register sets)."""
    return "ring" if -(-p.n // TILE) > BLOCKS_PER_SM * sms else "registers"


def loop_of(fused_op: ai.FusedOp) -> str:
    """The loop ``fused_op``'s ``LOOP_ATTR`` names (the register sets without one)."""
    attr = fused_op.attributes.get(LOOP_ATTR)
    if attr is None:
        return "registers"
    if not isinstance(attr, StringAttr) or attr.data not in LOOPS:
        expected = " or ".join(f'"{loop}"' for loop in LOOPS)
        raise error_at(fused_op, f"has a bad {LOOP_ATTR} attribute: expected {expected}")
    return attr.data


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The W4A16 kernel module of a group the route planned: this Tensor Core kernel, with
    the loop the IR names (or ``$FUSEC_W4_KERNEL``), where it serves the plan, else ``w4.py``'s
    (which also answers a plan's refusal)."""
    p = w4.plan(fused_op)
    chosen = switch(KERNEL_CHOICE, KERNELS)  # (a ValueError naming a bad value)
    if isinstance(p, str) or chosen == "cuda-cores" or mma_problem(p) is not None:
        return w4.generate(fused_op, name, p)
    loop = loop_of(fused_op) if chosen == "auto" else chosen
    emitter = W4RingEmitter if loop == "ring" else W4MmaEmitter
    return w4.kernel_source(fused_op, emitter(fused_op, p, kernel_name(name)))
