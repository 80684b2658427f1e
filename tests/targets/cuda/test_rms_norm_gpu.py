"""GPU tests of issue #28's RMSNorm row kernel (skipped without a GPU): Llama's exported
RMSNorm (``rms_norm_cases.llama_rms_norm``, recognised as one ``ai.rms_norm``) at a
Llama decoder's sizes, a warp per row and a block per row, then before the GEMM, against
the float64 reference of the ops as written, outputs poisoned first; and rows of 3e38
and 1e20 (their float32 squares overflow) finite."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from rms_norm_cases import llama_rms_norm

pytestmark = pytest.mark.gpu


def _run(text: str, kinds: list[str], big: float | None = None, seed: int = 0):
    import fusec
    from fusec.dialect.ops import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(text, target="cuda")
    assert [k.kind for k in compiled.kernels] == kinds
    rng = np.random.default_rng(seed)
    args = []
    for param in entry_function(compiled.module).function_type.inputs.data:
        spec = spec_of(param)
        if len(args) == 0:
            values = 2.0 * rng.standard_normal(spec.shape)
            if big is not None:
                rows = values.reshape(-1, spec.shape[-1])
                rows[0::3] = big * rng.uniform(-1.0, 1.0, rows[0::3].shape)
                rows[1::3] = big
        elif len(args) == 1:
            values = 1.0 + 0.1 * rng.standard_normal(spec.shape)
        else:
            values = rng.standard_normal(spec.shape) / spec.shape[0] ** 0.5
        args.append(values.astype(numpy_dtype(spec.dtype)))
    (out,) = compiled._runner(args, poison=True)
    (ref,) = run_reference(fusec.parse(text), args)
    return np.asarray(out), np.asarray(ref)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize(
    "shape", [(4, 1024, 4096), (8, 512, 2048), (64, 64)], ids=["llama-4096", "2048", "warp-rows"]
)
def test_llama_rms_norm_one_kernel(shape: tuple, dtype: str) -> None:
    out, ref = _run(llama_rms_norm(shape, dtype, reciprocal=dtype == "bf16"), ["row_reduce"])
    assert_close(out, ref, dtype, what="rms_norm")


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("big", [3e38, 1e20])
@pytest.mark.parametrize("shape", [(96, 48), (12, 4096)], ids=["warp-rows", "block-rows"])
def test_rows_whose_squares_overflow(shape: tuple, dtype: str, big: float) -> None:
    out, ref = _run(llama_rms_norm(shape, dtype), ["row_reduce"], big=big)
    assert np.isfinite(out.astype(np.float64)).all()
    assert_close(out, ref, dtype, what="rms_norm")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_before_the_gemm(dtype: str) -> None:
    text = llama_rms_norm((4, 256, 1024), dtype, matmul=1536)
    out, ref = _run(text, ["row_reduce", "matmul"])
    assert_close(out, ref, dtype, what="rms_norm -> matmul")
