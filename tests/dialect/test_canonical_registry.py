"""The ops' canonicalisation patterns are registered, not named by the ops (issue 27:
``dialect.ops`` imports nothing of ``dialect.canonical``): every op class with the
``Canonicalized`` trait has its patterns in ``CANONICAL_PATTERNS`` and every registered
class has the trait, so ``canonicalize`` finds each pattern, whatever module was imported
first."""

from __future__ import annotations

import subprocess
import sys

from fusec.dialect import ops as ai


def _op_classes() -> list[type]:
    return [op for op in ai.AI.operations if isinstance(op, type)]


def test_every_canonicalized_op_has_registered_patterns() -> None:
    traited = {op for op in _op_classes() if op.has_trait(ai.Canonicalized)}
    assert traited, "no op carries the Canonicalized trait"
    assert traited == set(ai.CANONICAL_PATTERNS), sorted(
        op.name for op in traited ^ set(ai.CANONICAL_PATTERNS)
    )
    for op, patterns in ai.CANONICAL_PATTERNS.items():
        assert patterns, op.name
        (trait,) = [t for t in op.traits if isinstance(t, ai.Canonicalized)]
        assert trait.get_patterns(op) == patterns


def test_patterns_are_registered_when_only_the_ops_module_is_imported() -> None:
    """Importing ``fusec.dialect.ops`` alone (as a front end does) runs the package's
    ``__init__``, which registers the patterns: canonicalize folds relu(relu(x))."""
    code = (
        "from fusec.dialect.ops import CANONICAL_PATTERNS, ReluOp\n"
        "assert CANONICAL_PATTERNS[ReluOp], CANONICAL_PATTERNS\n"
        "import fusec\n"
        "text = '''func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %a = ai.relu %x : tensor<4xf32>\n"
        "  %b = ai.relu %a : tensor<4xf32>\n"
        "  return %b : tensor<4xf32>\n}\n'''\n"
        "ir = fusec.compile(fusec.parse(text), target='reference', pipeline='canonicalize')\n"
        "print(str(ir.module).count('ai.relu'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1"], out.stdout + out.stderr
