"""``ai.quantize`` and ``ai.dequantize`` in the cuda Numba kernels (issue 31): the cpu
kernels' helpers (``fusec.codegen.quant``), as device intrinsics on the GPU.

Under Numba's CUDA simulator (a subprocess: ``quant_sim.py``) the pointwise kernel's codes
and values equal the reference executor's bit for bit for every quantized type, NaN,
infinities and out-of-range values among the inputs, outputs poisoned first. Compiled to
PTX for sm_90 (no GPU needed), the helpers are inline: no call, no local memory, no
float64.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from quant_sim import TYPES, qdq_ir

from fusec.targets.cuda.env import simulator_enabled

pytestmark = pytest.mark.requires_target("cuda")

HERE = Path(__file__).parent


def test_quantize_and_dequantize_under_the_simulator_equal_the_reference() -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run(
        [sys.executable, str(HERE / "quant_sim.py"), "11"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    records = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(records) == len(TYPES)
    for record in records:
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


def test_per_block_scales_are_a_located_error() -> None:
    """A per-block quantize (scales per 8 columns): the cuda kernels index a scale per
    tensor or per axis, so the op stays out of every group and compiling names it (the
    pointwise kernel read past the scale's end under the simulator before)."""
    import fusec
    from fusec.errors import FusecError

    text = """func.func @f(%b: tensor<8x32xf32>, %s: tensor<8x4xf32>, %z: tensor<8x4xi8>) -> tensor<8x32xi8> {
  %q = ai.quantize %b, %s, %z {axis = 1, block_size = 8} : tensor<8x32xf32> * tensor<8x4xf32> * tensor<8x4xi8>
  return %q : tensor<8x32xi8>
}"""  # noqa: E501
    with pytest.raises(FusecError, match=r":2:\d+: .*per-block scales \(block_size 8\)"):
        fusec.compile(text, target="cuda", executable=False)
