# fusec kernel for one ai.fused "pointwise" group of 8 op(s):
#   ai.neg -> ai.abs -> ai.neg -> ai.mul -> ai.abs -> ai.add -> ai.abs -> ai.sub
#   inputs : tensor<5x33xf16>, tensor<5x33xf16>
#   outputs: tensor<5x33xf16>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 5x33
@numba.njit(
    numba.void(ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, out0):
    for task in numba.prange(1):
        for j in range(165):
            l0 = in0[j]
            t0 = (-l0)
            t1 = math.fabs(t0)
            l1 = in1[j]
            t2 = (-l1)
            t3 = (t1 * t2)
            t4 = math.fabs(t2)
            t5 = (t3 + t4)
            t6 = math.fabs(l0)
            t7 = (t5 - t6)
            out0[j] = t7


def launch(in0, in1, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, out0)
