"""The policy as data: the rule language, the pattern lattice and the legality judge."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from fusion_helpers import summary

import fusec
from fusec.errors import FusecError
from fusec.passes.fusion.classify import Pattern, pattern_of
from fusec.passes.fusion.legality import check_group
from fusec.passes.fusion.rules import default_rules, default_rules_text, load_rules, parse_rules

BODY = """
func.func @f(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %w: tensor<8x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = ai.add %x, %y : tensor<4x8xf32> * tensor<4x8xf32>
  %c = ai.add %a, %b : tensor<4x8xf32> * tensor<8xf32>
  %d = ai.bias_add %c, %b {axis = 1 : i64} : tensor<4x8xf32> * tensor<8xf32>
  %m = ai.matmul %d, %w : tensor<4x8xf32> * tensor<8x8xf32>
  %s = ai.softmax %m : tensor<4x8xf32>
  %k = arith.constant dense<1.0> : tensor<4x8xf32>
  %o = ai.mul %s, %k : tensor<4x8xf32> * tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}
"""  # noqa: E501


def _ops():
    module = fusec.parse(BODY)
    return {op.results[0].name_hint: op for op in module.walk() if op.results}


def test_pattern_lattice_per_op_instance():
    ops = _ops()
    assert pattern_of(ops["a"]) is Pattern.ELEMENTWISE  # equal shapes
    assert pattern_of(ops["c"]) is Pattern.BROADCAST  # numpy broadcasting
    assert pattern_of(ops["d"]) is Pattern.BROADCAST
    assert pattern_of(ops["m"]) is Pattern.ANCHOR
    assert pattern_of(ops["s"]) is Pattern.REDUCTION
    assert pattern_of(ops["k"]) is Pattern.OPAQUE
    assert Pattern.ELEMENTWISE < Pattern.BROADCAST < Pattern.REDUCTION < Pattern.ANCHOR


def test_default_rules_are_data_with_named_parameters():
    rules = default_rules()
    assert [k.name for k in rules.kinds] == [
        "conv",
        "matmul",
        "row_reduce",
        "pointwise",
        "reduce",
        "pool",
        "copy",
        "view",
        "attention",
        "experts",
    ]
    assert rules.param("softmax_tile_limit") == 256
    assert "softmax_tile_limit" in default_rules_text()
    assert load_rules(softmax_tile_limit=8).param("softmax_tile_limit") == 8
    with pytest.raises(FusecError, match="no parameter 'nope'"):
        load_rules(nope=3)


def test_legality_reasons():
    ops = _ops()
    rules = load_rules(softmax_tile_limit=4)
    assert (
        check_group([ops["m"], ops["s"]], rules).reason == "softmax row of 8 exceeds tile limit 4"
    )
    verdict = check_group([ops["m"], ops["s"], ops["o"]], default_rules())
    assert verdict.ok and verdict.kind == "matmul"
    assert "prologue takes layernorm" in check_group([ops["d"], ops["m"]], rules).reason
    assert check_group([ops["a"], ops["c"], ops["d"]], rules).kind == "pointwise"
    assert "opaque" in check_group([ops["k"], ops["o"]], rules).reason


@pytest.mark.parametrize(
    "text, message, line",
    [
        ("kind k {\n  anchor matmul\n  epilogue bogus\n}", "unknown selector 'bogus'", 3),
        ("kind k {\n  anchor softmax\n  prologue matmul duplicate\n}", "never duplicated", 3),
        ("param p = 1\nkind k {\n  body relu where row <= q\n}", "unknown parameter 'q'", 3),
        ("kind k {\n  body relu where shiny\n}", "unknown predicate 'shiny'", 2),
        ("kind k {\n  anchor matmul\n  epilogue relu max\n}", "bad fusion rules", 4),
        ("param p = 1\nparam p = 2\n", "defined twice", 2),
    ],
)
def test_bad_rules_are_located_errors(text, message, line):
    with pytest.raises(FusecError, match=message) as info:
        parse_rules(text, "my.rules")
    assert info.value.location.file == "my.rules"
    assert info.value.location.line == line


def test_a_user_rules_file_changes_the_decisions(tmp_path):
    # The same policy without the softmax epilogue clause: the small chain splits.
    text = default_rules_text().replace(
        "  epilogue softmax max 1 where same_shape, last_axis, row <= softmax_tile_limit\n", ""
    )
    path = tmp_path / "no_softmax_epilogue.rules"
    path.write_text(text)
    spec = f'infer-shapes,fuse-prologue,fuse-epilogue{{rules="{path}"}},fuse-singletons'
    module = fusec.compile(
        EXAMPLES / "ln_matmul_softmax_small.mlir", pipeline=spec, target="reference"
    ).module
    assert [k for k, _ in summary(module)] == ["matmul", "row_reduce"]


def test_missing_rules_file_is_an_error(tmp_path):
    spec = f'fuse-epilogue{{rules="{tmp_path / "absent.rules"}"}}'
    with pytest.raises(FusecError, match="cannot read the fusion rules"):
        fusec.compile(EXAMPLES / "conv_bias_relu.mlir", pipeline=spec, target="reference")
