# fusec kernel for one ai.fused "pointwise" group of 8 op(s):
#   ai.mul -> ai.pow -> ai.mul -> ai.add -> ai.mul -> ai.tanh -> ai.add -> ai.mul
#   inputs : tensor<2x16x256xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
#   outputs: tensor<2x16x256xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 2x16x256
@numba.njit(
    numba.void(ro, ro, ro, ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, in2, in3, in4, in5, out0):
    for task in numba.prange(4):
        row = task // 4
        j0 = task % 4 * 2048
        j1 = min(j0 + 2048, 8192)
        for j in range(j0, j1):
            l0 = in0[j]
            l1 = in1[0]
            t0 = (l0 * l1)
            l2 = in2[0]
            t1 = math.pow(l0, l2)
            l3 = in3[0]
            t2 = (t1 * l3)
            t3 = (l0 + t2)
            l4 = in4[0]
            t4 = (t3 * l4)
            t5 = math.tanh(t4)
            l5 = in5[0]
            t6 = (t5 + l5)
            t7 = (t0 * t6)
            out0[j] = t7


def launch(in0, in1, in2, in3, in4, in5, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, in2, in3, in4, in5, out0)
