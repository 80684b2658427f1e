"""``exp_f32``, the vectorisable float32 exponential of the cpu kernels, against float64.

The bound: at most 1.02 ulp from the exact value (an exhaustive run over all
2**32 float32 inputs measured 1.010, and 99.6% correctly rounded: see
benchmarks/results/cpu-notes.md), exact at the edges (NaN, +-inf, overflow to
inf, underflow to 0, subnormal results), and a loop of it vectorised by LLVM.
"""

from __future__ import annotations

import math
import re

import numba
import numpy as np
import pytest
from numpy import float32 as f32

from fusec.api import parse
from fusec.codegen.expr import ExprGenerator, helper_source
from fusec.dialect import ops as ai

FLT_MAX = float(np.finfo(np.float32).max)
#: The smallest float32 whose exp rounds to inf, and the largest whose exp rounds to 0.
OVERFLOW_AT = f32(88.72283935546875)
UNDERFLOW_AT = f32(-103.97208404541016)


def helper_loop(name: str):
    """A Numba loop ``loop(x, out)`` storing the generated cpu helper ``name`` of each
    element (compiled strictly, as the kernels compile their helpers)."""
    ns = {"math": math, "numba": numba, "np": np, "f32": f32}
    exec(  # noqa: S102 - the generator's own helper source
        helper_source([name], '@numba.njit(fastmath=False, error_model="numpy")'), ns
    )
    helper = ns[name]

    @numba.njit(fastmath=False, error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = helper(x[i])

    return loop


def run_loop(loop, x: np.ndarray) -> np.ndarray:
    """``loop`` over ``x`` as float32, into an output poisoned with NaN first (an unwritten
    element fails)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.full_like(x, np.nan)
    loop(x, out)
    return out


NS = {"exp_loop": helper_loop("exp_f32")}


def fast_exp(x: np.ndarray) -> np.ndarray:
    return run_loop(NS["exp_loop"], x)


def ulp_errors(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|y - exp(x)| in units of the float32 ulp at exp(x) (float64 reference)."""
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    finite = ref <= FLT_MAX * (1 + 2.0**-25)  # rounds to a finite float32
    exponent = np.frexp(np.where(finite, ref, 1.0))[1]
    ulp = np.ldexp(1.0, np.maximum(exponent - 24, -149))
    with np.errstate(invalid="ignore"):
        err = np.abs(y.astype(np.float64) - ref) / ulp
    return np.where(finite, err, np.where(y == np.inf, 0.0, np.inf))


def all_float32_sample(stride: int) -> np.ndarray:
    """Every ``stride``-th non-NaN float32 bit pattern, both signs (all exponents)."""
    bits = np.arange(0, 0x7F800001, stride, dtype=np.int64).astype(np.int32)
    pos = bits.view(np.float32)
    return np.concatenate([pos, -pos])


def test_within_1_02_ulp_over_the_whole_float32_range():
    x = all_float32_sample(4099)  # ~1M inputs from 0 to inf, both signs
    err = ulp_errors(x, fast_exp(x))
    assert np.isfinite(err).all()
    assert err.max() <= 1.02, f"max {err.max():.3f} ulp at x={x[np.argmax(err)]!r}"
    assert (err <= 0.5).mean() > 0.99  # nearly always correctly rounded


def test_within_1_02_ulp_where_softmax_uses_it():
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            -rng.exponential(3.0, 200_000).astype(np.float32),  # x - max <= 0
            rng.uniform(-104, 89, 200_000).astype(np.float32),
            # both sides of each range-reduction boundary (n ln2 +- ln2/2)
            (np.arange(-150, 129) * math.log(2) + math.log(2) / 2).astype(np.float32),
            np.nextafter((np.arange(-150, 129) * math.log(2) + math.log(2) / 2), -np.inf).astype(
                np.float32
            ),
        ]
    )
    err = ulp_errors(x, fast_exp(x))
    assert err.max() <= 1.02, f"max {err.max():.3f} ulp at x={x[np.argmax(err)]!r}"


