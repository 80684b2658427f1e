"""One-row (and few-row) matmuls with a constant weight of ragged width on the cpu
target: the classifier heads of CNNs at batch 1 (1x2048 @ 2048x1000). The weight is
packed once into ``gemm_packed`` strips ending with a window strip on its last columns
(``microkernel.pack_strips``), and the columns are split between the blocks; every
check runs poisoned outputs on random inputs against the float64 reference
(``cpu_check.check``)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check, poison
from numerics import assert_close

from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.runtime.reference import run_reference
from fusec.targets.cpu import matmul as cpu_matmul
from fusec.targets.cpu import microkernel
from fusec.tools.runner import random_inputs

STRIP = microkernel.STRIP
#: lanes of one vector on this machine (8 with AVX2, 16 with AVX-512)
W = microkernel.W


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def four_blocks_at_least(monkeypatch):
    """Block counts as on a 4-thread pool, whatever this machine's."""
    monkeypatch.setattr(cpu_matmul, "MIN_BLOCKS", 4)


def _t(shape) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}f32>"


def _dense(array: np.ndarray) -> str:
    if array.ndim == 1:
        return "[" + ", ".join(repr(float(v)) for v in array) + "]"
    return "[" + ", ".join(_dense(row) for row in array) + "]"


def _classifier(m: int, k: int, n: int, transpose_b: bool, one_d: bool) -> str:
    """sigmoid(a @ W + bias) with W an ``arith.constant`` ((N, K) given ``transpose_b``);
    ``one_d``: A is a vector of K (then M = 1)."""
    rng = np.random.default_rng(k * n + m)
    shape = (n, k) if transpose_b else (k, n)
    w = rng.standard_normal(shape).astype(np.float32)
    a = _t((k,)) if one_d else _t((m, k))
    y = _t((n,)) if one_d else _t((m, n))
    wt, bias = _t(shape), _t((n,))
    attrs = " {transpose_b = true}" if transpose_b else ""
    return f"""
func.func @f(%a: {a}, %bias: {bias}) -> {y} {{
  %w = arith.constant dense<{_dense(w)}> : {wt}
  %m = ai.matmul %a, %w{attrs} : {a} * {wt}
  %c = ai.add %m, %bias : {y} * {bias}
  %r = ai.sigmoid %c : {y}
  return %r : {y}
}}"""


@pytest.mark.parametrize(
    ("m", "k", "n", "transpose_b", "one_d"),
    [
        (1, 37, 2 * STRIP + 37, True, False),  # K off the vector width, ragged N
        (1, 53, STRIP + 5, False, True),  # a 1-D A, fewer columns than a vector past a strip
        (3, 40, 3 * STRIP - 1, True, False),  # a few rows
        (6, 19, 2 * STRIP + W, False, False),  # a whole vector past the last strip
        (16, 29, 2 * STRIP + 5, True, False),  # a throughput batch: tiles of 6, 6 and 4 rows
    ],
)
def test_constant_weight_of_ragged_width_packed_once(
    cache, monkeypatch, m, k, n, transpose_b, one_d
):
    monkeypatch.setattr(cpu_matmul, "NN_MAX_NARROW", 16)  # (K below gemm_nn's bound)
    program = check(_classifier(m, k, n, transpose_b, one_d), cache=cache, fuse=True)
    (kernel,) = program.kernels
    source = kernel.source
    assert "gemm_packed(r1 - r0," in source and "sgemm(" not in source, source
    assert "c0 = blk" in source, source  # the columns split between the blocks
    # the layout named in the source (the kernel cache's key): kernels cached with the
    # zero-padded last strip of b7dc5da must not be reused
    assert "B's last strip: a window on its last columns" in source, source
    ((index, layout),) = kernel.prepared_inputs
    assert layout == ("strips_t" if transpose_b else "strips")
    weight = program.launches[0].operands[index]
    packed = program.prepared_constants[weight, layout]  # the last strip a window
    assert np.asarray(packed).size == k * STRIP * -(-n // STRIP)
    fn = entry_function(program.function.parent.parent)
    for seed in (3, 4):
        inputs = random_inputs(fn, seed)
        (out,) = program(inputs, alloc=poison)
        (ref,) = run_reference(program.function.parent.parent, inputs, precision="float64")
        assert_close(out, ref)


def test_streaming_weight_split_by_columns_over_the_threads(cache, monkeypatch):
    """A weight taken to stream from memory (PACKED_CACHED_BYTES lowered): one row,
    column tiles of whole strips, the last ragged (``MIN_BLOCKS`` 4, so 4 parts tried)."""
    monkeypatch.setattr(cpu_matmul, "NN_MAX_NARROW", 16)
    monkeypatch.setattr(cpu_matmul, "PACKED_CACHED_BYTES", 1 << 12)
    k, n = 70, 5 * STRIP + 13
    program = check(_classifier(1, k, n, True, False), cache=cache, fuse=True)
    source = program.kernels[0].source
    assert "gemm_packed(r1 - r0," in source and "c0 = blk" in source, source
    # 4 parts of 84 columns round up to whole strips: 3 tiles of 128, 128 and 77
    assert f"3 blocks of up to 1 rows x {2 * STRIP} columns" in source, source


def test_many_rows_of_ragged_width_stay_in_sgemm(cache, monkeypatch):
    """Past GEMV_ROWS rows a ragged constant weight is not packed (measured up to 16)."""
    monkeypatch.setattr(cpu_matmul, "NN_MAX_NARROW", 16)
    text = _classifier(cpu_matmul.GEMV_ROWS + 1, 24, STRIP + 3, True, False)
    source = check(text, cache=cache, fuse=True).kernels[0].source
    assert "sgemm(" in source and "gemm_packed" not in source, source
