"""The blocked matmul/conv kernels of the cpu target: every path, and their scratch bound.

Each numerics check runs poisoned outputs on fresh random inputs against the
float64 reference (``cpu_check.check``). Shapes are chosen so that the result
is split into several blocks with a ragged last one (``MIN_BLOCKS`` splits
small problems), which the assertions on ``ScratchPlan.max_tasks`` confirm.
"""

from __future__ import annotations

import re
import threading
import tracemalloc

import numba
import numpy as np
import pytest
from cpu_check import check, poison, wrap_group
from lanes import sampled
from numerics import assert_close

from fusec.api import parse, run_pipeline
from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.targets.cpu import blas as cpu_blas
from fusec.targets.cpu import blocked as cpu_blocked
from fusec.targets.cpu import buffers as cpu_buffers
from fusec.targets.cpu import matmul as cpu_matmul
from fusec.targets.cpu import microkernel
from fusec.targets.cpu.conv import choice as conv_choice
from fusec.targets.cpu.conv import gemm as conv_gemm
from fusec.targets.cpu.conv import planes as conv_planes
from fusec.targets.cpu.conv import transforms as conv_transforms
from fusec.tools.runner import random_inputs


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def four_blocks_at_least(monkeypatch):
    """The block counts below as on a 4-thread pool, whatever this machine's
    (``MIN_BLOCKS`` follows Numba's thread count): ragged splits on small shapes."""
    for module in (cpu_matmul, conv_choice, conv_gemm, conv_planes, cpu_blocked):
        monkeypatch.setattr(module, "MIN_BLOCKS", 4)  # attention reads blocked.MIN_BLOCKS


def _t(shape, dtype="f32"):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _blocks(program: Program) -> int:
    return program.kernels[-1].scratch.max_tasks


# -------------------------------------------------------------------- matmul


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_matmul_layernorm_prologue_gelu_epilogue_ragged_blocks(cache, dtype):
    x, v, w, hv, y = (_t(s, dtype) for s in ((100, 48), (48,), (48, 40), (40,), (100, 40)))
    text = f"""
func.func @f(%x: {x}, %g: {v}, %be: {v}, %w: {w}, %b: {hv}) -> {y} {{
  %n = ai.layernorm %x, %g, %be : {x} * {v} * {v}
  %m = ai.matmul %n, %w : {x} * {w}
  %c = ai.bias_add %m, %b {{axis = 1}} : {y} * {hv}
  %o = ai.gelu %c : {y}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert _blocks(program) == 4  # 100 rows: 32 + 32 + 32 + 4
    assert "la = (row - (r0)) * 48" in program.kernels[0].source  # LN rows into the A block


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transposed_operands_softmax_epilogue(cache, ta, tb):
    m, k, n = 70, 24, 36
    a = _t((k, m) if ta else (m, k))
    b = _t((n, k) if tb else (k, n))
    y = _t((m, n))
    attrs = ", ".join(
        f"{name} = true" for name, on in (("transpose_a", ta), ("transpose_b", tb)) if on
    )
    text = f"""
