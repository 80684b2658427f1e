"""The cuda target's ``matmul`` template: one Hopper GEMM kernel per ``ai.fused "matmul"`` group.

A group is generated as the Tensor Core kernel when it is ``ai.matmul`` on two
group inputs of f16 or bf16 (same type), rank >= 2, whose leading (batch) dims
are either the output's or all 1 (broadcast), followed by elementwise ops of
the output's shape (bias, activations, residual add, scale, casts: the
epilogue, rendered to C++ by ``CppExprGenerator`` and run on the f32
accumulators before the one rounding to the output type). Everything else
(f32 graphs, which keep IEEE f32 maths; a LayerNorm prologue; partial batch
broadcasting; 1-D operands) is served by the PyTorch fallback
(``fusec.targets.cuda.torch_fallback``), whose kernel header says so.

The tile configuration comes from the ``fusec.tile`` attribute the
``tile-gemm`` pass writes on the group, or the same heuristic when absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import StringAttr

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.expr import (
    ELEMENTWISE_OPS,
    CppExprGenerator,
    broadcast_offset,
    header,
    leaf_shapes,
)
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.targets.cuda.common import body_ops, kernel_name, yielded
from fusec.targets.cuda.gemm.config import TileConfig, choose_config
from fusec.targets.cuda.gemm.cpp import Epilogue, GemmSpec

TILE_ATTR = "fusec.tile"
_DTYPES = ("f16", "bf16")


@dataclass(frozen=True)
class GemmPlan:
    """How a group maps onto the kernel: the problem and the operand storage."""

    matmul: ai.MatmulOp
    epilogue_ops: tuple
    m: int
    n: int
    k: int
    batches: int
    folded: bool  # A's batch dims folded into M (B is not batched)
    a_major: str
    b_major: str
    a: tuple[int, int, int, int]  # (input index, stored rows, cols, batch)
    b: tuple[int, int, int, int]
    batch_a: bool
    batch_b: bool


def plan(fused_op: ai.FusedOp) -> GemmPlan | str:
    """The kernel's view of ``fused_op``, or why the group needs the fallback."""
    ops = body_ops(fused_op)
    matmuls = [op for op in ops if isinstance(op, ai.MatmulOp)]
    if len(matmuls) != 1 or ops[0] is not matmuls[0]:
        return "the group is not one matmul followed by elementwise ops (a prologue?)"
    matmul = matmuls[0]
    rest = tuple(ops[1:])
    if len(fused_op.results) != 1 or not all(isinstance(op, ELEMENTWISE_OPS) for op in rest):
        return "the epilogue is not a chain of elementwise ops with one result"
    args = {arg: i for i, arg in enumerate(fused_op.block.args)}
    if matmul.lhs not in args or matmul.rhs not in args:
        return "a matmul operand is computed inside the group"
    lhs, rhs, res = (spec_of(v.type) for v in (matmul.lhs, matmul.rhs, matmul.output))
    if lhs.dtype not in _DTYPES or rhs.dtype != lhs.dtype:
        return f"operands {lhs.dtype} x {rhs.dtype}: the Tensor Core kernel takes f16 or bf16"
    if len(lhs.shape) < 2 or len(rhs.shape) < 2:
        return "a 1-D operand"
    out_shape = res.shape
    if any(spec_of(op.results[0].type).shape != out_shape for op in rest):
        return "an epilogue op broadcasts beyond the matmul's shape"
    ta, tb = bool(matmul.attr("transpose_a")), bool(matmul.attr("transpose_b"))
    m, n = out_shape[-2], out_shape[-1]
    k = lhs.shape[-2] if ta else lhs.shape[-1]
    out_batch = out_shape[:-2]
    batches = math.prod(out_batch)
    batch_of = {}
    for name, shape in (("a", lhs.shape[:-2]), ("b", rhs.shape[:-2])):
        count = math.prod(shape)
        if count != 1 and (1,) * (len(out_batch) - len(shape)) + tuple(shape) != out_batch:
            return "partially broadcast batch dims"
        batch_of[name] = count > 1
    if 0 in (m, n, k):
        return "an empty dimension"
    folded = batch_of["a"] and not batch_of["b"] and not ta
    a_rows, a_cols = (k, m) if ta else (m, k)
    b_rows, b_cols = (n, k) if tb else (k, n)
    a_batch = batches if batch_of["a"] else 1
    b_batch = batches if batch_of["b"] else 1
    if folded:
        a_rows, a_batch = batches * m, 1
    return GemmPlan(
        matmul,
        rest,
        batches * m if folded else m,
        n,
        k,
        1 if folded else batches,
        folded,
        "m" if ta else "k",
        "k" if tb else "n",
        (args[matmul.lhs], a_rows, a_cols, a_batch),
        (args[matmul.rhs], b_rows, b_cols, b_batch),
        batch_of["a"] and not folded,
        batch_of["b"],
    )


def tile_config(fused_op: ai.FusedOp, p: GemmPlan, sms: int = 132) -> TileConfig:
    attr = fused_op.attributes.get(TILE_ATTR)
    if isinstance(attr, StringAttr):
        return TileConfig.parse(attr.data)
    return choose_config(p.m, p.n, p.k, p.batches, sms)


