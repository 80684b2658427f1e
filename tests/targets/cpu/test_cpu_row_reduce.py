"""The cpu row-reduce template's fast paths: row views, per-row loads, vectorised helpers.

Numerics are checked against the float64 reference on NaN-poisoned outputs;
vectorisation is checked on the LLVM IR Numba produced for the generated kernels.
"""

from __future__ import annotations

import importlib.util
import math
import re
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
from lanes import sampled
from numpy import float32 as f32

from fusec.codegen.expr import helper_source
from fusec.runtime.cache import KernelCache
from fusec.runtime.launch import SOURCE_NAME
from fusec.runtime.numba_cache import cached_njit
from fusec.targets.cpu.common import HELPER_DECORATOR
from fusec.targets.cpu.row_helpers import ROW_HELPERS

_spec = importlib.util.spec_from_file_location(
    "cpu_check", Path(__file__).parents[2] / "cpu_check.py"
)
cpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_check)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _t(shape) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def _helpers() -> dict:
    # outside a kernel cache's ``loading`` block, cached_njit compiles without a disk cache
    ns = {"math": math, "numba": numba, "np": np, "f32": f32, "cached_njit": cached_njit}
    exec(helper_source(["exp_nonpos_f32"], HELPER_DECORATOR), ns)  # noqa: S102 - row_exp_sum's
    for source in ROW_HELPERS.values():
        exec(f"{HELPER_DECORATOR}\n{source}", ns)  # noqa: S102 - the template's own source
    return ns


HELPERS = _helpers()


# -------------------------------------------------------------- row helpers


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_row_max_matches_numpy(n):
    rng = np.random.default_rng(n)
    for scale in (1e-30, 1.0, 1e30):
        row = (rng.standard_normal(n) * scale).astype(np.float32)
        assert HELPERS["row_max"](row) == row.max()
        assert HELPERS["row_max"](-np.abs(row)) == (-np.abs(row)).max()


def test_row_max_edges():
    row_max = HELPERS["row_max"]
    assert row_max(np.full(9, -np.inf, np.float32)) == -np.inf
    assert row_max(np.array([-np.inf, np.inf, 1.0], np.float32)) == np.inf
    assert row_max(np.array([-3.0, -1e-45, -2.0], np.float32)) == np.float32(-1e-45)
    assert row_max(np.array([-1e-45, 0.0, -0.0], np.float32)) == 0.0
    assert np.isnan(row_max(np.array([1.0, np.nan, 2.0], np.float32)))


def test_row_sums_are_float64_accurate_under_cancellation():
    # rows far from zero: a square expanded into x*x - 2*x*mean + mean*mean would lose
    # every digit here; the reassociated float64 sums must stay at float64 accuracy
    rng = np.random.default_rng(3)
    row = (1e4 + rng.standard_normal(1001)).astype(np.float32)
    total = math.fsum(float(v) for v in row)
    assert abs(HELPERS["row_sum"](row) - total) <= 1e-12 * abs(total)
    mean = total / row.size
    dev = math.fsum((float(v) - mean) ** 2 for v in row)
    assert abs(HELPERS["row_sq_dev"](row, mean) - dev) <= 1e-9 * dev
    assert math.isnan(HELPERS["row_sum"](np.array([1.0, np.nan], np.float32)))
    assert HELPERS["row_sum"](np.array([1.0, np.inf], np.float32)) == math.inf


@pytest.mark.parametrize("n", [1, 15, 1024, 1025, 5000, 100_000])
def test_row_exp_sum_stores_the_exponentials_and_sums_them(n):
    """One loop: dst = exp(src - m) (exp_nonpos_f32's values), their sum within float32
    lanes' rounding (< 1e-6 relative) at every length, chunks of 1024 and a ragged
    last one included; the in-place form gives the same values."""
    rng = np.random.default_rng(n)
    src = (rng.standard_normal(n) * 8).astype(np.float32)
    m = src.max()
    dst = np.full(n, np.nan, np.float32)  # poisoned
    total = HELPERS["row_exp_sum"](src, m, dst)
    want = np.exp((src - m).astype(np.float64))  # of the float32 difference, as computed
    assert np.allclose(dst, want, rtol=3e-7, atol=1e-38)  # exp_nonpos_f32: < 2 ulp
    assert abs(total - math.fsum(map(float, dst))) <= 1e-6 * total
    buf = src.copy()
    assert HELPERS["row_exp_sum_inplace"](buf, m) == total
    assert np.array_equal(buf, dst)


