# fusec kernel for one ai.fused "row_reduce" group of 1 op(s):
#   ai.layernorm
#   inputs : tensor<2x3x30xf32>, tensor<30xf32>, tensor<30xf32>
#   outputs: tensor<2x3x30xf32>
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


# layernorm over rows of 2x3x30
@numba.njit(
    numba.void(ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_row_reduce(in0, in1, in2, out0):
    for row in numba.prange(6):
        i0 = row // 3
        i1 = row % 3
        xrow = in0[row * 30:row * 30 + 30]
        out0_row = out0[row * 30:row * 30 + 30]
        mean = row_sum(xrow) / 30
        rstd = f32(1.0 / math.sqrt(row_sq_dev(xrow, mean) / 30 + f32(0.0010000000474974513)))
        mean32 = f32(mean)
        for k in range(30):
            xb = xrow[k]
            y = (xb - mean32) * rstd * in1[k] + in2[k]
            out0_row[k] = y


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    kernel_row_reduce(in0, in1, in2, out0)
