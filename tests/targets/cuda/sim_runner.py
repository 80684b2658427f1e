"""Run CUDA cases under Numba's CUDA simulator; print one JSON line per case.

Run as a subprocess by test_cuda_sim.py: ``NUMBA_ENABLE_CUDASIM=1`` must be set
before numba.cuda is first imported, which a pytest process cannot promise.
"""

from __future__ import annotations

import json
import os
import sys

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    sys.exit("sim_runner.py needs NUMBA_ENABLE_CUDASIM=1")

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # tests/: numerics

import cuda_cases  # noqa: E402
import numerics  # noqa: E402
import numpy as np  # noqa: E402

import fusec  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402


def run(case: dict) -> dict:
    text = getattr(cuda_cases, case["builder"])(*case["args"])
    # a case of one fused group keeps it as built; a whole graph ("pipeline": "fusec-cuda")
    # goes through the cuda target's fusion and layout passes
    compiled = fusec.compile(text, target="cuda", pipeline=case.get("pipeline", "infer-shapes"))
    args = cuda_cases.random_inputs(compiled.module, seed=case.get("seed", 0))
    if "scale" in case:  # e.g. rows of tiny variance, where layernorm's epsilon matters
        args = [(a.astype(np.float64) * case["scale"]).astype(a.dtype) for a in args]
    outs = compiled._runner(args, poison=True)
    # the kernels' own rounding points (f32 inside a group), at each result's own dtype
    refs = run_reference(compiled.module, args, rounding="groups")
    if case["name"].endswith("_exact"):  # float32-exact graphs: bit for bit
        pairs = list(zip(outs, refs, strict=True))
        passed = [bool(np.array_equal(o, r.astype(o.dtype))) for o, r in pairs]
        details = [f"max |diff| {float(np.max(np.abs(o - r))):.3g}" for o, r in pairs]
    else:
        results = [numerics.compare(o, r) for o, r in zip(outs, refs, strict=True)]
        passed, details = [c.passed for c in results], [str(c) for c in results]
    return {
        "name": case["name"],
        "passed": passed,
        "details": details,
        "kinds": [k.kind for k in compiled.kernels],
        "targets": [_target_line(k.source) for k in compiled.kernels],
    }


def _target_line(source: str) -> str:
    """A kernel header's ``# target:`` line (which template, or the fallback and why)."""
    return next((line for line in source.splitlines() if line.startswith("# target:")), "")


if __name__ == "__main__":
    for case in json.loads(sys.argv[1]):
        try:
            result = run(case)
        except Exception as err:  # reported to the test, which fails with it
            result = {"name": case["name"], "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(result), flush=True)
