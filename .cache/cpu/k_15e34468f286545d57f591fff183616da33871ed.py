# fusec kernel for one ai.fused "conv" group of 5 op(s):
#   ai.conv2d -> ai.bias_add -> ai.sub -> ai.mul -> ai.bias_add
#   inputs : tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>, tensor<4x1x1xf32>, tensor<4x1x1xf32>, tensor<4xf32>
#   outputs: tensor<2x4x5x5xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# im2col: cols[n, c*9 + r*3 + s, oh*5 + ow] = padded input window
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_im2col(x, cols):
    for task in numba.prange(6):
        base_in = task * 25
        for r in range(3):
            for s in range(3):
                base = ((task * 3 + r) * 3 + s) * 25
                for oh in range(5):
                    ih = oh * 1 + r * 1 - 1
                    inside = ih >= 0 and ih < 5
                    for ow in range(5):
                        iw = ow * 1 + s * 1 - 1
                        if inside and iw >= 0 and iw < 5:
                            cols[base + oh * 5 + ow] = x[base_in + ih * 5 + iw]
                        else:
                            cols[base + oh * 5 + ow] = f32(0.0)


# pointwise over 2x4x5x5
@numba.njit(
    numba.void(rw, ro, ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, in3, in4, in5, out0):
    for task in numba.prange(8):
        i0 = task // 4
        i1 = task % 4
        for j in range(25):
            l0 = s0[i0 * 100 + i1 * 25 + j]
            l1 = in2[i1]
            t0 = (l0 + l1)
            l2 = in3[i1]
            t1 = (t0 - l2)
            l3 = in4[i1]
            t2 = (t1 * l3)
            l4 = in5[i1]
            t3 = (t2 + l4)
            out0[i0 * 100 + i1 * 25 + j] = t3


def launch(in0, in1, in2, in3, in4, in5, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(200, dtype=np.float32)
    kernel_cols = np.empty(1350, dtype=np.float32)
    kernel_im2col(in0, kernel_cols)
    np.matmul(in1.reshape((1, 4, 27)), kernel_cols.reshape((2, 1, 27, 25)), out=s0.reshape((2, 1, 4, 25)))
    kernel_epilogue(s0, in2, in3, in4, in5, out0)
