"""``exp_nonpos_f32``, the softmax's exponential (x - max <= 0), against float64.

The bound: under 2 ulp on [-86.5, 0] (tools/exp_nonpos_exhaustive.py checks
every float32 there; benchmarks/results/cpu-notes.md has its figures), 0 below
-86.5 (where e ** x < 3e-38), NaN in -> NaN out, and a loop of it vectorised.
"""

from __future__ import annotations

import math
import re

import numba
import numpy as np
from numpy import float32 as f32

from fusec.codegen.expr import helper_source
from tests.targets.cpu.test_cpu_fast_exp import ulp_errors

FLUSH_BELOW = f32(-86.5)


def _loop():
    ns = {"math": math, "numba": numba, "np": np, "f32": f32}
    exec(  # noqa: S102 - the generator's own helper source
        helper_source(["exp_nonpos_f32"], '@numba.njit(fastmath=False, error_model="numpy")'), ns
    )
    exp = ns["exp_nonpos_f32"]

    @numba.njit(fastmath=False, error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = exp(x[i])

    return loop


LOOP = _loop()


def exp_nonpos(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.full_like(x, np.nan)  # poisoned: an unwritten element fails
    LOOP(x, out)
    return out


def test_within_2_ulp_on_a_dense_sample_of_its_range():
    last = int(np.array([FLUSH_BELOW], np.float32).view(np.uint32)[0])
    bits = np.arange(0x80000000, last + 1, 997, dtype=np.int64).astype(np.uint32)  # ~1.1M
    rng = np.random.default_rng(11)
    x = np.concatenate(
        [
            bits.view(np.float32),
            -rng.exponential(3.0, 200_000).astype(np.float32),
            # both sides of each range-reduction boundary (n ln2 +- ln2/2)
            -(np.arange(0, 125) * math.log(2) + math.log(2) / 2).astype(np.float32),
            np.nextafter(-(np.arange(0, 125) * math.log(2) + math.log(2) / 2), 0).astype(
                np.float32
            ),
            np.array([0.0, -0.0, -1e-45, -1e-30, -(2.0**-25), FLUSH_BELOW], np.float32),
        ]
    )
    err = ulp_errors(x, exp_nonpos(x))
    assert err.max() < 2.0, f"max {err.max():.3f} ulp at x={x[np.argmax(err)]!r}"
    assert (err <= 0.5).mean() > 0.85  # degree 5: 87% here (degree 6: over 90%)


def test_flushes_to_zero_below_minus_86_5_and_keeps_nan():
    x = np.array(
        [np.nextafter(FLUSH_BELOW, f32(-np.inf)), -87.0, -100.0, -1e30, -np.inf], dtype=np.float32
    )
    y = exp_nonpos(x)
    assert (y == 0.0).all() and not np.signbit(y).any()
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF], np.uint32)
    assert np.isnan(exp_nonpos(nans.view(np.float32))).all()
    assert list(exp_nonpos(np.array([0.0, -0.0], np.float32))) == [1.0, 1.0]


def test_the_loop_vectorises_and_calls_no_libm_exp():
    exp_nonpos(np.linspace(-5, 0, 64, dtype=np.float32))
    (llvm,) = LOOP.inspect_llvm().values()
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", llvm)}
    assert widths and max(widths) >= 4, "the exp loop was not vectorised"
    assert not re.search(r"call [^\n]*(@expf|@llvm\.exp\.)", llvm)
