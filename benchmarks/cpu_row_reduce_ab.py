"""A/B of the cpu row-reduce template: this tree's against a git revision's, in one run.

The machine is shared and noisy, so the old and new kernels (and numpy op by
op) are timed in interleaved rounds in one process: each round runs every
variant ``--reps`` times, and the table shows the median over all rounds. The
old template is loaded from ``git show REV:fusec/targets/cpu/row_reduce.py``
(with that revision's row helpers) and only swapped in while the graph is
compiled. Every result is first checked against the float64 reference on a
NaN-poisoned output.

    python benchmarks/cpu_row_reduce_ab.py [--rev HEAD] [--rounds 7] [--reps 10] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()

import numpy as np  # noqa: E402

import fusec  # noqa: E402
import fusec.targets.cpu.common as current  # noqa: E402
from fusec.api import parse  # noqa: E402
from fusec.ir.module import entry_function  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402
from fusec.targets.cpu.target import TARGET as CPU  # noqa: E402
from fusec.tools.runner import random_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "fusec/targets/cpu/row_reduce.py"  # fusec/codegen/cpu_row_reduce.py before the move


def t(shape) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def graphs(m: int, n: int) -> dict[str, str]:
    x, v = t((m, n)), t((n,))
    s3 = t((m // 16, 16, n))
    return {
        "softmax": f"""
func.func @f(%x: {x}) -> {x} {{
  %0 = ai.softmax %x : {x}
  return %0 : {x}
}}""",
        "layernorm": f"""
func.func @f(%x: {x}, %g: {v}, %b: {v}) -> {x} {{
  %0 = ai.layernorm %x, %g, %b : {x} * {v} * {v}
  return %0 : {x}
}}""",
        # attention-style: scale and additive mask before, a product after
        "scale_mask_softmax_mul": f"""
func.func @f(%x: {x}, %mask: {x}, %v: {x}) -> {x} {{
  %c = arith.constant dense<0.125> : tensor<f32>
  %0 = ai.mul %x, %c : {x} * tensor<f32>
  %1 = ai.add %0, %mask : {x} * {x}
  %2 = ai.softmax %1 : {x}
  %3 = ai.mul %2, %v : {x} * {x}
  return %3 : {x}
}}""",
        "residual_layernorm_gelu": f"""
func.func @f(%x: {x}, %r: {x}, %g: {v}, %b: {v}) -> ({x}, {x}) {{
  %s = ai.add %x, %r : {x} * {x}
  %n = ai.layernorm %s, %g, %b : {x} * {v} * {v}
  %y = ai.gelu %n {{approximate = "tanh"}} : {x}
  return %s, %y : {x}, {x}
}}""",
        "softmax_axis1_of_3d": f"""
func.func @f(%x: {s3}) -> {s3} {{
  %0 = ai.softmax %x {{axis = 1}} : {s3}
  return %0 : {s3}
}}""",
    }


def load_old(rev: str):
    """The template module at ``rev`` (imported under a private name)."""
    text = subprocess.run(
        ["git", "show", f"{rev}:{TEMPLATE}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(f"/tmp/fusec_ab_row_reduce_{abs(hash((rev, text)))}.py")
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("fusec_ab_old_row_reduce", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def old_template(module):
    """Generate row_reduce groups with ``module`` (and its row helpers) inside the block."""
    key = "row_reduce"
    saved_path, saved_helpers = CPU.templates[key], current.ROW_HELPERS
    CPU.templates[key] = dataclasses.replace(saved_path, module=module.__name__)
    current.ROW_HELPERS = module.ROW_HELPERS  # cpu_common.assemble reads them from here
    try:
        yield
    finally:
        CPU.templates[key] = saved_path
        current.ROW_HELPERS = saved_helpers


def checked(name: str, compiled, args, ref) -> None:
    outs = compiled(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for got, want in zip(outs, ref, strict=True):
        err = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
        if not err < 1e-5:  # NaN fails too
            raise SystemExit(f"{name}: wrong result, rel err {err}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("graphs", nargs="*", help="names of graphs to run (default: all)")
    opts = parser.parse_args()
    m, n = (256, 1024) if opts.quick else (4096, 1024)
    old = load_old(opts.rev)
    rows = []
    for name, text in graphs(m, n).items():
        if opts.graphs and name not in opts.graphs:
            continue
        module = parse(text)
        args = random_inputs(entry_function(module), seed=1)
        ref = run_reference(module, args, precision="float64")
        new_c = fusec.compile(text, target="cpu")
        with old_template(old):
            old_c = fusec.compile(text, target="cpu")
        sources = [{k.source for k in c.kernels if k.kind == "row_reduce"} for c in (old_c, new_c)]
        assert sources[0] and sources[0].isdisjoint(sources[1]), "the A/B compares nothing"
        for label, c in (("old", old_c), ("new", new_c)):
            checked(f"{name} ({label})", c, args, ref)
        variants = {
            "old": lambda c=old_c, a=args: c(*a),
            "new": lambda c=new_c, a=args: c(*a),
            "numpy": lambda m=module, a=args: run_reference(m, a, precision="native"),
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(opts.rounds):
            for label, fn in variants.items():
                for _ in range(opts.reps):
                    start = time.perf_counter()
                    fn()
                    times[label].append((time.perf_counter() - start) * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((name, med, {k: min(v) for k, v in times.items()}))
        print(f"{name}: old {med['old']:.2f} ms, new {med['new']:.2f} ms", flush=True)
    print(f"\n{m}x{n} f32, {opts.rounds} rounds x {opts.reps} reps, medians (minima)\n")
    print("| graph | old ms | new ms | old/new | numpy op-by-op ms | numpy/new |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, med, low in rows:
        old_ms, new_ms, np_ms = med["old"], med["new"], med["numpy"]
        print(
            f"| {name} | {old_ms:.2f} ({low['old']:.2f}) | {new_ms:.2f} ({low['new']:.2f}) "
            f"| {old_ms / new_ms:.2f}x | {np_ms:.2f} | {np_ms / new_ms:.2f}x |"
        )


if __name__ == "__main__":
    main()
