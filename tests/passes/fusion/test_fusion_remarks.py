"""Why-not-fused remarks: one located line per edge left between kernels."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

import fusec
from fusec.cli import main
from fusec.codegen import KernelRemark
from fusec.passes.fusion.remarks import fusion_remarks
from fusec.passes.fusion.rules import load_rules


def _remarks(name: str, **params):
    module = fusec.compile(EXAMPLES / f"{name}.mlir", target="reference").module
    return [str(r) for r in fusion_remarks(module, load_rules(**params) if params else None)]


def test_large_softmax_row_is_explained_at_the_softmax():
    path = EXAMPLES / "ln_matmul_softmax_large.mlir"
    assert _remarks("ln_matmul_softmax_large") == [
        f"{path}:6:3: remark: ai.softmax not fused with its producer ai.matmul (5:3): "
        "softmax row of 4096 exceeds tile limit 256"
    ]


def test_fully_fused_graphs_have_no_remarks():
    assert _remarks("conv_bias_relu") == []
    assert _remarks("ln_matmul_softmax_small") == []
    assert _remarks("elementwise_chain") == []


def test_second_anchor_is_explained():
    (line,) = _remarks("resnet_block")
    assert ":8:3: remark: ai.conv2d not fused with its producer ai.relu (7:3)" in line
    assert "would both be anchors of one kernel" in line


def test_one_remark_per_cut_edge():
    lines = _remarks("two_consumers")
    assert len(lines) == 2
    assert "ai.add not fused with its producer ai.layernorm" in lines[0]
    assert "one row_reduce kernel, which has one reduction" in lines[0]
    assert "ai.matmul not fused with its producer ai.add" in lines[1]


def test_cycle_and_missing_pass_reasons():
    text = """
func.func @f(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %a = ai.relu %x : tensor<4x4xf32>
  %m = ai.matmul %a, %w : tensor<4x4xf32> * tensor<4x4xf32>
  %c = ai.add %a, %m : tensor<4x4xf32> * tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}
"""
    module = fusec.compile(text, pipeline="fuse-elementwise", target="reference").module
    reasons = {(r.producer, r.consumer): r.reason for r in fusion_remarks(module)}
    assert reasons[("ai.relu", "ai.add")].startswith(
        "fusing would create a cycle between kernels: the consumer also depends on the "
        "producer through ai.matmul (4:3)"
    )
    assert reasons[("ai.matmul", "ai.add")] == (
        "the rules allow this fusion, but no stage of the pipeline made it"
    )
    assert (
        "prologue takes layernorm, injective, dequantize, quantize, not ai.relu"
        in reasons[("ai.relu", "ai.matmul")]
    )


def test_cli_remarks_go_to_stderr(capsys):
    path = EXAMPLES / "ln_matmul_softmax_large.mlir"
    assert main(["compile", str(path), "--remarks", "--target", "reference"]) == 0
    out, err = capsys.readouterr()
    assert 'ai.fused "row_reduce"' in out
    assert err == (
        f"{path}:6:3: remark: ai.softmax not fused with its producer ai.matmul (5:3): "
        "softmax row of 4096 exceeds tile limit 256\n"
    )


@pytest.mark.parametrize("name", ["attention", "mlp_block"])
def test_remarks_leave_the_module_unchanged(name):
    module = fusec.compile(EXAMPLES / f"{name}.mlir", target="reference").module
    before = str(module)
    fusion_remarks(module)
    assert str(module) == before


def test_cli_remarks_use_the_pipeline_policy(capsys):
    path = EXAMPLES / "ln_matmul_softmax_small.mlir"
    spec = "infer-shapes,fuse-prologue,fuse-epilogue{softmax_tile_limit=128},fuse-singletons"
    argv = ["compile", str(path), "--remarks", "--target", "reference", "--pipeline", spec]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.endswith("softmax row of 256 exceeds tile limit 128\n")


@pytest.mark.parametrize(
    "name", ["attention", "mlp_block", "ln_matmul_softmax_large", "resnet_block", "two_consumers"]
)
def test_the_pass_records_the_same_reasons_it_would_give_after_the_fact(name):
    compiled = fusec.compile(EXAMPLES / f"{name}.mlir", target="reference")
    recorded, judged = compiled.remarks(), fusion_remarks(compiled.module)
    assert [r.edge for r in recorded] == [r.edge for r in judged]
    for now, later in zip(recorded, judged, strict=True):
        # the same reason; a merge judged from the other side may name two anchors the
        # other way round
        assert sorted(now.reason.split()) == sorted(later.reason.split()), (now, later)


def test_remarks_are_recorded_at_decision_time_for_the_target():
    # in f32 the cuda conv runs alone through PyTorch (IEEE f32): its epilogue cannot join
    text = (EXAMPLES / "conv_bias_relu.mlir").read_text().replace("xf16>", "xf32>")
    remark, fallback = fusec.compile(text, target="cuda", executable=False).remarks()
    assert (remark.producer, remark.consumer) == ("ai.conv2d", "ai.bias_add")
    assert "the cuda conv templates cannot take the group (f32 conv: f32 graphs keep" in (
        remark.reason
    )
    # and the conv group itself says why it runs on the fallback, at the conv
    assert isinstance(fallback, KernelRemark) and fallback.op == "ai.conv2d"
    assert str(fallback).startswith("<string>:2:3: remark: ai.conv2d runs op by op")
    assert "f32 conv" in fallback.reason
    assert fusec.compile(text, target="cpu", executable=False).remarks() == []


def test_stage_dumps_are_a_debug_option(capsys):
    path = EXAMPLES / "mlp_block.mlir"
    plain = fusec.compile(path, target="reference").ir
    dumped = fusec.compile(
        path, target="reference", pipeline="infer-shapes,canonicalize,cse,fuse{dump_stages=true}"
    )
    err = capsys.readouterr().err
    stages = [line for line in err.splitlines() if line.startswith("// -----// IR Dump After")]
    assert stages == [
        f"// -----// IR Dump After fuse[{s}] //----- //"
        for s in ("prologue", "epilogue", "reduction", "elementwise", "injective", "singletons")
    ]
    assert dumped.ir == plain
