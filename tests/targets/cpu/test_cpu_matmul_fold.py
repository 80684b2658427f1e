"""A batched matmul whose B is one 2-D matrix shared by the batch runs as one product of
all of A's rows (``MatmulBlocks``): ConvNeXt's Linear layers on channels-last
activations, (1, H, W, C) @ (C, 4C), ran as H products of W rows, each reading all of B
(issue #30: ConvNeXt-T at 128x128, batch 1, one thread, 72 -> 37 ms).

Each numerics check runs poisoned outputs on fresh random inputs against the float64
reference (``cpu_check.check``)."""

from __future__ import annotations

import re

import pytest
from cpu_check import check

from fusec.runtime.cache import KernelCache
from fusec.targets.cpu import matmul as cpu_matmul

SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def four_blocks_at_least(monkeypatch):
    """Block counts as on a 4-thread pool: row blocks that cross the batch's matrices."""
    monkeypatch.setattr(cpu_matmul, "MIN_BLOCKS", 4)


def _t(shape, dtype="f32"):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _ln_matmul_gelu(a_shape, b_shape, attrs: str = "") -> str:
    """gelu(layernorm(a) @ b + bias), the bias along the result's last axis."""
    c, n = a_shape[-1], b_shape[-2] if "transpose_b" in attrs else b_shape[-1]
    a, b, g, bias = _t(a_shape), _t(b_shape), _t((c,)), _t((n,))
    y = _t((*a_shape[:-1], n))
    axis = len(a_shape) - 1
    return f"""
func.func @f(%a: {a}, %g: {g}, %be: {g}, %b: {b}, %bias: {bias}) -> {y} {{
  %n = ai.layernorm %a, %g, %be : {a} * {g} * {g}
  %m = ai.matmul %n, %b{attrs} : {a} * {b}
  %c = ai.bias_add %m, %bias {{axis = {axis}}} : {y} * {bias}
  %o = ai.gelu %c : {y}
  return %o : {y}
}}"""


@pytest.mark.parametrize(
    "a_shape, b_shape, attrs, rows",
    [
        ((1, 4, 4, 96), (96, 64), "", 16),  # ConvNeXt's stage 4 at 128x128: gemm_nn
        ((2, 5, 7, 24), (24, 40), "", 70),  # row blocks cross the matrices (7 rows each)
        pytest.param((3, 9, 40), (200, 40), " {transpose_b = true}", 27, marks=SLOW),  # sgemm
        pytest.param((1, 8, 8, 128), (128, 256), "", 64, marks=SLOW),  # wider: sgemm
    ],
)
def test_shared_b_batched_matmul_is_one_product_of_all_rows(cache, a_shape, b_shape, attrs, rows):
    program = check(_ln_matmul_gelu(a_shape, b_shape, attrs), cache=cache, kind="matmul")
    source = program.kernels[0].source
    k = a_shape[-1]
    n = b_shape[-2] if attrs else b_shape[-1]
    assert re.search(rf"# matmul \({rows}x{k} @ {k}x{n}\) in \d+ blocks", source), source


@pytest.mark.parametrize(
    "a_shape, b_shape, attrs, batch",
    [
        ((2, 6, 16), (2, 16, 24), "", "2"),  # B batched too: a product per matrix
        ((2, 16, 6), (16, 24), " {transpose_a = true}", "2"),  # A^T: its rows are columns
    ],
)
def test_batched_matmul_not_folded(cache, a_shape, b_shape, attrs, batch):
    ta = "transpose_a" in attrs
    m = a_shape[-1] if ta else a_shape[-2]
    k = a_shape[-2] if ta else a_shape[-1]
    n = b_shape[-1]
    a, b, y = _t(a_shape), _t(b_shape), _t((a_shape[0], m, n))
    text = f"""
func.func @f(%a: {a}, %b: {b}) -> {y} {{
  %m = ai.matmul %a, %b{attrs} : {a} * {b}
  %o = ai.tanh %m : {y}
  return %o : {y}
}}"""
    program = check(text, cache=cache, kind="matmul")
    source = program.kernels[0].source
    assert re.search(rf"# matmul {batch} x \({m}x{k} @ {k}x{n}\)", source), source
