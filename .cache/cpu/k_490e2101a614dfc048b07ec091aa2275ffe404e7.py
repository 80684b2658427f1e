# fusec kernel for one ai.fused "pointwise" group of 6 op(s):
#   ai.silu -> ai.sigmoid -> ai.mul -> ai.tanh -> ai.div -> ai.sub
#   inputs : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<bf16>
#   outputs: tensor<4x8xbf16>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


# pointwise over 4x8
@numba.njit(
    numba.void(ro, ro, ro, rw),
    parallel=False, fastmath=False, error_model="numpy", cache=True,
)
def kernel_pointwise(in0, in1, in2, out0):
    for task in numba.prange(1):
        for j in range(32):
            l0 = in0[j]
            t0 = (f32(-0.0) if (l0 == f32(-math.inf)) else (l0 / (f32(1.0) + math.exp((-l0)))))
            l1 = in1[j]
            t1 = (f32(1.0) / (f32(1.0) + math.exp((-l1))))
            t2 = (t0 * t1)
            t3 = math.tanh(l0)
            l2 = in2[0]
            t4 = (t3 / l2)
            t5 = (t2 - t4)
            out0[j] = t5


def launch(in0, in1, in2, out0):
    """Run the group: every output element is written."""
    kernel_pointwise(in0, in1, in2, out0)
