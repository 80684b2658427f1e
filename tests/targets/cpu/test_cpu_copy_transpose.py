"""A copy group that is one float32 transpose swapping two groups of axes (NCHW <->
NHWC: ConvNeXt's permutes) runs as a Numba kernel over 16 x 16 tiles with an njit entry
(``fusec.targets.cpu.copy.batched_swap``), issue #30; other copies stay numpy's.

Each numerics check runs poisoned outputs on fresh random inputs against the float64
reference (``cpu_check.check``): a transpose must reproduce every element exactly."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import check, poison

import fusec
from fusec.ir.module import entry_function
from fusec.runtime.cache import KernelCache
from fusec.targets.cpu.copy import batched_swap
from fusec.tools.runner import random_inputs

TILES = "in 16x16 tiles"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _t(shape, dtype="f32"):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _transpose_text(shape, perm, dtype="f32") -> str:
    x, y = _t(shape, dtype), _t([shape[p] for p in perm], dtype)
    return f"""
func.func @f(%x: {x}) -> {y} {{
  %t = ai.transpose %x {{perm = array<i64: {", ".join(map(str, perm))}>}} : {x}
  return %t : {y}
}}"""


@pytest.mark.parametrize(
    "shape, perm, swap",
    [
        ((2, 96, 4, 8), (0, 2, 3, 1), (2, 96, 32)),  # NCHW -> NHWC
        ((2, 4, 8, 96), (0, 3, 1, 2), (2, 32, 96)),  # NHWC -> NCHW
        ((33, 50), (1, 0), (1, 33, 50)),
        ((3, 2, 5, 7), (2, 3, 0, 1), (1, 6, 35)),  # no leading axis kept
        ((2, 3, 4, 5), (0, 2, 1, 3), None),  # the last axis stays: not a 2-D swap
        ((2, 3, 4, 5), (0, 1, 3, 2), (6, 4, 5)),
        ((2, 1, 4, 5), (0, 2, 3, 1), None),  # a swap with a unit group is a copy
        ((2, 3, 4), (2, 0, 1), (1, 6, 4)),
        ((2, 3, 4), (1, 2, 0), (1, 2, 12)),
        ((2, 3, 4), (2, 1, 0), None),
    ],
)
def test_batched_swap(shape, perm, swap):
    assert batched_swap(shape, perm) == swap


@pytest.mark.parametrize(
    "shape, perm",
    [
        ((1, 96, 32, 32), (0, 2, 3, 1)),  # ConvNeXt's first stage: whole tiles
        ((3, 37, 5, 7), (0, 2, 3, 1)),  # ragged tiles along both axes, 3 images
        pytest.param((2, 5, 7, 37), (0, 3, 1, 2), marks=pytest.mark.slow),
        pytest.param((40, 17), (1, 0), marks=pytest.mark.slow),
    ],
)
def test_transpose_copy_kernel_against_the_reference(cache, shape, perm):
    program = check(_transpose_text(shape, perm), cache=cache, kind="copy")
    (kernel,) = program.kernels
    assert TILES in kernel.source and kernel.compiled_entry is not None


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape, perm, dtype",
    [((2, 3, 4, 5), (0, 2, 1, 3), "f32"), ((1, 16, 4, 4), (0, 2, 3, 1), "f16")],
)
def test_other_copies_stay_numpy(cache, shape, perm, dtype):
    program = check(_transpose_text(shape, perm, dtype), cache=cache, kind="copy")
    (kernel,) = program.kernels
    assert TILES not in kernel.source and kernel.compiled_entry is None


def test_a_transpose_between_pointwise_groups_leaves_no_python_launch(cache):
    """relu -> NHWC -> tanh, fused by the default pipeline: every kernel has an njit
    entry, so the compiled launcher runs the whole call (no boundary)."""
    x, y = _t((1, 20, 6, 6)), _t((1, 6, 6, 20))
    text = f"""
func.func @f(%x: {x}) -> {y} {{
  %r = ai.relu %x : {x}
  %t = ai.transpose %r {{perm = array<i64: 0, 2, 3, 1>}} : {x}
  %o = ai.tanh %t : {y}
  return %o : {y}
}}"""
    compiled = fusec.compile(text, target="cpu")
    program = compiled.program
    assert any(TILES in k.source for k in compiled.kernels)
    assert program.compiled_reason is None and program.boundaries == 0
    inputs = random_inputs(entry_function(compiled.module), 0)
    (out,) = program(inputs, alloc=poison)
    want = np.tanh(np.maximum(inputs[0], 0).transpose(0, 2, 3, 1))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
