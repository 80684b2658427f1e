# fusec kernel for one ai.fused "copy" group of 1 op(s):
#   ai.concat
#   inputs : tensor<2xf32>, tensor<2xf32>
#   outputs: tensor<4xf32>
# target: cpu; numpy views and one copy into the output

import numpy as np


def launch(in0, in1, out0):
    """Run the group: every output element is written."""
    v0 = np.concatenate((in0.reshape((2,)), in1.reshape((2,)),), axis=-1)
    out0.reshape((4,))[...] = v0
