# fusec kernel for one ai.fused "pointwise" group of 1 op(s):
#   ai.cast
#   inputs : tensor<3x4xf32>
#   outputs: tensor<3x4xf16>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def round_f16(x):
    """x rounded to the nearest float16 (ties to even), as a float32."""
    a = abs(x)
    if a != a:
        return x
    if not a < f32(65520.0):
        return math.copysign(f32(math.inf), x)
    if a < f32(6.103515625e-05):
        # float16 subnormals are multiples of 2**-24: the ulp of float32 0.5
        return math.copysign((a + f32(0.5)) - f32(0.5), x)
    c = a * f32(8193.0)  # Veltkamp split: keep 24 - 13 = 11 significant bits
    return math.copysign(c - (c - a), x)


# pointwise over 3x4
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, out0):
    for task in numba.prange(1):
        for j in range(12):
            l0 = in0[j]
            t0 = round_f16(l0)
            out0[j] = t0


def launch(in0, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, out0)
