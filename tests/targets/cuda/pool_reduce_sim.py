"""Run pool/reduce cases under Numba's CUDA simulator; print one JSON line per case.

Run as a subprocess by test_pool_reduce.py (``NUMBA_ENABLE_CUDASIM=1`` must be set
before numba.cuda is first imported). A case is compiled for the cuda target (fusion
included: an epilogue joins the anchor's group), run with its outputs poisoned (NaN)
first, and compared with the reference executor: bit for bit (NaN where NaN) when its
name ends in ``_exact``, else at its element type's tolerance.
"""

from __future__ import annotations

import json
import os
import sys

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    sys.exit("pool_reduce_sim.py needs NUMBA_ENABLE_CUDASIM=1")

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # tests/: numerics

import numerics  # noqa: E402
import numpy as np  # noqa: E402
import pool_reduce_cases  # noqa: E402

import fusec  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402

#: The reduce template's constants as they were before a case scaled them.
DEFAULTS: dict = {}


def run(case: dict) -> dict:
    builder = getattr(pool_reduce_cases, case["builder"])
    # thresholds of the reduce template scaled down, so that a shape the simulator can
    # run in seconds takes the path a large one takes (e.g. the two-pass split)
    import fusec.targets.cuda.reduce as reduce_template

    asked = case.get("reduce_constants", {})
    DEFAULTS.update({k: getattr(reduce_template, k) for k in asked if k not in DEFAULTS})
    for key, value in {**DEFAULTS, **asked}.items():  # a case's never outlive it
        setattr(reduce_template, key, value)
    # hand-made groups (channels-last views) are compiled as they are, without fusion
    options = {"pipeline": "infer-shapes"} if case["builder"] == "channels_last_group" else {}
    compiled = fusec.compile(builder(*case["args"]), target="cuda", **options)
    args = pool_reduce_cases.inputs(compiled.module, case["seed"], case["special"])
    outs = compiled._runner(args, poison=True)
    refs = run_reference(compiled.module, args, rounding="groups")
    if case["name"].endswith("_exact"):
        pairs = [
            (np.asarray(o), r.astype(np.asarray(o).dtype)) for o, r in zip(outs, refs, strict=True)
        ]
        passed = [bool(np.array_equal(o, r, equal_nan=True)) for o, r in pairs]
        details = [
            f"{int(np.sum(~((o == r) | (np.isnan(o) & np.isnan(r)))))} differ" for o, r in pairs
        ]
    else:
        results = [numerics.compare(o, r) for o, r in zip(outs, refs, strict=True)]
        passed, details = [c.passed for c in results], [str(c) for c in results]
    return {
        "name": case["name"],
        "passed": passed,
        "details": details,
        "kinds": [k.kind for k in compiled.kernels],
        "fallbacks": [k.kind for k in compiled.kernels if "FALLBACK" in k.source],
        "two_pass": any("two passes" in k.source for k in compiled.kernels),
    }


if __name__ == "__main__":
    for case in json.loads(sys.argv[1]):
        try:
            result = run(case)
        except Exception as err:  # reported to the test, which fails with it
            result = {"name": case["name"], "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(result), flush=True)