func.func @f(%a: {a}, %b: {b}, %r: {y}) -> ({y}, {y}) {{
  %m = ai.matmul %a, %b {{{attrs}}} : {a} * {b}
  %s = ai.softmax %m : {y}
  %o = ai.add %s, %r : {y} * {y}
  return %o, %m : {y}, {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert _blocks(program) == 3  # 70 rows: 32 + 32 + 6


@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("yield_core", [False, True])
def test_matmul_short_wide_result_split_by_columns(cache, tb, yield_core):
    """Few rows, many columns, an elementwise epilogue: the tiles split the columns
    (each packs only its part of B), ragged last tile; a bias along N, a per-row and a
    full-size operand read at the tile's columns; C in the workspace or yielded."""
    m, k, n = 40, 24, 200
    a, b, y = _t((m, k)), _t((n, k) if tb else (k, n)), _t((m, n))
    bias, rows = _t((n,)), _t((m, 1))
    attrs = "{transpose_b = true} " if tb else ""
    results = f"%o, %m : {y}, {y}" if yield_core else f"%o : {y}"
    types = f"{y}, {y}" if yield_core else y
    text = f"""
func.func @f(%a: {a}, %b: {b}, %bias: {bias}, %s: {rows}, %r: {y}) -> ({types}) {{
  %m = ai.matmul %a, %b {attrs}: {a} * {b}
  %c = ai.add %m, %bias : {y} * {bias}
  %d = ai.mul %c, %s : {y} * {rows}
  %e = ai.relu %d : {y}
  %o = ai.add %e, %r : {y} * {y}
  return {results}
}}"""
    program = check(text, cache=cache, kind="matmul")
    source = program.kernels[0].source
    assert "c0 = blk %" in source and "x 64 columns" in source
    assert _blocks(program) == 4  # 200 columns: 64 + 64 + 64 + 8
    assert ("cbuf = ws[" in source) != yield_core


def test_matmul_batched_short_wide_result_split_by_columns(cache):
    """Column tiles of a batched matmul with a B shared by the batch: each tile finds
    its matrix, rows and columns (2 matrices x 2 column tiles, the last ragged). N = 396
    is not whole vectors of gemm_nn: sgemm, which repacks B per call, hence the tiles.
    A is transposed, so its batch cannot fold into the rows of one product (as it does
    without the transpose: test_cpu_matmul_fold.py)."""
    a, b, bias, y = _t((2, 24, 64)), _t((24, 396)), _t((396,)), _t((2, 64, 396))
    text = f"""
func.func @f(%a: {a}, %b: {b}, %bias: {bias}) -> {y} {{
  %m = ai.matmul %a, %b {{transpose_a = true}} : {a} * {b}
  %c = ai.add %m, %bias : {y} * {bias}
  %o = ai.relu %c : {y}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert "4 blocks of up to 64 rows x 208 columns" in program.kernels[0].source


def test_matmul_batch_of_one_row_products_runs_as_rows(cache):
    """(65, 1, 96) @ (96, 288) + bias, relu (ViT's exported QKV projection at batch 1):
    after the default pipeline one 65-row product in row blocks, not 65 one-row
    products each reading all of B (issue #30: 16.2 ms against 2.5 ms at 768 x 2304)."""
    program = check(_matmul_bias_relu((65, 1, 96), (96, 288)), cache=cache, fuse=True)
    (kernel,) = program.kernels
    assert re.search(r"# matmul \(65x96 @ 96x288\) in \d+ blocks", kernel.source), kernel.source


def _matmul_bias_relu(a_shape, b_shape, transpose_b: bool = False) -> str:
    """relu(a @ b + bias) (``b_shape`` given as stored: (N, K) with ``transpose_b``)."""
    n = b_shape[0] if transpose_b else b_shape[1]
    a, b, bias, y = _t(a_shape), _t(b_shape), _t((n,)), _t((*a_shape[:-1], n))
    attrs = " {transpose_b = true}" if transpose_b else ""
    return f"""
func.func @f(%a: {a}, %b: {b}, %bias: {bias}) -> {y} {{
  %m = ai.matmul %a, %b{attrs} : {a} * {b}
  %c = ai.add %m, %bias : {y} * {bias}
  %o = ai.relu %c : {y}
  return %o : {y}
}}"""


@pytest.mark.parametrize("n", [32, 20])
def test_matmul_gathers_merged_heads_per_block(cache, n):
    """A = (B, H, S, E) -> transpose (0, 2, 1, 3) -> reshape (B, S, H*E), an attention
    result before its output projection: each block gathers its rows (H pieces of E
    floats) into gbuf; no copy of A before the kernel. N = 32: gemm_nn; N = 20: sgemm.
    S = 37 leaves a ragged block; a bias and a residual in the epilogue."""
    b, h, s, e = 2, 3, 37, 16
    x, xt, a = _t((b, h, s, e)), _t((b, s, h, e)), _t((b, s, h * e))
    w, bias, y = _t((h * e, n)), _t((n,)), _t((b, s, n))
    text = f"""
func.func @f(%x: {x}, %w: {w}, %bias: {bias}, %r: {y}) -> {y} {{
  %t = ai.transpose %x {{perm = array<i64: 0, 2, 1, 3>}} : {x}
  %a = ai.reshape %t {{shape = array<i64: {b}, {s}, {h * e}>}} : {xt}
  %m = ai.matmul %a, %w : {a} * {w}
  %c = ai.bias_add %m, %bias {{axis = 2 : i64}} : {y} * {_t((n,))}
  %o = ai.add %c, %r : {y} * {y}
  return %o : {y}
}}"""
    kernel = check(text, cache=cache, kind="matmul").kernels[0]
    # one loop over a row's H x E values (nested head/element loops took LLVM seconds)
    gather = f"gbuf[i * {h * e} + j] = in0[(bi0) * {h * s * e} + j // {e} * {s * e} + (r0 + i) * {e} + j % {e}]"  # noqa: E501
    assert f"for j in range({h * e}):" in kernel.source and gather in kernel.source
    gemm = "gemm_nn(r1 - r0, " if n == 32 else "sgemm(0, 0, r1 - r0, "
    assert f"{gemm}{n}, {h * e}, gbuf, 0, {h * e}," in kernel.source
    assert "ascontiguousarray" not in kernel.source and kernel.scratch.operand_bytes == 0


def test_matmul_in_register_tiles_takes_small_row_blocks(cache):
    """K = 24 narrow (NN_MAX_NARROW), N whole vectors of gemm_nn (16 lanes, so of 8 too)
    and row-major operands: the blocks run gemm_nn, rows only (no packing to share out),
    each C block within NN_WORKSPACE_BYTES; a transposed B keeps sgemm."""
    text = _matmul_bias_relu((2, 300, 24), (24, 512))
    source = check(text, cache=cache, kind="matmul").kernels[0].source
    found = re.search(r"in (\d+) blocks of up to (\d+) rows: prologue, gemm_nn, epilogue", source)
    assert found, source
    blocks, rows = map(int, found.groups())
    assert rows * 512 * 4 <= cpu_matmul.NN_WORKSPACE_BYTES and blocks == 2 * -(-300 // rows)
    assert "gemm_nn(r1 - r0, 512, 24, in0," in source and "sgemm(" not in source
    text = _matmul_bias_relu((2, 300, 24), (512, 24), transpose_b=True)
    assert "sgemm(0, 1, r1 - r0," in check(text, cache=cache, kind="matmul").kernels[0].source


def _dense(array: np.ndarray) -> str:
    """An ``arith.constant`` value for ``array`` (float32s written exactly)."""
    if array.ndim == 1:
        return "[" + ", ".join(repr(float(v)) for v in array) + "]"
    return "[" + ", ".join(_dense(row) for row in array) + "]"


def _constant_weight_matmul(m: int, k: int, n: int, transpose_b: bool, weight_twice=False):
    """relu(a @ W + bias) with W an ``arith.constant`` ((N, K) given ``transpose_b``);
    ``weight_twice``: + W again in the epilogue (N = K)."""
    rng = np.random.default_rng(m * k + n)
    shape = (n, k) if transpose_b else (k, n)
    w = rng.standard_normal(shape).astype(np.float32)
    a, wt, bias, y = _t((m, k)), _t(shape), _t((n,)), _t((m, n))
    attrs = " {transpose_b = true}" if transpose_b else ""
    again = f"\n  %o = ai.add %r, %w : {y} * {wt}" if weight_twice else ""
    return f"""
func.func @f(%a: {a}, %bias: {bias}) -> {y} {{
  %w = arith.constant dense<{_dense(w)}> : {wt}
  %m = ai.matmul %a, %w{attrs} : {a} * {wt}
  %c = ai.add %m, %bias : {y} * {bias}
  %r = ai.relu %c : {y}{again}
  return {"%o" if weight_twice else "%r"} : {y}
}}"""


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("m", [100, 8])
def test_matmul_constant_weights_are_packed_once(cache, monkeypatch, transpose_b, m):
    """A wide GEMM (NN_MAX_NARROW lowered to 16) whose B is a constant runs in
    ``gemm_packed``: the Program lays B out in strips once, at construction, and every
    call passes that copy (the only one kept). 100 rows: row blocks; 8 rows: tiles of
    whole strips of columns (``c0 * K`` into the packed B)."""
    from fusec.targets.cpu.backend import CpuBackend

    monkeypatch.setattr(cpu_matmul, "NN_MAX_NARROW", 16)
    calls = []
    prepare = CpuBackend.prepare
    monkeypatch.setattr(
        CpuBackend, "prepare", lambda self, *a: calls.append(a[0]) or prepare(self, *a)
    )
    k, n = 24, 2 * microkernel.STRIP
    program = check(_constant_weight_matmul(m, k, n, transpose_b), cache=cache, fuse=True)
    kernel = program.kernels[0]
    assert [kernel.kind for kernel in program.kernels] == ["matmul"]
    assert calls == ["strips_t" if transpose_b else "strips"]
    ((index, layout),) = kernel.prepared_inputs
    weight = program.launches[0].operands[index]  # kept laid out only
    assert (weight, layout) in program.prepared_constants and weight not in program.constants
    assert "gemm_packed(r1 - r0," in kernel.source and "sgemm(" not in kernel.source
    if m == 8:
        assert f"x {microkernel.STRIP} columns" in kernel.source and f"c0 * {k}" in kernel.source
    fn = entry_function(program.function.parent.parent)
    for seed in (1, 2):  # more calls, no more packing, still right
        inputs = random_inputs(fn, seed)
        (out,) = program(inputs, alloc=poison)
        (ref,) = run_reference(program.function.parent.parent, inputs, precision="float64")
        assert_close(out, ref)
    assert len(calls) == 1


def test_matmul_weights_not_packed_when_an_argument_or_read_twice(cache, monkeypatch):
    """B as a function argument, or a constant the epilogue reads too: sgemm on B as
    it is (the kernel gets the array itself)."""
    monkeypatch.setattr(cpu_matmul, "NN_MAX_NARROW", 16)
    n = 2 * microkernel.STRIP
    for text in (
        _matmul_bias_relu((100, 24), (24, n)),
        _constant_weight_matmul(n, n, n, False, True),
    ):
        program = check(text, cache=cache, fuse=True)
        source = program.kernels[0].source
        assert "sgemm(" in source and "gemm_packed" not in source, source
        assert program.kernels[0].prepared_inputs == ()


def test_matmul_reduction_epilogue_keeps_whole_rows(cache):
    """A softmax after the matmul needs whole rows: no column tiles however wide."""
    a, b, y = _t((40, 24)), _t((24, 200)), _t((40, 200))
    text = f"""
func.func @f(%a: {a}, %b: {b}) -> {y} {{
  %m = ai.matmul %a, %b : {a} * {b}
  %s = ai.softmax %m : {y}
  return %s : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert "c0 = blk" not in program.kernels[0].source


def test_matmul_batched_broadcast_operands_and_epilogue(cache):
    a, b, r = _t((2, 1, 40, 16)), _t((3, 16, 24)), _t((3, 1, 24))
    y = _t((2, 3, 40, 24))
    g = _t((16,))
    text = f"""
func.func @f(%a: {a}, %g: {g}, %be: {g}, %b: {b}, %r: {r}) -> {y} {{
  %n = ai.layernorm %a, %g, %be : {a} * {g} * {g}
  %m = ai.matmul %n, %b : {a} * {b}
  %o = ai.add %m, %r : {y} * {r}
  %t = ai.tanh %o : {y}
  return %t : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert _blocks(program) == 6  # one block per (2 x 3) matrix


def test_matmul_two_batch_dims_scalar_and_mask_epilogue(cache):
    """Attention scores: both operands carry the (2, 3) batch; a scalar and a mask follow."""
    q, y, mask = _t((2, 3, 40, 8)), _t((2, 3, 40, 40)), _t((40, 40))
    text = f"""
func.func @f(%q: {q}, %k: {q}, %s: {_t(())}, %mask: {mask}) -> {y} {{
  %m = ai.matmul %q, %k {{transpose_b = true}} : {q} * {q}
  %d = ai.div %m, %s : {y} * {_t(())}
  %a = ai.add %d, %mask : {y} * {mask}
  %p = ai.softmax %a : {y}
  return %p : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert _blocks(program) == 6  # one block per matrix


@pytest.mark.parametrize(
    "a, b, y",
    [
        ((24,), (2, 24, 30), (2, 30)),  # a 1-D A: one row per matrix
        ((2, 30, 24), (24,), (2, 30)),  # a 1-D B: whole matrices, rows along M
        ((24,), (24,), ()),  # a dot product
    ],
)
def test_matmul_vector_operands(cache, a, b, y):
    ta, tb, ty = _t(a), _t(b), _t(y)
    if y:
        epilogue = f"%s = ai.softmax %m : {ty}\n  %o = ai.mul %s, %m : {ty} * {ty}"
    else:
        epilogue = f"%o = ai.sigmoid %m : {ty}"
    text = f"""
func.func @f(%a: {ta}, %b: {tb}) -> {ty} {{
  %m = ai.matmul %a, %b : {ta} * {tb}
  {epilogue}
  return %o : {ty}
}}"""
    check(text, cache=cache, kind="matmul")


def test_a_small_matmul_group_is_split_over_the_threads(cache):
    """LN -> matmul -> softmax at the benchmark's --quick size in rows (256): one block
    per 64 rows, the kernel parallel, so both cores of a 2-core machine get blocks."""
    x, v, w, y = _t((256, 64)), _t((64,)), _t((64, 128)), _t((256, 128))
    text = f"""
func.func @f(%x: {x}, %g: {v}, %be: {v}, %w: {w}) -> {y} {{
  %n = ai.layernorm %x, %g, %be : {x} * {v} * {v}
  %m = ai.matmul %n, %w : {x} * {w}
  %s = ai.softmax %m : {y}
  return %s : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert _blocks(program) == 4  # 256 rows: MIN_BLOCKS blocks of 64
    assert "parallel=True" in program.kernels[0].source
    assert "tasks = min(num_threads(), 4)" in program.kernels[0].source


@pytest.mark.parametrize("channels, parallel", [(256, True), (8, False)])
def test_a_small_result_of_a_long_reduction_runs_in_parallel(channels, parallel):
    """A conv's blocks run on the thread pool by the core's FLOPs, not only by the
    result's size: ResNet-50's 3x3 on an 8x8 plane at batch 1 (C = K = 256: 16384
    outputs, 75 MFLOP) is parallel; the same conv with 8 channels (0.07 MFLOP) is not
    worth a parallel region."""
    x, w, y = _t((1, channels, 8, 8)), _t((channels, channels, 3, 3)), _t((1, channels, 8, 8))
    text = f"""
func.func @f(%x: {x}, %w: {w}) -> {y} {{
  %c = ai.conv2d %x, %w {{padding = array<i64: 1, 1>}} : {x} * {w}
  %r = ai.relu %c : {y}
  return %r : {y}
}}"""
    module = parse(text)
    run_pipeline(module, target="cpu")
    source = Program(module, target="cpu", cache=None).kernels[0].source
    assert "_blocked(" in source
    assert ("parallel=True" in source) == parallel, source[:1500]


def test_matmul_prologue_values_needed_later_run_as_a_stage_of_their_own(cache):
    a, b, y = _t((40, 40)), _t((40, 40)), _t((40, 40))
    text = f"""
func.func @f(%a: {a}, %s: {a}, %b: {b}) -> {y} {{
  %p = ai.mul %a, %s : {a} * {a}
  %m = ai.matmul %p, %b : {a} * {b}
  %o = ai.add %m, %p : {y} * {a}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert "_prologue0" in program.kernels[0].source  # %p is read by the epilogue too


# ---------------------------------------------------------------------- conv

CONVS = [
    # strides, padding, dilations, groups, (N, C, H, W), (K, kh, kw)
    ((2, 2), (0, 1, 1, 2), (1, 1), 1, (1, 6, 21, 17), (8, 3, 3)),  # stride, uneven padding
    # strided im2col by phases of the input row: column stride 3, dilated 5x5, padding
    # wider than some taps reach; and a 7x7 stride-2 stem
    ((2, 3), (2, 1, 3, 4), (2, 2), 1, (2, 3, 15, 14), (4, 5, 5)),
    ((2, 2), (3, 3), (1, 1), 1, (1, 3, 20, 19), (5, 7, 7)),
    ((1, 1), (2, 2), (2, 2), 1, (1, 4, 14, 12), (6, 3, 3)),  # dilation
    ((1, 1), (1, 1), (1, 1), 8, (1, 8, 12, 12), (16, 3, 3)),  # groups: 1 channel each
    ((2, 1), (0, 0), (1, 1), 1, (2, 8, 13, 9), (4, 1, 1)),  # 1x1 with a stride: im2col
    ((1, 1), (0, 0), (1, 1), 2, (1, 8, 11, 7), (6, 1, 1)),  # 1x1: reads the input directly
    ((1, 1), (3, 3), (1, 1), 1, (1, 3, 5, 5), (4, 3, 3)),  # padding wider than the kernel
    # taps: uneven padding and a non-square kernel; a ragged last block (OH 13 over
    # blocks of TAP_PIXELS // Wp rows); a 1xS kernel (no padding rows)
    ((1, 1), (2, 0, 1, 3), (1, 1), 1, (2, 5, 13, 40), (7, 3, 5)),
    ((1, 1), (0, 1), (1, 1), 1, (1, 6, 9, 30), (5, 1, 3)),
    # Winograd F(2x2, 3x3): odd OH and OW (half tiles at both edges), groups, more
    # blocks than threads with a ragged last one; and unpadded, several images
    ((1, 1), (1, 1), (1, 1), 2, (2, 6, 15, 13), (8, 3, 3)),
    ((1, 1), (0, 0), (1, 1), 1, (3, 16, 40, 9), (12, 3, 3)),
    # 14 tiles a row: a block's tiles are not whole vectors of gemm_nn (zero columns
    # pad each of the 16 x 16 rows of wv, each matrix a cache line past the last)
    ((1, 1), (1, 1), (1, 1), 1, (1, 16, 28, 28), (16, 3, 3)),
    # depthwise (groups = C = K): MobileNet's 3x3 at strides 1 and 2 (uneven padding,
    # odd sizes, several planes a block, a ragged last block); dilated 5x5 with padding
    # wider than a tap reaches; 1x3 whose first column only ever reads padding; 1x1
    ((1, 1), (1, 1), (1, 1), 24, (2, 24, 9, 11), (24, 3, 3)),
    ((2, 2), (0, 1, 1, 2), (1, 1), 12, (2, 12, 15, 13), (12, 3, 3)),
    ((1, 2), (3, 4), (2, 2), 5, (1, 5, 9, 8), (5, 5, 5)),
    ((1, 1), (0, 3), (1, 1), 3, (1, 3, 6, 2), (3, 1, 3)),
    ((1, 1), (0, 0), (1, 1), 7, (3, 7, 5, 6), (7, 1, 1)),
    # strided rows longer than the lanes form takes: the planar sums in passes of
    # planes.SUM_TERMS taps on AVX2 (5x5: 3 passes, 7x7: 6)
    ((2, 2), (2, 2), (1, 1), 6, (1, 6, 34, 34), (6, 5, 5)),
    ((2, 2), (3, 2), (1, 1), 4, (2, 4, 40, 37), (4, 7, 7)),
    # stride 2, padding 1: the input row's column pairs split by vector shuffles
    # (depthwise_deinterleave: two vectors, the first input column one at a time)
    ((2, 2), (1, 1), (1, 1), 8, (1, 8, 66, 65), (8, 3, 3)),
    # small planes in a batch: blocks of several images side by side, 1x1 read as it
    # is (3 + 3 + 3 + 1 images), 3x3 by im2col (3 x 3 images; 2 + 2 + 2 + 2 at stride 2)
    ((1, 1), (0, 0), (1, 1), 1, (10, 8, 3, 3), (6, 1, 1)),
    ((1, 1), (1, 1), (1, 1), 1, (9, 6, 2, 2), (5, 3, 3)),
    ((2, 2), (1, 0, 2, 1), (1, 1), 1, (8, 4, 5, 5), (6, 3, 3)),
]


def _depthwise(case) -> bool:
    groups, c, k = case[3], case[4][1], case[5][0]
    return groups == c == k


def _conv_text(case, dtype, epilogue="relu"):
    strides, padding, dil, groups, (n, c, h, w), (k, kh, kw) = case
    pads = padding * 2 if len(padding) == 2 else padding
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    x, wt, b = _t((n, c, h, w), dtype), _t((k, c // groups, kh, kw), dtype), _t((k,), dtype)
    y = _t((n, k, oh, ow), dtype)

    def arr(v):
        return ", ".join(map(str, v))

    return f"""
func.func @f(%x: {x}, %w: {wt}, %b: {b}) -> {y} {{
  %c = ai.conv2d %x, %w {{strides = array<i64: {arr(strides)}>,
                          padding = array<i64: {arr(padding)}>,
                          dilations = array<i64: {arr(dil)}>, groups = {groups}}} : {x} * {wt}
  %a = ai.bias_add %c, %b : {y} * {b}
  %o = ai.{epilogue} %a : {y}
  return %o : {y}
}}"""


def _constant_weight_program(case, cache, seed: int = 0) -> tuple[Program, object, str]:
    """(the cpu Program, its module, the text) of ``_constant_weight_conv_text``."""
    text = _constant_weight_conv_text(case, seed)
    module = parse(text)
    run_pipeline(module)
    return Program(module, target="cpu", cache=cache), module, text


def _constant_weight_conv_text(case, seed: int = 0) -> str:
    """``_conv_text``'s conv + bias + relu with the weight an ``arith.constant`` (random)."""
    strides, padding, dil, groups, (n, c, h, w), (k, kh, kw) = case
    weight = np.random.default_rng(seed).standard_normal((k, c // groups, kh, kw))
    weight = (weight / np.sqrt(c // groups * kh * kw)).astype(np.float32)
    text = _conv_text(case, "f32")
    wt = _t(weight.shape)
    text = text.replace(f", %w: {wt}", "")
    constant = f"  %w = arith.constant dense<{_dense(weight)}> : {wt}\n  %c = ai.conv2d"
    return text.replace("  %c = ai.conv2d", constant)


WINOGRAD4_CONVS = [
    # strides, padding, dilations, groups, (N, C, H, W), (K, kh, kw): F(4x4, 3x3) on odd
    # sizes (a last tile of 1 or 3 columns, ragged tile rows), a deep channel sum,
    # uneven padding, groups, two images, the smallest plane it takes (8 rows; one
    # image's 8x8, whole vectors, goes by "channels")
    ((1, 1), (1, 1), (1, 1), 1, (1, 64, 23, 17), (48, 3, 3)),
    ((1, 1), (0, 1, 1, 2), (1, 1), 2, (2, 16, 13, 30), (8, 3, 3)),
    ((1, 1), (0, 0), (1, 1), 1, (1, 8, 10, 11), (8, 3, 3)),
]


@pytest.mark.parametrize("case", sampled(WINOGRAD4_CONVS, 3))  # the first by default
def test_conv_winograd4_against_float64_reference(cache, case):
    """F(4x4, 3x3) with constant weights: the Program transforms them once
    ("winograd:<groups>:4"); elementwise at f32 tolerance and relative L2 < 1e-4 against
    the float64 reference, on fresh random inputs with poisoned outputs."""
    program, module, text = _constant_weight_program(case, cache)
    (kernel,) = program.kernels
    assert "Winograd F(4x4, 3x3): input transform, 36 GEMMs" in kernel.source
    assert [layout for _, layout in kernel.prepared_inputs] == [f"winograd:{case[3]}:4"]
    _check_float64(program, module, text, (21, 22), f"winograd4 {case}")


def test_small_batched_3x3_planes_go_winograd_when_blocks_fill_a_vector():
    """A batch's 4x4 planes (4 tiles of F(2x2, 3x3) an image) go by Winograd in blocks of
    images when a block of ``ceil(N / MIN_BLOCKS)`` images fills a vector, else im2col."""
    from fusec.targets.cpu import host

    def method(n: int, hw: int) -> str:
        case = ((1, 1), (1, 1), (1, 1), 1, (n, 16, hw, hw), (16, 3, 3))
        return conv_choice.conv_method(_conv_op(case))

    enough = -(-host.W // 4) * cpu_blocked.MIN_BLOCKS  # images whose blocks fill a vector
    assert method(enough, 4) == "winograd"
    assert method(2, 4) == "im2col"  # blocks of one image: 4 tiles
    assert method(enough, 1) == "im2col"  # one tile an image


def test_winograd2_blocks_of_several_images(cache):
    """F(2x2, 3x3) (the weight an argument) over blocks of several images' 4x4 planes,
    against the reference."""
    from fusec.targets.cpu import host

    images = -(-host.W // 4)  # 4 tiles an image: a vector's worth a block
    n = images * cpu_blocked.MIN_BLOCKS
    case = ((1, 1), (1, 1), (1, 1), 1, (n, 8, 4, 4), (12, 3, 3))
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "Winograd F(2x2, 3x3)" in source
    assert f"tiles of {images} images)" in source, source[:1500]


@pytest.mark.parametrize(
    "case, images",
    [
        # 8x8 planes: 4 tiles of F(4x4, 3x3) an image; 3 images: blocks of 2 and 1
        (((1, 1), (1, 1), (1, 1), 1, (3, 16, 8, 8), (24, 3, 3)), 2),
        # a 16x16 plane is 16 tiles: a vector of AVX-512 by itself, two of AVX2
        (((1, 1), (1, 1), (1, 1), 1, (2, 8, 16, 16), (8, 3, 3)), 1),
    ],
)
def test_winograd_blocks_of_several_images_fill_a_vector(cache, case, images):
    """A Winograd block that is a whole plane of fewer tiles than a vector holds several
    images (``_winograd_images``), their tiles side by side in the GEMMs' columns; at f32
    tolerance and relative L2 < 1e-4 against the float64 reference, poisoned outputs."""
    from fusec.targets.cpu import host

    n, tpi = case[4][0], -(-case[4][2] // 4) * -(-case[4][3] // 4)
    most = min(-(-host.W // tpi), -(-n // cpu_blocked.MIN_BLOCKS))
    images = min(images, most) if tpi < host.W else 1
    program, module, text = _constant_weight_program(case, cache, seed=4)
    source = program.kernels[0].source
    assert "Winograd F(4x4, 3x3)" in source
    assert (f"tiles of {images} images)" in source) == (images > 1), source[:1500]
    _check_float64(program, module, text, (61, 62), f"winograd images {case}")


IM2ROW_CONVS = [
    # one image's small plane that is not whole vectors of gemm_nn (those go by
    # "channels"), constant weights of whole strips of output channels (ResNet-18's
    # last stages at batch 1): 2x2 and 3x5 3x3 convs, a strided one with
    # uneven padding, a dilated one and a 2x3 plane of a 1x1 conv with padding
    ((1, 1), (1, 1), (1, 1), 1, (1, 128, 2, 2), (128, 3, 3)),
    ((1, 1), (1, 1), (1, 1), 1, (1, 64, 3, 5), (64, 3, 3)),
    ((2, 2), (0, 1, 1, 2), (1, 1), 1, (1, 24, 7, 6), (64, 3, 3)),
    ((1, 1), (2, 2), (2, 2), 1, (1, 5, 3, 3), (192, 3, 3)),
    ((1, 1), (1, 0), (1, 1), 1, (1, 9, 1, 3), (64, 1, 1)),
]


@pytest.mark.parametrize("case", sampled(IM2ROW_CONVS, 5))  # the first by default
def test_conv_im2row_against_float64_reference(cache, case):
    """A small plane of one image by im2row and gemm_packed on the weight packed once
    ("strips_kcrs"), the output channels split among blocks: at f32 tolerance against
    the float64 reference, on fresh random inputs with poisoned outputs."""
    program, module, text = _constant_weight_program(case, cache, seed=3)
    (kernel,) = program.kernels
    assert "im2row, gemm_packed (weight packed once)" in kernel.source
    assert [layout for _, layout in kernel.prepared_inputs] == ["strips_kcrs"]
    strips = case[5][0] // microkernel.STRIP  # output channels split among the blocks
    assert _blocks(program) == min(4, strips)
    _check_float64(program, module, text, (31, 32), f"im2row {case}")


ONE_PIXEL_CONVS = [
    # squeeze-excite's 1x1 convs after a global pool (issue 30), constant weights: fewer
    # channels than a strip (with 16-float vectors: the packed weight is one window strip,
    # gemm_nn over all of it), more but not whole strips (gemm_packed's window strip),
    # whole strips; and a padded 3x3 whose one output pixel reads the centre tap only
    ((1, 1), (0, 0), (1, 1), 1, (1, 96, 1, 1), (20, 1, 1)),
    ((1, 1), (0, 0), (1, 1), 1, (1, 20, 1, 1), (80, 1, 1)),
    ((1, 1), (0, 0), (1, 1), 1, (1, 24, 1, 1), (128, 1, 1)),
    ((1, 1), (1, 1), (1, 1), 1, (1, 8, 1, 1), (12, 3, 3)),
]


@pytest.mark.parametrize("case", sampled(ONE_PIXEL_CONVS, 2))  # 1st, 3rd by default
def test_conv_one_pixel_by_im2row_any_output_channels(cache, case):
    """One image's single output pixel with a constant weight goes by im2row whatever
    its output channels (a matrix-vector product; "direct" ran sgemm with N = 1): at f32
    tolerance against the float64 reference, on fresh random inputs with poisoned
    outputs, in one block unless the channels are whole strips."""
    op = _conv_op(case)
    assert conv_choice.conv_method(op, constant_weight=True) == "im2row"
    assert conv_choice.conv_method(op) != "im2row"  # the weight an argument: not packed
    program, module, text = _constant_weight_program(case, cache, seed=5)
    (kernel,) = program.kernels
    k = case[5][0]
    gemm = "gemm_nn" if k < microkernel.STRIP else "gemm_packed"
    assert f"im2row, {gemm} (weight packed once)" in kernel.source
    assert [layout for _, layout in kernel.prepared_inputs] == ["strips_kcrs"]
    whole = k % microkernel.STRIP == 0
    # whole strips: at most 4 blocks of whole strips each (5 strips: 2, 2 and 1)
    strips = k // microkernel.STRIP
    per = -(-strips // min(4, max(strips, 1)))
    assert _blocks(program) == (-(-strips // per) if whole else 1)
    _check_float64(program, module, text, (41, 42), f"one-pixel im2row {case}")


BATCH_ONE_PIXEL_CONVS = [
    # a batch's one-pixel outputs from a window that is the whole input (squeeze-excite
    # at batch > 1): fewer channels than a strip (the window strip), more but not whole
    # strips, whole strips (split among the threads' blocks), a 3x3 on a 3x3 input
    ((1, 1), (0, 0), (1, 1), 1, (4, 96, 1, 1), (20, 1, 1)),
    ((1, 1), (0, 0), (1, 1), 1, (3, 20, 1, 1), (80, 1, 1)),
    ((1, 1), (0, 0), (1, 1), 1, (2, 24, 1, 1), (128, 1, 1)),
    ((1, 1), (0, 0), (1, 1), 1, (5, 8, 3, 3), (12, 3, 3)),
]


@pytest.mark.parametrize("case", BATCH_ONE_PIXEL_CONVS)
def test_batch_one_pixel_conv_takes_the_images_as_rows(cache, case):
    """A batch's single output pixels whose window is the whole unpadded input go by
    im2row with the images as the GEMM's rows, read where they are (``image_rows``), the
    weight packed once; not with an argument weight. At f32 tolerance against the float64
    reference on fresh random inputs with poisoned outputs."""
    op = _conv_op(case)
    assert conv_choice.image_rows(op)
    assert conv_choice.conv_method(op, constant_weight=True) == "im2row"
    assert conv_choice.conv_method(op) != "im2row"
    program, module, text = _constant_weight_program(case, cache, seed=7)
    (kernel,) = program.kernels
    gemm = "gemm_nn" if case[5][0] < microkernel.STRIP else "gemm_packed"
    assert f"the images as rows, {gemm} (weight packed once)" in kernel.source
    assert [layout for _, layout in kernel.prepared_inputs] == ["strips_kcrs"]
    _check_float64(program, module, text, (51, 52), f"images as rows {case}")


@pytest.mark.parametrize("n", [2, 3])
def test_batch_one_pixel_conv_with_an_argument_weight(cache, n):
    """The weight an argument (nothing packed): "direct", its result local to the block
    (``ConvBlocks.local_result`` says so for every ``image_rows`` conv); against the
    reference."""
    case = ((1, 1), (0, 0), (1, 1), 1, (n, 24, 1, 1), (40, 1, 1))
    assert conv_choice.conv_method(_conv_op(case)) == "direct"
    check(_conv_text(case, "f32"), cache=cache, kind="conv")


def test_image_rows_with_a_row_reduction_in_the_epilogue(cache):
    """With a softmax in the epilogue (a row reduction: whole rows along W, one pixel
    here) the images-as-rows block walks every (image, channel) as a row of its own."""
    case = ((1, 1), (0, 0), (1, 1), 1, (4, 96, 1, 1), (80, 1, 1))
    y = _t((4, 80, 1, 1))
    text = _constant_weight_conv_text(case, seed=3).replace(
        f"  %o = ai.relu %a : {y}",
        f"  %s = ai.softmax %a {{axis = 3 : i64}} : {y}\n  %o = ai.add %s, %a : {y} * {y}",
    )
    assert "ai.softmax" in text
    program = check(text, cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "the images as rows" in source and "for kk in range(g1 - g):" in source


def test_image_rows_needs_the_whole_unpadded_input_as_the_window():
    """A padded one-pixel conv, a one-image one and a grouped one are not ``image_rows``."""
    padded = ((1, 1), (1, 1), (1, 1), 1, (2, 8, 1, 1), (12, 3, 3))
    single = ((1, 1), (0, 0), (1, 1), 1, (1, 96, 1, 1), (20, 1, 1))
    grouped = ((1, 1), (0, 0), (1, 1), 2, (2, 8, 1, 1), (12, 1, 1))
    assert not any(conv_choice.image_rows(_conv_op(case)) for case in (padded, single, grouped))


CHANNEL_CONVS = [
    # one image's plane of whole vectors (16 pixels a vector with AVX-512, 8 with AVX2),
    # blocks of output channels (4 here: ``four_blocks_at_least``), a ragged last one
    # (K = 37: 10, 10, 10, 7): a 1x1 read in place on 4x4 and on 16x16; a padded 3x3
    # on 8x8 (im2col of the plane); a 3x3/2 with uneven padding to 8x8 (the strided
    # im2col by phases) and a 1x1/2; a padded 1x1 (not in place) and a dilated 3x3
    ((1, 1), (0, 0), (1, 1), 1, (1, 24, 4, 4), (37, 1, 1)),
    ((1, 1), (0, 0), (1, 1), 1, (1, 32, 16, 16), (48, 1, 1)),
    ((1, 1), (1, 1), (1, 1), 1, (1, 16, 8, 8), (20, 3, 3)),
    ((2, 2), (0, 1, 1, 2), (1, 1), 1, (1, 8, 16, 15), (12, 3, 3)),
    ((2, 2), (0, 0), (1, 1), 1, (1, 8, 16, 16), (24, 1, 1)),
    ((1, 1), (1, 1), (1, 1), 1, (1, 5, 2, 6), (9, 1, 1)),
    ((1, 1), (2, 2), (2, 2), 1, (1, 6, 8, 8), (7, 3, 3)),
]


@pytest.mark.parametrize("case", sampled(CHANNEL_CONVS, 3))  # every 3rd by default
def test_conv_channel_blocks_against_float64_reference(cache, case):
    """One image's small plane in blocks of output channels (``conv_method``
    "channels"): gemm_nn of the weight's rows by the input in place (1x1, stride 1,
    unpadded) or by the plane's im2col; conv + bias + relu at f32 tolerance against the
    float64 reference on fresh random inputs with poisoned outputs."""
    assert conv_choice.conv_method(_conv_op(case)) == "channels"
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    source = program.kernels[0].source
    in_place = case[5][1:] == (1, 1) and case[0] == (1, 1) and not any(case[1])
    how = "the input in place" if in_place else "im2col of the plane"
    assert f"pixels: gemm_nn by {how}" in source
    assert ("cols = ws[" in source) == (not in_place)
    per = -(-case[5][0] // conv_choice.channel_blocks())  # channels a block
    assert _blocks(program) == -(-case[5][0] // per)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_conv_channel_blocks_bare_and_whole_row_epilogue(cache, dtype):
    """A bare "channels" conv writes the output's channel rows where they are (no
    workspace block, no epilogue); one whose epilogue operand varies along H (whole
    output rows, a block's channels each) computes in the workspace; a constant weight
    is read as it is (nothing laid out). All against the float64 reference."""
    x, w, y, r = (
        _t((1, 8, 8, 8), dtype),
        _t((21, 8, 3, 3), dtype),
        _t((1, 21, 8, 8), dtype),
        _t((21, 8, 1), dtype),
    )
    conv = "ai.conv2d %x, %w {padding = array<i64: 1, 1>}"
    bare = f"""
func.func @f(%x: {x}, %w: {w}) -> {y} {{
  %c = {conv} : {x} * {w}
  return %c : {y}
}}"""
    program = check(bare, cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "gemm_nn by im2col of the plane" in source and "cbuf = ws[" not in source
    rows = f"""
func.func @f(%x: {x}, %w: {w}, %r: {r}) -> {y} {{
  %c = {conv} : {x} * {w}
  %o = ai.mul %c, %r : {y} * {r}
  return %o : {y}
}}"""
    program = check(rows, cache=cache, kind="conv")
    assert "cbuf = ws[" in program.kernels[0].source
    case = ((1, 1), (0, 0), (1, 1), 1, (1, 24, 4, 4), (40, 1, 1))
    program, module, text = _constant_weight_program(case, cache, seed=5)
    (kernel,) = program.kernels
    assert "gemm_nn by the input in place" in kernel.source and not kernel.prepared_inputs
    _check_float64(program, module, text, (41, 42), "channels, constant weight")


@pytest.mark.parametrize(
    "case, gemm",
    [
        # ResNet's stem at 64x64: 16 output channels, rows of 32 pixels: gemm_nn
        (((2, 2), (3, 3), (1, 1), 1, (1, 3, 64, 64), (16, 7, 7)), "gemm_nn(16, pw, 147,"),
        # rows of 31 pixels (not whole vectors): sgemm (a kernel compile: the slow lane)
        pytest.param(
            ((2, 2), (3, 3), (1, 1), 1, (1, 3, 62, 62), (16, 7, 7)),
            "sgemm(0, 0, 16, pw, 147,",
            marks=pytest.mark.slow,
        ),
        # a 1x1 read in place ("direct": more than CHANNEL_PIXELS_IN_PLACE pixels), rows
        # of 32 pixels, 24 input channels: gemm_nn over blocks of DIRECT_NN_PIXELS (9
        # rows: 5 + 4 for two threads, a ragged last block)
        (((1, 1), (0, 0), (1, 1), 1, (1, 24, 9, 32), (40, 1, 1)), "gemm_nn(40, pw, 24,"),
        # ... more than DIRECT_NN_DEPTH input channels: sgemm (the slow lane)
        pytest.param(
            ((1, 1), (0, 0), (1, 1), 1, (1, 168, 17, 16), (8, 1, 1)),
            "sgemm(0, 0, 8, pw, 168,",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_conv_im2col_few_channels_whole_vector_rows_in_gemm_nn(cache, case, gemm):
    """An im2col block of few output channels whose output rows are whole vectors runs
    its GEMM in gemm_nn (``COLS_NN_ROWS``), others in sgemm; so does a 1x1 read in place
    of few input channels (``DIRECT_NN_DEPTH``); all against the reference."""
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    assert gemm in program.kernels[0].source


def _constant_weight_conv(n: int, c: int, hw: int, k: int, groups: int) -> str:
    """relu(conv3x3(x, W, pad 1) + bias) with W an ``arith.constant``."""
    w = np.random.default_rng(c * k + groups).standard_normal((k, c // groups, 3, 3))
    x, wt, b, y = _t((n, c, hw, hw)), _t(w.shape), _t((k,)), _t((n, k, hw, hw))
    return f"""
func.func @f(%x: {x}, %b: {b}) -> {y} {{
  %w = arith.constant dense<{_dense(w.astype(np.float32))}> : {wt}
  %c = ai.conv2d %x, %w {{strides = array<i64: 1, 1>, padding = array<i64: 1, 1>,
                          dilations = array<i64: 1, 1>, groups = {groups}}} : {x} * {wt}
  %a = ai.bias_add %c, %b : {y} * {b}
  %o = ai.relu %a : {y}
  return %o : {y}
}}"""


@pytest.mark.parametrize("groups", [1, 2])
def test_conv_constant_weights_are_winograd_transformed_once(cache, monkeypatch, groups):
    """A 3x3 conv by Winograd whose weights are a constant: the Program transforms them
    (G g G^T) once, at construction, keeps only that copy, and every call passes it."""
    from fusec.targets.cpu.backend import CpuBackend

    calls = []
    prepare = CpuBackend.prepare
    monkeypatch.setattr(
        CpuBackend, "prepare", lambda self, *a: calls.append(a[0]) or prepare(self, *a)
    )
    program = check(_constant_weight_conv(1, 8, 6, 12, groups), cache=cache, fuse=True)
    kernel = program.kernels[0]
    assert [kernel.kind for kernel in program.kernels] == ["conv"]
    assert calls == [f"winograd:{groups}"]
    ((index, layout),) = kernel.prepared_inputs
    weight = program.launches[0].operands[index]
    assert (weight, layout) in program.prepared_constants and weight not in program.constants
    assert "Winograd" in kernel.source and "winograd_filters(" not in kernel.source
    module = program.function.parent.parent
    for seed in (1, 2):  # more calls, no more transforms, still right
        inputs = random_inputs(entry_function(module), seed)
        (out,) = program(inputs, alloc=poison)
        (ref,) = run_reference(module, inputs, precision="float64")
        assert_close(out, ref)
    assert len(calls) == 1


def test_conv_weights_as_an_argument_are_transformed_at_each_launch(cache):
    case = ((1, 1), (1, 1), (1, 1), 1, (1, 8, 6, 6), (12, 3, 3))
    program = check(_conv_text(case, "f32"), cache=cache, fuse=True)
    assert "winograd_filters(" in program.kernels[0].source
    assert program.kernels[0].prepared_inputs == ()


@pytest.mark.parametrize("case", sampled(CONVS, 3))  # every 3rd by default, all: slow
def test_conv_blocks(cache, case):
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    method = conv_choice.conv_method(_conv_op(case))
    depthwise, winograd, taps = (method == m for m in ("depthwise", "winograd", "taps"))
    im2col = method == "im2col"
    source = program.kernels[0].source
    images = "images: their pixels side by side" in source
    n, (oh, ow) = case[4][0], program.kernels[0].outputs[0].shape[2:]
    in_place = conv_choice.small_plane_in_place(_conv_op(case))
    small = oh * ow <= conv_choice.SMALL_PLANE
    by_gemm = method in ("direct", "im2col")  # (a batch's small 3x3 planes may go Winograd)
    assert images == (n > 1 and small and by_gemm and not in_place)
    assert ("(depthwise)" in source) == depthwise
    assert not depthwise or not re.search(r"\bs?gemm(_nn)?\(", source)  # no GEMM at all
    assert ("cols = ws[" in source) == (im2col or images)
    assert ("xrow = ws[" in source) == (im2col and case[0][1] > 1 and case[5][2] > 1)
    assert ("sgemm_acc(" in source) == taps and ("wv = ws[" in source) == winograd
    assert ("xpad = ws[" in source) == (taps or winograd or depthwise)
    assert _blocks(program) > 1


@pytest.mark.parametrize("sum_terms, passes", [(9, 3), (64, 1)])
def test_planar_depthwise_sums_in_passes_of_taps(cache, monkeypatch, sum_terms, passes):
    """A strided 5x5 depthwise row (the planar loop, not the lanes form) sums its 25 taps
    in passes of ``planes.SUM_TERMS`` (AVX2: 9, so that a pass's weights and sums fit in
    16 vector registers), each pass after the first adding to the stored row; the
    results are the same either way."""
    from fusec.targets.cpu.conv import planes

    monkeypatch.setattr(planes, "SUM_TERMS", sum_terms)
    case = CONVS[18]
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "direct multiply-adds along output rows" in source
    assert len(re.findall(r"cbuf\[U\(d \+ j\)\] = ", source)) == passes
    assert len(re.findall(r"= cbuf\[U\(d \+ j\)\] \+ w", source)) == passes - 1


@pytest.mark.parametrize(
    "case, staged",
    [
        (((1, 1), (0, 0), (1, 1), 1, (1, 16, 32, 32), (40, 1, 1)), True),  # rows 4 KiB apart
        (((1, 1), (0, 0), (1, 1), 1, (1, 16, 32, 32), (24, 1, 1)), False),  # too few rows
        (((1, 1), (0, 0), (1, 1), 1, (1, 16, 24, 24), (40, 1, 1)), False),  # 2304 B apart
        (((1, 1), (0, 0), (1, 1), 1, (1, 16, 16, 32), (40, 1, 1)), True),  # 2 KiB apart
        (((1, 1), (0, 0), (1, 1), 1, (1, 16, 16, 16), (40, 1, 1)), False),  # 1 KiB: level
    ],
)
@pytest.mark.parametrize("lanes_stage", [True, False])
def test_direct_1x1_stages_b_strips_whose_rows_alias(cache, monkeypatch, case, staged, lanes_stage):
    """A 1x1 conv read in place whose input planes are a multiple of 2 KiB (B's rows in
    one or two L1 sets) and with at least ``host.STAGE_MIN_ROWS`` output channels runs
    ``gemm_nn_staged`` (each strip of the plane copied out first) where the vectors are
    ``host.STAGE_LANES`` wide (AVX2; made this machine's width here, or not); right
    either way."""
    from fusec.targets.cpu import host

    monkeypatch.setattr(host, "STAGE_LANES", host.W if lanes_stage else -1)
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    source = program.kernels[0].source
    staged = staged and lanes_stage
    assert ("gemm_nn_staged(" in source) == staged, source[:800]
    assert ("B strips staged" in source) == staged


@pytest.mark.parametrize(
    "case",
    [
        ((1, 1), (0, 0), (1, 1), 1, (4, 40, 4, 4), (48, 1, 1)),  # 16 pixels: one AVX-512 vector
        ((1, 1), (0, 0), (1, 1), 1, (3, 24, 8, 8), (40, 1, 1)),  # 64 pixels
    ],
)
def test_batched_small_plane_1x1_runs_gemm_nn_an_image_in_place(cache, case):
    """A batch's 1x1 conv whose output plane is whole vectors of at most
    ``CHANNEL_PIXELS_IN_PLACE`` pixels runs one image a block, ``gemm_nn`` on its plane
    where it is (``choice.small_plane_in_place``), not blocks of images copied side by
    side for one sgemm; against the reference."""
    program = check(_conv_text(case, "f32"), cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "images: their pixels side by side" not in source
    assert re.search(r"gemm_nn(_staged)?\(\d+, pw, \d+,", source), source[:1200]
    assert "cols = ws[" not in source and "sgemm(" not in source.split("def launch")[0]


WINOGRAD_CONVS = [
    # padding, groups, (N, C, H, W), K: deep channel sums (the transform's rounding
    # accumulates over C), odd and ragged sizes, uneven padding, batch > 1
    ((1, 1), 1, (2, 64, 23, 17), 48),
    ((0, 1, 1, 2), 1, (3, 32, 9, 30), 40),
    ((2, 2), 4, (2, 32, 7, 5), 16),
    ((0, 0), 1, (1, 128, 4, 3), 8),  # one tile row, a half tile column
]


@pytest.mark.parametrize("case", sampled(WINOGRAD_CONVS, 2))  # every 2nd by default
def test_conv_winograd_against_float64_reference(cache, case):
    """Winograd F(2x2, 3x3) in f32: elementwise at f32 tolerance and relative L2 < 1e-4
    against the float64 reference, on fresh random inputs with poisoned outputs."""
    padding, groups, (n, c, h, w), k = case
    text = _conv_text(((1, 1), padding, (1, 1), groups, (n, c, h, w), (k, 3, 3)), "f32")
    module = wrap_group(text, "conv")
    program = Program(module, target="cpu", cache=cache)
    assert "Winograd" in program.kernels[0].source
    _check_float64(program, module, text, (11, 12), f"winograd {case}")


def _check_float64(program: Program, module, text: str, seeds, what: str) -> None:
    """``program`` (compiled from ``module``, parsed from ``text``) on fresh random inputs
    of each seed with poisoned outputs: elementwise at f32 tolerance and relative L2
    < 1e-4 against the float64 reference of ``text``."""
    for seed in seeds:
        inputs = random_inputs(entry_function(module), seed)
        (out,) = program(inputs, alloc=poison)
        (ref,) = run_reference(parse(text), inputs, precision="float64")
        assert_close(out, ref, what=what)
        rel = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)
        assert rel < 1e-4, rel


@pytest.mark.parametrize(
    "channels, hw, gemm",
    [
        (32, (4, 5), "sgemm(0, 0, 32, nt,"),
        (32, (64, 64), "gemm_nn(32, ntv,"),
        (8, (4, 5), "gemm_nn(8, ntv,"),
    ],
)
def test_winograd_gemms_pad_little_or_run_in_sgemm(cache, channels, hw, gemm):
    """One image's 4x5 output is 3 tiles a block (split for the threads): padded to a
    whole vector of gemm_nn it would compute 3-5x the columns, so 32 x 32 GEMMs stay in
    sgemm on the exact width; 64x64 outputs give blocks of whole vectors, in gemm_nn;
    8 x 8 GEMMs (below WINOGRAD_SGEMM_MIN) cost less padded than a call of sgemm. All
    against the reference. (A batch of 4x4 planes goes by im2col: SMALL_PLANE; one
    image's 4x4, whole vectors, by "channels".)"""
    shape = (1, channels, *hw)
    text = _conv_text(((1, 1), (1, 1), (1, 1), 1, shape, (channels, 3, 3)), "f32")
    source = check(text, cache=cache, kind="conv").kernels[0].source
    assert "Winograd" in source and gemm in source
    assert ("gemm_nn(" in source) == gemm.startswith("gemm_nn")


@pytest.mark.parametrize("rows, pitch", [(64, 96), (63, 16), (16, 128), (3, 8), (1, 16)])
def test_winograd_matrices_start_in_16_different_l1_lines(rows, pitch):
    """The 16 matrices of wv (wm) start in 16 different 64-byte lines of a 4 KiB window:
    at a multiple of 4 KiB apart (64 x 96 floats) the transforms' 16 streams shared one
    L1 set and the conv ran 2.3x slower."""
    stride = conv_transforms.winograd_stride(rows, pitch)
    assert stride >= rows * pitch and stride % 16 == 0
    assert len({e * stride // 16 % 64 for e in range(16)}) == 16


@pytest.mark.parametrize("tiles, rows", [(96, 8), (256, 24)])
def test_conv_winograd_blocks_of_at_most_winograd_tiles(cache, monkeypatch, tiles, rows):
    """20 tiles a row: 96 tiles a block -> 4 tile rows (8 output rows), 256 -> 12 (24 rows,
    then a ragged block of 16); both against the float64 reference with poisoned outputs."""
    monkeypatch.setattr(conv_gemm, "WINOGRAD_TILES", tiles)
    text = _conv_text(((1, 1), (1, 1), (1, 1), 1, (4, 16, 40, 40), (8, 3, 3)), "f32")
    module = wrap_group(text, "conv")
    program = Program(module, target="cpu", cache=cache)
    assert f"blocks of {rows} output rows: padded copy, Winograd" in program.kernels[0].source
    inputs = random_inputs(entry_function(module), 13)
    (out,) = program(inputs, alloc=poison)
    (ref,) = run_reference(parse(text), inputs, precision="float64")
    assert_close(out, ref, what=f"winograd blocks of {rows} rows")


@pytest.mark.parametrize("groups, kg, cg", [(1, 64, 64), (2, 5, 3), (4, 1, 7), (1, 3, 37)])
def test_winograd_filters_match_the_float64_matrix_product(groups, kg, cg):
    """The compiled filter transform is numpy's float64 G g G^T rounded once, laid out
    [g, a, b, k, c] (fresh random filters, poisoned by construction: every element is
    compared)."""
    from fusec.targets.cpu.winograd import winograd_filters

    w = np.random.default_rng(kg * cg).standard_normal(groups * kg * cg * 9)
    w = w.astype(np.float32)
    gw = np.array(conv_transforms.WINOGRAD_G)
    ref = gw @ w.reshape(groups, kg, cg, 3, 3).astype(np.float64) @ gw.T
    ref = ref.transpose(0, 3, 4, 1, 2).astype(np.float32).reshape(-1)
    out = winograd_filters(w, groups, kg, cg)
    assert out.shape == ref.shape and np.array_equal(out, ref)


def _conv_op(case):
    module = wrap_group(_conv_text(case, "f32"), "conv")
    (group,) = [op for op in entry_function(module).body.block.ops if op.name == "ai.fused"]
    (conv,) = [op for op in group.body.block.ops if op.name == "ai.conv2d"]
    return conv


@pytest.mark.parametrize(
    "method, case",
    [
        ("direct", ((1, 1), (0, 0), (1, 1), 1, (1, 4, 6, 6), (4, 1, 1))),
        ("winograd", ((1, 1), (1, 1), (1, 1), 2, (1, 4, 6, 6), (4, 3, 3))),
        ("taps", ((1, 1), (2, 2), (2, 2), 1, (1, 4, 6, 6), (4, 3, 3))),  # dilated 3x3
        ("taps", ((1, 1), (2, 2), (1, 1), 1, (1, 4, 6, 6), (4, 5, 5))),
        ("im2col", ((2, 2), (1, 1), (1, 1), 1, (1, 4, 6, 6), (4, 3, 3))),  # stride 2
        ("im2col", ((1, 1), (1, 1), (1, 1), 1, (1, 4, 4, 5), (4, 1, 1))),  # a padded 1x1
        ("channels", ((1, 1), (1, 1), (1, 1), 1, (1, 4, 6, 6), (4, 1, 1))),  # ... to 8x8
        ("channels", ((1, 1), (0, 0), (1, 1), 1, (1, 4, 4, 4), (4, 1, 1))),  # 1x1 on 4x4
        ("channels", ((1, 1), (1, 1), (1, 1), 1, (1, 4, 8, 8), (4, 3, 3))),  # 3x3 on 8x8
        ("winograd", ((1, 1), (1, 1), (1, 1), 1, (1, 4, 8, 9), (4, 3, 3))),  # 8x9: 72
        ("im2col", ((1, 1), (1, 1), (1, 1), 1, (2, 4, 4, 4), (4, 3, 3))),  # batched, 4x4
        ("winograd", ((1, 1), (1, 1), (1, 1), 1, (2, 4, 5, 4), (4, 3, 3))),  # 5x4: not small
        ("depthwise", ((1, 1), (1, 1), (1, 1), 4, (1, 4, 6, 6), (4, 3, 3))),
        ("depthwise", ((2, 2), (0, 0), (1, 1), 4, (1, 4, 6, 6), (4, 1, 1))),
        ("winograd", ((1, 1), (1, 1), (1, 1), 4, (1, 4, 6, 6), (8, 3, 3))),  # 2 outputs a group
    ],
)
def test_conv_method_rule(method, case):
    """The rule ``conv_method`` states, one convolution per clause."""
    assert conv_choice.conv_method(_conv_op(case)) == method


@pytest.mark.parametrize(
    "method, case",
    [
        # the shape classes of real models, weights constant (as a model's are)
        ("winograd4", ((1, 1), (1, 1), (1, 1), 1, (1, 64, 56, 56), (64, 3, 3))),  # ResNet 3x3
        ("winograd4", ((1, 1), (1, 1), (1, 1), 2, (8, 64, 8, 8), (64, 3, 3))),  # grouped 3x3
        ("winograd", ((1, 1), (1, 1), (1, 1), 1, (1, 128, 7, 7), (128, 3, 3))),  # 7x7 plane
        ("channels", ((1, 1), (1, 1), (1, 1), 1, (1, 128, 4, 4), (128, 3, 3))),  # 4x4 plane
        ("channels", ((1, 1), (1, 1), (1, 1), 1, (1, 256, 8, 8), (256, 3, 3))),  # 8x8 plane
        ("channels", ((2, 2), (1, 1), (1, 1), 1, (1, 64, 8, 8), (128, 3, 3))),  # 3x3/2 to 4x4
        ("channels", ((1, 1), (0, 0), (1, 1), 1, (1, 512, 16, 16), (128, 1, 1))),  # 1x1 16x16
        ("direct", ((1, 1), (0, 0), (1, 1), 1, (1, 256, 32, 32), (64, 1, 1))),  # 1x1 32x32
        ("winograd4", ((1, 1), (1, 1), (1, 1), 1, (1, 128, 16, 16), (128, 3, 3))),  # 16x16
        ("im2col", ((1, 1), (1, 1), (1, 1), 1, (4, 128, 2, 2), (128, 3, 3))),  # batch of 2x2
        ("im2row", ((1, 1), (1, 1), (1, 1), 1, (1, 128, 2, 2), (128, 3, 3))),  # one 2x2
        ("im2row", ((1, 1), (1, 1), (1, 1), 1, (1, 128, 3, 5), (128, 3, 3))),  # 3x5: 15
        ("im2row", ((1, 1), (0, 0), (1, 1), 1, (1, 672, 1, 1), (28, 1, 1))),  # SE's 1x1
        ("winograd", ((1, 1), (1, 1), (1, 1), 1, (1, 96, 2, 2), (88, 3, 3))),  # K not strips
        ("direct", ((1, 1), (0, 0), (1, 1), 1, (1, 64, 14, 14), (256, 1, 1))),  # 1x1
        ("im2col", ((2, 2), (0, 0), (1, 1), 1, (1, 64, 14, 14), (128, 1, 1))),  # 1x1 / 2
        ("im2col", ((2, 2), (1, 1), (1, 1), 1, (1, 64, 14, 14), (128, 3, 3))),  # 3x3 / 2
        ("im2col", ((2, 2), (3, 3), (1, 1), 1, (1, 3, 64, 64), (64, 7, 7))),  # the stem, C=3
        ("depthwise", ((1, 1), (1, 1), (1, 1), 32, (1, 32, 16, 16), (32, 3, 3))),  # MobileNet
        ("depthwise", ((2, 2), (1, 1), (1, 1), 32, (1, 32, 16, 16), (32, 3, 3))),  # ... / 2
        ("depthwise", ((1, 1), (3, 3), (1, 1), 96, (1, 96, 14, 14), (96, 7, 7))),  # ConvNeXt
        ("taps", ((1, 1), (2, 2), (1, 1), 1, (1, 16, 14, 14), (16, 5, 5))),  # 5x5
    ],
)
def test_conv_method_rule_with_constant_weights(method, case, monkeypatch):
    """The rule for each class of shape #30 names, with a constant weight; F(4x4, 3x3)
    and im2row need the constant (the Program transforms or packs it once): the same
    convolution with the weight an argument takes F(2x2, 3x3) or im2col. (On a host
    with 2 MB of L2 a core: ``test_channels_need_the_plane_in_l2`` varies it.)"""
    monkeypatch.setattr(conv_choice.host, "l2_bytes", lambda: 2 << 20)
    op = _conv_op(case)
    assert conv_choice.conv_method(op, constant_weight=True) == method
    if method == "winograd4":
        assert conv_choice.conv_method(op) == "winograd"
    if method == "im2row":
        assert conv_choice.conv_method(op) in ("winograd", "im2col", "direct")


@pytest.mark.parametrize(
    "l2, method", [(2 << 20, "channels"), (512 << 10, "im2row"), (590 << 10, "channels")]
)
def test_channels_need_the_plane_in_l2(l2, method, monkeypatch):
    """ResNet-50's C256 8x8 K256 3x3: its plane's im2col is 2304 x 64 floats (576 KiB),
    which a 512 KiB L2 does not hold; it then goes by im2row (a constant weight of whole
    strips), else, the weight an argument, by "channels" still; 1x1s read in place stay."""
    monkeypatch.setattr(conv_choice.host, "l2_bytes", lambda: l2)
    op = _conv_op(((1, 1), (1, 1), (1, 1), 1, (1, 256, 8, 8), (256, 3, 3)))
    assert conv_choice.conv_method(op, constant_weight=True) == method
    assert conv_choice.conv_method(op) == "channels"
    one_by_one = _conv_op(((1, 1), (0, 0), (1, 1), 1, (1, 1024, 8, 8), (256, 1, 1)))
    assert conv_choice.conv_method(one_by_one, constant_weight=True) == "channels"


@pytest.mark.parametrize(
    "case",
    [
        ((1, 1), (1, 1), (1, 1), 1, (1, 16, 8, 8), (64, 3, 3)),  # 8x8: blocks of rows
        ((1, 1), (1, 1), (1, 1), 1, (1, 16, 3, 16), (64, 3, 3)),  # 3 rows: 3 blocks
    ],
)
def test_im2row_of_a_plane_past_l2_splits_its_rows(cache, case, monkeypatch):
    """A plane "channels" would take but for its im2col's size in L2 goes by im2row in
    blocks of output rows, every channel a block (each block builds only its rows),
    against the float64 reference on fresh inputs with poisoned outputs."""
    monkeypatch.setattr(conv_choice.host, "l2_bytes", lambda: 1024)
    assert conv_choice.conv_method(_conv_op(case), constant_weight=True) == "im2row"
    program, module, text = _constant_weight_program(case, cache, seed=7)
    (kernel,) = program.kernels
    assert "output rows (all 64 channels) of one image: im2row" in kernel.source
    oh = case[4][2]
    rows = -(-oh // min(oh, conv_planes.MIN_BLOCKS))  # a block's (4 blocks at most)
    assert _blocks(program) == -(-oh // rows) >= 2
    _check_float64(program, module, text, (43, 44), f"im2row by rows {case}")


def test_l2_size_is_read_as_sysfs_writes_it():
    from fusec.targets.cpu import host

    assert host.parse_cache_size("512K") == 512 << 10
    assert host.parse_cache_size("2M\n") == 2 << 20
    assert host.parse_cache_size("1048576") == 1 << 20
    assert host.l2_bytes() > 0


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_conv_16_bit(cache, dtype):
    check(_conv_text(CONVS[0], dtype, "sigmoid"), cache=cache, kind="conv")


def test_conv_epilogue_operand_varying_along_h_only(cache):
    # a 7 x 9 plane: not whole vectors on any ISA (8x7 went by "channels" with AVX2)
    x, w, y, r = _t((1, 4, 9, 11)), _t((5, 4, 3, 3)), _t((1, 5, 7, 9)), _t((5, 7, 1))
    text = f"""
func.func @f(%x: {x}, %w: {w}, %r: {r}) -> {y} {{
  %c = ai.conv2d %x, %w : {x} * {w}
  %o = ai.mul %c, %r : {y} * {r}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="conv")
    assert "for kk in range(5):" in program.kernels[0].source  # whole output rows


@pytest.mark.parametrize("yield_conv", [False, True])
def test_depthwise_epilogue_by_whole_output_rows_and_the_conv_yielded(cache, yield_conv):
    """A depthwise block's channel planes through an epilogue operand varying along H
    (whole output rows, ``kk`` over the block's channels), the conv also a result (then
    computed straight into it)."""
    x, w, y, r = _t((2, 6, 10, 9)), _t((6, 1, 3, 3)), _t((2, 6, 8, 4)), _t((6, 8, 1))
    results = f"%o, %c : {y}, {y}" if yield_conv else f"%o : {y}"
    types = f"{y}, {y}" if yield_conv else y
    text = f"""
func.func @f(%x: {x}, %w: {w}, %r: {r}) -> ({types}) {{
  %c = ai.conv2d %x, %w {{strides = array<i64: 1, 2>, groups = 6}} : {x} * {w}
  %o = ai.mul %c, %r : {y} * {r}
  return {results}
}}"""
    program = check(text, cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "(depthwise)" in source and "for kk in range(g1 - g):" in source
    assert ("cbuf = ws[" in source) != yield_conv


@pytest.mark.parametrize("epilogue", ["h_only", "softmax", "yielded"])
def test_1x1_conv_blocks_of_images_by_whole_output_rows(cache, epilogue):
    """A 1x1 conv on 2x3 planes, several images a block: an epilogue operand varying
    along H, or a softmax over W, walks each image's whole output rows; the conv also
    a result (copied out of the block by the epilogue)."""
    x, w, y, r = _t((9, 5, 2, 3)), _t((4, 5, 1, 1)), _t((9, 4, 2, 3)), _t((4, 2, 1))
    body = (
        f"%o = ai.mul %c, %r : {y} * {r}"
        if epilogue == "h_only"
        else f"%o = ai.softmax %c {{axis = 3}} : {y}"
    )
    results, types = (
        (f"%o, %c : {y}, {y}", f"{y}, {y}")
        if epilogue == "yielded"
        else (
            f"%o : {y}",
            y,
        )
    )
    text = f"""
func.func @f(%x: {x}, %w: {w}, %r: {r}) -> ({types}) {{
  %c = ai.conv2d %x, %w : {x} * {w}
  {body}
  return {results}
}}"""
    program = check(text, cache=cache, kind="conv")
    source = program.kernels[0].source
    assert "in 3 blocks of 3 images" in source and "for kk in range(4):" in source


def test_conv_softmax_over_the_last_axis_in_the_epilogue(cache):
    x, w, y = _t((2, 3, 9, 11)), _t((4, 3, 3, 3)), _t((2, 4, 7, 9))
    text = f"""
func.func @f(%x: {x}, %w: {w}) -> ({y}, {y}) {{
  %c = ai.conv2d %x, %w : {x} * {w}
  %s = ai.softmax %c : {y}
  return %s, %c : {y}, {y}
}}"""
    check(text, cache=cache, kind="conv")


# ----------------------------------------------------------------- attention

ATTENTIONS = [
    # q, key, v, mask shapes; scale: ragged row blocks (S 70 over blocks of MIN_BLOCKS'
    # split), key and v shared by the batch (broadcast), masks of every broadcast kind
    ((2, 3, 70, 8), (2, 3, 24, 8), (2, 3, 24, 12), (70, 24), 0.35),
    ((2, 3, 70, 8), (1, 3, 24, 8), (3, 24, 12), (2, 1, 1, 24), 1.0),  # a padding mask
    ((40, 16), (33, 16), (33, 5), (), 0.125),  # no batch, a scalar mask
    ((3, 100, 8), (3, 64, 8), (3, 64, 8), (3, 100, 1), 0.5),  # a mask constant along T
    ((40, 16), (33, 16), (33, 5), (), -0.25),  # scale < 0: the scaled scores are stored
]


@pytest.mark.parametrize("case", sampled(ATTENTIONS, 2))  # every 2nd by default
def test_attention_blocks(cache, case):
    q, key, v, mask, scale = case
    y = (*np.broadcast_shapes(q[:-2], key[:-2], v[:-2]), q[-2], v[-1])
    tq, tk, tv, tm, ty = (_t(s) for s in (q, key, v, mask, y))
    text = f"""
func.func @f(%q: {tq}, %k: {tk}, %v: {tv}, %m: {tm}, %r: {ty}) -> ({ty}, {ty}) {{
  %a = ai.attention %q, %k, %v, %m {{scale = {scale} : f32}} : {tq} * {tk} * {tv} * {tm}
  %o = ai.add %a, %r : {ty} * {ty}
  %g = ai.gelu %o : {ty}
  return %g, %a : {ty}, {ty}
}}"""
    program = check(text, cache=cache, kind="attention")
    assert "sbuf = ws[" in program.kernels[0].source
    assert _blocks(program) > 1
    assert program.kernels[0].scratch.full_bytes == 0  # no scores of a whole head


def test_attention_folds_a_positive_scale_and_a_row_constant_mask_into_the_exponent(cache):
    """x -> x * scale + mask is monotone there: the raw max is transformed, the scaled
    scores are never stored, and the output rows (not the probabilities) are normalised."""
    shapes = ((3, 100, 8), (3, 64, 8), (3, 64, 8), (3, 100, 1), (3, 100, 8))
    q, k, v, m, y = (_t(s) for s in shapes)
    body = "ai.attention %q, %k, %v, %m {{scale = {s} : f32}} : {q} * {k} * {v} * {m}"
    sources = {}
    for scale in (0.5, -0.5):
        text = f"""
func.func @f(%q: {q}, %k: {k}, %v: {v}, %m: {m}) -> {y} {{
  %a = {body.format(s=scale, q=q, k=k, v=v, m=m)}
  return %a : {y}
}}"""
        sources[scale] = check(text, cache=cache, kind="attention").kernels[0].source
    folded, stored = sources[0.5], sources[-0.5]
    assert "m = row_max(srow) * f32(0.5) + mval" in folded
    assert "row_exp_sum_affine_inplace(srow, f32(0.5), mval, m)" in folded
    assert "srow[j] = srow[j]" not in folded  # no pass storing scaled scores
    assert "srow[j] = srow[j] * f32(-0.5) + mval" in stored
    for source in (folded, stored):
        assert "crow[j] = crow[j] * rinv[i]" in source


@pytest.mark.parametrize("reshaped", [False, True])
def test_attention_reads_a_transposed_key_without_a_copy(cache, reshaped):
    """A key given as (..., D, T) (a cache's layout) swapped into (..., T, D): the kernel
    reads the given array as B, not transposed (gemm_nn where T = 24 is whole vectors,
    8 lanes; else sgemm), no contiguous copy of the swap; its source may itself be a
    view (a reshape, made contiguous)."""
    q, kt, key, v, m, y = (
        _t(s)
        for s in (
            (2, 3, 70, 8),
            (2, 3, 8, 24),
            (2, 3, 24, 8),
            (2, 3, 24, 12),
            (70, 24),
            (2, 3, 70, 12),
        )
    )
    given, source = (_t((6, 8, 24)), "%kr") if reshaped else (kt, "%kt")
    reshape = (
        f"%kr = ai.reshape %kt {{shape = array<i64: 2, 3, 8, 24>}} : {given}" if reshaped else ""
    )
    text = f"""
func.func @f(%q: {q}, %kt: {given}, %v: {v}, %m: {m}) -> {y} {{
  {reshape}
  %k = ai.transpose {source} {{perm = array<i64: 0, 1, 3, 2>}} : {kt}
  %a = ai.attention %q, %k, %v, %m {{scale = 0.35 : f32}} : {q} * {key} * {v} * {m}
  return %a : {y}
}}"""
    program = check(text, cache=cache, kind="attention")
    source = program.kernels[0].source
    scores = "gemm_nn(r1 - r0, 24, 8," if microkernel.fits(24) else "sgemm(0, 0, r1 - r0, 24, 8,"
    assert scores in source  # q @ (D, T) as given
    assert "transpose(" not in source
    assert program.kernels[0].scratch.full_bytes == (4 * 2 * 3 * 8 * 24 if reshaped else 0)
    assert _blocks(program) > 1


def test_attention_copies_a_transposed_key_that_is_also_a_result(cache):
    q, kt, key, v, y = (_t(s) for s in ((2, 40, 8), (2, 8, 30), (2, 30, 8), (2, 30, 8), (2, 40, 8)))
    text = f"""
func.func @f(%q: {q}, %kt: {kt}, %v: {v}, %m: {_t(())}) -> ({y}, {key}) {{
  %k = ai.transpose %kt {{perm = array<i64: 0, 2, 1>}} : {kt}
  %a = ai.attention %q, %k, %v, %m {{scale = 0.5 : f32}} : {q} * {key} * {v} * {_t(())}
  return %a, %k : {y}, {key}
}}"""
    program = check(text, cache=cache, kind="attention")
    assert "sgemm(0, 1, r1 - r0, 30, 8," in program.kernels[0].source  # the copy, (T, D)


@pytest.mark.parametrize("softcap", [0.0, 1.0], ids=["plain", "softcap"])
def test_attention_masked_out_rows_are_zero_with_nan_to_zero(cache, softcap):
    """... with Gemma-2's softcap too (the scores' tanh in the kernel's score loop)."""
    q, k, v, y = _t((2, 40, 8)), _t((2, 30, 8)), _t((2, 30, 8)), _t((2, 40, 8))
    mask = np.zeros((40, 30))
    mask[3, :] = -np.inf  # a row masked out entirely: NaN, then 0
    mask[7, 2:] = -np.inf
    rows = ", ".join("[" + ", ".join("0xFF800000" if v else "0.0" for v in r) + "]" for r in mask)
    cap = f", softcap = {softcap} : f32" if softcap else ""
    text = f"""
func.func @f(%q: {q}, %k: {k}, %v: {v}) -> {y} {{
  %m = arith.constant dense<[{rows}]> : {_t((40, 30))}
  %a = ai.attention %q, %k, %v, %m {{scale = 0.5 : f32, nan_to_zero = true{cap}}} : {q} * {k} * {v} * {_t((40, 30))}
  return %a : {y}
}}"""  # noqa: E501
    program = check(text, cache=cache, fuse=True)
    assert [k.kind for k in program.kernels] == ["attention"]
    if softcap:
        assert "math.tanh(" in program.kernels[0].source
    else:
        assert "rinv" not in program.kernels[0].source  # probabilities normalised, NaN -> 0


@pytest.mark.parametrize("key_layout", ["DT", "TD"])
def test_attention_gemms_in_register_tiles(cache, key_layout):
    """T and E whole vectors of any target's tiles (16 lanes): both GEMMs of a block run in
    gemm_nn when the key comes as (D, T); a narrow (T, D) key (D = 16, rows along D) is
    transposed into the block's kbuf for gemm_nn (sgemm packed both operands on every
    call), and p @ v runs in tiles. S = 70 leaves ragged row tiles (70 = 11 x 6 + 4 in a
    block of 70 rows, fewer in smaller blocks)."""
    q, key, v, y = (_t(s) for s in ((2, 70, 16), (2, 48, 16), (2, 48, 32), (2, 70, 32)))
    if key_layout == "DT":
        kt = _t((2, 16, 48))
        head = f"%kt: {kt}"
        swap = f"%k = ai.transpose %kt {{perm = array<i64: 0, 2, 1>}} : {kt}"
    else:
        head, swap = f"%k: {key}", ""
    text = f"""
func.func @f(%q: {q}, {head}, %v: {v}, %m: {_t(())}) -> {y} {{
  {swap}
  %a = ai.attention %q, %k, %v, %m {{scale = 0.25 : f32}} : {q} * {key} * {v} * {_t(())}
  return %a : {y}
}}"""
    source = check(text, cache=cache, kind="attention").kernels[0].source
    assert "gemm_nn(r1 - r0, 32, 48, sbuf, 0, 48," in source  # p @ v
    if key_layout == "DT":
        assert "gemm_nn(r1 - r0, 48, 16," in source and "sgemm(" not in source
        assert "gemm_nn scores, softmax rows in cache, gemm_nn with v" in source
    else:
        assert "kbuf[dd * 48 + j] = in1[" in source and "sgemm(" not in source
        assert (
            "gemm_nn(r1 - r0, 48, 16, in0, " in source and ", kbuf, 0, 48, sbuf, 0, 48)" in source
        )
        assert "gemm_nn (key^T packed) scores, softmax rows in cache, gemm_nn with v" in source


@pytest.mark.parametrize("d", [16, 40])
def test_attention_reads_head_splits_through_strides(cache, d):
    """q, key and v as a (B, S, H*D) input reshaped to (B, S, H, D) and transposed to
    (B, H, S, D), as every exported transformer splits heads: the kernel reads head h of
    batch b at b*S*H*D + h*D with rows H*D apart; no copy of the three operands (odd S
    and T; D = 40 is not whole vectors: the key goes through sgemm with its row stride)."""
    b, s, t, h, e = 2, 37, 32, 3, 16
    x = lambda n, w: _t((b, n, h * w))  # noqa: E731
    split = lambda n, w: _t((b, n, h, w))  # noqa: E731
    heads = lambda n, w: _t((b, h, n, w))  # noqa: E731
    y = heads(s, e)
    text = f"""
func.func @f(%q: {x(s, d)}, %k: {x(t, d)}, %v: {x(t, e)}, %m: {_t(())}) -> {y} {{
  %q4 = ai.reshape %q {{shape = array<i64: {b}, {s}, {h}, {d}>}} : {x(s, d)}
  %qh = ai.transpose %q4 {{perm = array<i64: 0, 2, 1, 3>}} : {split(s, d)}
  %k4 = ai.reshape %k {{shape = array<i64: {b}, {t}, {h}, {d}>}} : {x(t, d)}
  %kh = ai.transpose %k4 {{perm = array<i64: 0, 2, 1, 3>}} : {split(t, d)}
  %v4 = ai.reshape %v {{shape = array<i64: {b}, {t}, {h}, {e}>}} : {x(t, e)}
  %vh = ai.transpose %v4 {{perm = array<i64: 0, 2, 1, 3>}} : {split(t, e)}
  %a = ai.attention %qh, %kh, %vh, %m {{scale = 0.3 : f32}} : {heads(s, d)} * {heads(t, d)} * {heads(t, e)} * {_t(())}
  return %a : {y}
}}"""  # noqa: E501
    kernel = check(text, cache=cache, kind="attention").kernels[0]
    source = kernel.source
    q_off = f"bi0 * {s * h * d} + bi1 * {d} + r0 * {h * d}, {h * d}"
    v_off = f"in2, bi0 * {t * h * e} + bi1 * {e}, {h * e}, out0,"
    assert q_off in source and v_off in source
    assert "ascontiguousarray" not in source and "c1_s" not in source  # no copies
    if d == 16:
        assert (
            f"kbuf[dd * {t} + j] = in1[bi0 * {t * h * d} + bi1 * {d} + j * {h * d} + dd]" in source
        )
    else:
        assert f"sgemm(0, 1, r1 - r0, {t}, {d}, in0, " in source
        assert f"in1, bi0 * {t * h * d} + bi1 * {d}, {h * d}, sbuf, 0, {t})" in source
    assert kernel.scratch.operand_bytes == 0


# ------------------------------------------------------- the Numba GEMM fallback


def test_numba_gemm_fallback(cache, monkeypatch):
    monkeypatch.setattr(cpu_blas, "BLAS", None)
    assert "sgemm_numba as sgemm" in cpu_blas.import_line()
    program = check(_conv_text(CONVS[0], "f32"), cache=cache, kind="conv")
    assert "sgemm_numba" in program.kernels[0].source
    test_matmul_transposed_operands_softmax_epilogue(cache, True, True)


def test_the_kernel_names_the_blas_it_was_built_for(cache):
    program = check(_conv_text(CONVS[1], "f32"), cache=cache, kind="conv")
    assert cpu_blas.import_line() in program.kernels[0].source
    if cpu_blas.BLAS is not None:  # numpy's wheels ship OpenBLAS
        assert cpu_blas.mode().startswith("blas-")


def test_a_per_thread_blas_setter_is_tried_before_it_is_trusted():
    """A setter that sets the process-wide count (scipy-openblas 0.3.31's
    ``openblas_set_num_threads_local``) is found out; a real per-thread one passes."""
    shared = {"n": 2}

    def set_shared(n: int) -> int:
        previous, shared["n"] = shared["n"], n
        return previous

    local = threading.local()

    def set_local(n: int) -> int:
        previous = getattr(local, "n", 2)
        local.n = n
        return previous

    assert not cpu_blas.per_thread(set_shared, lambda: shared["n"])
    assert shared["n"] == 2  # put back
    assert cpu_blas.per_thread(set_local, lambda: getattr(local, "n", 2))


def _blas_threads() -> int | None:
    if cpu_blas.BLAS is None or cpu_blas.BLAS.get_threads is None:
        return None
    return getattr(cpu_blas._LIB, cpu_blas.BLAS.get_threads)()


def test_a_launch_leaves_the_callers_blas_thread_count_alone(cache):
    """The caller's numpy keeps its BLAS threads after a kernel that calls sgemm (with the
    process-wide setter the tasks raced on it and left 1: numpy's next matmul ran on one
    thread). N = 396 is not whole vectors of gemm_nn: the blocks call sgemm."""
    before = _blas_threads()
    if before is None:
        pytest.skip("no BLAS thread count to read")
    a, b, y = _t((300, 512)), _t((512, 396)), _t((300, 396))
    text = f"""
func.func @f(%a: {a}, %b: {b}) -> {y} {{
  %m = ai.matmul %a, %b : {a} * {b}
  %o = ai.relu %m : {y}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    assert "sgemm(" in program.kernels[0].source
    assert _blas_threads() == before


def test_single_threaded_launches_from_two_threads_restore_the_count():
    """The first launch in sets 1, the last one out restores: overlapping launches from
    two threads leave the count they found."""
    before = _blas_threads()
    if before is None or cpu_blas.BLAS.threads_local:
        pytest.skip("no process-wide BLAS count to share")
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[int | None] = []

    def first() -> None:
        with cpu_blas.single_threaded():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with cpu_blas.single_threaded():
            second_in.set()
            first_out.wait(5)
            seen.append(_blas_threads())  # the first one left: still 1

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == [1] and _blas_threads() == before


def test_single_threaded_blocks_nest_in_one_thread():
    """An inner block (a launch's, inside its Program call's) neither sets nor restores."""
    before = _blas_threads()
    if before is None or cpu_blas.BLAS.threads_local:
        pytest.skip("no process-wide BLAS count to share")
    with cpu_blas.single_threaded():
        with cpu_blas.single_threaded():
            assert _blas_threads() == 1
        assert _blas_threads() == 1  # the inner block left, the outer one holds
    assert _blas_threads() == before


class _CountingLib:
    """The BLAS library with its thread-count setter's calls counted."""

    def __init__(self, lib) -> None:
        self.lib, self.sets = lib, 0

    def __getattr__(self, name: str):
        function = getattr(self.lib, name)
        if name != cpu_blas.BLAS.set_threads:
            return function

        def counted(n):
            self.sets += 1
            return function(n)

        return counted


def test_a_program_call_sets_the_blas_count_once_for_all_its_launches(cache, monkeypatch):
    """Three sgemm launches in one call: one set to 1 and one restore, not three of each."""
    before = _blas_threads()
    if before is None or cpu_blas.BLAS.threads_local:
        pytest.skip("no process-wide BLAS count to share")
    a, b, y = _t((300, 512)), _t((512, 396)), _t((300, 396))
    text = f"""
func.func @f(%a: {a}, %b: {b}, %c: {b}, %d: {b}) -> ({y}, {y}, {y}) {{
  %m = ai.matmul %a, %b : {a} * {b}
  %n = ai.matmul %a, %c : {a} * {b}
  %o = ai.matmul %a, %d : {a} * {b}
  return %m, %n, %o : {y}, {y}, {y}
}}"""
    module = parse(text)
    run_pipeline(module)
    program = Program(module, target="cpu", cache=cache)
    args = random_inputs(entry_function(module))
    program(args)  # compiled, and the placement made
    assert sum("sgemm(" in k.source for k in program.kernels) == 3
    lib = _CountingLib(cpu_blas._LIB)
    monkeypatch.setattr(cpu_blas, "_LIB", lib)
    got = program(args)
    assert lib.sets == 2 and _blas_threads() == before
    for out, ref in zip(got, run_reference(module, args), strict=True):
        assert_close(out, ref)


# ------------------------------------------------------------ scratch bound


def _launch_peak(program: Program, inputs) -> tuple[int, list[np.ndarray]]:
    """Peak bytes traced while the group's kernel runs (outputs allocated before)."""
    (launch,) = program.launches
    (fn,) = program.load()
    flat = [np.ascontiguousarray(a, np.float32).reshape(-1) for a in inputs]
    outs = [np.full(spec.shape, np.nan, np.float32) for spec in launch.kernel.outputs]
    fn(*flat, *(o.reshape(-1) for o in outs))  # compile first: the compiler allocates too
    for o in outs:
        o.fill(np.nan)
    cpu_buffers.release_workspace()  # the traced launch allocates its workspaces anew
    tracemalloc.start()
    try:
        fn(*flat, *(o.reshape(-1) for o in outs))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, outs


GROUPS = {
    "layernorm-matmul-softmax": f"""
func.func @f(%x: {_t((8192, 64))}, %g: {_t((64,))}, %be: {_t((64,))}, %w: {_t((64, 256))})
    -> {_t((8192, 256))} {{
  %n = ai.layernorm %x, %g, %be : {_t((8192, 64))} * {_t((64,))} * {_t((64,))}
  %m = ai.matmul %n, %w : {_t((8192, 64))} * {_t((64, 256))}
  %s = ai.softmax %m : {_t((8192, 256))}
  return %s : {_t((8192, 256))}
}}""",
    "conv-bias-relu": f"""
func.func @f(%x: {_t((1, 8, 384, 384))}, %w: {_t((16, 8, 3, 3))}, %b: {_t((16,))})
    -> {_t((1, 16, 384, 384))} {{
  %c = ai.conv2d %x, %w {{padding = array<i64: 1, 1>}}
    : {_t((1, 8, 384, 384))} * {_t((16, 8, 3, 3))}
  %a = ai.bias_add %c, %b : {_t((1, 16, 384, 384))} * {_t((16,))}
  %r = ai.relu %a : {_t((1, 16, 384, 384))}
  return %r : {_t((1, 16, 384, 384))}
}}""",
}


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_scratch_is_bounded_by_a_block_not_by_the_output(cache, name):
    text = GROUPS[name]
    module = parse(text)
    run_pipeline(module)
    program = Program(module, target="cpu", cache=cache)
    assert len(program.launches) == 1  # the fusion pipeline made it one group
    plan = program.kernels[0].scratch
    out_bytes = 4 * int(np.prod(program.kernels[0].outputs[0].shape))
    threads = numba.get_num_threads()
    assert plan.full_bytes == 0  # no buffer of a tensor's size
    assert plan.per_task_bytes <= cpu_matmul.WORKSPACE_BYTES
    assert plan.peak_bytes(threads) < out_bytes / 4

    inputs = random_inputs(entry_function(module), seed=3)
    peak, outs = _launch_peak(program, inputs)
    # tracemalloc sees numpy's allocations: the workspaces are all there is
    assert plan.per_task_bytes <= peak <= plan.peak_bytes(threads) + 64 * 1024
    (reference,) = run_reference(parse(text), inputs, precision="float64")
    assert_close(outs[0], reference, what=name)