def test_row_exp_sum_edges():
    row_exp_sum = HELPERS["row_exp_sum"]
    src = np.array([0.0, -np.inf, -1.0, -200.0], np.float32)
    dst = np.full(4, np.nan, np.float32)
    total = row_exp_sum(src, f32(0.0), dst)
    assert list(dst[[0, 1, 3]]) == [1.0, 0.0, 0.0]  # -inf and deep underflow: exactly 0
    assert total == f32(1.0) + dst[2]  # added in float32
    for bad in (np.nan, -np.nan):
        src = np.linspace(-3, 0, 2000).astype(np.float32)
        src[1500] = bad  # a NaN in the second chunk: the sum is NaN
        assert math.isnan(row_exp_sum(src, f32(0.0), np.empty_like(src)))
    src = np.full(5, -np.inf, np.float32)  # x - max is NaN when max = -inf: numpy's NaN
    assert math.isnan(row_exp_sum(src, f32(-np.inf), np.empty_like(src)))


def _vector_widths(llvm: str) -> set[int]:
    return {int(w) for w in re.findall(r"<(\d+) x (?:float|double|i32)>", llvm)}


@pytest.mark.parametrize(
    "name",
    [
        "row_max",
        "row_scale_max",
        "row_sum_f64",
        "row_sq_dev_f64",
        "row_exp_sum_f32",
        "row_exp_sum_inplace_f32",
        "row_exp_sum_affine_inplace_f32",
    ],
)
def test_row_helpers_vectorise(name):
    fn = HELPERS[name]
    row = np.linspace(-1, 1, 256, dtype=np.float32)
    args = {
        "row_sq_dev_f64": (row, 0.5),
        "row_exp_sum_f32": (row, f32(1.0), np.empty_like(row)),
        "row_exp_sum_inplace_f32": (row.copy(), f32(1.0)),
        "row_exp_sum_affine_inplace_f32": (row.copy(), f32(0.5), f32(0.0), f32(1.0)),
        "row_scale_max": (row.copy(), f32(0.5), row),
    }.get(name, (row,))
    fn(*args)
    (llvm,) = fn.inspect_llvm().values()
    assert max(_vector_widths(llvm), default=0) >= 4, f"{name} was not vectorised"
    if name.startswith("row_exp_sum"):  # the exponential vectorised with the sum, no libm
        assert "<16 x float>" in llvm or "<8 x float>" in llvm
        assert not re.search(r"call [^\n]*(@expf|@llvm\.exp\.)", llvm)
    if name in ("row_max", "row_scale_max"):  # the max's keys in 32-bit lanes, not widened
        assert re.search(r"<\d+ x i32>", llvm)
        assert not re.search(r"<\d+ x i64>", llvm), f"{name} widened its int32 keys to int64"


# ------------------------------------------------------------ whole kernels


def _stage_llvm(program, cache: KernelCache) -> str:
    """The LLVM IR of the (single) generated row-reduce kernel, compiled in this process."""
    (kernel,) = program.kernels
    module = cache.load_module(kernel.source)
    fn = getattr(module, f"{SOURCE_NAME}_row_reduce")  # sources name kernels alike
    return "\n".join(fn.inspect_llvm().values())


@pytest.mark.parametrize("op", ["softmax", "layernorm"])
def test_last_axis_kernels_vectorise_without_gathers(cache, op):
    x, v = _t((64, 256)), _t((256,))
    reduce = (
        f"ai.layernorm %0, %g, %b : {x} * {v} * {v}"
        if op == "layernorm"
        else f"ai.softmax %0 : {x}"
    )
    text = f"""
func.func @f(%x: {x}, %r: {x}, %g: {v}, %b: {v}) -> {x} {{
  %0 = ai.add %x, %r : {x} * {x}
  %1 = {reduce}
  %2 = ai.mul %1, %r : {x} * {x}
  return %2 : {x}
}}"""
    program = cpu_check.check(text, cache=cache, kind="row_reduce")
    source = program.kernels[0].source
    assert "in1_row = in1[row * 256:row * 256 + 256]" in source
    assert "out0_row[k] = " in source
    llvm = _stage_llvm(program, cache)
    assert max(_vector_widths(llvm), default=0) >= 4
    assert "masked.gather" not in llvm and "masked.scatter" not in llvm
    assert not re.search(r"call [^\n]*(@expf|@llvm\.exp\.)", llvm)


