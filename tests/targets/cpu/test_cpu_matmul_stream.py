"""Matmul groups whose constant B is too large for L2 (``MatmulBlocks.streams``): blocks of
all the matrix's rows (or equal blocks of as many as fit ``PACKED_STREAM_BYTES``) against
column tiles of whole strips, in ``gemm_packed``, which prefetches the next strip while a
strip's first tiles run (``microkernel._packed_strip``).

``PACKED_CACHED_BYTES`` is lowered so that small weights take that path; shapes leave
ragged row tiles (rows not a multiple of 6, more than ``PREFETCH_TILES`` tiles a strip) and
K not a multiple of the vector width. Each case runs poisoned outputs on fresh random
inputs against the float64 reference (``cpu_check.check``). ``tests/targets/cpu/
test_cpu_microkernel.py`` runs ``gemm_packed`` alone on such shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check

from fusec.runtime.cache import KernelCache
from fusec.targets.cpu import matmul as cpu_matmul
from fusec.targets.cpu import microkernel

STRIP = microkernel.STRIP
#: 3-6 s each cold on the loaded 2-core machine: one case in the default lane.
SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def streaming(monkeypatch):
    """Every packed B streams; blocks split for two threads; no ``gemm_nn`` for K >= 8."""
    monkeypatch.setattr(cpu_matmul, "PACKED_CACHED_BYTES", 0)
    monkeypatch.setattr(cpu_matmul, "NN_MAX_NARROW", 4)
    monkeypatch.setattr(cpu_matmul, "MIN_BLOCKS", 2)


def _t(shape) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}f32>"


def _dense(array: np.ndarray) -> str:
    if array.ndim == 1:
        return "[" + ", ".join(repr(float(v)) for v in array) + "]"
    return "[" + ", ".join(_dense(row) for row in array) + "]"


def _group(m: int, k: int, n: int, prologue: bool, tail: str, transpose_b: bool = False) -> str:
    """[layernorm ->] a @ W (a constant, (N, K) given ``transpose_b``) + bias -> ``tail``."""
    rng = np.random.default_rng(m * k + n)
    w_shape = (n, k) if transpose_b else (k, n)
    w = (rng.standard_normal(w_shape) / np.sqrt(k)).astype(np.float32)
    a, v, wt, bias, y = _t((m, k)), _t((k,)), _t(w_shape), _t((n,)), _t((m, n))
    attrs = " {transpose_b = true}" if transpose_b else ""
    lines = [f"  %w = arith.constant dense<{_dense(w)}> : {wt}"]
    source = "%a"
    if prologue:
        lines.append(f"  %n = ai.layernorm %a, %g, %be : {a} * {v} * {v}")
        source = "%n"
    lines += [
        f"  %m = ai.matmul {source}, %w{attrs} : {a} * {wt}",
        f"  %c = ai.add %m, %bias : {y} * {bias}",
        f"  %r = ai.{tail} %c : {y}",
    ]
    body = "\n".join(lines)
    return f"""
func.func @f(%a: {a}, %g: {v}, %be: {v}, %bias: {bias}) -> {y} {{
{body}
  return %r : {y}
}}"""


def _described(program) -> str:
    (kernel,) = program.kernels
    assert kernel.kind == "matmul" and "gemm_packed(r1 - r0," in kernel.source
    return kernel.source


@pytest.mark.parametrize(
    ("m", "k", "strips", "prologue", "tail", "transpose_b", "blocks"),
    [
        (37, 13, 3, True, "gelu", False, "2 blocks of up to 37 rows x 128 columns"),
        pytest.param(
            29, 40, 2, False, "relu", True, "2 blocks of up to 29 rows x 64 columns", marks=SLOW
        ),
        pytest.param(
            5, 21, 2, True, "tanh", False, "2 blocks of up to 5 rows x 64 columns", marks=SLOW
        ),
    ],
)
def test_streaming_weight_all_rows_against_column_tiles(
    cache, m, k, strips, prologue, tail, transpose_b, blocks
):
    n = strips * STRIP
    program = check(_group(m, k, n, prologue, tail, transpose_b), cache=cache, fuse=True)
    assert blocks.replace("128", str(2 * STRIP)).replace("64", str(STRIP)) in _described(program)


@SLOW
def test_streaming_weight_rows_split_equally_when_the_block_outgrows_its_budget(cache, monkeypatch):
    """A and C of 100 rows exceed the budget: one-strip column tiles leave room for 60
    rows (whole ones, 34 rows: three reads of B), so two equal row blocks (not 60 + 40),
    each against the two column tiles."""
    k, n = 24, 2 * STRIP
    budget = 4 * 60 * (k + STRIP)  # 60 rows of A and of a one-strip C tile
    monkeypatch.setattr(cpu_matmul, "PACKED_STREAM_BYTES", budget)
    source = _described(check(_group(100, k, n, True, "relu"), cache=cache, fuse=True))
    assert f"in 4 blocks of up to 50 rows x {STRIP} columns" in source


@SLOW
def test_streaming_weight_whole_rows_for_a_softmax(cache):
    """A softmax epilogue needs whole rows: no column tiles, the rows split for the threads."""
    source = _described(check(_group(70, 16, 2 * STRIP, False, "softmax"), cache=cache, fuse=True))
    assert "in 2 blocks of up to 35 rows:" in source and "c0 = blk" not in source


def test_streaming_weight_column_parts_the_threads_share_evenly(monkeypatch):
    """15 strips of columns, room for all the rows against at most 5 strips: 3 parts of
    5 strips and 4 of 4 (the last 3) both read B once; on two threads 3 blocks leave one
    idle for a third of the time (ViT-B/16 b4's MLP up projection: 5 blocks, 0.98x of
    onnxruntime on two threads, 1.02x in 6), so 4 parts. The kernel's source only: the
    column tiles' numerics are the tests above."""
    import fusec

    m, k, n = 100, 16, 15 * STRIP
    monkeypatch.setattr(cpu_matmul, "PACKED_STREAM_BYTES", 4 * m * (k + 5 * STRIP))
    compiled = fusec.compile(_group(m, k, n, True, "relu"), target="cpu", executable=False)
    (kernel,) = compiled.kernels
    assert f"in 4 blocks of up to {m} rows x {4 * STRIP} columns" in kernel.source
