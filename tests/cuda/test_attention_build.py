"""Fused attention without a GPU: the fusion pass, routing, the online-softmax model, SASS."""

from __future__ import annotations

import re

import numpy as np
import pytest
from attention_cases import attention_graph
from test_gemm_build import needs_toolchain, sass_of

import fusec
from fusec.dialect import ops as ai
from fusec.targets.cuda.attention import model
from fusec.targets.cuda.attention.cpp import AttentionSpec


def _groups(text: str, target: str = "cuda") -> list[ai.FusedOp]:
    compiled = fusec.compile(text, target=target, executable=False)
    return [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]


def _source(text: str) -> str:
    compiled = fusec.compile(text, target="cuda", executable=False)
    (kernel,) = compiled.kernels
    compile(kernel.source, kernel.name, "exec")
    return kernel.source


# ------------------------------------------------------------ fusion pass


def test_attention_chain_is_one_group() -> None:
    (group,) = _groups(attention_graph((2, 3), 64, 80, 64, 64))
    assert group.kind_name == "attention"
    names = [op.name for op in group.block.ops]
    assert names == ["ai.matmul", "ai.mul", "ai.softmax", "ai.matmul", "ai.yield"]
    assert "fusec.causal" not in group.attributes


def test_targets_without_the_kernel_keep_two_matmul_kernels() -> None:
    kinds = sorted(g.kind_name for g in _groups(attention_graph((2,), 64, 64, 64, 64), "cpu"))
    assert kinds == ["matmul", "matmul"]


def test_causal_constant_is_recognised() -> None:
    (group,) = _groups(attention_graph((2,), 9, 9, 64, 64, causal=True))
    assert group.kind_name == "attention" and "fusec.causal" in group.attributes
    assert "causal" in _source(attention_graph((2,), 9, 9, 64, 64, causal=True))


def test_other_masks_and_shared_scores_are_not_fused() -> None:
    text = attention_graph((2,), 9, 9, 64, 64, causal=True).replace(
        "[0.0, -1.0e4", "[-1.0e4, -1.0e4", 1
    )  # row 0 masks its own key: not causal
    assert "attention" not in {g.kind_name for g in _groups(text)}
    shared = (
        attention_graph((2,), 16, 16, 64, 64)
        .replace(
            "return %o : tensor<2x16x64xf16>",
            "return %o, %t : tensor<2x16x64xf16>, tensor<2x16x16xf16>",
        )
        .replace("-> tensor<2x16x64xf16> {", "-> (tensor<2x16x64xf16>, tensor<2x16x16xf16>) {")
    )
    assert "attention" not in {g.kind_name for g in _groups(shared)}


@pytest.mark.parametrize(
    "text, expected",
    [
        (attention_graph((4,), 100, 77, 64, 128), "fused flash-style attention"),
        (attention_graph((2,), 64, 64, 128, 128, "bf16", scale="div"), "scale div"),
    ],
)
def test_routing(text: str, expected: str) -> None:
    assert expected in _source(text)


@pytest.mark.parametrize(
    "text",
    [attention_graph((2,), 64, 64, 32, 32), attention_graph((2,), 64, 64, 64, 64, "f32")],
    ids=["head-32", "f32"],
)
def test_chains_the_kernel_cannot_take_stay_two_matmuls(text: str) -> None:
    assert "attention" not in {g.kind_name for g in _groups(text)}


def test_example_attention_is_not_fused_in_f32() -> None:
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples" / "attention.mlir"
    kinds = sorted(g.kind_name for g in _groups(example.read_text()))
    assert "attention" not in kinds  # f32 and head size 32: no kernel for it


# ------------------------------------------------------------ online softmax model


@pytest.mark.parametrize(
    "spec",
    [
        AttentionSpec(2, 200, 300, 64, 128),  # ragged queries and keys
        AttentionSpec(1, 257, 257, 128, 64, scale_op="div", causal=True),
        AttentionSpec(2, 64, 5, 64, 64, scale_op="none"),  # fewer keys than one block
    ],
    ids=["ragged", "causal-div", "short-keys"],
)
def test_online_softmax_model_matches_attention(spec: AttentionSpec) -> None:
    rng = np.random.default_rng(2)
    q = rng.standard_normal((spec.batch, spec.sq, spec.d)).astype(np.float16)
    k = rng.standard_normal((spec.batch, spec.sk, spec.d)).astype(np.float16)
    v = rng.standard_normal((spec.batch, spec.sk, spec.dv)).astype(np.float16)
    out, writes = model.run(spec, q, k, v, 0.125)
    assert (writes == 1).all()
    scale = {"mul": 0.125, "div": 8.0, "none": 1.0}[spec.scale_op]
    ref = model.reference(q, k, v, scale, spec.causal)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-3
    np.testing.assert_allclose(out, ref, atol=2e-3)


# ------------------------------------------------------------ generated C++


def test_tma_innermost_coordinates_are_16_byte_aligned() -> None:
    from test_conv_build import tma_innermost_coordinates

    coords = tma_innermost_coordinates(AttentionSpec(2, 100, 70, 128, 64).cpp_source())
    assert len(coords) == 3 and all(c == "c * 64" for c in coords), coords


SPECS = [
    AttentionSpec(32, 1024, 1024, 64, 64),
    AttentionSpec(16, 4096, 4096, 128, 128, "bf16", "bf16", causal=True),
]


@needs_toolchain
@pytest.mark.parametrize("spec", SPECS, ids=["d64-f16", "d128-bf16-causal"])
def test_attention_cubin(spec: AttentionSpec, tmp_path) -> None:
    from fusec.runtime.cache import KernelCache
    from fusec.targets.cuda.gemm import build

    built = build.build(spec, KernelCache(tmp_path))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", built.log)
    assert "setmaxnreg' ignored" not in built.log
    sass = sass_of(built.cubin, tmp_path)
    if sass is None:
        pytest.skip("cuobjdump/nvdisasm not found: SASS not checked")
    qk = re.findall(r"HGMMA\.64x128x16\.F32\S* R\d+, gdesc", sass)
    pv = re.findall(rf"HGMMA\.64x{spec.dv}x16\.F32\S* R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", sass)
    assert len(qk) == spec.d // 16, "Q K^T from shared memory"
    assert len(pv) == 128 // 16, "P V with P from registers"
    assert not re.search(r"\b(LDL|STL)\b", sass), "local-memory traffic in the kernel"
    assert "CALL" not in sass and "UTMALDG" in sass