def test_edges_are_exact():
    below_overflow = np.nextafter(OVERFLOW_AT, f32(0))
    x = np.array(
        [0.0, -0.0, np.inf, -np.inf, OVERFLOW_AT, 89.0, 100.0, 1e30, FLT_MAX, -FLT_MAX],
        dtype=np.float32,
    )
    y = fast_exp(x)
    assert list(y[:4]) == [1.0, 1.0, np.inf, 0.0]
    assert (y[4:8] == np.inf).all() and y[8] == np.inf and y[9] == 0.0
    top = fast_exp(np.array([below_overflow], np.float32))[0]
    assert np.isfinite(top) and top > f32(3.4e38)
    # underflow: exactly 0 from UNDERFLOW_AT down, the smallest subnormal just above
    low = fast_exp(np.array([UNDERFLOW_AT, -104.0, -200.0, -1e30], np.float32))
    assert (low == 0.0).all() and not np.signbit(low).any()
    tiny = fast_exp(np.array([np.nextafter(UNDERFLOW_AT, f32(0))], np.float32))[0]
    assert tiny == np.float32(1e-45)


def test_subnormal_results_within_1_02_ulp_of_2_pow_minus_149():
    x = np.linspace(-103.9, -87.34, 50_001, dtype=np.float32)  # exp(x) below 2**-126
    y = fast_exp(x)
    assert (y < np.finfo(np.float32).tiny).all()
    assert ulp_errors(x, y).max() <= 1.02


def test_tiny_arguments():
    x = np.array([1e-45, -1e-45, 1e-30, -1e-30, 1e-8, -1e-8, 2.0**-24, -(2.0**-25)], np.float32)
    y = fast_exp(x)
    assert (y[:6] == 1.0).all()  # correctly rounded
    assert ulp_errors(x, y).max() <= 1.02


def test_nan_in_nan_out_whatever_the_payload_or_sign():
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF], np.uint32)
    y = fast_exp(bits.view(np.float32))
    assert np.isnan(y).all()


def test_the_loop_vectorises_and_calls_no_libm_exp():
    x = np.linspace(-5, 5, 64, dtype=np.float32)
    fast_exp(x)
    (llvm,) = NS["exp_loop"].inspect_llvm().values()
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", llvm)}
    assert widths and max(widths) >= 4, "the exp loop was not vectorised"
    assert "llvm.fma" in llvm  # fma32 became the LLVM intrinsic
    assert not re.search(r"call [^\n]*(@expf|@llvm\.exp\.)", llvm)


def test_the_cpu_generator_uses_exp_f32_and_the_default_keeps_math_exp():
    module = parse(
        """
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = ai.exp %x : tensor<8xf32>
  %1 = ai.sigmoid %0 : tensor<8xf32>
  %2 = ai.silu %1 : tensor<8xf32>
  %3 = ai.gelu %2 {approximate = "tanh"} : tensor<8xf32>
  return %3 : tensor<8xf32>
}"""
    )
    ops = [op for op in module.walk() if isinstance(op, ai.AiOp)]
    fast = ExprGenerator(fast_exp=True)
    stmts, _ = fast.chain(ops, lambda v: "x")
    # exp itself: exp_f32; the logistic forms (sigmoid, silu, tanh GELU): exp(-|x|)
    assert sum("exp_f32(" in s for s in stmts) == 1 and not any("math.exp" in s for s in stmts)
    assert sum("exp_nonpos_f32(-abs(" in s for s in stmts) == 3
    assert fast.helpers == {"exp_f32", "exp_nonpos_f32"}
    source = helper_source(fast.helpers, "@numba.njit")
    assert "def exp_f32(" in source and "def fma32(" in source  # its dependency comes along
    default = ExprGenerator()  # the CUDA templates' generator: unchanged
    stmts, _ = default.chain(ops, lambda v: "x")
    assert sum("math.exp(" in s for s in stmts) == 4 and not any("exp_f32" in s for s in stmts)
    assert default.helpers == set()


