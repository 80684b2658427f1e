"""Golden-IR snapshots of fusion: after each fusion pass and after ``fusec-default``.

``tests/golden/fusion/NAME.passes.mlir`` holds the IR after every pass of
``fusec-default`` from the first fusion pass on, each under an
``// -----// IR Dump After PASS //----- //`` header (as
``fusec compile --print-ir-after-all`` prints it); ``NAME.expected.mlir`` the
final IR. ``pytest --update-golden`` rewrites them on purpose; otherwise a
mismatch fails with a unified diff.
"""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, GOLDEN

import fusec
from fusec.api import print_ir
from fusec.passes.fusion.driver import STAGE_PASSES

#: The fusion stages one pass each, so the IR after every stage can be dumped.
STAGED = "infer-shapes,canonicalize,cse," + ",".join(STAGE_PASSES)

GRAPHS = (
    "conv_bias_relu",
    "resnet_block",
    "mlp_block",
    "attention",
    "ln_matmul_softmax_small",
    "ln_matmul_softmax_large",
    "elementwise_chain",
    "two_consumers",
)


def _compile_with_dumps(name: str) -> tuple[str, str]:
    dumps: list[str] = []

    def after_pass(pass_name: str, module) -> None:
        if pass_name in STAGE_PASSES:
            dumps.append(f"// -----// IR Dump After {pass_name} //----- //\n{print_ir(module)}")

    path = EXAMPLES / f"{name}.mlir"
    staged = fusec.compile(path, after_pass=after_pass, target="reference", pipeline=STAGED)
    compiled = fusec.compile(path, target="reference")  # fusec-default: one ``fuse`` pass
    assert compiled.ir == staged.ir, "fuse and its stages one pass each disagree"
    return "\n".join(dumps), compiled.ir


@pytest.mark.parametrize("name", GRAPHS)
def test_ir_after_each_fusion_pass(name, golden):
    passes, final = _compile_with_dumps(name)
    assert passes.count("IR Dump After") == len(STAGE_PASSES)
    golden(GOLDEN / f"{name}.passes.mlir", passes)
    golden(GOLDEN / f"{name}.expected.mlir", final)


@pytest.mark.parametrize("name", GRAPHS)
def test_fused_snapshot_parses_back_and_is_stable(name):
    """The fused IR is valid input: parsing it and re-running the pipeline changes nothing."""
    final = (GOLDEN / f"{name}.expected.mlir").read_text()
    again = fusec.compile(final, target="reference").ir
    assert again == final
