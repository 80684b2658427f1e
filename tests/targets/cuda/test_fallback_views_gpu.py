"""A fallback group's result that PyTorch returns as a view (a slice at an odd offset) is
copied before a Numba kernel reads it with 16-byte vector loads (skipped without a GPU).

Found by the H200 differential run: the slice below came back as a contiguous view 70
bytes into its input, and the vectorised gelu kernel after it failed with
CUDA_ERROR_MISALIGNED_ADDRESS (which then poisoned the process's CUDA context).
"""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close

pytestmark = pytest.mark.gpu

SLICE_THEN_GELU = """
func.func @graph(%a0: tensor<5x33x{t}>) -> (tensor<1x28x{t}>, tensor<5x33x{t}>) {{
  %0 = ai.gelu %a0 : tensor<5x33x{t}>
  %1 = ai.slice %a0 {{offsets = array<i64: 1, 2>, sizes = array<i64: 1, 28>, strides = array<i64: 1, 1>}} : tensor<5x33x{t}>
  %2 = ai.gelu %1 : tensor<1x28x{t}>
  return %2, %0 : tensor<1x28x{t}>, tensor<5x33x{t}>
}}
"""  # noqa: E501


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_a_sliced_view_feeds_a_vectorised_kernel(dtype: str) -> None:
    import fusec
    from fusec.ir.module import entry_function
    from fusec.tools.runner import random_inputs

    text = SLICE_THEN_GELU.format(t=dtype)
    compiled = fusec.compile(text, target="cuda")
    for seed in range(3):
        args = random_inputs(entry_function(fusec.parse(text)), seed)
        outs = compiled(*args)
        refs = fusec.reference(text)(*args)
        for out, ref in zip(outs, refs, strict=True):
            assert_close(np.asarray(out), np.asarray(ref), dtype)
