"""The fast kernels of cuda ``copy`` groups that read a strided view (``strided``).

* ``vectorised``: a grid-stride loop over the result's vectors of 4, 8 or 16 bytes;
  each vector's source is ``offset + sum(i[d] * stride[d])`` over the collapsed view
  (one set of constant divisions per vector, not per element) and it moves with one
  raw ``ld.global.v4``/``st.global.v4`` pair (``rawmove``), bits unconverted.
* ``tiled``: a batched 2-D transpose through a 32 x 33 shared-memory tile (the extra
  column keeps a warp's column reads on 32 different banks, for 2- and 4-byte
  elements alike): one block of 32 x 8 threads per tile, reading along the source's
  contiguous dimension and writing along the result's, every read and write
  coalesced. Edge tiles are masked element by element.

Both move elements as stored (16-bit types as their int16 bits, f32 as float32 loads
and stores, which do not touch a NaN's payload), so a copy is exact for every value.
"""

from __future__ import annotations

import math

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import header
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import (
    ITEMSIZE,
    Source,
    grid_stride_launch,
    kernel_name,
    prelude,
    storage_signature,
    yielded,
)
from fusec.targets.cuda.strided import TILE, CopyPlan, View

THREADS = 256
#: Blocks per multiprocessor at most for the vectorised loop; the grid stride covers the rest.
BLOCKS_PER_SM = 16
#: Rows of the tile each thread row moves: 32 x 8 threads, 4 elements each way.
TILE_ROWS = THREADS // TILE


def _sum(terms: list[str]) -> str:
    return " + ".join(t for t in terms if t) or "0"


def _term(index: str, stride: int) -> str:
    if stride == 0:
        return ""
    return index if stride == 1 else f"{index} * {stride}"


def _split(code: Source, indent: int, flat: str, names: list[str], sizes: list[int]) -> None:
    """``names`` (C order) := the multi-index of ``flat`` over ``sizes`` (no size 1)."""
    if not names:
        return
    if len(names) == 1:
        code.add(indent, f"{names[0]} = {flat}")
        return
    code.add(indent, f"r = {flat}")
    for name, size in zip(names[:0:-1], sizes[:0:-1], strict=True):
        code.add(indent, f"{name} = r % {size}", f"r = r // {size}")
    code.add(indent, f"{names[0]} = r")


def _module(
    fused_op: ai.FusedOp, name: str, plan: CopyPlan, notes: list[str], body: str, tail: list[str]
) -> KernelSource:
    (result,) = yielded(fused_op)
    dtype = spec_of(result.type).dtype
    dtypes = [dtype] + [spec_of(v.type).dtype for v in fused_op.inputs]
    storage = "np.float32" if dtype == "f32" else "np.int16"
    helpers = [f"move{plan.vector_bytes}"] if plan.vector_bytes else []
    parts = [
        header(
            fused_op,
            notes=[
                f"target: cuda (Numba CUDA), template: gather, path: "
                f"{plan.label} (an index-map copy)",
                plan.why,
                *notes,
            ],
        ),
        prelude(helpers),
        "import numpy as np",
        "",
        f"SIGNATURE = {storage_signature(dtypes)!r}",
        f"STORAGE = {storage}",
        f"THREADS = {THREADS}",
        "",
        "",
        body,
        "",
        *tail,
    ]
    inputs, outputs = io_specs(fused_op)
    return KernelSource(name, "copy", "cuda", "\n".join(parts), inputs, outputs, array_dtype=None)


def _params(fused_op: ai.FusedOp) -> tuple[list[str], list[str]]:
    ins = [f"in{k}" for k in range(len(fused_op.inputs))]
    return ["out0", *ins], ins