def epilogue(fused_op: ai.FusedOp, p: GemmPlan) -> tuple[Epilogue, tuple[int, ...], str]:
    """The group's elementwise tail as C++ on ``acc`` at output element (bat, row, col): the
    epilogue, the group inputs it reads (in ``e0, e1...`` order) and its C++ helpers."""
    out_shape = spec_of(p.matmul.output.type).shape
    rank = len(out_shape)
    lines = []
    if p.folded:  # row runs over (batch dims..., M)
        lines += _decompose("row", out_shape[:-1], 0)
    else:
        lines += _decompose("bat", out_shape[:-2], 0)
        lines.append(f"const long long i{rank - 2} = row;")
    lines.append(f"const long long i{rank - 1} = col;")
    index_vars = [f"i{d}" for d in range(rank)]
    args = {arg: index for index, arg in enumerate(fused_op.block.args)}
    shapes = leaf_shapes(p.epilogue_ops) if p.epilogue_ops else {}
    extras: list[str] = []
    extra_inputs: list[int] = []
    gen = CppExprGenerator()

    def leaf(value) -> str:
        if value is p.matmul.output:
            return "acc"
        index = args[value]
        if index not in extra_inputs:
            extra_inputs.append(index)
            extras.append(spec_of(value.type).dtype)
        slot = extra_inputs.index(index)
        offset = broadcast_offset(out_shape, shapes[value], index_vars)
        return f"fs_ld_{spec_of(value.type).dtype}(e{slot}, {offset})"

    stmts, names = gen.chain(p.epilogue_ops, leaf)
    final = names[yielded(fused_op)[0]] if p.epilogue_ops else "acc"
    body = "\n".join([*lines, *stmts, f"y = {final};"])
    ops = " -> ".join(op.name for op in p.epilogue_ops) or "identity"
    return Epilogue(body, tuple(extras), ops), tuple(extra_inputs), gen.helper_source()


def _decompose(flat: str, dims, first: int) -> list[str]:
    """``const long long iN = ...`` for C-order dims ``dims`` of the flat index ``flat``."""
    lines = []
    stride = math.prod(dims)
    for d, size in enumerate(dims):
        stride //= size
        lines.append(f"const long long i{first + d} = ((long long){flat} / {stride}) % {size};")
    return lines


def generate(fused_op: ai.FusedOp, name: str) -> KernelSource:
    """The kernel module of a matmul group (the fallback's when the kernel cannot serve it)."""
    from fusec.targets.cuda import torch_fallback

    name = kernel_name(name)
    p = plan(fused_op)
    if isinstance(p, str):
        return torch_fallback.generate(fused_op, name, reason=p)
    config = tile_config(fused_op, p)
    epi, extra_inputs, helpers = epilogue(fused_op, p)
    out_dtype = spec_of(fused_op.results[0].type).dtype
    dtype = spec_of(p.matmul.lhs.type).dtype
    spec = GemmSpec(
        config,
        dtype,
        out_dtype,
        p.a_major,
        p.b_major,
        p.batch_a,
        p.batch_b,
        Epilogue(epi.body, epi.extras, epi.name, helpers),
    )
    inputs = [f"in{k}" for k in range(len(fused_op.inputs))]
    notes = [
        f"target: cuda, Hopper Tensor Core GEMM (wgmma + TMA, sm_90a), tile {config.text};",
        f"M={p.m} N={p.n} K={p.k} batches={p.batches}, A {p.a_major.upper()}-major, "
        f"B {p.b_major.upper()}-major, {dtype} -> {out_dtype}, f32 accumulation;",
        f"epilogue on the accumulators: {epi.name} (f32, one rounding at the store)",
    ]
    source = "\n".join(
        [
            header(fused_op, notes=notes),
            "from fusec.targets.cuda.abi import Epilogue, GemmLaunch, GemmSpec, TileConfig",
            "",
            "GEMM = GemmLaunch(",
            "    GemmSpec(",
            f"        TileConfig.parse({config.text!r}),",
            f"        {dtype!r}, {out_dtype!r}, {p.a_major!r}, {p.b_major!r}, "
            f"{p.batch_a!r}, {p.batch_b!r},",
            f"        Epilogue({epi.body!r}, {epi.extras!r}, {epi.name!r}, {helpers!r}),",
            "    ),",
            f"    a={p.a!r}, b={p.b!r}, extras={extra_inputs!r},",
            f"    m={p.m}, n={p.n}, k={p.k}, batches={p.batches},",
            ")",
            "",
            "",
            f"def launch({', '.join([*inputs, 'out0'])}, stream=0, sms=132):",
            f"    GEMM(({', '.join(inputs)},), out0, stream, sms)",
            "",
            "",
            "KERNELS = []  # a linked cubin, launched by GemmLaunch (not a Numba dispatcher)",
            f"GEMM_SPECS = [GEMM.spec]  # {spec.function_name}",
            "",
        ]
    )
    ins, outs = io_specs(fused_op)
    return KernelSource(name, "matmul", "cuda", source, ins, outs, array_dtype=None)
