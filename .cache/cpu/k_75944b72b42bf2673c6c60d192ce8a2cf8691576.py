# fusec kernel for one ai.fused "row_reduce" group of 5 op(s):
#   ai.add -> ai.add -> ai.add -> ai.add -> ai.layernorm
#   inputs : tensor<2x16x64xf32>, tensor<1x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
#   outputs: tensor<2x16x64xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def row_sq_dev(buf, mean):
    """The sum of squared deviations from mean, in float64 (see row_sq_dev_f64)."""
    return row_sq_dev_f64(buf, mean)


@numba.njit(fastmath={"reassoc"}, error_model="numpy", cache=True)
def row_sq_dev_f64(buf, mean):
    """Reassociable float64 sum, vectorised; see fusec.targets.cpu.row_reduce."""
    s = 0.0
    for k in range(buf.size):
        s += (buf[k] - mean) * (buf[k] - mean)
    return s


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def row_sum(buf):
    """The sum of the elements, in float64 (see row_sum_f64)."""
    return row_sum_f64(buf)


@numba.njit(fastmath={"reassoc"}, error_model="numpy", cache=True)
def row_sum_f64(buf):
    """Reassociable float64 sum, vectorised; see fusec.targets.cpu.row_reduce."""
    s = 0.0
    for k in range(buf.size):
        s += buf[k]
    return s


# layernorm over rows of 2x16x64
@numba.njit(
    numba.void(ro, ro, ro, ro, ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_row_reduce(in0, in1, in2, in3, in4, in5, in6, out0):
    for row in numba.prange(32):
        buf = np.empty(64, dtype=np.float32)
        i0 = row // 16
        i1 = row % 16
        in0_row = in0[row * 64:row * 64 + 64]
        in1_row = in1[i1 * 64:i1 * 64 + 64]
        in2_row = in2[row * 64:row * 64 + 64]
        in3_row = in3[row * 64:row * 64 + 64]
        in4_row = in4[row * 64:row * 64 + 64]
        out0_row = out0[row * 64:row * 64 + 64]
        for k in range(64):
            l0 = in0_row[k]
            l1 = in1_row[k]
            t0 = (l0 + l1)
            l2 = in2_row[k]
            t1 = (l2 + t0)
            l3 = in3_row[k]
            t2 = (t1 + l3)
            l4 = in4_row[k]
            t3 = (l4 + t2)
            buf[k] = t3
        mean = row_sum(buf) / 64
        rstd = f32(1.0 / math.sqrt(row_sq_dev(buf, mean) / 64 + f32(9.999999747378752e-06)))
        mean32 = f32(mean)
        for k in range(64):
            xb = buf[k]
            y = (xb - mean32) * rstd * in5[k] + in6[k]
            out0_row[k] = y


def launch(in0, in1, in2, in3, in4, in5, in6, out0):
    """Run the group: every output element is written."""
    kernel_row_reduce(in0, in1, in2, in3, in4, in5, in6, out0)
