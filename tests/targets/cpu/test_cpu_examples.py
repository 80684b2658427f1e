"""Every example graph through the default pipeline on the cpu target, f32 and f16."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from cpu_check import check
from lanes import sampled

import fusec
from fusec.runtime.cache import KernelCache

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*.mlir"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


# Each example compiles into a cold module cache (5-7 s): the default lane runs every
# 2nd in f32 and the others in f16; the slow lane the rest.
@pytest.mark.parametrize("path", sampled(EXAMPLES, 2), ids=lambda p: p.stem)
def test_example_matches_reference(cache, path):
    program = check(path.read_text(), cache=cache, fuse=True)
    assert program.launches, "the example produced no kernel"


@pytest.mark.parametrize("path", sampled(EXAMPLES, lambda i, _p: i % 2 == 1), ids=lambda p: p.stem)
def test_example_in_f16_matches_reference(cache, path):
    text = re.sub(r"(tensor<[0-9x]*)f32>", r"\1f16>", path.read_text())
    if text == path.read_text():
        pytest.skip("the example has no f32 tensors")
    check(text, cache=cache, fuse=True, seed=1)


def test_compile_api_runs_kernels_and_lists_them():
    path = next(p for p in EXAMPLES if p.stem == "conv_bias_relu")
    compiled = fusec.compile(path, target="cpu")
    assert compiled.target == "cpu"
    assert [k.kind for k in compiled.kernels] == ["conv"]
    assert "@cached_njit(" in compiled.kernels[0].source  # numba.njit with sealed cache files
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 28, 28)).astype(np.float16)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float16)
    b = rng.standard_normal(64).astype(np.float16)
    out = compiled(x, w, b)
    ref = fusec.reference(path)(x, w, b)
    assert out.dtype == np.float16 and out.shape == (1, 64, 26, 26)
    err = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref.astype(np.float64))
    assert err < 1e-2


def _no_gpu(monkeypatch):
    from fusec.targets.cuda.target import CudaTarget

    monkeypatch.setattr(CudaTarget, "auto_selectable", lambda self: False)


def test_auto_target_is_cpu_without_a_gpu(monkeypatch):
    from fusec import api

    _no_gpu(monkeypatch)
    assert api.resolve_target("auto") == "cpu"
    assert api.resolve_target("cpu") == "cpu"


def test_auto_never_falls_back_to_the_reference_for_unfused_pipelines(monkeypatch):
    _no_gpu(monkeypatch)
    path = next(p for p in EXAMPLES if p.stem == "mlp_block")
    assert fusec.compile(path).target == "cpu"
    for target in ("auto", "cpu"):
        with pytest.raises(fusec.FusecError, match="outside any ai.fused group"):
            fusec.compile(path, target=target, pipeline="infer-shapes,canonicalize")
    interpreted = fusec.compile(path, target="reference", pipeline="infer-shapes,canonicalize")
    assert interpreted.target == "reference" and interpreted.kernels == []
