"""The fast kernels of cuda ``copy`` groups that read a strided view (``strided``).

* ``vectorised``: a grid-stride loop over the result's vectors of 4, 8 or 16 bytes;
  each vector's source is ``offset + sum(i[d] * stride[d])`` over the collapsed view
  (one set of constant divisions per vector, not per element) and it moves with one
  raw ``ld.global.v4``/``st.global.v4`` pair (``rawmove``), bits unconverted.
* ``tiled``: a batched 2-D transpose through a shared-memory tile, 32 x 32 (64 x 64 of
  2-byte elements on long enough sides, a short side's power of two by up to 256 where
  one side is short; padded rows spread a warp's column reads over the banks): one
  block of 256 threads per tile, reading along the source's
  contiguous dimension and writing along the result's, every read and write
  coalesced. Each thread issues all its loads before its first store (straight-line
  code, loads clamped into the tensor rather than branched around); edge tiles mask
  the stores element by element.

Both move elements as stored (16-bit types as their int16 bits, f32 as float32 loads
and stores, which do not touch a NaN's payload), so a copy is exact for every value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import header
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.common import (
    ITEMSIZE,
    NUMBA_STORAGE,
    Source,
    grid_stride_launch,
    kernel_def,
    kernel_name,
    module_text,
    prelude,
    storage_signature,
    yielded,
)
from fusec.targets.cuda.strided import CopyPlan, View

THREADS = 256
#: Blocks per multiprocessor at most for the vectorised loop; the grid stride covers the rest.
BLOCKS_PER_SM = 16
#: Index arithmetic on numbers below this is 32-bit (``udiv32``, ``urem32``).
NARROW = 1 << 31
#: The index helpers every fast copy module imports.
INDEX_HELPERS = ["udiv32", "urem32"]


def _sum(terms: list[str]) -> str:
    return " + ".join(t for t in terms if t) or "0"


def _term(index: str, stride: int) -> str:
    if stride == 0:
        return ""
    return index if stride == 1 else f"{index} * {stride}"


def index_div(x: str, d: int, bound: int) -> str:
    """``x // d`` for ``0 <= x < bound``: 32-bit unsigned when ``bound`` allows."""
    return f"udiv32({x}, {d})" if bound <= NARROW else f"{x} // {d}"


def index_rem(x: str, d: int, bound: int) -> str:
    """``x % d`` for ``0 <= x < bound``: 32-bit unsigned when ``bound`` allows."""
    return f"urem32({x}, {d})" if bound <= NARROW else f"{x} % {d}"


def _split(code: Source, indent: int, flat: str, names: list[str], sizes: list[int]) -> None:
    """``names`` (C order) := the multi-index of ``flat`` over ``sizes`` (no size 1)."""
    if not names:
        return
    if len(names) == 1:
        code.add(indent, f"{names[0]} = {flat}")
        return
    bound = math.prod(sizes)
    code.add(indent, f"r = {flat}")
    for name, size in zip(names[:0:-1], sizes[:0:-1], strict=True):
        code.add(
            indent, f"{name} = {index_rem('r', size, bound)}", f"r = {index_div('r', size, bound)}"
        )
    code.add(indent, f"{names[0]} = r")


def copy_module(
    fused_op: ai.FusedOp,
    name: str,
    label: str,
    notes: list[str],
    helpers: list[str],
    constants: list[str],
    body: str,
    tail: list[str],
) -> KernelSource:
    """A copy kernel's module (this module's paths and ``gather``'s): its header (``path:
    label``, then ``notes``), the prelude of ``helpers``, ``SIGNATURE`` then
    ``constants``, the kernel ``body`` and its launch ``tail``."""
    (result,) = yielded(fused_op)
    dtypes = [spec_of(result.type).dtype] + [spec_of(v.type).dtype for v in fused_op.inputs]
    path = f"target: cuda (Numba CUDA), template: gather, path: {label} (an index-map copy)"
    text = module_text(
        [header(fused_op, notes=[path, *notes]), prelude(helpers), "import numpy as np", ""],
        [f"SIGNATURE = {storage_signature(dtypes)!r}", *constants],
        body,
        tail,
    )
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "copy", "cuda", text, inputs, outputs, array_dtype=None)


