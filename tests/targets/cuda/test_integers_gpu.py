"""Integer and bool graphs on the GPU (issue 29; skipped without one): poisoned outputs,
fresh random inputs (integers in [-4, 5), bools), compared with the float64 reference
with the program's rounding points; integers and bools exactly."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import random_inputs
from numerics import assert_close

pytestmark = pytest.mark.gpu

GRAPHS = {
    "arithmetic_and_logic": """
func.func @f(%a: tensor<64x257xi64>, %b: tensor<257xi64>, %p: tensor<64x257xi1>,
             %x: tensor<64x257xf16>)
    -> (tensor<64x257xi64>, tensor<64x257xi1>, tensor<64x257xf16>) {
  %d = ai.div %a, %b : tensor<64x257xi64> * tensor<257xi64>
  %r = ai.mod %a, %b {fmod = true} : tensor<64x257xi64> * tensor<257xi64>
  %s = ai.sub %d, %r : tensor<64x257xi64> * tensor<64x257xi64>
  %l = ai.less %s, %b : tensor<64x257xi64> * tensor<257xi64>
  %n = ai.not %p : tensor<64x257xi1>
  %o = ai.xor %l, %n : tensor<64x257xi1> * tensor<64x257xi1>
  %f = ai.cast %o : tensor<64x257xi1> to tensor<64x257xf16>
  %w = ai.where %o, %x, %f : tensor<64x257xi1> * tensor<64x257xf16> * tensor<64x257xf16>
  return %s, %o, %w : tensor<64x257xi64>, tensor<64x257xi1>, tensor<64x257xf16>
}
""",
    "lookup_positions_mask": """
func.func @f(%ids: tensor<4x128xi64>, %mask: tensor<4x128xi64>, %t: tensor<1000x64xf32>)
    -> (tensor<4x128x64xf32>, tensor<4x128xi64>, tensor<4x1x128x128xf32>) {
  %e = ai.take %t, %ids : tensor<1000x64xf32> * tensor<4x128xi64>
  %c = ai.cumsum %mask {axis = 1 : i64} : tensor<4x128xi64>
  %pos = ai.mul %c, %mask : tensor<4x128xi64> * tensor<4x128xi64>
  %b = ai.cast %mask : tensor<4x128xi64> to tensor<4x128xi1>
  %b4 = ai.reshape %b {shape = array<i64: 4, 1, 1, 128>} : tensor<4x128xi1>
  %be = ai.expand %b4 {shape = array<i64: 4, 1, 128, 128>} : tensor<4x1x1x128xi1>
  %zero = arith.constant dense<0.0> : tensor<f32>
  %ninf = arith.constant dense<0xFF800000> : tensor<f32>
  %m = ai.where %be, %zero, %ninf : tensor<4x1x128x128xi1> * tensor<f32> * tensor<f32>
  return %e, %pos, %m : tensor<4x128x64xf32>, tensor<4x128xi64>, tensor<4x1x128x128xf32>
}
""",
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_integer_graph_on_the_gpu(name: str) -> None:
    import fusec
    from fusec.dialect.ops import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(GRAPHS[name], target="cuda")
    args = random_inputs(compiled.module, seed=3)
    if name == "lookup_positions_mask":
        args[0] = np.abs(args[0]) * 200  # ids over the whole table
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    results = entry_function(compiled.module).function_type.outputs.data
    for k, (out, ref, t) in enumerate(zip(outs, refs, results, strict=True)):
        assert out.dtype == numpy_dtype(spec_of(t).dtype), (k, out.dtype)
        assert_close(out, ref, dtype=spec_of(t).dtype, what=f"{name} output #{k}")
