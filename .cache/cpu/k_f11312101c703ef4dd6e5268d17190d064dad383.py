# fusec kernel for one ai.fused "matmul" group of 4 op(s):
#   ai.layernorm -> ai.matmul -> ai.add -> ai.gelu
#   inputs : tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256xf32>
#   outputs: tensor<2x16x256xf32>
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
    numba.void(ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_prologue0(in0, in1, in2, s0):
    for row in numba.prange(32):
        i0 = row // 16
        i1 = row % 16
        xrow = in0[row * 64:row * 64 + 64]
        s0_row = s0[row * 64:row * 64 + 64]
        mean = row_sum(xrow) / 64
        rstd = f32(1.0 / math.sqrt(row_sq_dev(xrow, mean) / 64 + f32(9.999999960041972e-13)))
        mean32 = f32(mean)
        for k in range(64):
            xb = xrow[k]
            y = (xb - mean32) * rstd * in1[k] + in2[k]
            s0_row[k] = y


# pointwise over 2x16x256
@numba.njit(
    numba.void(rw, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_epilogue(s1, in4, out0):
    for task in numba.prange(32):
        i0 = task
        for j in range(256):
            l0 = s1[i0 * 256 + j]
            l1 = in4[j]
            t0 = (l0 + l1)
            t1 = (f32(-0.0) if (t0 == f32(-math.inf)) else ((f32(0.5) * t0) * math.erfc(((-t0) * f32(0.7071067811865476)))))
            out0[i0 * 256 + j] = t1


def launch(in0, in1, in2, in3, in4, out0):
    """Run the group: every output element is written."""
    s0 = np.empty(2048, dtype=np.float32)
    s1 = np.empty(8192, dtype=np.float32)
    kernel_prologue0(in0, in1, in2, s0)
    a = s0.reshape((2, 16, 64))
    b = in3.reshape((64, 256))
    np.matmul(a, b, out=s1.reshape((2, 16, 256)))
    kernel_epilogue(s1, in4, out0)
