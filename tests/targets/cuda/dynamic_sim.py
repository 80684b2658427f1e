"""A model with a dynamic batch and sequence on the cuda target under Numba's CUDA
simulator: one ``fusec.from_onnx`` + ``fusec.compile``, three shapes, each compiled once
(issue 29). Prints one JSON line per shape; run by test_dynamic_sim.py in a process of its
own (``NUMBA_ENABLE_CUDASIM=1`` must be set before numba.cuda is first imported)."""

from __future__ import annotations

import json
import os
import sys

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    sys.exit("dynamic_sim.py needs NUMBA_ENABLE_CUDASIM=1")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # tests/: numerics
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "frontend", "onnx")
)

import numerics  # noqa: E402
import numpy as np  # noqa: E402
from dynamic_models import scaled_softmax  # noqa: E402

import fusec  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402


def main(shapes: list[list[int]]) -> None:
    compiles: set[int] = set()
    compiled = fusec.compile(
        fusec.from_onnx(scaled_softmax(np.float16)),
        target="cuda",
        after_pass=lambda _name, module: compiles.add(id(module)),
    )
    rng = np.random.default_rng(0)
    seen: set[tuple[int, int]] = set()
    for batch, seq in shapes:
        x = rng.standard_normal((batch, seq, 24)).astype(np.float16)
        out = compiled(x)
        spec = compiled.specialize(x.shape)
        (poisoned,) = spec.program([x], poison=True)
        expected = run_reference(spec.module, [x], rounding="groups")[0]
        checks = [numerics.compare(o, expected) for o in (out, poisoned)]
        record = {
            "name": f"{batch}x{seq}" + (" again" if (batch, seq) in seen else ""),
            "passed": [c.passed for c in checks],
            "details": [str(c) for c in checks],
            "kinds": [k.kind for k in spec.kernels],
            "compiles": len(compiles),
        }
        seen.add((batch, seq))
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
