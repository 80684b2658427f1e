# fusec kernel for one ai.fused "matmul" group of 3 op(s):
#   ai.reshape -> ai.transpose -> ai.matmul
#   inputs : tensor<2x16x64xf32>, tensor<2x4x16x16xf32>
#   outputs: tensor<2x4x16x16xf32>
# cpu: arrays are flat float32; the runtime converts f16/bf16 inputs to float32 before the call and rounds f16/bf16 outputs back after it

import math

import numba
import numpy as np
from numpy import float32 as f32

ro = numba.types.Array(numba.float32, 1, "C", readonly=True)
rw = numba.float32[::1]


def launch(in0, in1, out0):
    """Run the group: every output element is written."""
    v0 = in0.reshape((2, 16, 64)).reshape((2, 16, 4, 16,))
    v0f = np.ascontiguousarray(v0, dtype=np.float32).reshape(-1)
    v1 = v0.transpose((0, 2, 1, 3,))
    a = in1.reshape((2, 4, 16, 16))
    b = v1.reshape((2, 4, 16, 16))
    np.matmul(a, b, out=out0.reshape((2, 4, 16, 16)))
