# fusec kernel for one ai.fused "pointwise" group of 3 op(s):
#   ai.mul -> ai.bias_add -> ai.relu
#   inputs : tensor<2x3xf32>, tensor<f32>, tensor<3xf32>
#   outputs: tensor<2x3xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 2x3
@numba.njit(
    numba.void(ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, in2, out0):
    for task in numba.prange(2):
        i0 = task
        for j in range(3):
            l0 = in0[i0 * 3 + j]
            l1 = in1[0]
            t0 = (l0 * l1)
            l2 = in2[j]
            t1 = (t0 + l2)
            t2 = (t1 if (not (t1 < f32(0.0))) else f32(0.0))
            out0[i0 * 3 + j] = t2


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, in2, out0)
