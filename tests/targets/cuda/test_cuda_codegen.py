"""CUDA kernel source: generated without numba or a GPU, readable, and free of user text."""

from __future__ import annotations

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
