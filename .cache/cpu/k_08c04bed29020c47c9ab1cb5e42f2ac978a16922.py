# fusec kernel for one ai.fused "matmul" group of 3 op(s):
#   ai.matmul -> ai.mul -> ai.add
#   inputs : tensor<4x3xf32>, tensor<5x4xf32>, tensor<1xf32>, tensor<1x5xf32>
#   outputs: tensor<3x5xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 3x5
@numba.njit(
    numba.void(rw, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, in3, out0):
    for task in numba.prange(3):
        i0 = task
        for j in range(5):
            l0 = s0[i0 * 5 + j]
            l1 = in2[0]
            t0 = (l0 * l1)
            l2 = in3[j]
            t1 = (t0 + l2)
            out0[i0 * 5 + j] = t1


def launch(in0, in1, in2, in3, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(15, dtype=np.float32)
    a = in0.reshape((4, 3))
    a = a.swapaxes(-1, -2)
    b = in1.reshape((5, 4))
    b = b.swapaxes(-1, -2)
    np.matmul(a, b, out=s0.reshape((3, 5)))
    kernel_epilogue(s0, in2, in3, out0)
