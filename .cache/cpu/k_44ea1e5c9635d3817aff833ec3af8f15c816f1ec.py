# fusec kernel for one ai.fused "matmul" group of 2 op(s):
#   ai.matmul -> ai.add
#   inputs : tensor<5x7xf32>, tensor<7x6xf32>, tensor<5x1xf32>
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
    numba.void(rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, out0):
    for task in numba.prange(5):
        i0 = task
        for j in range(6):
            l0 = s0[i0 * 6 + j]
            l1 = in2[i0]
            t0 = (l0 + l1)
            out0[i0 * 6 + j] = t0


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(30, dtype=np.float32)
    a = in0.reshape((5, 7))
    b = in1.reshape((7, 6))
    np.matmul(a, b, out=s0.reshape((5, 6)))
    kernel_epilogue(s0, in2, out0)
