"""``fusec profile --target cuda`` under Numba's CUDA simulator: the cuda program's launch
hook (``CudaProgram(..., recorder=)``) times every kernel once per call.

The simulator records no event times, so the recorder times its synchronous, emulated
kernels with the host clock and says so; the event timing itself is checked on a GPU
(test_profile_gpu.py). ``NUMBA_ENABLE_CUDASIM=1`` must be set before numba.cuda is
imported, hence a process of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.requires_target("cuda"), pytest.mark.slow]  # ~10 s: a process

# two kernels: a row reduction, then a pointwise chain reading its result
GRAPH = """\
func.func @g(%x: tensor<4x32xf32>, %y: tensor<4x32xf32>) -> tensor<32x4xf32> {
  %s = ai.softmax %x : tensor<4x32xf32>
  %a = ai.add %s, %y : tensor<4x32xf32> * tensor<4x32xf32>
  %r = ai.relu %a : tensor<4x32xf32>
  %t = ai.transpose %r {perm = array<i64: 1, 0>} : tensor<4x32xf32>
  %u = ai.tanh %t : tensor<32x4xf32>
  return %u : tensor<32x4xf32>
}
"""


def test_profile_under_the_simulator(tmp_path: Path) -> None:
    import fusec

    kernels = fusec.compile(GRAPH, target="cuda", executable=False).kernels
    assert len(kernels) >= 2
    (tmp_path / "g.mlir").write_text(GRAPH)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, "-m", "fusec.cli", "profile", "g.mlir", "--target", "cuda",
         "--repeat", "2", "--warmup", "1", "-q", "--html", "p.html"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "target 'cuda' (CUDA simulator" in out
    rows = [line.split()[0] for line in out.splitlines() if re.match(r"k\d+ ", line)]
    assert sorted(rows) == sorted(k.name for k in kernels)
    assert "CUDA graphs are off in the timed calls" in out
    assert "<svg" in (tmp_path / "p.html").read_text()
