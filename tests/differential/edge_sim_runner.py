"""Run the numeric edge cases on the cuda target under Numba's CUDA simulator.

Run by test_edge_cases.py as a subprocess (``NUMBA_ENABLE_CUDASIM=1`` must be
set before numba.cuda is imported): ``edge_sim_runner.py OUT_DIR NAME...``
writes ``OUT_DIR/NAME.npz`` (the outputs as float64, ``result0``...) or
``OUT_DIR/NAME.error`` (the exception) per case.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    sys.exit("edge_sim_runner.py needs NUMBA_ENABLE_CUDASIM=1")

sys.path[:0] = [os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))]

import numpy as np  # noqa: E402
from edge_cases import cases  # noqa: E402

import fusec  # noqa: E402


def main(out_dir: Path, names: list[str]) -> None:
    table = cases()
    for name in names:
        text, inputs, _ = table[name]
        try:
            compiled = fusec.compile(text, target="cuda")
            outputs = compiled._runner(inputs, poison=True)
            arrays = {f"result{i}": np.asarray(o).astype(np.float64) for i, o in enumerate(outputs)}
            np.savez(out_dir / f"{name}.npz", **arrays)
        except Exception:
            (out_dir / f"{name}.error").write_text(traceback.format_exc())


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
