"""Dynamic shapes on the cuda target without a GPU (issue 29): ``dynamic_sim.py`` runs one
``fusec.from_onnx`` + ``fusec.compile`` of an f16 model with dynamic batch and sequence at
three shapes (and one again) under Numba's CUDA simulator, each output (poisoned first
on the direct run) compared with the reference on the specialization's IR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_client import run_simulator

pytestmark = pytest.mark.requires_target("cuda")  # the simulator is numba-cuda's

SCRIPT = Path(__file__).with_name("dynamic_sim.py")


@pytest.mark.slow  # a process of its own under the simulator
def test_three_shapes_each_compiled_once_under_the_simulator():
    shapes = [[1, 3], [2, 5], [3, 2], [2, 5]]
    done = run_simulator(SCRIPT, shapes)  # type: ignore[arg-type]
    assert list(done) == ["1x3", "2x5", "3x2", "2x5 again"], json.dumps(done)
    for name, record in done.items():
        assert record["passed"] == [True, True], f"{name}: {record['details']}"
        assert record["kinds"] == ["row_reduce"]  # the scale and shift fused into the softmax
    assert [r["compiles"] for r in done.values()] == [1, 2, 3, 3]  # the repeat: none