@pytest.mark.parametrize("op", ["softmax", "layernorm"])
def test_every_broadcast_shape_through_row_views(cache, op):
    # over a 3-D space (a, b, n): full rows, rows shared along a dim, one row, per-row
    # scalars of two shapes and a scalar; a prologue value is also a result
    a, b, n = 3, 5, 40
    x, ab1, a1n, n1, s1 = _t((a, b, n)), _t((a, b, 1)), _t((a, 1, n)), _t((n,)), _t((b, 1))
    reduce = (
        f"ai.layernorm %3, %g, %v : {x} * {n1} * {n1}"
        if op == "layernorm"
        else f"ai.softmax %3 : {x}"
    )
    text = f"""
func.func @f(%x: {x}, %p: {ab1}, %q: {a1n}, %g: {n1}, %v: {n1}, %s: {s1}) -> ({x}, {x}) {{
  %0 = ai.mul %x, %p : {x} * {ab1}
  %1 = ai.add %0, %q : {x} * {a1n}
  %2 = ai.sub %1, %s : {x} * {s1}
  %3 = ai.add %2, %g : {x} * {n1}
  %4 = {reduce}
  %5 = ai.mul %4, %q : {x} * {a1n}
  %6 = ai.add %5, %p : {x} * {ab1}
  %7 = ai.sigmoid %6 : {x}
  return %7, %1 : {x}, {x}
}}"""
    program = cpu_check.check(text, cache=cache, kind="row_reduce")
    source = program.kernels[0].source
    assert "in1_at = in1[i0 * 5 + i1]" in source  # (a, b, 1): one load per row
    assert f"in2_row = in2[i0 * {n}:i0 * {n} + {n}]" in source  # (a, 1, n): row of dim 0
    assert "in5_at = in5[i1]" in source


@pytest.mark.parametrize("axis", [0, 1])
def test_strided_rows_with_per_row_operands(cache, axis):
    x, c = _t((6, 7, 33)), _t((7, 1))
    text = f"""
func.func @f(%x: {x}, %c: {c}) -> {x} {{
  %0 = ai.mul %x, %c : {x} * {c}
  %1 = ai.softmax %0 {{axis = {axis}}} : {x}
  %2 = ai.add %1, %c : {x} * {c}
  return %2 : {x}
}}"""
    cpu_check.check(text, cache=cache, kind="row_reduce")


def _softmax_program(cache: KernelCache, shape: tuple[int, ...]):
    t = _t(shape)
    text = f"""
func.func @f(%x: {t}) -> {t} {{
  %0 = ai.softmax %x : {t}
  return %0 : {t}
}}"""
    return cpu_check.check(text, cache=cache, kind="row_reduce")


