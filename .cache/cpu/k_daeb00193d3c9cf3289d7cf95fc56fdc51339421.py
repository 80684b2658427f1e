# fusec kernel for one ai.fused "matmul" group of 5 op(s):
#   ai.transpose -> ai.reshape -> ai.matmul -> ai.add -> ai.add
#   inputs : tensor<2x4x16x16xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>
#   outputs: tensor<2x16x64xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 2x16x64
@numba.njit(
    numba.void(ro, rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(in2, s0, in3, out0):
    for task in numba.prange(32):
        i0 = task
        for j in range(64):
            l0 = in2[j]
            l1 = s0[i0 * 64 + j]
            t0 = (l0 + l1)
            l2 = in3[i0 * 64 + j]
            t1 = (t0 + l2)
            out0[i0 * 64 + j] = t1


def launch(in0, in1, in2, in3, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(2048, dtype=np.float32)
    v0 = in0.reshape((2, 4, 16, 16)).transpose((0, 2, 1, 3,))
    v0f = np.ascontiguousarray(v0, dtype=np.float32).reshape(-1)
    v1 = v0.reshape((2, 16, 64,))
    a = v1.reshape((2, 16, 64))
    b = in1.reshape((64, 64))
    np.matmul(a, b, out=s0.reshape((2, 16, 64)))
    kernel_epilogue(in2, s0, in3, out0)
