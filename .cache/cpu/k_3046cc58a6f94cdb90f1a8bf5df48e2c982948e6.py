# fusec kernel for one ai.fused "pointwise" group of 6 op(s):
#   ai.maximum -> ai.mul -> ai.bias_add -> ai.mul -> ai.sub -> ai.mul
#   inputs : tensor<2x4xf32>, tensor<4xf32>, tensor<f32>
#   outputs: tensor<2x4xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 2x4
@numba.njit(
    numba.void(ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, in2, out0):
    for task in numba.prange(2):
        i0 = task
        for j in range(4):
            l0 = in0[i0 * 4 + j]
            l1 = in1[j]
            t0 = (l0 if ((l0 >= l1) or (l0 != l0)) else l1)
            l2 = in2[0]
            t1 = (t0 * l2)
            t2 = (t1 + l1)
            t3 = (t2 * l2)
            t4 = (t3 - l1)
            t5 = (t4 * l2)
            out0[i0 * 4 + j] = t5


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, in2, out0)
