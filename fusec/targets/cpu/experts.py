"""cpu template for "experts" groups: one ``ai.moe_experts`` (issue 31), each expert's
weights read once for all the tokens routed to it.

With T tokens, k experts a token and S = T * k (token, slot) pairs, three stages:

1. route (one thread, O(S)): the pairs counted per expert and sorted by expert, stably
   (a counting sort: ``order``), then cut into tiles of at most ``rows`` pairs of one
   expert (``tiles``: expert, first, end). An expert index outside [-E, E) stops the
   launch with the error ``ai.take``'s reference gives.
2. experts (the tasks take tiles with ``next_block``): the tile's token rows gathered
   into ``a`` (rows x D); the product with the expert's gate_up rows (nn.Linear's
   layout, B transposed) -> ``h`` (rows x 2F); the SwiGLU ``silu(g) * u`` in place over
   h's first F columns; the product with the expert's down rows -> ``y`` (rows x D);
   each row times its routing weight into its pair's row of ``slots`` (S x D). Every
   pair is one row of one tile, so no two tasks write a row. A model's weights
   (constants) are packed once at load, each expert's B^T in ``gemm_packed``'s strips
   (``expert_strips_t``), and multiplied by ``gemm_packed``; run-time weights by one
   single-threaded BLAS ``sgemm`` a product, which packs the expert's B again per tile
   (8 tokens, top-2 of 8, D 1024, F 2816, 2 threads: sgemm 23.7 ms, packed 10.6,
   PyTorch's loop over experts 10.4).
3. combine (parallel over tokens): a token's output is the sum of its k slots, in slot
   order.

So the work is the routed tokens' (2 * 2F * D + 2 * D * F) * S flops, not E times it, and
nothing of size E x S is made (the graph it was recognised from gathered an expert's
weights per pair). 16-bit tensors are float32 here (the cpu runtime converts them).
"""

from __future__ import annotations

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import ExprGenerator, shape_of
from fusec.dialect import ops as ai
from fusec.targets.cpu import abi, host
from fusec.targets.cpu.blocked import constant_inputs
from fusec.targets.cpu.common import Stage, assemble, input_names, single_core

