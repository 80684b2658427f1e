# fusec kernel for one ai.fused "matmul" group of 3 op(s):
#   ai.matmul -> ai.mul -> ai.bias_add
#   inputs : tensor<7x5xf32>, tensor<6x7xf32>, tensor<1xf32>, tensor<6xf32>
#   outputs: tensor<5x6xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 5x6
@numba.njit(
    numba.void(rw, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, in3, out0):
    for task in numba.prange(5):
        i0 = task
        for j in range(6):
            l0 = s0[i0 * 6 + j]
            l1 = in2[0]
            t0 = (l0 * l1)
            l2 = in3[j]
            t1 = (t0 + l2)
            out0[i0 * 6 + j] = t1


def launch(in0, in1, in2, in3, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(30, dtype=np.float32)
    a = in0.reshape((7, 5))
    a = a.swapaxes(-1, -2)
    b = in1.reshape((6, 7))
    b = b.swapaxes(-1, -2)
    np.matmul(a, b, out=s0.reshape((5, 6)))
    kernel_epilogue(s0, in2, in3, out0)