def _module(
    fused_op: ai.FusedOp, name: str, plan: CopyPlan, notes: list[str], body: str, tail: list[str]
) -> KernelSource:
    dtype = spec_of(yielded(fused_op)[0].type).dtype
    storage = f"np.{NUMBA_STORAGE[dtype]}"  # the kernel's array type: int16 for f16/bf16
    moves = [f"move{plan.vector_bytes}"] if plan.vector_bytes else ["load_bits", "store_bits"]
    constants = [f"STORAGE = {storage}", f"THREADS = {THREADS}"]
    notes = [plan.why, *notes]
    return copy_module(
        fused_op, name, plan.label, notes, moves + INDEX_HELPERS, constants, body, tail
    )


def _params(fused_op: ai.FusedOp) -> tuple[list[str], list[str]]:
    ins = [f"in{k}" for k in range(len(fused_op.inputs))]
    return ["out0", *ins], ins


def vectorised(fused_op: ai.FusedOp, name: str, plan: CopyPlan) -> KernelSource:
    """The vectorised copy kernel module of ``plan`` (path ``vectorised``)."""
    name = kernel_name(name)
    itemsize = ITEMSIZE[spec_of(yielded(fused_op)[0].type).dtype]
    per = plan.vector_bytes // itemsize
    params, ins = _params(fused_op)
    code = Source([])
    kernel_def(
        code,
        name,
        params,
        "Grid-stride loop over the result's vectors, each moved from its source.",
    )
    code.add(1, "step = cuda.gridsize(1)", "v = cuda.grid(1)", "while v < NVEC:")
    if plan.pieces:
        nvec = _emit_concat(code, plan, per)
        layout = (
            f"{plan.rows} row(s) of {sum(c for _, c in plan.pieces)} elements, the pieces' "
            + "; ".join(_describe(view) for view, _ in plan.pieces)
        )
    else:
        assert plan.view is not None
        source, nvec = _vector_source(code, 2, plan.view, per, "v")
        code.add(
            2, f"move{plan.vector_bytes}(out0, {_term('v', per)}, in{plan.view.source}, {source})"
        )
        layout = _describe(plan.view)
    code.add(2, "v += step")
    notes = [
        f"one {plan.vector_bytes}-byte vector ({per} elements) per thread and loop step over "
        f"{nvec} vectors; {layout}",
    ]
    tail = [
        f"NVEC = {nvec}",
        "",
        "",
        *grid_stride_launch(name, "NVEC", BLOCKS_PER_SM, [*ins, "out0"], params),
    ]
    return _module(fused_op, name, plan, notes, code.text(), tail)


def _describe(view: View) -> str:
    return (
        f"collapsed view: shape {list(view.shape)}, source strides {list(view.strides)}, "
        f"offset {view.offset} (elements of input {view.source})"
    )


