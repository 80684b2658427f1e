"""PyTorch stays optional: fusec and its other front ends never import torch, and the
PyTorch front end without torch is one error naming the ``torch`` extra. (These run
in every lane, torch installed or not: torch is hidden from the child process.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: Makes ``import torch`` fail in the child, as if torch were not installed.
HIDE_TORCH = "import sys; sys.modules['torch'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_fusec_and_its_other_front_ends_do_not_import_torch() -> None:
    code = (
        "import sys, numpy as np, fusec\n"
        "m = fusec.parse('examples/elementwise_chain.mlir')\n"
        "fusec.reference(m)\n"
        "assert 'torch' not in sys.modules, 'fusec imported torch'\n"
        "print('ok')\n"
    )
    done = _run(code)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


def test_from_torch_without_torch_names_the_extra_at_the_file() -> None:
    code = HIDE_TORCH + (
        "import fusec\n"
        "try:\n"
        "    fusec.from_torch('model.pt2')\n"
        "except fusec.FusecError as err:\n"
        "    print(err)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("model.pt2: error: importing a PyTorch program needs torch")
    assert "pip install 'fusec[torch]'" in done.stdout
