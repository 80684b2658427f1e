# fusec kernel for one ai.fused "row_reduce" group of 1 op(s):
#   ai.softmax
#   inputs : tensor<3x6xf32>
#   outputs: tensor<3x6xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def exp_f32(x):
    """e ** x in float32 arithmetic that vectorises (math.exp is a scalar libm call).

    Cody-Waite: x = n ln2 + r with |r| <= ln2 / 2, e ** r by a degree-7
    polynomial (Cephes expf), times 2 ** n built from exponent bits in two
    halves so that subnormal results round once and large ones overflow to inf.
    The clamps keep n in range and let NaN through; under 1 ulp everywhere.
    """
    xc = f32(89.0) if x > f32(89.0) else x
    xc = f32(-104.0) if xc < f32(-104.0) else xc
    t = fma32(xc, f32(1.4426950408889634), f32(12582912.0))  # 1.5 * 2**23 rounds to an integer
    n = t - f32(12582912.0)
    r = fma32(n, f32(-0.693359375), xc)  # ln2 = 0.693359375 - 2.12194440e-4 (Cody-Waite)
    r = fma32(n, f32(2.12194440e-4), r)
    p = fma32(f32(1.9875691500e-4), r, f32(1.3981999507e-3))
    p = fma32(p, r, f32(8.3334519073e-3))
    p = fma32(p, r, f32(4.1665795894e-2))
    p = fma32(p, r, f32(1.6666665459e-1))
    p = fma32(p, r, f32(5.0000001201e-1))
    p = fma32(p, r * r, r) + f32(1.0)
    k = f32(t).view(np.int32) - np.int32(0x4B400000)  # n as an integer, -150 <= n <= 128
    k1 = k >> np.int32(1)
    s1 = np.int32((k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    s2 = np.int32((k - k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    return p * s1 * s2

from numba.extending import intrinsic


def _fma_codegen(context, builder, signature, args):
    return builder.fma(*args)


@intrinsic
def fma32(typingctx, a, b, c):
    """a * b + c rounded once (LLVM fma: one vfmadd on x86-64, vectorisable)."""
    return numba.float32(numba.float32, numba.float32, numba.float32), _fma_codegen


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def row_max(buf):
    """The largest element, as an integer max over the bits (LLVM vectorises that).

    ``i ^ ((i >> 31) & 0x7FFFFFFF)`` maps the float32 bit patterns to int32s in
    the order of their values, NaN aside: a NaN with the sign bit clear comes
    out as the max, one with it set is skipped. Only softmax calls this, and a
    NaN anywhere in its row makes every output NaN through exp and the sum
    either way, as numpy's does.
    """
    m = np.int32(-2147483648)
    for k in range(buf.size):
        i = f32(buf[k]).view(np.int32)
        i = i ^ ((i >> np.int32(31)) & np.int32(0x7FFFFFFF))
        m = i if i > m else m
    m = m ^ ((m >> np.int32(31)) & np.int32(0x7FFFFFFF))
    return np.int32(m).view(np.float32)


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


# softmax (axis 1) over rows of 3x6
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_row_reduce(in0, out0):
    for row in numba.prange(3):
        buf = np.empty(6, dtype=np.float32)
        i0 = row
        xrow = in0[row * 6:row * 6 + 6]
        out0_row = out0[row * 6:row * 6 + 6]
        m = row_max(xrow)
        for k in range(6):
            buf[k] = exp_f32(xrow[k] - m)
        inv = f32(1.0 / row_sum(buf))
        for k in range(6):
            y = buf[k] * inv
            out0_row[k] = y


def launch(in0, out0):
    """Run the group: every output element is written."""
    kernel_row_reduce(in0, out0)
