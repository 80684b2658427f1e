"""``max_chain_ops``: very long elementwise chains split into bounded kernels."""

from __future__ import annotations

import numpy as np

import fusec
from fusec.dialect.ops import FusedOp
from fusec.runtime.reference import run_reference


def _chain(n: int) -> str:
    lines = ["func.func @chain(%x: tensor<8xf32>) -> tensor<8xf32> {"]
    prev = "%x"
    for i in range(n):
        op = "ai.tanh" if i % 2 else "ai.relu"
        lines.append(f"  %v{i} = {op} {prev} : tensor<8xf32>")
        prev = f"%v{i}"
    lines.append(f"  return {prev} : tensor<8xf32>\n}}")
    return "\n".join(lines)


def _groups(module) -> list[FusedOp]:
    return [op for op in module.walk() if isinstance(op, FusedOp)]


def test_long_chain_splits_at_the_limit_and_keeps_semantics() -> None:
    text = _chain(150)
    compiled = fusec.compile(text, target="reference")
    sizes = [len(list(g.block.ops)) - 1 for g in _groups(compiled.module)]
    assert sizes == [64, 64, 22]
    x = np.random.default_rng(0).standard_normal(8)
    (before,) = run_reference(fusec.parse(text), [x])
    (after,) = run_reference(compiled.module, [x])
    np.testing.assert_allclose(after, before, rtol=1e-12)


def test_the_limit_is_a_pass_option() -> None:
    pipeline = "infer-shapes,fuse-elementwise{max_chain_ops=10}"
    compiled = fusec.compile(_chain(25), target="reference", pipeline=pipeline)
    assert [len(list(g.block.ops)) - 1 for g in _groups(compiled.module)] == [10, 10, 5]
