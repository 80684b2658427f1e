# fusec kernel for one ai.fused "pointwise" group of 6 op(s):
#   ai.mul -> ai.mul -> ai.maximum -> ai.mul -> ai.maximum -> ai.mul
#   inputs : tensor<1x2xf32>, tensor<f32>, tensor<f32>
#   outputs: tensor<1x2xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 1x2
@numba.njit(
    numba.void(ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, in2, out0):
    for task in numba.prange(1):
        for j in range(2):
            l0 = in0[j]
            l1 = in1[0]
            t0 = (l0 * l1)
            l2 = in2[0]
            t1 = (t0 * l2)
            t2 = (t1 if ((t1 >= l1) or (t1 != t1)) else l1)
            t3 = (t2 * l2)
            t4 = (t3 if ((t3 >= l1) or (t3 != t3)) else l1)
            t5 = (t4 * l2)
            out0[j] = t5


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, in2, out0)
