"""A compiled cpu program of serial, BLAS-free kernels runs them without the thread
placement and the BLAS thread count (``fusec.targets.cpu.program.bare_program``, issue 30).

After a kernel that streams its weights every piece of Python around it runs with cold
caches; for a one-kernel Linear(2048, 1000) the two scopes and ``affinity.run`` were ~50
us of a ~340 us call. Checked here: which programs are bare, that a bare call enters
neither scope (both made to fail), and its results (poisoned outputs, fresh inputs, the
float64 reference). Counts and facts, not times."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_check import poison
from numerics import assert_close

import fusec
from fusec.targets.cpu import affinity, blas
from fusec.targets.cpu.program import bare_program

#: A matmul of one row by a constant of ragged width: one serial blocked kernel whose GEMM
#: is gemm_packed (no BLAS call), as a classifier's.
LINEAR = """
func.func @linear(%x: tensor<1x256xf32>, %b: tensor<200xf32>) -> tensor<1x200xf32> {{
  %w = arith.constant dense<{w}> : tensor<256x200xf32>
  %y = ai.matmul %x, %w : tensor<1x256xf32> * tensor<256x200xf32>
  %z = ai.bias_add %y, %b : tensor<1x200xf32> * tensor<200xf32>
  return %z : tensor<1x200xf32>
}}
"""

#: A pointwise kernel large enough to run in parallel.
POINTWISE = """
func.func @pw(%x: tensor<262144xf32>, %y: tensor<262144xf32>) -> tensor<262144xf32> {
  %a = ai.add %x, %y : tensor<262144xf32> * tensor<262144xf32>
  return %a : tensor<262144xf32>
}
"""


def _linear() -> str:
    w = np.random.default_rng(7).standard_normal((256, 200)).astype(np.float32)
    return LINEAR.format(w='"0x' + w.tobytes().hex().upper() + '"')


def _compiled(text: str):
    compiled = fusec.compile(text, target="cpu")
    program = compiled.program
    program._build()
    return compiled, program


@pytest.mark.slow  # compiles a blocked matmul kernel: ~7 s on 2 cores
def test_a_serial_blas_free_program_is_bare_and_enters_no_scope(monkeypatch):
    compiled, program = _compiled(_linear())
    assert program._bare and bare_program(program, program.plan)
    source = program.kernels[0].source
    assert "parallel=False" in source and "gemm_packed(" in source

    def refuse(*args, **kwargs):
        raise AssertionError("a bare program entered a scope")

    monkeypatch.setattr(affinity, "run", refuse)
    monkeypatch.setattr(affinity, "Scope", refuse)
    monkeypatch.setattr(blas, "single_threaded", refuse)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    b = rng.standard_normal(200).astype(np.float32)
    (got,) = program([x, b], alloc=poison)
    want = fusec.reference(_linear())(x, b)
    assert_close(got, want)
    assert_close(compiled(x, b), want)


@pytest.mark.parametrize("threads", [2])
def test_a_parallel_program_is_not_bare(threads, monkeypatch):
    monkeypatch.setattr("fusec.targets.cpu.tasks.num_threads", lambda: threads)
    _, program = _compiled(POINTWISE)
    if "parallel=True" not in program.kernels[0].source:
        pytest.skip("the pointwise kernel is serial with this thread count")
    assert not program._bare


def test_a_program_calling_the_blas_is_not_bare():
    text = """
func.func @mm(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %c = ai.matmul %a, %b : tensor<512x512xf32> * tensor<512x512xf32>
  return %c : tensor<512x512xf32>
}
"""
    _, program = _compiled(text)
    sources = "\n".join(k.source for k in program.kernels)
    if "sgemm(" not in sources:
        pytest.skip("this matmul runs in gemm_nn here, no BLAS call")
    assert not program._bare
