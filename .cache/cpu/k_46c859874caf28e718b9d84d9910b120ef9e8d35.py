# fusec kernel for one ai.fused "pointwise" group of 3 op(s):
#   ai.sub -> ai.mul -> ai.bias_add
#   inputs : tensor<2x3x4x5xf32>, tensor<3x1x1xf32>, tensor<3x1x1xf32>, tensor<3xf32>
#   outputs: tensor<2x3x4x5xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 2x3x4x5
@numba.njit(
    numba.void(ro, ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, in2, in3, out0):
    for task in numba.prange(6):
        i0 = task // 3
        i1 = task % 3
        for j in range(20):
            l0 = in0[i0 * 60 + i1 * 20 + j]
            l1 = in1[i1]
            t0 = (l0 - l1)
            l2 = in2[i1]
            t1 = (t0 * l2)
            l3 = in3[i1]
            t2 = (t1 + l3)
            out0[i0 * 60 + i1 * 20 + j] = t2


def launch(in0, in1, in2, in3, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, in2, in3, out0)
