# fusec kernel for one ai.fused "copy" group of 1 op(s):
#   ai.slice
#   inputs : tensor<2x6xf32>
#   outputs: tensor<2x2xf32>
# target: cpu; numpy views and one copy into the output

import numpy as np


def launch(in0, out0):
    """Run the group: every output element is written."""
    v0 = in0.reshape((2, 6))[0:2:1, 0:2:1]
    out0.reshape((2, 2))[...] = v0
