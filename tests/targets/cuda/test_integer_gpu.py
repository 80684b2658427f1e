"""GPU tests of one-byte integer inputs in the cuda pointwise kernel (skipped without a
GPU): codes and zero points of each storage (int8, uint8, int4, uint4) dequantized, and
bool masks in the integer kernel, their vectors loaded 4, 8 or 16 bytes at once
(``rawmove.load_bytes<W>``: the bytes sign- or zero-extended in registers); outputs
poisoned with NaN first, against the reference executor (integers and bools exactly)."""

from __future__ import annotations

import cuda_cases
import numpy as np
import pytest
from numerics import assert_close

pytestmark = pytest.mark.gpu


def _run(text: str, seed: int) -> None:
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(text, target="cuda", pipeline="infer-shapes")
    assert [k.kind for k in compiled.kernels] == ["pointwise"]
    assert "load_bytes" in compiled.kernels[0].source
    args = cuda_cases.random_inputs(compiled.module, seed=seed)
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    for out, ref in zip(outs, refs, strict=True):
        out = np.asarray(out)
        if out.dtype.kind in "biu":
            assert np.array_equal(out, ref.astype(out.dtype))
        else:
            assert_close(out, ref, what="pointwise")


@pytest.mark.parametrize(
    ("rows", "cols", "codes", "block"),
    [
        (256, 512, "i8", 32),  # vectors of 16 bytes
        (64, 520, "ui8", 8),  # of 8
        (96, 4100, "i4", 16),  # of 4
        (128, 64, "ui4", 128),  # one block covering the rows
    ],
)
def test_dequantized_one_byte_codes(rows: int, cols: int, codes: str, block: int) -> None:
    _run(cuda_cases.dequantize_codes(rows, cols, codes, block), seed=rows + cols)


@pytest.mark.parametrize(("rows", "cols"), [(64, 256), (3, 8)])
def test_bool_masks_and_integers(rows: int, cols: int) -> None:
    _run(cuda_cases.integer_pointwise(rows, cols, "f16"), seed=cols)
