"""``ai.quantize`` and ``ai.dequantize`` in the cuda Numba kernels (issue 31): the cpu
kernels' helpers (``fusec.codegen.quant``), as device intrinsics on the GPU.

Under Numba's CUDA simulator (a subprocess: ``quant_sim.py``) the pointwise kernel's codes
and values equal the reference executor's bit for bit for every quantized type, NaN,
infinities and out-of-range values among the inputs, outputs poisoned first. Compiled to
PTX for sm_90 (no GPU needed), the helpers are inline: no call, no local memory, no
float64.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from quant_sim import BLOCKS, TYPES, block_ir, qdq_ir
from sim_client import run_simulator

from fusec.targets.cuda.env import simulator_enabled

pytestmark = pytest.mark.requires_target("cuda")

HERE = Path(__file__).parent


def test_quantize_and_dequantize_under_the_simulator_equal_the_reference() -> None:
    records = run_simulator(HERE / "quant_sim.py", [{"name": "seed 11", "seed": 11}])
    assert len(records) == len(TYPES) + len(BLOCKS)
    for record in records.values():
        assert record["kinds"] == ["pointwise"], record
        assert record["codes_equal"] and record["values_equal"], record


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("dtype", ["f8E4M3FN", "f8E5M2", "i8"])
def test_quantization_helpers_compile_inline_to_ptx(dtype: str) -> None:
    import fusec

    compiled = fusec.compile(qdq_ir(dtype, True), target="cuda", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    assert ".entry" in ptx and "call." not in ptx
    assert ".local" not in ptx and not re.search(r"\.f64\b", ptx)


def test_per_block_scales_stay_in_pointwise_groups() -> None:
    """A per-block quantize/dequantize pair (scales per 8 rows) is one pointwise kernel
    (the one that reads such scales, at index // block); the GEMM takes no per-block op
    into its epilogue: the dequantize of a weight-only int4 weight is its own kernel."""
    import fusec

    compiled = fusec.compile(block_ir("i4", 0), target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise"]
    assert "// 37 x 53" not in compiled.kernels[0].source  # (no stale layout notes)
    text = """func.func @f(%x: tensor<16x64xf16>, %q: tensor<64x32xi4>, %s: tensor<4x32xf16>) -> tensor<16x32xf16> {
  %z = arith.constant dense<0> : tensor<4x32xi4>
  %w = ai.dequantize %q, %s, %z {axis = 0 : i64, block_size = 16 : i64} : tensor<64x32xi4> * tensor<4x32xf16> * tensor<4x32xi4>
  %y = ai.matmul %x, %w : tensor<16x64xf16> * tensor<64x32xf16>
  %r = ai.relu %y : tensor<16x32xf16>
  return %r : tensor<16x32xf16>
}"""  # noqa: E501
    compiled = fusec.compile(text, target="cuda", executable=False)
    assert [k.kind for k in compiled.kernels] == ["pointwise", "matmul"]
    assert "ai.dequantize" in compiled.kernels[0].source.split("\n\n")[0]
    assert compiled.kernels[1].remark is None