def vectorised(fused_op: ai.FusedOp, name: str, plan: CopyPlan) -> KernelSource:
    """The vectorised copy kernel module of ``plan`` (path ``vectorised``)."""
    name = kernel_name(name)
    view = plan.view
    assert view is not None and plan.vector_bytes
    itemsize = ITEMSIZE[spec_of(yielded(fused_op)[0].type).dtype]
    per = plan.vector_bytes // itemsize
    sizes = [*view.shape[:-1], view.shape[-1] // per]
    nvec = math.prod(sizes)
    idx = [f"i{d}" for d in range(len(sizes))]
    strides = [*view.strides[:-1], per]
    params, ins = _params(fused_op)
    code = Source([])
    code.add(0, "@cuda.jit", f"def {name}({', '.join(params)}):")
    code.add(1, '"""Grid-stride loop over the result\'s vectors, each moved from its source."""')
    code.add(1, "step = cuda.gridsize(1)", "v = cuda.grid(1)", "while v < NVEC:")
    dims = [d for d, size in enumerate(sizes) if size > 1]  # a dim of one vector: index 0
    if dims == [len(sizes) - 1]:  # one contiguous run: the vector index is the source's
        source = _sum([str(view.offset) if view.offset else "", _term("v", per)])
    else:
        _split(code, 2, "v", [idx[d] for d in dims], [sizes[d] for d in dims])
        terms = [_term(idx[d], strides[d]) for d in dims]
        source = _sum([str(view.offset) if view.offset else "", *terms])
    code.add(2, f"move{plan.vector_bytes}(out0, {_term('v', per)}, in{view.source}, {source})")
    code.add(2, "v += step")
    notes = [
        f"one {plan.vector_bytes}-byte vector ({per} elements) per thread and loop step over "
        f"{nvec} vectors; collapsed view: shape {list(view.shape)}, source strides "
        f"{list(view.strides)}, offset {view.offset} (elements of input {view.source})",
    ]
    tail = [
        f"NVEC = {nvec}",
        "",
        "",
        *grid_stride_launch(name, "NVEC", BLOCKS_PER_SM, [*ins, "out0"], params),
    ]
    return _module(fused_op, name, plan, notes, code.text(), tail)


def tiled(fused_op: ai.FusedOp, name: str, plan: CopyPlan) -> KernelSource:
    """The tiled transpose kernel module of ``plan`` (path ``tiled transpose``)."""
    name = kernel_name(name)
    view = plan.view
    assert view is not None and plan.contiguous_dim >= 0
    rank, j = len(view.shape), plan.contiguous_dim
    out_strides = _out_strides(view)
    a, b = view.shape[j], view.shape[-1]
    ta, tb = -(-a // TILE), -(-b // TILE)
    batch = [d for d in range(rank - 1) if d != j]
    tiles = ta * tb * math.prod(view.shape[d] for d in batch)
    params, ins = _params(fused_op)
    code = Source([])
    code.add(0, "@cuda.jit", f"def {name}({', '.join(params)}):")
    code.add(
        1,
        '"""One tile per block: read along the source\'s contiguous dimension into '
        'shared memory, write along the result\'s."""',
    )
    code.add(1, f"tile = cuda.shared.array(({TILE}, {TILE + 1}), STORAGE)")
    code.add(1, "t = cuda.threadIdx.x", f"tx = t % {TILE}", f"ty = t // {TILE}")
    code.add(1, "blk = cuda.blockIdx.x", f"tb = blk % {tb}", f"blk = blk // {tb}")
    code.add(1, f"ta = blk % {ta}")
    if batch:
        code.add(1, f"blk = blk // {ta}")
    names = [f"i{d}" for d in batch]
    _split(code, 1, "blk", names, [view.shape[d] for d in batch])
    src = _sum(
        [str(view.offset) if view.offset else ""] + [_term(f"i{d}", view.strides[d]) for d in batch]
    )
    dst = _sum([_term(f"i{d}", out_strides[d]) for d in batch])
    code.add(1, f"src = {src}", f"dst = {dst}")
    code.add(1, f"a = ta * {TILE} + tx", f"if a < {a}:")
    code.add(2, f"for y in range(ty, {TILE}, {TILE_ROWS}):")
    code.add(3, f"b = tb * {TILE} + y", f"if b < {b}:")
    code.add(4, f"tile[y, tx] = in{view.source}[src + a + {_term('b', view.strides[-1]) or '0'}]")
    code.add(1, "cuda.syncthreads()")
    code.add(1, f"b = tb * {TILE} + tx", f"if b < {b}:")
    code.add(2, f"for y in range(ty, {TILE}, {TILE_ROWS}):")
    code.add(3, f"a = ta * {TILE} + y", f"if a < {a}:")
    code.add(4, f"out0[dst + {_term('a', out_strides[j])} + b] = tile[tx, y]")
    notes = [
        f"one {TILE} x {TILE} tile per block of {THREADS} threads ({tiles} tiles), shared "
        f"memory {TILE} x {TILE + 1}; collapsed view: shape {list(view.shape)}, source "
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
        f"def launch({', '.join([*ins, 'out0'])}, stream=0, sms=132):",
        f'    """Launch {name} on ``stream`` (no synchronisation)."""',
        f"    {name}[TILES, THREADS, stream]({', '.join(params)})",
        "",
        "",
        f"KERNELS = [({name}, SIGNATURE)]",
        "",
    ]
    return _module(fused_op, name, plan, notes, code.text(), tail)


def _out_strides(view: View) -> list[int]:
    strides, run = [], 1
    for size in reversed(view.shape):
        strides.append(run)
        run *= size
    return strides[::-1]
