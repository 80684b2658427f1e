"""Does a GEMM's code size cost it time in a model? The unrolled and rolled epilogues
(``loop=``) of ConvNeXt-T b32's MLP-up GEMMs alone and beside other kernels.

    python benchmarks/gemm_code_cache.py [--reps 30] [--json out.json]

In ConvNeXt-T b32 on the H200 the bias + exact GELU GEMMs ran 6-49% slower than alone
(benchmarks/results/profile.md: 15 MLP ups 798 us in the model, 597 alone), a ~12 us
excess a launch whatever its size; their SASS is 126 KB, 87 KB of it the epilogue
unrolled over the 192x192 tile (bias only: 39 KB). The question this script answers:
is the excess the instruction caches, cold after the model's other kernels? Each GEMM is
timed (torch.profiler, CUPTI kernel times, mean of ``--reps`` calls) back to back, and
alternated with: a tiny kernel (little code, little data), a 256 MB fill (cold L2), a
small GEMM of other code (66 KB of SASS on little data: evicts code, not data), and the
model-sized MLP down. If the excess follows the other code (and not the data), it is the
code; ``loop=rolled`` (the epilogue on the staged chunks in a rolled loop, 39 KB) should
then keep the alone time beside other kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

LEAD3 = (32, 14, 14)  # ConvNeXt-T b32's stage-3 NHWC pixels (6272)
LEAD1 = (32, 56, 56)  # stage 1 (100352)


def main() -> int:
    import torch
    from gemm_split_k_ab import inputs_for, ir
    from profile_cases import kernel_table

    import fusec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)

    def graph(m, k, n, epilogue, lead, loop="unrolled"):
        pipeline = f"fusec-default,tile-gemm{{loop={loop}}}"
        compiled = fusec.compile(ir(m, k, n, epilogue, lead), target="cuda", pipeline=pipeline)
        xs = inputs_for(m, k, n, epilogue, lead)
        return lambda: compiled(*xs)

    down = graph(6272, 1536, 384, "bias+scale+residual", LEAD3)
    other_code = graph(256, 1536, 384, "bias+scale+residual", (256,))
    tiny_t = torch.zeros(16, device="cuda")
    scratch = torch.empty(64 << 20, device="cuda")
    neighbours = {
        "alone": None,
        "+ tiny kernel": lambda: tiny_t.add_(1.0),
        "+ 256 MB fill": lambda: scratch.fill_(1.0),
        "+ other code, small data": other_code,
        "+ MLP down (model size)": down,
    }
    results: dict = {}
    for loop in ("unrolled", "rolled"):
        ups = {
            "stage-3 up": graph(6272, 384, 1536, "bias+gelu", LEAD3, loop),
            "stage-1 up": graph(100352, 96, 384, "bias+gelu", LEAD1, loop),
        }
        for gemm, up in ups.items():
            for _ in range(3):
                up()
            # the up's own kernel by name: the neighbours' GEMMs (the MLP down has the
            # up's FLOPs) are fusec_gemm kernels too
            (up_name,) = {k for k, _, _ in kernel_table(torch, up, 2) if "fusec_gemm" in k}
            for name, other in neighbours.items():
                fn = up if other is None else (lambda up=up, other=other: (up(), other()))
                rows = kernel_table(torch, fn, args.reps)
                gemm_us = sum(us for kname, us, _ in rows if kname == up_name)
                key = f"{gemm} loop={loop} {name}"
                results[key] = {"us": gemm_us, "kernels": rows}
                print(f"{key:60s} {gemm_us:8.1f} us", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
