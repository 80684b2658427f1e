# fusec kernel for one ai.fused "matmul" group of 2 op(s):
#   ai.matmul -> ai.add
#   inputs : tensor<3x6xf32>, tensor<6x4xf32>, tensor<3x4xf32>
#   outputs: tensor<3x4xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 3x4
@numba.njit(
    numba.void(rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, out0):
    for task in numba.prange(1):
        for j in range(12):
            l0 = s0[j]
            l1 = in2[j]
            t0 = (l0 + l1)
            out0[j] = t0


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(12, dtype=np.float32)
    a = in0.reshape((3, 6))
    b = in1.reshape((6, 4))
    np.matmul(a, b, out=s0.reshape((3, 4)))
    kernel_epilogue(s0, in2, out0)