def _softmax_float64(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def test_softmax_rows_with_inf_and_nan_like_numpy(cache):
    program = _softmax_program(cache, (4, 50))
    # no epilogue: the exponentials go straight into the output row, scaled in place
    assert "row_exp_sum(xrow, m, out0_row)" in program.kernels[0].source
    x = np.random.default_rng(0).standard_normal((4, 50)).astype(np.float32) * 30
    x[0, 3] = -np.inf  # exp -> 0, the rest unaffected
    x[1, :] = -np.inf  # all -inf: NaN, as numpy's
    x[2, 7] = np.nan  # NaN anywhere: the whole row NaN
    x[3, 9] = -np.nan
    (out,) = program([x], alloc=cpu_check.poison)
    ref = _softmax_float64(x)
    assert np.isnan(out[1:]).all() and np.isnan(ref[1:]).all()
    assert np.isfinite(out[0]).all() and out[0, 3] == 0.0
    assert np.linalg.norm(out[0] - ref[0]) / np.linalg.norm(ref[0]) < 1e-6


def test_row_scale_max_scales_one_row_and_takes_the_next_rows_max():
    rng = np.random.default_rng(5)
    for nxt in (
        rng.standard_normal(300).astype(np.float32),
        np.full(300, -np.inf, np.float32),
        np.array([1.0, np.nan] * 150, np.float32),
    ):
        dst = rng.standard_normal(300).astype(np.float32)
        want = dst * f32(0.37)
        got = HELPERS["row_scale_max"](dst, f32(0.37), nxt)
        assert np.array_equal(dst, want)
        assert np.array_equal(got, HELPERS["row_max"](nxt), equal_nan=True)


def test_softmax_rows_take_the_next_rows_max_while_scaling(cache):
    """1001 rows: 16 chunks of 63 rows (the last one of 56), one per range, taken by the
    tasks from the ranges' counters: each row after a chunk's first gets its max from
    the loop that scaled the row before; -inf and NaN rows inside a chunk, at its end
    and at its start stay as numpy's."""
    program = _softmax_program(cache, (1001, 50))
    source = program.kernels[0].source
    assert "m = row_scale_max(out0_row, inv, in0[(row + 1) * 50:(row + 2) * 50])" in source
    assert "counters = np.empty(16, dtype=np.int64)" in source
    assert "np.zeros(" not in source  # see test_np_zeros_is_a_parallel_loop_of_its_own
    assert "row_end = min(row_begin + 63, 1001)" in source
    x = np.random.default_rng(1).standard_normal((1001, 50)).astype(np.float32) * 30
    x[1, :] = -np.inf  # the second row of a chunk: NaN, as numpy's
    x[6, 11] = np.nan
    x[62, 0] = -np.inf  # a chunk's last row
    x[63, 5] = np.nan  # the next chunk's first row
    x[1000, 3] = np.nan  # the last row
    (out,) = program([x], alloc=cpu_check.poison)
    ref = _softmax_float64(x)
    nan_rows = [1, 6, 63, 1000]
    assert np.isnan(out[nan_rows]).all() and np.isnan(ref[nan_rows]).all()
    finite = np.setdiff1d(np.arange(1001), nan_rows)
    assert np.isfinite(out[finite]).all() and out[62, 0] == 0.0
    assert np.linalg.norm(out[finite] - ref[finite]) / np.linalg.norm(ref[finite]) < 1e-6


@pytest.mark.parametrize("op", ["softmax", "layernorm"])
def test_row_kernels_compile_cacheable(tmp_path, op):
    """Nothing in a row kernel stops Numba's (sealed) disk cache: no dynamic globals
    (``numba.get_num_threads()`` inside the kernel was one: its ctypes pointer)."""
    x, v = _t((300, 64)), _t((64,))
    reduce = (
        f"ai.softmax %x : {x}" if op == "softmax" else f"ai.layernorm %x, %g, %b : {x} * {v} * {v}"
    )
    text = f"""
func.func @f(%x: {x}, %g: {v}, %b: {v}) -> {x} {{
  %0 = {reduce}
  return %0 : {x}
}}"""
    with warnings.catch_warnings():
        warnings.simplefilter("error", numba.NumbaWarning)
        program = cpu_check.check(text, cache=KernelCache(tmp_path), kind="row_reduce")
    assert "next_block(counters[home:home + 1])" in program.kernels[0].source


#: Each row count compiles a program of its own (seconds on a cold cache): the default
#: lane runs one row, a short last chunk and empty ranges; the slow lane the others.
ROW_COUNTS = sampled(
    [1, 15, 16, 17, 255, 1000, 4099, 30000], lambda _i, rows: rows in (1, 17, 30000)
)


@pytest.mark.parametrize("rows", ROW_COUNTS)
def test_row_chunks_cover_every_row_once(cache, rows):
    """Every row is written once whatever the chunking: a short last chunk, fewer rows
    than chunks, ranges left empty (30000 rows: 19 chunks of 1638 in 16 ranges of 2).
    The poisoned output has no NaN left and matches numpy."""
    program = _softmax_program(cache, (rows, 40))
    x = np.random.default_rng(rows).standard_normal((rows, 40)).astype(np.float32)
    (out,) = program([x], alloc=cpu_check.poison)
    ref = _softmax_float64(x)
    assert np.isfinite(out).all()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6


def test_np_zeros_is_a_parallel_loop_of_its_own():
    """Why the row kernels zero their chunk counters in a plain loop: in a
    ``parallel=True`` function Numba turns ``np.zeros`` into a parfor, a parallel region
    of its own, so the pool woke twice a call (softmax 4096x1024 on 2 threads: the first
    task started ~130 us after the kernel's entry after a 20 ms pause, ~36 us without)."""

    def parfors(fn) -> int:
        fn(np.zeros(4))
        (signature,) = fn.signatures
        return len(fn.overloads[signature].metadata["parfor_diagnostics"].initial_parfors)

    @numba.njit(parallel=True)
    def zeros(a):
        c = np.zeros(16, dtype=np.int64)
        for t in numba.prange(4):
            a[t] += c[t]

    @numba.njit(parallel=True)
    def loop(a):
        c = np.empty(16, dtype=np.int64)
        for i in range(16):
            c[i] = 0
        for t in numba.prange(4):
            a[t] += c[t]

    assert (parfors(zeros), parfors(loop)) == (2, 1)


def test_two_reductions_in_one_group_are_a_located_error() -> None:
    """The cpu row template takes one layernorm, rms_norm or softmax a group (the check
    and its message are codegen.expr.the_row_reduction, shared with the cuda target)."""
    import fusec
    from fusec.codegen.expr import CodegenError

    x = "tensor<4x8xf32>"
    text = f"""
func.func @f(%x: {x}) -> {x} {{
  %r = ai.fused "row_reduce" (%x) : ({x}) -> {x} {{
  ^bb0(%a: {x}):
    %s = ai.softmax %a : {x}
    %t = ai.softmax %s : {x}
    ai.yield %t : {x}
  }}
  return %r : {x}
}}
"""
    with pytest.raises(CodegenError, match="exactly one layernorm, rms_norm or softmax, has 2"):
        fusec.compile(text, target="cpu", pipeline="infer-shapes", executable=False)
