"""The cuda copy kernels on the GPU at transformer sizes (skipped without a GPU).

The head split, head merge, K transpose and QKV unpacking of ViT-B/16 at batch 32
(S = 197: a multiple of neither the vector width nor the tile) and BERT-base at batch 8,
ViT's class-token concat and ResNet-50's RGB input NCHW -> NHWC (the cases of
``benchmarks/copy_bench.py``), in f16 and f32: random inputs salted with signalling NaNs
that carry payloads, outputs poisoned first, every result element compared bit for bit
with numpy's, and the path each group's kernel took checked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from copy_bench import (  # noqa: E402
    Case,
    channels_last_case,
    concat_case,
    path_of,
    transformer_cases,
)

pytestmark = pytest.mark.gpu

SIGNALLING_NAN = {"f16": 0x7C05, "f32": 0x7F800005}
NUMPY = {"f16": np.float16, "f32": np.float32}
BITS = {"f16": np.uint16, "f32": np.uint32}


def _cases(dtype: str) -> dict[str, Case]:
    cases = [
        *transformer_cases("ViT-B/16", 32, 197, 12, 64, dtype),
        *transformer_cases("BERT-base", 8, 128, 12, 64, dtype),
        concat_case("ViT-B/16", 32, 197, 768, dtype),
        channels_last_case("ResNet-50", 32, 3, 224, dtype),
    ]
    return {case.label: case for case in cases}


LABELS = list(_cases("f16"))


def _expected_path(label: str, dtype: str) -> str:
    if label.endswith("NHWC"):  # 50176 pixels x 3 channels
        return "tiled transpose 256x4"
    if label.endswith("K transpose"):  # 64 x 197 and 64 x 128 transposes
        return "tiled transpose 64x64" if dtype == "f16" else "tiled transpose 32x32"
    return "vectorised 16 B"


@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("label", LABELS)
def test_transformer_copies_are_bit_exact(label: str, dtype: str) -> None:
    import fusec

    case = _cases(dtype)[label]
    compiled = fusec.compile(case.ir, target="cuda", pipeline="infer-shapes")
    assert [path_of(k.source) for k in compiled.kernels] == [_expected_path(label, dtype)]
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(shape).astype(NUMPY[dtype]) for shape in case.shapes]
    for arg in args:
        arg.reshape(-1).view(BITS[dtype])[5::11] = SIGNALLING_NAN[dtype]
    (out,) = compiled._runner(args, poison=True)
    want = np.ascontiguousarray(case.numpy(*args))
    assert out.shape == want.shape
    differ = np.flatnonzero(np.asarray(out).view(BITS[dtype]) != want.view(BITS[dtype]))
    assert differ.size == 0, f"{differ.size} elements differ, the first at flat index {differ[0]}"
