# fusec kernel for one ai.fused "conv" group of 4 op(s):
#   ai.conv2d -> ai.bias_add -> ai.add -> ai.relu
#   inputs : tensor<2x8x12x12xf32>, tensor<8x8x3x3xf32>, tensor<8xf32>, tensor<2x8x12x12xf32>
#   outputs: tensor<2x8x12x12xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# im2col: cols[n, c*9 + r*3 + s, oh*12 + ow] = padded input window
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_im2col(x, cols):
    for task in numba.prange(16):
        base_in = task * 144
        for r in range(3):
            for s in range(3):
                base = ((task * 3 + r) * 3 + s) * 144
                for oh in range(12):
                    ih = oh * 1 + r * 1 - 1
                    inside = ih >= 0 and ih < 12
                    for ow in range(12):
                        iw = ow * 1 + s * 1 - 1
                        if inside and iw >= 0 and iw < 12:
                            cols[base + oh * 12 + ow] = x[base_in + ih * 12 + iw]
                        else:
                            cols[base + oh * 12 + ow] = f32(0.0)


# pointwise over 2x8x12x12
@numba.njit(
    numba.void(rw, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s0, in2, in3, out0):
    for task in numba.prange(16):
        i0 = task // 8
        i1 = task % 8
        for j in range(144):
            l0 = s0[i0 * 1152 + i1 * 144 + j]
            l1 = in2[i1]
            t0 = (l0 + l1)
            l2 = in3[i0 * 1152 + i1 * 144 + j]
            t1 = (t0 + l2)
            t2 = (t1 if (not (t1 < f32(0.0))) else f32(0.0))
            out0[i0 * 1152 + i1 * 144 + j] = t2


def launch(in0, in1, in2, in3, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(2304, dtype=np.float32)
    kernel_cols = np.empty(20736, dtype=np.float32)
    kernel_im2col(in0, kernel_cols)
    np.matmul(in1.reshape((1, 8, 72)), kernel_cols.reshape((2, 1, 72, 144)), out=s0.reshape((2, 1, 8, 144)))
    kernel_epilogue(s0, in2, in3, out0)