#: Pairs per tile, at most and at least. Each tile packs its expert's whole gate_up and
#: down matrices again inside sgemm, so a tile holds all of an expert's pairs, typically:
#: 1024 tokens, top-2 of 8, D 1024, F 2816 on 2 threads, tiles of <= 128 pairs 141 ms, of
#: <= 512 116 ms, PyTorch's loop over experts 112-117 ms (alternated, same machine).
MAX_ROWS, MIN_ROWS = 1024, 16
#: Floats of one task's workspace (a, h and y of a tile) at most: 128 MiB.
WORKSPACE_FLOATS = 32 << 20


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    op = single_core(fused_op, ai.MoEExpertsOp)
    names = input_names(fused_op)
    x, weights, experts, gate_up, down = (names[v] for v in op.operands)
    tokens, width = shape_of(op.operands[0])
    k = shape_of(op.operands[1])[1]
    count, double, _ = shape_of(op.operands[3])
    hidden = double // 2
    pairs = tokens * k
    rows = tile_rows(pairs, count, width, hidden)
    floats = rows * (2 * width + double)
    max_tiles = -(-pairs // rows) + count
    constants = constant_inputs(fused_op)
    packed = gate_up in constants and down in constants  # a model's weights: packed once
    dtypes = {"order": "i64", "tiles": "i64", "meta": "i64"}
    route = Stage(
        f"{name}_route",
        [experts, "order", "tiles", "meta"],
        _route_body(experts, pairs, count, rows),
        comment=f"{pairs} (token, slot) pairs sorted by expert ({count}), tiles of <= {rows}",
        parallel=False,
        dtypes=dtypes,
    )
    compute = Stage(
        f"{name}_experts",
        [x, weights, gate_up, down, "order", "tiles", "meta", "slots", "ws", "counter"],
        _experts_body((x, weights, gate_up, down), width, hidden, k, rows, floats, packed),
        comment=f"per tile: gather, {'gemm_packed' if packed else 'sgemm'} (x 2F={double}), "
        f"SwiGLU, {'gemm_packed' if packed else 'sgemm'} (x D={width}), weights",
        dtypes=dtypes,
    )
    combine = Stage(
        f"{name}_combine",
        ["slots", "out0"],
        [
            f"for t in numba.prange({tokens}):",
            f"    for c in range({width}):",
            "        acc = np.float32(0.0)",
            f"        for j in range({k}):",
            f"            acc += slots[U((t * {k} + j) * {width} + c)]",
            f"        out0[U(t * {width} + c)] = acc",
        ],
        comment=f"each token's {k} slots summed",
        parallel=tokens * width >= 1 << 15,
    )
    launch = [
        f"order = np.empty({pairs}, dtype=np.int64)",
        f"tiles = np.empty({3 * max_tiles}, dtype=np.int64)",
        "meta = np.zeros(3, dtype=np.int64)",
        route.call(),
        "if meta[1]:",
        "    raise FusecError(",
        f'        f"ai.moe_experts: expert index {{meta[2]}} is out of range for {count} experts"',
        "    )",
        "tasks = max(1, min(num_threads(), int(meta[0])))",
        # the slots after the tasks' workspace, in the thread's arena: no fresh S x D
        # buffer (mapped anew each launch) per call
        f"arena = workspace(tasks * {floats} + {pairs * width})",
        f"ws = arena[: tasks * {floats}]",
        f"slots = arena[tasks * {floats} :]",
        "counter = np.zeros(1, dtype=np.int64)",
        compute.call(),
        combine.call(),
    ]
    from fusec.targets.cpu import blas_mode  # not blas: probing it loads numpy (issue #26)

    if blas_mode.mode().endswith("global"):  # no per-thread BLAS thread count
        launch = ["with blas_single_threaded():", *(f"    {line}" for line in launch)]
    source = assemble(
        fused_op,
        ExprGenerator(),
        [route, compute, combine],
        launch,
        notes=[
            f"experts: {tokens} tokens x {k} of {count} experts (D={width}, F={hidden}), "
            f"tiles of <= {rows} pairs of one expert, {floats * 4} bytes of workspace a task; "
            + (
                "the experts' weights packed once (gemm_packed)"
                if packed
                else "sgemm (the weights are no constants)"
            )
        ],
        imports=[
            blas_mode.import_line(),
            abi.import_line("FusecError", "blas_single_threaded", "num_threads", "workspace"),
            *([abi.import_line("gemm_packed_call as gemm_packed")] if packed else []),
        ],
    )
    inputs, outputs = io_specs(fused_op)
    prepared = (
        tuple((constants[array], "expert_strips_t") for array in (gate_up, down)) if packed else ()
    )
    return KernelSource(name, "experts", "cpu", source, inputs, outputs, prepared_inputs=prepared)


def packed_floats(k: int, n: int) -> int:
    """Floats of one expert's packed B (``k x n``, as ``microkernel.pack_strips`` lays it
    out: whole strips of ``host.STRIP`` columns, the last a window)."""
    return k * host.STRIP * -(-n // host.STRIP)


def tile_rows(pairs: int, count: int, width: int, hidden: int) -> int:
    """Pairs per tile: twice an expert's average share of the pairs, a multiple of 8, between
    ``MIN_ROWS`` and ``MAX_ROWS``, and no more than ``WORKSPACE_FLOATS`` of a, h and y."""
    share = -(-2 * pairs // count)  # twice the average: a busier expert's pairs in one tile
    fit = WORKSPACE_FLOATS // (2 * width + 2 * hidden)
    return max(MIN_ROWS, min(MAX_ROWS, fit, -(-share // 8) * 8) // 8 * 8)


def _route_body(experts: str, pairs: int, count: int, rows: int) -> list[str]:
    """The counting sort of the pairs by expert, and the tiles (``meta[0]`` of them);
    ``meta[1:3]`` = (1, the index) at the first expert index out of range."""
    return [
        f"counts = np.zeros({count + 1}, dtype=np.int64)",
        f"for p in range({pairs}):",
        f"    e = np.int64({experts}[p])",
        "    if e < 0:",
        f"        e += {count}",
        f"    if e < 0 or e >= {count}:",
        "        meta[1] = 1",
        f"        meta[2] = {experts}[p]",
        "        return",
        "    counts[e + 1] += 1",
        f"for e in range({count}):",
        "    counts[e + 1] += counts[e]",
        f"fill = counts[:{count}].copy()",
        f"for p in range({pairs}):",
        f"    e = np.int64({experts}[p])",
        "    if e < 0:",
        f"        e += {count}",
        "    order[fill[e]] = p",
        "    fill[e] += 1",
        "n = 0",
        f"for e in range({count}):",
        f"    for first in range(counts[e], counts[e + 1], {rows}):",
        "        tiles[3 * n] = e",
        "        tiles[3 * n + 1] = first",
        f"        tiles[3 * n + 2] = min(first + {rows}, counts[e + 1])",
        "        n += 1",
        "meta[0] = n",
    ]


def _experts_body(
    arrays: tuple[str, str, str, str],
    width: int,
    hidden: int,
    k: int,
    rows: int,
    floats: int,
    packed: bool,
) -> list[str]:
    """Each task's tiles: gather, the two products with the SwiGLU between, the weights.
    ``packed``: the weights come packed once (``expert_strips_t``), each expert's B^T
    ``strips(K, N)`` floats after the last, for ``gemm_packed``."""
    x, weights, gate_up, down = arrays
    double = 2 * hidden
    if packed:
        up = (
            f"        gemm_packed(m, {double}, {width}, a, 0, {width}, "
            f"{gate_up}, e * {packed_floats(width, double)}, h, 0, {double})"
        )
        back = (
            f"        gemm_packed(m, {width}, {hidden}, h, 0, {double}, "
            f"{down}, e * {packed_floats(hidden, width)}, y, 0, {width})"
        )
        first, second = [up], [back]
    else:
        first = [
            "        prev = threads_begin(1)",
            f"        sgemm(0, 1, m, {double}, {width}, a, 0, {width}, "
            f"{gate_up}, e * {double * width}, {width}, h, 0, {double})",
            "        threads_end(prev)",
        ]
        second = [
            "        prev = threads_begin(1)",
            f"        sgemm(0, 1, m, {width}, {hidden}, h, 0, {double}, "
            f"{down}, e * {width * hidden}, {hidden}, y, 0, {width})",
            "        threads_end(prev)",
        ]
    swiglu = [  # silu(g) * u as the reference: exp of -|g| (no overflow), -0.0 at g = -inf
        "for r in range(m):",
        f"    for c in range({hidden}):",
        f"        g = h[r * {double} + c]",
        "        z = np.exp(-abs(g))",
        "        p = np.float32(1.0) / (np.float32(1.0) + z)",
        "        s = g * (p if g >= 0 else z * p)",
        "        if g == -np.inf:",
        "            s = np.float32(-0.0)",
        f"        h[r * {double} + c] = s * h[r * {double} + {hidden} + c]",
    ]
    return [
        f"for t in numba.prange(ws.size // {floats}):",
        f"    a = ws[t * {floats}:t * {floats} + {rows * width}]",
        f"    h = ws[t * {floats} + {rows * width}:t * {floats} + {rows * (width + double)}]",
        f"    y = ws[t * {floats} + {rows * (width + double)}:(t + 1) * {floats}]",
        "    blk = next_block(counter)",
        "    while blk < meta[0]:",
        "        e = tiles[3 * blk]",
        "        first = tiles[3 * blk + 1]",
        "        m = tiles[3 * blk + 2] - first",
        "        for r in range(m):",
        f"            token = order[first + r] // {k}",
        f"            a[r * {width}:(r + 1) * {width}] = "
        f"{x}[token * {width}:(token + 1) * {width}]",
        *first,
        *(f"        {line}" for line in swiglu),
        *second,
        "        for r in range(m):",
        "            pair = order[first + r]",
        f"            weight = {weights}[pair]",
        f"            for c in range({width}):",
        f"                slots[U(pair * {width} + c)] = y[r * {width} + c] * weight",
        "        blk = next_block(counter)",
    ]
