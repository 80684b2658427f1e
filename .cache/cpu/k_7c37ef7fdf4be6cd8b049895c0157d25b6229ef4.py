# fusec kernel for one ai.fused "pointwise" group of 1 op(s):
#   ai.cast
#   inputs : tensor<3x4xf32>
#   outputs: tensor<3x4xbf16>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def round_bf16(x):
    """x rounded to the nearest bfloat16 (ties to even), as a float32."""
    a = abs(x)
    if a != a or a == f32(math.inf):
        return x
    if a < f32(1.1754943508222875e-38):
        # bfloat16 subnormals are multiples of 2**-133: the ulp of float32 2**-110
        return math.copysign((a + f32(7.703719777548943e-34)) - f32(7.703719777548943e-34), x)
    scale = f32(1.0)
    if a > f32(1e30):  # keep a * 65537 finite; powers of two scale exactly
        a = a * f32(5.421010862427522e-20)
        scale = f32(1.8446744073709552e19)
    c = a * f32(65537.0)  # Veltkamp split: keep 24 - 16 = 8 significant bits
    return math.copysign((c - (c - a)) * scale, x)


# pointwise over 3x4
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, out0):
    for task in numba.prange(1):
        for j in range(12):
            l0 = in0[j]
            t0 = round_bf16(l0)
            out0[j] = t0


def launch(in0, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, out0)
