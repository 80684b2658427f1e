"""CUDA template for "reduce" groups: a sum, mean or max over any axes, with its epilogue.

The input's dims are collapsed first (size-1 dims dropped, neighbours that are both
reduced or both kept merged), which leaves kept groups (the outputs) and reduced groups
(``R`` elements per output). When the innermost dim is kept (``I`` elements: e.g. the
channels of an NHWC global mean) the outputs are ``O`` rows of ``I`` contiguous
columns, else ``I`` = 1 (the contiguous row case: an NCHW global mean, ``R`` = H*W).

One kernel serves both: a block of ``THREADS`` threads is ``Z`` output rows x ``TY``
reduction lanes x ``TX`` columns, ``x`` the fastest. Each thread accumulates every
``TY``-th element of its output's reduction in float32 (16-bit inputs converted on
load; a sum or mean of float32 or bfloat16 values in float64: values near float32's
largest, 3e38, overflow a float32 sum where the float64 mean is finite, and float64
adds cost nothing in a kernel that reads memory at 4 or 2 bytes an element), then the
``TY`` partials of each output are combined in shared memory, a tree
of halving strides (no shuffles: the same code runs in the simulator), and the lane
``y = 0`` thread finishes (a mean divides by ``R``) and runs the epilogue:

* the row case (``TX`` = 1): ``TY`` threads per row read consecutive elements
  (coalesced), ``Z`` rows a block when rows are short;
* the column case: ``TX`` threads over consecutive columns (coalesced), ``TY`` lanes
  splitting the strided reduction, so a long reduction over few columns still spreads.

Blocks walk their tiles grid-stride. A max keeps a NaN once it sees one (``v >= m or
v != v``: ``v >= NaN`` is false), and of equal values the later element (numpy's choice
between -0.0 and 0.0): each lane scans with ``>=``, and the tree, where a lane's
elements are not all after another's, compares the indices the partials came from.

Few outputs of long reductions (fewer tiles than ``SPLIT_BELOW_BLOCKS``, lanes of
more than ``SPLIT_LANE_ELEMENTS`` elements: a mean over a whole large image, a
squeeze-excite mean over a channels-last plane of few channels) take two passes,
without atomics: the first kernel reduces each of ``SPLIT`` parts of every
reduction as a tile of its own, into a workspace of the partials' type (``scratch_f32``
or ``scratch_f64``: one per stream, allocated once), the second combines each output's
parts in order (a later part holds later elements, so ties still go to the later one),
finishes it and runs the epilogue.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fusec.codegen.expr import literal, shape_of
from fusec.dialect import ops as ai
from fusec.targets.cuda.anchored import (
    AnchorEmitter,
    input_view,
    planned_template,
    stored_views,
)
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.common import (
    Source,
    block_tile_launch,
    kernel_def,
    storage_signature,
)

THREADS = 256
#: Elements each reduction lane aims to accumulate before the shared-memory tree.
PER_LANE = 8
#: Columns per block at most in the column case (128 bytes of f32, 64 of f16).
MAX_TX = 32
#: Blocks per multiprocessor at most; the grid-stride loop covers the rest.
BLOCKS_PER_SM = 16
#: A reduction of fewer block tiles than this (two per multiprocessor of an H200) whose
#: lanes would each read more than SPLIT_LANE_ELEMENTS is split into parts across blocks
#: (two passes), PART_LANE elements per lane and part. EfficientNet-B0 b1's
#: squeeze-excite mean over (1, 56, 56, 96) channels-last, 3 tiles of 8 lanes x 392
#: elements, was by its launch shape the profile's 25.5 us kernel (H100, profile_zoo at
#: 4ed87b4, when lanes split only past 512 elements); in 13 parts of 32 elements a lane it
#: takes 5.2 us, both passes (CUPTI, H100, 2026-12-06), and the one-pass means of 14 x 14
#: and 7 x 7 planes (25 and 7 elements a lane) 3.1-3.2 and 2.1 us. Loading 16 bytes of
#: columns a thread with lanes of ~4 loads (23bc25b, reverted) was slower at every SE shape
#: of EfficientNet-B0 and MobileNetV3 (63.6 us over 13 shapes against 49.2).
SPLIT_BELOW_BLOCKS = 2 * H200.sms
SPLIT_LANE_ELEMENTS = 64
PART_LANE = 32
#: Threads of the second pass (one output each).
FINISH_THREADS = 256


def _reduce_problem(fused_op: ai.FusedOp, red: ai.ReduceOp) -> str | None:
    """What the reduce kernel needs of an anchored group (``planned_template``): None when
    it serves ``fused_op``, else why it cannot."""
    if any(perm for _, perm in stored_views(fused_op)):
        return "a result stored transposed"
    source, perm = input_view(fused_op, red.operands[0]) or (None, ())
    if perm:
        shape, axes = shape_of(red.operands[0]), set(red.reduced_axes())
        kept = [perm[d] for d, size in enumerate(shape) if d not in axes and size > 1]
        if kept != sorted(kept):
            return "the input's transpose reorders the kept dims"
    return None


def storage_axes(fused_op: ai.FusedOp, red: ai.ReduceOp) -> tuple[tuple[int, ...], set[int]]:
    """(shape, reduced axes) of the reduction in its input's storage: a transposed view of
    a group input is read through (logical dim d is stored dim ``perm[d]``)."""
    view = input_view(fused_op, red.operands[0])
    assert view is not None  # plan_problem checked it
    source, perm = view
    axes = set(red.reduced_axes())
    if perm:
        axes = {perm[a] for a in axes}
    return shape_of(source), axes


@dataclass(frozen=True)
class ReducePlan:
    """The collapsed reduction and the block shape serving it."""

    groups: tuple[tuple[int, bool], ...]  # (size, reduced) per collapsed input dim
    outer: int  # O: output rows
    inner: int  # I: contiguous kept columns (1 in the row case)
    length: int  # R: elements reduced per output
    tx: int
    ty: int
    z: int
    #: passes over the reduction's parts: 1, or SPLIT parts into a workspace, then a
    #: second kernel combining them (few outputs of long reductions)
    split: int = 1

    @property
    def chunk(self) -> int:
        """Elements of each part of the reduction."""
        return -(-self.length // self.split)

    @property
    def xblocks(self) -> int:
        return -(-self.inner // self.tx)

    @property
    def blocks(self) -> int:
        return -(-self.outer // self.z) * self.xblocks


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def collapse_axes(shape: tuple[int, ...], axes: set[int]) -> list[tuple[int, bool]]:
    """(size, reduced) of each run of neighbouring dims alike (size-1 dims dropped)."""
    groups: list[list] = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        reduced = d in axes
        if groups and groups[-1][1] == reduced:
            groups[-1][0] *= size
        else:
            groups.append([size, reduced])
    return [(size, reduced) for size, reduced in groups]


def make_plan(shape: tuple[int, ...], axes: set[int]) -> ReducePlan:
    """The block shape for reducing ``axes`` of ``shape``."""
    groups = collapse_axes(shape, axes)
    inner = groups[-1][0] if groups and not groups[-1][1] else 1
    length = math.prod(size for size, reduced in groups if reduced)
    outer = math.prod(size for size, reduced in groups if not reduced) // inner
    tx = 1 if inner == 1 else min(MAX_TX, _pow2_at_least(inner))
    lanes = THREADS // tx
    ty = min(lanes, _pow2_at_least(-(-length // PER_LANE)))
    plan = ReducePlan(tuple(groups), outer, inner, length, tx, ty, lanes // ty)
    if plan.blocks < SPLIT_BELOW_BLOCKS and length > ty * SPLIT_LANE_ELEMENTS:
        split = min(-(-SPLIT_BELOW_BLOCKS // plan.blocks), -(-length // (ty * PART_LANE)))
        chunk = -(-length // split)
        plan = dataclasses.replace(plan, split=-(-length // chunk))  # every part non-empty
    return plan


class _Emitter(AnchorEmitter):
    """The source of one reduce kernel module (``make_plan``'s blocks for its axes)."""

    def __init__(self, fused_op: ai.FusedOp, red: ai.ReduceOp, name: str) -> None:
        super().__init__(fused_op, red, name)
        self.red, self.plan = red, make_plan(*storage_axes(fused_op, red))
        self.transposed = bool(self.in_perm)
        #: the partials' type: float64 for a sum or mean of values that reach float32's
        #: largest (f32, bf16), whose float32 sum overflows where the mean is finite
        self.acc = "f64" if self.red.KIND != "max" and self.dtype in ("f32", "bf16") else "f32"

    @property
    def is_max(self) -> bool:
        return self.red.KIND == "max"

    def offsets(self) -> tuple[str, str]:
        """(base offset of output row ``o``, offset of reduced element ``r``) in the input."""
        strides, run = [], 1
        for size, _ in reversed(self.plan.groups):
            strides.append(run)
            run *= size
        strides.reverse()
        kept = [(s, st) for (s, red), st in zip(self.plan.groups, strides, strict=True) if not red]
        if self.plan.inner > 1:
            kept = kept[:-1]  # the inner columns: ``+ i``
        reduced = [(s, st) for (s, red), st in zip(self.plan.groups, strides, strict=True) if red]
        return _decode("o", kept), _decode("r", reduced)

    def emit(self) -> str:
        p = self.plan
        code = Source([])
        params = self.epilogue.params()
        if p.split == 1:
            kernel_def(
                code,
                self.name,
                params,
                "Z output rows x TY reduction lanes x TX columns per block.",
            )
            self.tiles(code)
            return self.module(code, params)
        ins = params[len(self.epilogue.results) :]
        doc = "As the one-pass kernel, each tile one of SPLIT parts of its reduction, into ws."
        kernel_def(code, f"{self.name}_part", ["ws", *ins], doc)
        self.tiles(code)
        code.add(0, "", "")
        doc = "One output per thread: its SPLIT parts combined in order, then the epilogue."
        kernel_def(code, self.name, ["ws", *params], doc)
        self.finish(code)
        return self.module(code, params)

    def tiles(self, code: Source) -> None:
        """The block-tile loop: each tile's partials reduced over its lanes, then the
        epilogue (one pass) or the part's value written to ``ws`` (two passes)."""
        p = self.plan
        code.add(1, f"sh = cuda.shared.array(THREADS, {self.acc})", "t = cuda.threadIdx.x")
        if self.is_max:
            code.add(1, "si = cuda.shared.array(THREADS, int32)  # where each partial max is")
        code.add(1, "x = t % TX", "y = (t // TX) % TY", "z = t // (TX * TY)")
        code.add(1, "b = cuda.blockIdx.x", "while b < BLOCKS * SPLIT:  # uniform across the block")
        code.add(2, "bt = b // SPLIT", "part = b % SPLIT")
        code.add(2, "o = (bt // XBLOCKS) * Z + z", "i = (bt % XBLOCKS) * TX + x")
        code.add(2, "live = o < O and i < I", f"acc = {self.initial()}")
        if self.is_max:
            code.add(2, "at = -1  # the element acc came from: of equal values the later wins")
        code.add(2, "if live:")
        base, roff = self.offsets()
        code.add(3, f"base = {base} + i", "r = part * CHUNK + y", "end = min(R, r - y + CHUNK)")
        code.add(3, "while r < end:")
        code.add(4, f"v = ld_{self.dtype}({self.array}, base + {roff})")
        if self.is_max:
            # NaN sticks (v >= NaN is False); ties: the later element (numpy's -0.0 / 0.0)
            code.add(4, "if v >= acc or v != v:")
            code.add(5, "acc = v", "at = r")
        else:
            code.add(4, "acc += v")
        code.add(4, "r += TY")
        code.add(2, "sh[t] = acc")
        if self.is_max:
            code.add(2, "si[t] = at")
        code.add(2, "cuda.syncthreads()")
        s = p.ty // 2
        while s >= 1:
            code.add(2, f"if y < {s}:")
            code.add(3, "a = sh[t]", f"c = sh[t + {s * p.tx}]")
            if self.is_max:
                code.add(3, f"ic = si[t + {s * p.tx}]")
                code.add(3, "if c > a or c != c or (c == a and ic > si[t]):")
                code.add(4, "sh[t] = c", "si[t] = ic")
            else:
                code.add(3, "sh[t] = a + c")
            code.add(2, "cuda.syncthreads()")
            s //= 2
        code.add(2, "if live and y == 0:", "    e = o * I + i")
        if p.split > 1:
            code.add(3, "ws[part * O * I + e] = sh[t]  # parts of one output O * I apart")
        else:
            code.add(3, f"val = {self.finished('sh[t]')}")
            self.epilogue.emit(code, 3, "val", "e")
        code.add(2, "b += cuda.gridDim.x")

    def finish(self, code: Source) -> None:
        """The second pass: each output's parts combined in order (a later part holds
        later elements: of equal maxima it wins), finished, the epilogue."""
        code.add(1, "e = cuda.grid(1)", "while e < O * I:")
        code.add(2, "acc = ws[e]", "for part in range(1, SPLIT):")
        code.add(3, "c = ws[part * O * I + e]")
        if self.is_max:
            code.add(3, "if c >= acc or c != c:", "    acc = c")
        else:
            code.add(3, "acc += c")
        code.add(2, f"val = {self.finished('acc')}")
        self.epilogue.emit(code, 2, "val", "e")
        code.add(2, "e += cuda.gridsize(1)")

    def finished(self, total: str) -> str:
        """The output of the reduction from its combined value ``total`` (float32; a
        float64 total divided, then rounded once)."""
        if self.acc == "f64":
            if self.red.KIND == "mean":
                return f"f32({total} / f64({float(self.plan.length)!r}))"
            return f"f32({total})"
        if self.red.KIND == "mean":
            return f"{total} / {literal(float(self.plan.length))}"
        return total

    def initial(self) -> str:
        if self.acc == "f64":
            return "f64(0.0)"
        return literal(-math.inf) if self.is_max else literal(0.0)

    def module(self, code: Source, params: list[str]) -> str:
        p = self.plan
        case = "row" if p.inner == 1 else "column"
        wide = "float64" if self.acc == "f64" else "float32"
        notes = [
            f"target: cuda (Numba CUDA), template: reduce ({self.red.KIND} over axes "
            f"{list(self.red.reduced_axes())}, the {case} case"
            + (", of a transposed input read in its storage order)" if self.transposed else ")"),
            f"layout: {p.outer} output rows x {p.inner} columns, {p.length} elements each; "
            f"blocks of {p.z} rows x {p.ty} lanes x {p.tx} columns, {wide} partials "
            "combined in shared memory, grid-stride over "
            f"{p.blocks} tiles",
        ]
        if p.split > 1:
            notes.append(
                f"two passes: each reduction in {p.split} parts of {p.chunk} elements (the "
                f"tiles x parts spread over the GPU), the parts into a {wide} workspace per "
                "stream, then one thread per output combines them in order and runs the "
                "epilogue"
            )
        ins, outs = self.io_names()
        constants = [
            ("O", p.outer),
            ("I", p.inner),
            ("R", p.length),
            ("TX", p.tx),
            ("TY", p.ty),
            ("Z", p.z),
            ("XBLOCKS", p.xblocks),
            ("BLOCKS", p.blocks),
            ("SPLIT", p.split),
            ("CHUNK", p.chunk),
            ("THREADS", THREADS),
        ]
        dtypes = self.epilogue.dtypes()
        signatures: list[str] = []  # the kernel's SIGNATURE (one pass)
        if p.split == 1:
            tail = block_tile_launch(self.name, "BLOCKS", BLOCKS_PER_SM, ins + outs, params)
        else:
            self.helpers.add(f"scratch_{self.acc}")
            part = storage_signature(["f32", *dtypes[len(outs) :]])
            whole = storage_signature(["f32", *dtypes])
            if self.acc == "f64":  # the workspace's type (no element type of the IR)
                part, whole = (s.replace("float32[::1]", "float64[::1]", 1) for s in (part, whole))
            signatures = [
                f"PART_SIGNATURE = {part!r}",
                f"SIGNATURE = {whole!r}",
                f"FINISH_THREADS = {FINISH_THREADS}",
            ]
            tail = split_launch(self.name, ins, outs, params, self.acc)
        imports = [
            *(["from numpy import int32", ""] if self.is_max else []),
            *(["from numpy import float64 as f64", ""] if self.acc == "f64" else []),
        ]
        return self.kernel_module(
            notes, constants, code, tail, imports=imports, signatures=signatures
        )


def _decode(var: str, dims: list[tuple[int, int]]) -> str:
    """The input offset of index ``var`` over ``dims`` ((size, input stride), C order)."""
    if not dims:
        return "0"
    terms = []
    below = 1
    for size, stride in reversed(dims):
        index = var if below == 1 else f"({var} // {below})"
        if below * size < math.prod(s for s, _ in dims):
            index = f"({index} % {size})"
        terms.append(index if stride == 1 else f"{index} * {stride}")
        below *= size
    return " + ".join(reversed(terms))


def split_launch(
    name: str, ins: list[str], outs: list[str], params: list[str], acc: str = "f32"
) -> list[str]:
    """The module tail of a two-pass reduction: ``config`` (of the first pass),
    ``launch`` queueing both kernels on ``stream`` with the module's workspace for that
    stream (``scratch_f32``, or ``scratch_f64`` for float64 partials), ``KERNELS``."""
    wide = "float64" if acc == "f64" else "float32"
    return [
        f"_WORKSPACES = {{}}  # stream -> this module's {wide} workspace",
        "",
        "",
        "def config(sms):",
        '    """(blocks, threads per block) of the first pass on ``sms`` multiprocessors."""',
        f"    return max(1, min(BLOCKS * SPLIT, sms * {BLOCKS_PER_SM})), THREADS",
        "",
        "",
        f"def launch({', '.join(ins + outs)}, stream=0, sms={H200.sms}):",
        f'    """Launch {name}_part, then {name}, on ``stream`` (no synchronisation)."""',
        f"    ws = scratch_{acc}(_WORKSPACES, SPLIT * O * I, stream)",
        "    blocks, threads = config(sms)",
        f"    {name}_part[blocks, threads, stream]({', '.join(['ws', *ins])})",
        "    finish = max(1, min(-(-(O * I) // FINISH_THREADS), sms * 16))",
        f"    {name}[finish, FINISH_THREADS, stream]({', '.join(['ws', *params])})",
        "",
        "",
        f"KERNELS = [({name}_part, PART_SIGNATURE), ({name}, SIGNATURE)]",
        "",
    ]


#: The reduce template's one plan, what fusion asks of a group, and its kernel module (or
#: PyTorch's, with the reason, where ``plan_problem`` refuses the group).
plan_problem, accepts, generate = planned_template("reduce", ai.ReduceOp, _reduce_problem, _Emitter)
