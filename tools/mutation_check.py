"""Mutation check of the code generators: does some test fail for each planted bug?

Each mutant is one textual change to fusec's code generation (a dropped bias, a
cast that does not round, swapped operands, a dropped epilogue op, an
off-by-one index), on the cpu path, the CUDA simulator path, the PyTorch
fallback, or all of them (the op facts and the shared expression generator
feed every target). For each mutant the working tree is copied, the change
applied, and the numerics tests of the code generators run against the copy
(``-x``: the first failure kills the mutant). A mutant that no test kills is a
hole in the tests.

    python tools/mutation_check.py [--only NAME ...] [--out tools/mutation_check.md]

Writes the result table (markdown) and exits 1 if a mutant survives or a
change no longer applies (the code moved: update the mutant).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The tests a mutant must fail: codegen numerics on cpu, the CUDA simulator and the
#: PyTorch fallback (on CPU torch where installed), and fusec run --check.
TESTS = [
    "tests/codegen",
    "tests/targets/cpu/test_cpu_abi.py",
    "tests/targets/cpu/test_cpu_exp_nonpos.py",
    "tests/targets/cpu/test_cpu_fast_erfc.py",
    "tests/targets/cpu/test_cpu_fast_exp.py",
    "tests/targets/cpu/test_cpu_microkernel.py",
    "tests/targets/cpu/test_cpu_row_reduce.py",
    "tests/targets/cpu/test_cpu_kinds.py",
    "tests/targets/cpu/test_cpu_examples.py",
    "tests/targets/cpu/test_cpu_random.py",
    "tests/targets/cpu/test_cpu_run_cli.py",
    "tests/targets/cuda/test_cuda_sim.py",
    "tests/targets/cuda/test_cuda_torch_fallback.py",
]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    paths: str  # which code paths it affects
    what: str


MUTANTS = [
    Mutant(
        "bias-dropped",
        "fusec/dialect/ops/anchors.py",
        'return s.arith(args[0], "+", args[1])  # an add, once the bias is broadcast',
        "return args[0]",
        "cpu, cuda (sim), gemm epilogue",
        "ai.bias_add's scalar semantics drop the bias",
    ),
    Mutant(
        "cast-does-not-round",
        "fusec/codegen/expr.py",
        '        if dtype == "f32":\n            return a\n        if self.language is TORCH:',
        '        if dtype in ("f32", "f16", "bf16"):\n            return a\n'
        "        if self.language is TORCH:",
        "cpu, cuda (sim)",
        "a mid-chain ai.cast to f16/bf16 never rounds",
    ),
    Mutant(
        "sub-operands-swapped",
        "fusec/dialect/ops/elementwise.py",
        'return s.arith(args[0], "-", args[1])',
        'return s.arith(args[1], "-", args[0])',
        "cpu, cuda (sim)",
        "ai.sub computes b - a",
    ),
    Mutant(
        "div-operands-swapped",
        "fusec/dialect/ops/elementwise.py",
        'return s.arith(args[0], "/", args[1])',
        'return s.arith(args[1], "/", args[0])',
        "cpu, cuda (sim)",
        "ai.div computes b / a",
    ),
    Mutant(
        "relu-dropped",
        "fusec/dialect/ops/elementwise.py",
        'return s.select(s.negate(s.compare(a, "<", zero)), a, zero)',
        "return a",
        "cpu, cuda (sim), every epilogue",
        "ai.relu (the usual epilogue op) becomes the identity",
    ),
    Mutant(
        "cpu-epilogue-op-lost",
        "fusec/targets/cpu/segments.py",
        "    after = [op for op in ops if op in post or op in fits]\n",
        "    after = [op for op in ops if op in post or op in fits][:-1]\n",
        "cpu matmul/conv",
        "the last op of a matmul/conv epilogue is not generated",
    ),
    Mutant(
        "broadcast-index-off-by-one",
        "fusec/codegen/expr.py",
        'terms.append(var if stride == 1 else f"{var} * {stride}")',
        'terms.append(var if stride == 1 else f"(({var} + 1) % {size}) * {stride}")',
        "cpu, cuda (sim)",
        "a broadcast operand is read one row off along outer dims",
    ),
    Mutant(
        "cpu-loop-index-off-by-one",
        "fusec/targets/cpu/loops.py",
        'expr = row if stride == 1 else f"{row} // {stride}"',
        'expr = row if stride == 1 else f"({row} + 1) // {stride}"',
        "cpu pointwise",
        "the outer loop index of a multi-dim pointwise space is off by one",
    ),
    Mutant(
        "cuda-tail-last-element-skipped",
        "fusec/targets/cuda/pointwise.py",
        '"k = NVEC * VEC + cuda.grid(1)", "if k < N:"',
        '"k = NVEC * VEC + cuda.grid(1)", "if k < N - 1:"',
        "cuda (sim) pointwise",
        "the scalar tail loop misses the last element",
    ),
    Mutant(
        "cuda-index-off-by-one",
        "fusec/targets/cuda/pointwise.py",
        'code.add(2, f"{idx[d]} = r % {space[d]}", f"r = r // {space[d]}")',
        'code.add(2, f"{idx[d]} = (r + 1) % {space[d]}", f"r = r // {space[d]}")',
        "cuda (sim) pointwise",
        "the multi-index of an indexed (broadcast) pointwise kernel is off by one",
    ),
    Mutant(
        "cpu-layernorm-variance-n-minus-1",
        "fusec/targets/cpu/rows.py",
        'f"rstd = f32(1.0 / math.sqrt(row_sq_dev({row}, mean) / {n} + {eps}))"',
        'f"rstd = f32(1.0 / math.sqrt(row_sq_dev({row}, mean) / ({n} - 1) + {eps}))"',
        "cpu row_reduce",
        "layernorm divides the sum of squares by n - 1",
    ),
    Mutant(
        "cpu-layernorm-epsilon-dropped",
        "fusec/targets/cpu/rows.py",
        'f"rstd = f32(1.0 / math.sqrt(row_sq_dev({row}, mean) / {n} + {eps}))"',
        'f"rstd = f32(1.0 / math.sqrt(row_sq_dev({row}, mean) / {n}))"',
        "cpu row_reduce",
        "layernorm ignores epsilon",
    ),
    Mutant(
        "cuda-layernorm-epsilon-dropped",
        "fusec/targets/cuda/row_reduce.py",
        'code.add(2, f"rstd = {literal(1.0)} / math.sqrt(var + EPS)")',
        'code.add(2, f"rstd = {literal(1.0)} / math.sqrt(var)")',
        "cuda (sim) row_reduce",
        "layernorm ignores epsilon",
    ),
    Mutant(
        "fallback-bias-dropped",
        "fusec/targets/cuda/torch_fallback.py",
        "            expression = fuse(op, operands, text)",
        '            expression = fuse(op, operands, "None")',
        "cuda PyTorch fallback",
        "the bias folded into conv2d/addmm is passed as None",
    ),
    Mutant(
        "fallback-sub-operands-swapped",
        "fusec/targets/cuda/torch_fallback.py",
        'ai.SubOp: _simple("torch.sub({0}, {1})"),',
        'ai.SubOp: _simple("torch.sub({1}, {0})"),',
        "cuda PyTorch fallback",
        "ai.sub through PyTorch computes b - a",
    ),
]


def run_mutant(mutant: Mutant, workdir: Path, tests: list[str] = TESTS, stop: bool = True) -> dict:
    tree = workdir / mutant.name
    shutil.copytree(
        ROOT,
        tree,
        ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".dev", "*.egg-info"),
    )
    target = tree / mutant.path
    text = target.read_text()
    if text.count(mutant.old) != 1:
        return {"status": "stale", "detail": f"pattern found {text.count(mutant.old)} times"}
    target.write_text(text.replace(mutant.old, mutant.new))
    env = dict(os.environ, PYTHONPATH=str(tree), FUSEC_CACHE_DIR=str(tree / ".cache"))
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *tests,
            *(["-x"] if stop else []),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    seconds = time.perf_counter() - start
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    if proc.returncode == 0:
        return {"status": "SURVIVED", "detail": "every test passed", "seconds": seconds}
    names = [line.removeprefix("FAILED ").split(" - ")[0] for line in failed]
    killer = names[0] if names else proc.stdout[-300:]
    if not stop and len(names) > 1:
        killer = f"{len(names)} tests, e.g. " + ", ".join(names[:3])
    return {"status": "killed", "detail": killer, "seconds": seconds}


def check_imports_the_copy(workdir: Path) -> None:
    """The copy must be what the tests import (PYTHONPATH before the editable install)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import fusec; print(fusec.__file__)"],
        env=dict(os.environ, PYTHONPATH=str(workdir)),
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    if not probe.stdout.strip().startswith(str(workdir)):
        sys.exit(f"the copy is not imported first: {probe.stdout} {probe.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="mutant names (default: all)")
    parser.add_argument("--out", default=str(ROOT / "tools" / "mutation_check.md"))
    parser.add_argument("--tests", nargs="*", help="test paths (default: TESTS)")
    parser.add_argument("--all-failures", action="store_true", help="no -x: count them all")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    rows = []
    tests = args.tests or TESTS
    with tempfile.TemporaryDirectory(prefix="fusec-mutants-") as tmp:
        probe_tree = Path(tmp) / "probe"
        shutil.copytree(ROOT / "fusec", probe_tree / "fusec")
        check_imports_the_copy(probe_tree)
        for mutant in chosen:
            result = run_mutant(mutant, Path(tmp), tests, stop=not args.all_failures)
            rows.append((mutant, result))
            print(f"{mutant.name}: {result['status']} ({result['detail']})", flush=True)
            shutil.rmtree(Path(tmp) / mutant.name, ignore_errors=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"# Mutation check of the code generators, {datetime.date.today().isoformat()}",
        "",
        f"Commit {commit}; command `python tools/mutation_check.py`. Each mutant is one "
        "textual change in a copy of the tree; the tests run are "
        + ", ".join(f"`{t}`" for t in tests)
        + (
            " (all failures counted)."
            if args.all_failures
            else " (`-x`: the first failing test is named)."
        )
        + " On this machine the PyTorch fallback "
        "tests run on CPU torch when it is installed, and skip otherwise.",
        "",
        "| mutant | file | paths | what it breaks | result | first failing test |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for mutant, result in rows:
        lines.append(
            f"| {mutant.name} | `{mutant.path}` | {mutant.paths} | {mutant.what} | "
            f"{result['status']} | {result['detail']} |"
        )
    survived = [m.name for m, r in rows if r["status"] != "killed"]
    lines += ["", f"{len(rows) - len(survived)} of {len(rows)} mutants killed."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
