"""Layout chains in a cpu kernel's compiled entry (``fusec.targets.cpu.entry.view_lines``).

A chain of reshapes, transposes and slices is composed (``_View``: dims of (size,
stride) digits over a flat array) and each result a kernel reads is copied once from the
chain's source. Checked: random chains against numpy (the generated copy loops run as
Python), and PyTorch MultiheadAttention's sequence-first head split at batch 2 (ViT's
layout) through a compiled program, poisoned outputs against the float64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import poison
from numerics import assert_close

import fusec
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference
from fusec.targets.cpu.entry import _View
from fusec.targets.cpu.program import CpuProgram
from fusec.tools import runner


def _copied(view: _View, source: np.ndarray, size: int) -> np.ndarray:
    """The generated copy loops of ``view`` run as Python over ``source``."""
    space = {"src": source, "dst": np.full(size, np.nan)}
    exec("\n".join(view.copy_lines("dst", "t_")), space)  # noqa: S102 - our own loops
    return space["dst"]


def _random_step(rng, a: np.ndarray, view: _View) -> tuple[np.ndarray, _View | None]:
    kind = rng.integers(0, 3)
    if kind == 0:
        perm = [int(p) for p in rng.permutation(a.ndim)]
        return a.transpose(perm), view.transposed(perm)
    if kind == 1:
        items, index = [], []
        for n in a.shape:
            step = int(rng.choice([1, 1, 2, -1]))
            start = int(rng.integers(0, n))
            index.append(slice(start, None, step))
            items.append((start, step))
        b = a[tuple(index)]
        return b, view.sliced(items, b.shape)
    factors, left = [], a.size
    for p in (2, 3, 5, 4):
        while left % p == 0 and rng.random() < 0.5:
            factors.append(p)
            left //= p
    factors += [left] if left > 1 else []
    rng.shuffle(factors)
    if rng.random() < 0.3:
        factors.insert(int(rng.integers(0, len(factors) + 1)), 1)
    shape = tuple(factors) or (1,)
    return a.reshape(shape), view.reshaped(shape)


def test_composed_views_copy_what_numpy_views_hold():
    """Random chains of up to five ops from an offset into a flat array: every view the
    digits express copies exactly numpy's elements in C order; ``whole`` only for the
    source itself. Some chains are not expressible (None: the entry copies there)."""
    rng = np.random.default_rng(7)
    checked = unexpressed = 0
    for _ in range(600):
        shape = tuple(int(n) for n in rng.integers(1, 6, rng.integers(1, 5)))
        size = int(np.prod(shape))
        source = np.arange(size + 5, dtype=np.float64)
        a = source[3 : 3 + size].reshape(shape)
        view: _View | None = _View.contiguous("src", shape)
        view.offset = 3
        for _ in range(rng.integers(1, 6)):
            a, view = _random_step(rng, a, view)
            if view is None:
                break
        if view is None:
            unexpressed += 1
            continue
        np.testing.assert_array_equal(_copied(view, source, a.size), a.reshape(-1))
        checked += 1
        whole = _View.contiguous("src", a.shape)
        assert whole.whole() and whole.reshaped((a.size,)).whole()
        assert not view.whole()  # offset 3: never the flat array itself
    assert checked > 400 and unexpressed > 0


_SEQ, _B, _H, _D = 5, 2, 2, 16
_X = f"tensor<{_SEQ}x{_B}x{3 * _H * _D}xf32>"
_P = f"tensor<{_B}x{_H}x{_SEQ}x{_D}xf32>"


def _head(name: str, at: int) -> str:
    """q, k or v (``at``: 0, 1, 2) of the sequence-first packed projection, as
    PyTorch's MultiheadAttention exports it (ViT-B/16 at batch > 1)."""
    hd = _H * _D
    return f"""
  %{name}s = ai.slice %r2 {{offsets = array<i64: {at}, 0, 0, 0>, sizes = array<i64: 1, {_SEQ}, {_B}, {hd}>, strides = array<i64: 1, 1, 1, 1>}} : tensor<3x{_SEQ}x{_B}x{hd}xf32>
  %{name}r = ai.reshape %{name}s {{shape = array<i64: {_SEQ}, {_B * _H}, {_D}>}} : tensor<1x{_SEQ}x{_B}x{hd}xf32>
  %{name}t = ai.transpose %{name}r {{perm = array<i64: 1, 0, 2>}} : tensor<{_SEQ}x{_B * _H}x{_D}xf32>
  %{name} = ai.reshape %{name}t {{shape = array<i64: {_B}, {_H}, {_SEQ}, {_D}>}} : tensor<{_B * _H}x{_SEQ}x{_D}xf32>"""  # noqa: E501


ATTENTION = f"""
func.func @mha(%x: {_X}) -> {_P} {{
  %r = ai.reshape %x {{shape = array<i64: 1, {_SEQ}, {_B}, 3, {_H * _D}>}} : {_X}
  %t = ai.transpose %r {{perm = array<i64: 3, 1, 2, 0, 4>}} : tensor<1x{_SEQ}x{_B}x3x{_H * _D}xf32>
  %r2 = ai.reshape %t {{shape = array<i64: 3, {_SEQ}, {_B}, {_H * _D}>}} : tensor<3x{_SEQ}x{_B}x1x{_H * _D}xf32>
  {_head("q", 0)}
  {_head("k", 1)}
  {_head("v", 2)}
  %s = ai.matmul %q, %k {{transpose_b = true}} : {_P} * {_P}
  %scale = arith.constant dense<0.25> : tensor<f32>
  %m = ai.mul %s, %scale : tensor<{_B}x{_H}x{_SEQ}x{_SEQ}xf32> * tensor<f32>
  %p = ai.softmax %m : tensor<{_B}x{_H}x{_SEQ}x{_SEQ}xf32>
  %o = ai.matmul %p, %v : tensor<{_B}x{_H}x{_SEQ}x{_SEQ}xf32> * {_P}
  return %o : {_P}
}}
"""  # noqa: E501


@pytest.mark.slow  # 3-10 s to compile on the 2-core machine
def test_sequence_first_head_split_copies_each_operand_once():
    compiled = fusec.compile(ATTENTION, target="cpu")
    program = compiled.program
    assert isinstance(program, CpuProgram) and program.compiled_reason is None
    (kernel,) = [k for k in compiled.kernels if "def entry(" in k.source]
    entry = kernel.source[kernel.source.index("def entry(") :]
    assert entry.count("= scratch[") - entry.count("ws = scratch[") == 3  # q, k and v
    for seed in (1, 2):
        inputs = runner.random_inputs(entry_function(compiled.module), seed)
        (got,) = program(inputs, alloc=poison)
        (want,) = run_reference(compiled.module, inputs, precision="float64", rounding="groups")
        assert_close(got, want)
