# fusec kernel for one ai.fused "pointwise" group of 1 op(s):
#   ai.tanh
#   inputs : tensor<3xf32>
#   outputs: tensor<3xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 3
@numba.njit(
    numba.void(ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, out0):
    for task in numba.prange(1):
        for j in range(3):
            l0 = in0[j]
            t0 = math.tanh(l0)
            out0[j] = t0


def launch(in0, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, out0)
