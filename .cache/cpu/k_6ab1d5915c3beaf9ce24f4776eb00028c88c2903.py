# fusec kernel for one ai.fused "conv" group of 3 op(s):
#   ai.conv2d -> ai.bias_add -> ai.relu
#   inputs : tensor<2x32x8x8xf32>, tensor<64x32x3x3xf32>, tensor<64xf32>
#   outputs: tensor<2x64x4x4xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# im2col: cols[n, c*9 + r*3 + s, oh*4 + ow] = padded input window
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_im2col(x, cols):
    for task in numba.prange(64):
        base_in = task * 64
        for r in range(3):
            for s in range(3):
                base = ((task * 3 + r) * 3 + s) * 16
                for oh in range(4):
                    ih = oh * 2 + r * 1 - 1
                    inside = ih >= 0 and ih < 8
                    for ow in range(4):
                        iw = ow * 2 + s * 1 - 1
                        if inside and iw >= 0 and iw < 8:
                            cols[base + oh * 4 + ow] = x[base_in + ih * 8 + iw]
                        else:
                            cols[base + oh * 4 + ow] = f32(0.0)


# pointwise over 2x64x4x4
@numba.njit(
    numba.void(rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, out0):
    for task in numba.prange(128):
        i0 = task // 64
        i1 = task % 64
        for j in range(16):
            l0 = s0[i0 * 1024 + i1 * 16 + j]
            l1 = in2[i1]
            t0 = (l0 + l1)
            t1 = (t0 if (not (t0 < f32(0.0))) else f32(0.0))
            out0[i0 * 1024 + i1 * 16 + j] = t1


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(2048, dtype=np.float32)
    kernel_cols = np.empty(9216, dtype=np.float32)
    kernel_im2col(in0, kernel_cols)
    np.matmul(in1.reshape((1, 64, 288)), kernel_cols.reshape((2, 1, 288, 16)), out=s0.reshape((2, 1, 64, 16)))
    kernel_epilogue(s0, in2, out0)
