# fusec kernel for one ai.fused "matmul" group of 3 op(s):
#   ai.reshape -> ai.matmul -> ai.bias_add
#   inputs : tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>
#   outputs: tensor<32x256xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 32x256
@numba.njit(
    numba.void(rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, out0):
    for task in numba.prange(32):
        i0 = task
        for j in range(256):
            l0 = s0[i0 * 256 + j]
            l1 = in2[j]
            t0 = (l0 + l1)
            out0[i0 * 256 + j] = t0


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(8192, dtype=np.float32)
    v0 = in0.reshape((2, 16, 64)).reshape((32, 64,))
    a = v0.reshape((32, 64))
    b = in1.reshape((64, 256))
    np.matmul(a, b, out=s0.reshape((32, 256)))
    kernel_epilogue(s0, in2, out0)
