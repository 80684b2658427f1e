"""Generated source never contains user text: symbol names, value names, attributes, kinds."""

from __future__ import annotations

import pytest

from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.dialect.facts import FUSED_KINDS
from fusec.errors import FusecError
from fusec.target import generate

EVIL = """
func.func @"evil\\"; import os; os.system('pwn')"(%evil_arg: tensor<4x8xf32>, %b: tensor<8xf32>,
                                                 %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %pwned = ai.bias_add %evil_arg, %b {axis = 1, evil.attr = "import os; os.system('pwn')"}
      : tensor<4x8xf32> * tensor<8xf32>
  %evil_gelu = ai.gelu %pwned {approximate = "tanh"} : tensor<4x8xf32>
  %evil_mm = ai.matmul %evil_gelu, %w : tensor<4x8xf32> * tensor<8x8xf32>
  %evil_sm = ai.softmax %evil_mm : tensor<4x8xf32>
  %evil_ln = ai.layernorm %evil_sm, %b, %b {evil.x = "\\n import os"}
      : tensor<4x8xf32> * tensor<8xf32> * tensor<8xf32>
  return %evil_ln : tensor<4x8xf32>
}
"""


def test_no_user_text_in_generated_source():
    module = parse(EVIL)
    run_pipeline(module)
    groups = [op for op in module.walk() if isinstance(op, ai.FusedOp)]
    assert groups
    for i, group in enumerate(groups):
        source = generate(group, "cpu", f"k{i}").source
        compile(source, f"k{i}", "exec")  # it is valid Python
        for text in ("evil", "pwn", "import os", "os.system"):
            assert text not in source, (text, source)


def test_unknown_kind_is_a_located_error_and_not_spliced():
    text = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = ai.fused "x\\"); import os; (\\"" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %y = ai.relu %a : tensor<4xf32>
    ai.yield %y : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}"""
    with pytest.raises(FusecError, match="unknown kind") as err:
        parse(text)  # the verifier knows the registered kinds: it never reaches codegen
    assert err.value.location is not None and err.value.location.line == 3


def test_registered_kind_without_a_template_is_a_located_error(monkeypatch):
    monkeypatch.setitem(FUSED_KINDS, "experimental", "a kind no target has a template for")
    text = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = ai.fused "experimental" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %y = ai.relu %a : tensor<4xf32>
    ai.yield %y : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}"""
    group = next(op for op in parse(text).walk() if isinstance(op, ai.FusedOp))
    with pytest.raises(FusecError, match="has no 'cpu' template") as err:
        generate(group, "cpu", "k0")
    assert err.value.location is not None and err.value.location.line == 3


def test_kernel_name_must_be_an_identifier():
    module = parse(EVIL)
    run_pipeline(module)
    group = next(op for op in module.walk() if isinstance(op, ai.FusedOp))
    with pytest.raises(ValueError):
        generate(group, "cpu", "k0(); import os")
