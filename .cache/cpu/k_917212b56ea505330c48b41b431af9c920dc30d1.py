# fusec kernel for one ai.fused "matmul" group of 5 op(s):
#   ai.slice -> ai.reshape -> ai.matmul -> ai.bias_add -> ai.tanh
#   inputs : tensor<2x5x8xf32>, tensor<8x8xf32>, tensor<8xf32>
#   outputs: tensor<2x8xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 2x8
@numba.njit(
    numba.void(rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, out0):
    for task in numba.prange(2):
        i0 = task
        for j in range(8):
            l0 = s0[i0 * 8 + j]
            l1 = in2[j]
            t0 = (l0 + l1)
            t1 = math.tanh(t0)
            out0[i0 * 8 + j] = t1


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(16, dtype=np.float32)
    v0 = in0.reshape((2, 5, 8))[0:2:1, 0:1:1, 0:8:1]
    v0f = np.ascontiguousarray(v0, dtype=np.float32).reshape(-1)
    v1 = v0.reshape((2, 8,))
    a = v1.reshape((2, 8))
    b = in1.reshape((8, 8))
    b = b.swapaxes(-1, -2)
    np.matmul(a, b, out=s0.reshape((2, 8)))
    kernel_epilogue(s0, in2, out0)