@pytest.mark.parametrize("x", [-0.5, 0.0, 0.5, 10.0, -10.0])
def test_exp_f32_agrees_with_numpy_float32_exp(x):
    got = fast_exp(np.array([x], np.float32))[0]
    want = np.exp(np.float32(x))
    assert abs(float(got) - float(want)) <= 2 * np.spacing(want)


def logistic_loop(op: str):
    """A Numba loop of the cpu generator's ``ai.<op>`` (sigmoid, silu, tanh GELU) over a
    float32 vector: the code the cpu kernels' epilogues get."""
    attrs = ' {approximate = "tanh"}' if op == "gelu" else ""
    module = parse(
        f"""func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {{
  %0 = ai.{op} %x{attrs} : tensor<8xf32>
  return %0 : tensor<8xf32>
}}"""
    )
    ops = [o for o in module.walk() if isinstance(o, ai.AiOp)]
    gen = ExprGenerator(fast_exp=True)
    stmts, names = gen.chain(ops, lambda v: "v")
    body = "\n".join(f"        {s}" for s in stmts)
    source = (
        helper_source(gen.helpers, '@numba.njit(fastmath=False, error_model="numpy")')
        + '\n@numba.njit(fastmath=False, error_model="numpy")\ndef loop(x, out):\n'
        + f"    for i in range(x.size):\n        v = x[i]\n{body}\n"
        + f"        out[i] = {names[ops[-1].results[0]]}\n"
    )
    ns = {"math": math, "numba": numba, "np": np, "f32": f32}
    exec(source, ns)  # noqa: S102 - the generator's own source
    return ns["loop"]


def _logistic_reference(op: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if op == "sigmoid":
            return 1.0 / (1.0 + np.exp(-x))
        if op == "silu":
            return np.where(x == -np.inf, -0.0, x / (1.0 + np.exp(-x)))
        u2 = 2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return np.where(x == -np.inf, -0.0, x / (1.0 + np.exp(-u2)))


@pytest.mark.parametrize("op", ["sigmoid", "silu", "gelu"])
def test_the_logistic_forms_on_exp_of_minus_abs_x_match_float64(op):
    """sigmoid, silu and the tanh GELU divide by 1 + exp(-|x|) (``exp_nonpos_f32``): within
    a few ulp of float64 where the value is a normal float, the limits at +-inf, NaN kept."""
    loop = logistic_loop(op)
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [rng.standard_normal(100_000) * 4, np.linspace(-90, 90, 20_001), [0.0, -0.0, 1e-30]]
    ).astype(np.float32)
    got, want = run_loop(loop, x), _logistic_reference(op, x)
    # exp(-|arg|) is exp_nonpos_f32's down to -86.5 (0 below): there the value is within
    # a few ulp where it is a normal float; past it, 0 or a tiny number where the exact
    # one is below 1e-35 (sigmoid(-86.5) = 2.6e-38, silu(-86.5) = -2.3e-36)
    arg = x.astype(np.float64)
    if op == "gelu":  # the logistic's argument: 2u
        arg = 2.0 * math.sqrt(2.0 / math.pi) * (arg + 0.044715 * arg**3)
    kept = (np.abs(want) >= np.finfo(np.float32).tiny) & (np.abs(arg) <= 86.5)
    rel = np.abs(got[kept] - want[kept]) / np.abs(want[kept])
    # the GELU's argument is itself rounded to float32 first: |arg| ulp more where x < 0
    bound = 8 * 2.0**-24 + (np.abs(arg[kept]) * 2.0**-22 if op == "gelu" else 0.0)
    assert (rel < bound).all(), f"max relative error {rel.max():.3e}"
    assert (np.abs(got[~kept] - want[~kept]) < 1e-35).all()
    edges = run_loop(loop, np.array([np.inf, -np.inf, np.nan], np.float32))
    assert edges[0] == (1.0 if op == "sigmoid" else np.inf)
    assert edges[1] == 0.0 and np.isnan(edges[2])
    (llvm,) = loop.inspect_llvm().values()
    assert max(int(w) for w in re.findall(r"<(\d+) x float>", llvm)) >= 4, "not vectorised"
