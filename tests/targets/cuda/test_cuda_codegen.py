"""CUDA kernel source: generated without numba or a GPU, readable, and free of user text."""

from __future__ import annotations

import re

import pytest
from cuda_cases import layernorm_residual, pointwise_broadcast, softmax_axis

import fusec
from fusec.codegen.expr import CodegenError


def _kernels(text: str):
    return fusec.compile(text, target="cuda", pipeline="infer-shapes", executable=False).kernels


@pytest.mark.parametrize(
    "text",
    [
        pointwise_broadcast(8, 64, "f16"),
        layernorm_residual(4, 4096, "bf16"),
        softmax_axis((2, 3, 4), 1, "f32"),
    ],
)
def test_sources_are_python_with_a_header(text: str) -> None:
    (kernel,) = _kernels(text)
    assert kernel.target == "cuda"
    assert kernel.source.startswith("# fusec kernel for one ai.fused")
    compile(kernel.source, kernel.name, "exec")  # valid Python
    assert "@cuda.jit" in kernel.source and "def launch(" in kernel.source


def test_pointwise_source_uses_vector_helpers() -> None:
    (kernel,) = _kernels(pointwise_broadcast(8, 64, "f16"))
    assert "load_f16x8(in0, e, v_in0, 0)" in kernel.source
    assert "store_f16x8(out0" in kernel.source


def test_no_user_text_in_generated_source() -> None:
    text = pointwise_broadcast(4, 16, "f32").replace("@pw_bcast", "@user_marker_fn")
    text = text.replace("%x1", "%user_marker_arg")
    (kernel,) = _kernels(text)
    assert "user_marker" not in kernel.source


def test_two_reductions_in_one_group_are_rejected() -> None:
    x = "tensor<4x8xf32>"
    text = f"""
func.func @f(%x: {x}) -> {x} {{
  %r = ai.fused "row_reduce" (%x) : ({x}) -> {x} {{
  ^bb0(%a: {x}):
    %s = ai.softmax %a : {x}
    %t = ai.softmax %s : {x}
    ai.yield %t : {x}
  }}
  return %r : {x}
}}
"""
    with pytest.raises(CodegenError, match="exactly one layernorm, rms_norm or softmax"):
        _kernels(text)


def test_cli_prints_cuda_kernels_without_a_gpu(tmp_path, capsys) -> None:
    from fusec.cli import main

    path = tmp_path / "g.mlir"
    path.write_text(layernorm_residual(4, 256, "f16"))
    assert main(["compile", str(path), "--target", "cuda", "--emit", "kernels"]) == 0
    out = capsys.readouterr().out
    assert "// ===== kernel k0 (row_reduce) =====" in out
    assert "layernorm over the last axis" in out


def test_capture_needs_the_cuda_target() -> None:
    compiled = fusec.compile(
        pointwise_broadcast(2, 8, "f32"), target="reference", pipeline="infer-shapes"
    )
    with pytest.raises(fusec.FusecError, match="needs a device target"):
        compiled.capture()


LAYERNORM = """func.func @f(%x: tensor<{rows}x{cols}xf16>, %g: tensor<{cols}xf16>, %b: tensor<{cols}xf16>) -> tensor<{rows}x{cols}xf16> {{
  %y = ai.layernorm %x, %g, %b {{epsilon = 1.0e-05 : f64}} : tensor<{rows}x{cols}xf16> * tensor<{cols}xf16> * tensor<{cols}xf16>
  return %y : tensor<{rows}x{cols}xf16>
}}"""  # noqa: E501


@pytest.mark.parametrize(
    "rows, cols, test",
    [
        (128, 768, "True"),  # GPT-2 b1: 4-row blocks filled, 3 x 32 x 8 columns
        (197, 768, "live"),  # ViT: 197 rows leave the last block a row short
        (128, 200, "col < L"),  # 200 columns: 25 vectors of 8, a lane's last one past L
        (197, 200, "live and col < L"),
    ],
)
def test_row_kernels_test_only_the_bounds_some_thread_can_cross(rows, cols, test) -> None:
    """The bounds test around each of a thread's vectors keeps only what can be false for
    some thread (a branch ptxas cannot prove uniform costs the 128 x 768 LayerNorm a fifth
    of its time: benchmarks/results/models-gpu.md)."""
    text = LAYERNORM.format(rows=rows, cols=cols)
    compiled = fusec.compile(text, target="cuda", executable=False)
    (kernel,) = compiled.kernels
    tests = set(re.findall(r"^\s+if (.*):$", kernel.source, re.M)) & {
        "True", "live", "col < L", "live and col < L"
    }  # fmt: skip
    assert tests == {test}, tests