def _vector_source(code: Source, indent: int, view: View, per: int, flat: str) -> tuple[str, int]:
    """The source element of vector ``flat`` (C order over ``view``, ``per`` elements a
    vector), its index arithmetic emitted; and the number of vectors."""
    sizes = [*view.shape[:-1], view.shape[-1] // per]
    strides = [*view.strides[:-1], per]
    offset = str(view.offset) if view.offset else ""
    dims = [d for d, size in enumerate(sizes) if size > 1]  # a dim of one vector: index 0
    if dims == [len(sizes) - 1]:  # one contiguous run: the vector index is the source's
        return _sum([offset, _term(flat, per)]), math.prod(sizes)
    idx = [f"i{d}" for d in dims]
    _split(code, indent, flat, idx, [sizes[d] for d in dims])
    terms = [_term(i, strides[d]) for i, d in zip(idx, dims, strict=True)]
    return _sum([offset, *terms]), math.prod(sizes)


def _emit_concat(code: Source, plan: CopyPlan, per: int) -> int:
    """Each vector's piece by its column (vectors never straddle two), then its source in
    that piece's own view; returns the number of vectors."""
    row = sum(columns for _, columns in plan.pieces) // per
    nvec = plan.rows * row
    code.add(2, f"o = {index_div('v', row, nvec)}", f"c = v - o * {row}")
    start, count = 0, len(plan.pieces)
    for k, (view, columns) in enumerate(plan.pieces):
        width = columns // per
        if count > 1:  # the piece whose columns hold c
            end = f" c < {start + width}:"
            code.add(2, "if" + end if k == 0 else "else:" if k == count - 1 else "elif" + end)
        indent = 3 if count > 1 else 2
        code.add(indent, f"p = o * {width} + c" + (f" - {start}" if start else ""))
        source, _ = _vector_source(code, indent, view, per, "p")
        move = f"move{plan.vector_bytes}(out0, {_term('v', per)}, in{view.source}, {source})"
        code.add(indent, move)
        start += width
    return nvec


def tiled(fused_op: ai.FusedOp, name: str, plan: CopyPlan) -> KernelSource:
    """The tiled transpose kernel module of ``plan`` (path ``tiled transpose``)."""
    name = kernel_name(name)
    view = plan.view
    assert view is not None and plan.contiguous_dim >= 0 and plan.tile[0]
    rank, j, (side_a, side_b) = len(view.shape), plan.contiguous_dim, plan.tile
    a, b = view.shape[j], view.shape[-1]
    ta, tb = -(-a // side_a), -(-b // side_b)
    batch = [d for d in range(rank - 1) if d != j]
    tiles = ta * tb * math.prod(view.shape[d] for d in batch)
    pitch = _pitch(side_a, ITEMSIZE[spec_of(yielded(fused_op)[0].type).dtype])
    params, ins = _params(fused_op)
    code = Source([])
    doc = (
        "One tile per block: read along the source's contiguous dimension into shared "
        "memory, write along the result's."
    )
    kernel_def(code, name, params, doc)
    code.add(1, f"tile = cuda.shared.array(({side_b}, {pitch}), STORAGE)")
    code.add(1, "t = cuda.threadIdx.x")
    for x, y, side in (("tx", "ty", side_a), ("sx", "sy", side_b)):  # load, store lanes
        code.add(
            1, f"{x} = {index_rem('t', side, THREADS)}", f"{y} = {index_div('t', side, THREADS)}"
        )
    code.add(1, "blk = cuda.blockIdx.x")
    for corner, count, side in (("b0", tb, side_b), ("a0", ta, side_a)):  # then the batch
        rem = f"{index_rem('blk', count, tiles)} * {side}"
        code.add(1, f"{corner} = {rem}" if count > 1 else f"{corner} = 0")
        if count > 1 and (batch or corner == "b0"):
            code.add(1, f"blk = {index_div('blk', count, tiles)}")
    _split(code, 1, "blk", [f"i{d}" for d in batch], [view.shape[d] for d in batch])
    offset = [str(view.offset) if view.offset else ""]
    src = _sum(offset + [_term(f"i{d}", view.strides[d]) for d in batch])
    dst = _sum([_term(f"i{d}", _out_strides(view)[d]) for d in batch])
    code.add(1, f"src = {src}", f"dst = {dst}")
    _emit_tile_moves(code, _TileSpec(view, j, plan.tile, (a, b)), f"in{view.source}")
    notes = [
        f"one {side_a} x {side_b} tile per block of {THREADS} threads ({tiles} tiles), "
        f"shared memory {side_b} x {pitch}, every thread's {side_a * side_b // THREADS} loads "
        f"issued before its first store; collapsed view: shape {list(view.shape)}, source "
        f"strides {list(view.strides)}, offset {view.offset} (elements of input {view.source})",
    ]
    tail = [
        f"TILES = {tiles}",
        "",
        "",
        "def config(sms):",
        '    """(blocks, threads per block): one block per tile."""',
        "    return TILES, THREADS",
        "",
        "",
        f"def launch({', '.join([*ins, 'out0'])}, stream=0, sms={H200.sms}):",
        f'    """Launch {name} on ``stream`` (no synchronisation)."""',
        f"    {name}[TILES, THREADS, stream]({', '.join(params)})",
        "",
        "",
        f"KERNELS = [({name}, SIGNATURE)]",
        "",
    ]
    return _module(fused_op, name, plan, notes, code.text(), tail)


def _pitch(side: int, itemsize: int) -> int:
    """Elements per shared row: an odd number of 4-byte words, so that the 32 lanes of a
    column read (rows apart) fall on 32 different banks. (32 halves + 1: rows 16.5 words
    apart, which also spreads them.)"""
    if itemsize == 4 or side <= 32:
        return side + 1
    return side + 2


@dataclass(frozen=True)
class _TileSpec:
    """What the tile code needs: the view, its source-contiguous dim ``j``, the tile
    (along a, along b) and the transpose's extent (a, b)."""

    view: View
    j: int
    tile: tuple[int, int]
    extent: tuple[int, int]


def _emit_tile_moves(code: Source, spec: _TileSpec, source: str) -> None:
    """A whole tile (every tile but the last along each side) without bounds, else the
    edge tile: its loads clamped into the tensor, its stores masked."""
    (a, b), (side_a, side_b) = spec.extent, spec.tile
    if a % side_a == 0 and b % side_b == 0:  # no edge tiles
        _emit_tile_body(code, spec, False, source, indent=1)
    elif a < side_a or b < side_b:  # only edge tiles
        _emit_tile_body(code, spec, True, source, indent=1)
    else:
        code.add(1, f"if a0 + {side_a} <= {a} and b0 + {side_b} <= {b}:  # the same for the block")
        _emit_tile_body(code, spec, False, source, indent=2)
        code.add(1, "else:")
        _emit_tile_body(code, spec, True, source, indent=2)


def _emit_tile_body(code: Source, spec: _TileSpec, edge: bool, source: str, indent: int) -> None:
    """Straight-line code: the thread's loads all issued before the first store to the
    shared tile (clamped at an ``edge``, never branched around), the barrier, the tile's
    column reads, the stores (masked at an ``edge``). Loads: lane ``tx`` along a, rows
    ``ty`` + k * (threads / tile a) along b; stores: lane ``sx`` along b, rows ``sy`` + k *
    (threads / tile b) along a."""
    (a, b), (side_a, side_b) = spec.extent, spec.tile
    count = side_a * side_b // THREADS
    loads = [f"ty + {k * (THREADS // side_a)}" if k else "ty" for k in range(count)]
    stores = [f"sy + {k * (THREADS // side_b)}" if k else "sy" for k in range(count)]
    code.add(indent, f"a = min(a0 + tx, {a - 1})" if edge else "a = a0 + tx")
    for k, y in enumerate(loads):
        row = f"min(b0 + {y}, {b - 1})" if edge else f"b0 + {y}"
        at = _sum(["src", "a", _term(f"({row})", spec.view.strides[-1])])
        code.add(indent, f"v{k} = load_bits({source}, {at})")
    code.add(indent, *(f"tile[{y}, tx] = v{k}" for k, y in enumerate(loads)))
    code.add(indent, "cuda.syncthreads()")
    code.add(indent, *(f"w{k} = tile[sx, {y}]" for k, y in enumerate(stores)))
    out_a = _out_strides(spec.view)[spec.j]
    code.add(indent, "b = b0 + sx")
    if edge:
        code.add(indent, f"if b < {b}:")
        indent += 1
    for k, y in enumerate(stores):
        at = _sum(["dst", _term(f"(a0 + {y})", out_a), "b"])
        if edge:
            code.add(indent, f"if a0 + {y} < {a}:")
            code.add(indent + 1, f"store_bits(out0, {at}, w{k})")
        else:
            code.add(indent, f"store_bits(out0, {at}, w{k})")


def _out_strides(view: View) -> list[int]:
    strides, run = [], 1
    for size in reversed(view.shape):
        strides.append(run)
        run *= size
    return strides[::-1]
