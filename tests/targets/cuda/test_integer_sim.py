"""Integer and bool values in the cuda pointwise kernel, under Numba's CUDA simulator
(issue 29): loaded, computed and stored as themselves (i64 arithmetic, truncating
division, remainders, comparisons, bool logic, casts, a where), poisoned outputs, fresh
random inputs (integers in [-4, 5), bools), integers and bools compared exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sim_client import run_simulator

HERE = Path(__file__).parent

pytestmark = pytest.mark.requires_target("cuda")

CASES = [
    ("pw_int_f32", "integer_pointwise", [3, 8, "f32"]),
    ("pw_int_tail_f16", "integer_pointwise", [3, 7, "f16"]),
    ("pw_int_bf16", "integer_pointwise", [2, 16, "bf16"]),
]
#: One-byte codes dequantized (int8, uint8 and int4 storage; vectors of 16, 8 and 4 bytes).
DEQUANT_CASES = [
    ("deq_i8", "dequantize_codes", [24, 32, "i8", 8]),
    ("deq_ui8", "dequantize_codes", [16, 8, "ui8", 4]),
    ("deq_i4", "dequantize_codes", [12, 20, "i4", 4]),
]


@pytest.fixture(scope="module")
def sim_results() -> dict:
    records = [{"name": n, "builder": b, "args": a} for n, b, a in CASES + DEQUANT_CASES]
    return run_simulator(HERE / "sim_runner.py", records)


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_integer_pointwise_under_simulator(sim_results: dict, name: str) -> None:
    record = sim_results.get(name)
    assert record is not None, f"{name}: no result from the simulator run"
    assert "error" not in record, record.get("error")
    assert record["kinds"] == ["pointwise"]
    assert all(record["passed"]), record["details"]


def test_the_kernel_moves_integers_as_themselves():
    import cuda_cases

    import fusec

    compiled = fusec.compile(
        cuda_cases.integer_pointwise(3, 8, "f16"),
        target="cuda",
        pipeline="infer-shapes",
        executable=False,
    )
    (kernel,) = compiled.kernels
    assert not kernel.runs_op_by_op
    source = kernel.source
    assert "cuda.local.array(SPAN, i64_t)" in source and "cuda.local.array(SPAN, u8_t)" in source
    assert " // " in source and " % " in source  # integer division and remainder, inline
    assert "integer and bool values loaded, computed and stored as themselves" in source


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="no PTX under the simulator"
)
def test_the_integer_kernel_compiles_to_ptx_for_hopper():
    """NVVM compiles the kernel (typing the integer helpers as device functions) without a
    GPU: 64-bit integer loads and stores, bools as bytes, no float64 arithmetic."""
    import re

    import cuda_cases

    import fusec

    text = cuda_cases.integer_pointwise(64, 257, "f16")
    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ".target sm_90" in ptx and ".entry" in ptx
    assert re.search(r"ld\.global(\.nc)?\.u64", ptx) or "ld.global.b64" in ptx
    assert re.search(r"st\.global\.u8", ptx)
    assert not re.search(r"\.f64\b", ptx), "float64 arithmetic"


CONSTANT_GRAPH = """
func.func @f(%a: tensor<f32>, %b: tensor<i64>, %c: tensor<f32>)
    -> (tensor<1xf32>, tensor<i64>, tensor<1xi1>) {
  %k = arith.constant dense<2> : tensor<1xi64>
  %e = ai.equal %b, %k : tensor<i64> * tensor<1xi64>
  %w = ai.where %e, %a, %c : tensor<1xi1> * tensor<f32> * tensor<f32>
  return %w, %b, %e : tensor<1xf32>, tensor<i64>, tensor<1xi1>
}
"""

_CONSTANT_RUN = """
import numpy as np, fusec, sys
compiled = fusec.compile(sys.stdin.read(), target="cuda")
for b in (2, 3):
    w, same, e = compiled(np.float32(1.5), np.int64(b), np.float32(-3.0))
    print(float(w[0]), int(same), bool(e[0]), same.dtype, e.dtype)
"""


def test_an_integer_constant_is_uploaded_in_its_own_type() -> None:
    """The program's constants take the IR's element type (an i64 constant was uploaded
    as f32 and refused: found by the cuda differential fuzzer on the H200 at e544ccd),
    and integer and bool results come back in theirs."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run(
        [sys.executable, "-c", _CONSTANT_RUN],
        input=CONSTANT_GRAPH,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [
        "1.5 2 True int64 bool",
        "-3.0 3 False int64 bool",
    ]


@pytest.mark.parametrize("name", [c[0] for c in DEQUANT_CASES])
def test_one_byte_codes_load_as_vectors_under_simulator(sim_results: dict, name: str) -> None:
    """Against the reference at f32 tolerance (a code or zero point misread is off by one or
    more scales)."""
    record = sim_results.get(name)
    assert record is not None, f"{name}: no result from the simulator run"
    assert "error" not in record, record.get("error")
    assert record["kinds"] == ["pointwise"]
    assert all(record["passed"]), record["details"]


@pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="no PTX under the simulator"
)
def test_one_byte_codes_compile_to_one_vector_load_each_for_hopper():
    """A vector of 16 int8 codes and one of their zero points: one 16-byte load each (no
    byte loads), the bytes sign-extended in registers."""
    import cuda_cases

    import fusec

    text = cuda_cases.dequantize_codes(24, 32, "i8", 8)
    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ptx.count("ld.global.v4.u32") >= 2
    assert "ld.global.s8" not in ptx and "ld.global.u8" not in ptx
