"""The benchmark runners' shared core: suites as data, one timer, one results format.

Design
======

Two runners, one per target, with the same commands::

    python benchmarks/cpu.py list                     # the suites: name, script, table, what
    python benchmarks/cpu.py run ops vs-ort [-- ARGS] # full runs, tables in benchmarks/results
    python benchmarks/cpu.py smoke [SUITE ...]        # every suite (or those named) at smoke size
    python benchmarks/gpu.py run gemm --out $OUT      # the cuda target's suites, on a GPU

A **suite** (:class:`Suite`) is one benchmark, declared as data in ``cpu.py`` or ``gpu.py``:
its name, the script under ``benchmarks/`` that measures it, the arguments of its full run,
the results table it writes (``results/<table>.md`` and ``.json``, undated: one table per
benchmark, the latest; git has the history), the modules its full run needs, its named
variants (``options``: the A/B questions that used to be one-off scripts, e.g. ``cpu.py run
threads:pin-off``) and its **smoke**: a function that takes the suite's own cases (the IR
texts, ONNX models and baselines its script builds, at a few elements each) through the same
steps as the full run but cheaply, and returns the rows of a table.

Full runs (``run``) execute the suite's script in a new process from the repository root,
so a script keeps its command line, its own checks against the reference and its table;
every suite of one ``run`` names the same commit (``FUSEC_COMMIT``, set once here when the
caller did not). Baselines are measured in the same run by each script (interleaved rounds
or alternated calls): a table never compares against a number from another process or day.

Smoke runs (``smoke``) happen in this process, without a GPU and without timing claims: on
the cpu runner the fusec side runs on the ``reference`` target (the numpy executor, no
Numba builds) against the suite's baselines (hand-written numpy, onnxruntime) on fresh
random inputs, checked by relative L2 error; on the gpu runner each case is compiled for the
``cuda`` target (code generation only: the kernels' kinds and their count, nothing is
launched) and, when small, run on the reference executor, whose outputs must be finite;
the model zoos, which need torch to build a model, check their plan; gemm-host-path runs its
script in a process of its own (it stands a fake torch in). Each smoke is
timed by the shared timer (:func:`bench_common.best_ms`, one round) and written in the one
results format (:class:`Table`) to ``--out`` (a temporary folder by default: smoke tables
never land in ``benchmarks/results``). ``tests/tools/test_bench_runner.py`` runs every
suite's smoke (each meant to take under 2 s on 2 cores, imports included; the slowest,
gemm-host-path and vs-ort, take 2.3-2.8 s at a load of 8) and checks the tables it writes.

The results format (:class:`Table`, ``FORMAT``): ``<stem>.json`` holds ``format``,
``benchmark``, ``target``, ``mode`` (``full`` or ``smoke``), ``commit``, ``date``,
``machine``, ``columns`` and ``rows`` (one object per row with every column); ``<stem>.md``
holds a title, a line naming the commit and the machine, and one markdown table of the same
columns and rows. :func:`check_table` says what is wrong with a pair of files. The full runs
of the suites that used to print their figures write :class:`Table` too (``--out``, through
:func:`write_table`: cpu call-overhead, conv-layers, conv-transpose, pool, launcher,
transformers, fusion-scaling); the scripts with committed tables keep those tables' layout
(read by people and by ``git diff``); a new suite writes :class:`Table`.

Shared timing lives in ``bench_common``: ``best_ms`` (min of N rounds of K calls) and
``alternate`` (the contenders' rounds interleaved, for same-run baselines); the GPU scripts
share ``stream_timing`` (CUDA events against the wall clock).

An A/B of two trees is an option of ``run``: ``--against REV [--pairs N]`` runs each suite
(one that writes its table under ``--out``) with git revision ``REV``'s ``fusec/`` exported
first on ``PYTHONPATH`` and with this tree, alternating, ``N`` times each, the tables in
``<out>/ab-<rev>-<i>`` and ``<out>/ab-tree-<i>`` (each naming its commit): the benchmark code
is this tree's on both sides, only the compiler differs.

The device machines run one script, ``benchmarks/device.sh STAGE ...`` (its stages are the
former per-question shell scripts, whose names stay as one-line aliases).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the scripts import their neighbours by name
    sys.path.insert(0, str(HERE))

from bench_common import RESULTS, ROOT, best_ms, commit, cpu_name  # noqa: E402

#: The results format's name and version, in every ``.json`` a :class:`Table` writes.
FORMAT = "fusec-bench/1"
#: The keys of a :class:`Table`'s JSON.
TABLE_KEYS = (
    "format",
    "benchmark",
    "target",
    "mode",
    "commit",
    "date",
    "machine",
    "columns",
    "rows",
)
#: A smoke's rows: the columns it fills, then the rows (each a dict of those columns).
SmokeResult = tuple[list[str], list[dict[str, Any]]]


@dataclass(frozen=True)
class Suite:
    """One benchmark of a runner, as data (see the module's docstring)."""

    name: str
    script: str
    summary: str
    smoke: Callable[[], SmokeResult]
    args: tuple[str, ...] = ()
    table: str | None = None
    requires: tuple[str, ...] = ()
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)

    def command(self, option: str | None, out: Path, extra: Sequence[str]) -> list[str]:
        """The full run's command line: the script, its arguments (``{out}`` replaced by
        the results folder), the option's, then ``extra``."""
        if option is not None and option not in self.options:
            known = ", ".join(sorted(self.options)) or "none"
            raise SystemExit(f"suite {self.name!r} has no option {option!r} (options: {known})")
        args = self.options[option] if option is not None else self.args
        return [
            sys.executable,
            str(HERE / self.script),
            *(a.replace("{out}", str(out)) for a in args),
            *extra,
        ]


@dataclass
class Table:
    """A results table in the one format: a title, its columns, its rows, where it ran."""

    benchmark: str
    target: str
    mode: str
    columns: list[str]
    rows: list[dict[str, Any]]
    title: str = ""
    commit: str = ""
    date: str = ""
    machine: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "benchmark": self.benchmark,
            "target": self.target,
            "mode": self.mode,
            "commit": self.commit,
            "date": self.date,
            "machine": self.machine,
            "columns": self.columns,
            "rows": [{c: row.get(c) for c in self.columns} for row in self.rows],
        }

    def markdown(self) -> str:
        head = self.title or f"{self.benchmark} ({self.target}, {self.mode})"
        where = ", ".join(f"{k} {v}" for k, v in self.machine.items())
        lines = [
            f"# {head}",
            "",
            f"Commit {self.commit}, {self.date}; {where}.",
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "---|" * len(self.columns),
        ]
        for row in self.rows:
            lines.append("| " + " | ".join(cell(row.get(c)) for c in self.columns) + " |")
        return "\n".join(lines) + "\n"

    def write(self, stem: Path) -> Path:
        """Write ``<stem>.json`` and ``<stem>.md``; the stem back."""
        stem.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{stem}.json").write_text(json.dumps(self.payload(), indent=2, default=str) + "\n")
        Path(f"{stem}.md").write_text(self.markdown())
        return stem


def cell(value: Any) -> str:
    """A table cell: floats to 4 significant digits, lists joined, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) or "-"
    return str(value).replace("|", "/").replace("\n", " ")


def machine() -> dict[str, Any]:
    """Where a table was measured: the CPU, its cores, Python, the load average."""
    info: dict[str, Any] = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    if hasattr(os, "getloadavg"):
        info["load"] = round(os.getloadavg()[0], 2)
    return info


def check_table(stem: Path) -> list[str]:
    """What is wrong with the table at ``stem`` (``.json`` and ``.md``); [] when well formed."""
    problems: list[str] = []
    js, md = Path(f"{stem}.json"), Path(f"{stem}.md")
    for path in (js, md):
        if not path.is_file():
            problems.append(f"{path.name} is missing")
    if problems:
        return problems
    try:
        data = json.loads(js.read_text())
    except json.JSONDecodeError as err:
        return [f"{js.name} is not JSON: {err}"]
    missing = [k for k in TABLE_KEYS if k not in data]
    if missing:
        return [f"{js.name} lacks {', '.join(missing)}"]
    if data["format"] != FORMAT:
        problems.append(f"{js.name}: format {data['format']!r}, not {FORMAT!r}")
    columns = data["columns"]
    if not columns or not all(isinstance(c, str) for c in columns):
        problems.append(f"{js.name}: columns must be a non-empty list of names")
    if not data["rows"]:
        problems.append(f"{js.name} has no rows")
    for i, row in enumerate(data["rows"]):
        if not isinstance(row, dict) or list(row) != columns:
            problems.append(f"{js.name}: row {i} does not have exactly the columns {columns}")
    table = [line for line in md.read_text().splitlines() if line.startswith("|")]
    if not table or table[0] != "| " + " | ".join(columns) + " |":
        problems.append(f"{md.name}: its table's header is not the columns {columns}")
    elif len(table) != 2 + len(data["rows"]):
        problems.append(f"{md.name}: {len(table) - 2} table rows, the JSON has {len(data['rows'])}")
    return problems


def write_table(
    out: Path | str,
    benchmark: str,
    target: str,
    columns: Sequence[str],
    rows: list[dict[str, Any]],
    title: str,
    mode: str = "full",
) -> Path:
    """Write ``<out>/<benchmark>.md`` and ``.json`` in the one results format, naming the
    commit, the date and the machine; the stem back."""
    table = Table(
        benchmark=benchmark,
        target=target,
        mode=mode,
        columns=list(columns),
        rows=rows,
        title=title,
        commit=commit(dirty="+dirty"),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine(),
    )
    return table.write(Path(out) / benchmark)


def smoke(suite: Suite, target: str, out: Path) -> tuple[Path, float]:
    """Run ``suite``'s smoke, write its table under ``out`` (``<table or name>``); the stem
    and the seconds the smoke took (the writing included)."""
    start = time.perf_counter()
    columns, rows = suite.smoke()
    title = f"{suite.name} smoke ({target}): {suite.summary}"
    stem = write_table(out, suite.table or suite.name, target, columns, rows, title, "smoke")
    return stem, time.perf_counter() - start


def missing_modules(suite: Suite) -> list[str]:
    """The modules of ``suite.requires`` that do not import here."""
    import importlib.util

    return [m for m in suite.requires if importlib.util.find_spec(m) is None]


def main(target: str, suites: Sequence[Suite], argv: Sequence[str] | None = None) -> int:
    """The runner's command line (``list``, ``run``, ``smoke``) over ``suites``."""
    by_name = {s.name: s for s in suites}
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(
        prog=f"benchmarks/{'gpu' if target == 'cuda' else target}.py",
        description=f"the {target} target's benchmarks (benchmarks/runner.py says how)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the suites, their scripts, tables and options")
    run = sub.add_parser(
        "run", help="full runs of SUITE[:OPTION] ... or all (ARGS after -- go to each)"
    )
    run.add_argument("suites", nargs="+", metavar="SUITE[:OPTION]")
    run.add_argument("--out", type=Path, default=RESULTS, help="the tables' folder")
    run.add_argument("--dry-run", action="store_true", help="print the commands only")
    run.add_argument(
        "--against",
        metavar="REV",
        help="A/B of two trees: each suite also runs with git revision REV's fusec/ first on "
        "PYTHONPATH, the two sides alternating (REV first), tables in <out>/ab-<side>-<pair>",
    )
    run.add_argument("--pairs", type=int, default=1, help="--against: runs of each side")
    smk = sub.add_parser("smoke", help="the suites' smoke runs (all when none is named)")
    smk.add_argument("suites", nargs="*", metavar="SUITE")
    smk.add_argument("--out", type=Path, help="the tables' folder (default: a temporary one)")
    args = parser.parse_args(argv)

    if args.command == "list":
        for s in suites:
            options = f" options: {', '.join(s.options)}" if s.options else ""
            table = f"results/{s.table}" if s.table else "printed"
            print(f"{s.name:18} {s.script:26} {table:28} {s.summary}{options}")
        return 0
    if args.command == "smoke":
        names = args.suites or list(by_name)
        unknown = [n for n in names if n not in by_name]
        if unknown:
            parser.error(f"unknown suite(s) {', '.join(unknown)}; `list` names them")
        out = args.out or Path(tempfile.mkdtemp(prefix=f"fusec-bench-{target}-"))
        failed = 0
        for name in names:
            try:
                stem, seconds = smoke(by_name[name], target, out)
            except Exception as err:  # one suite's failure is reported, the others still run
                failed += 1
                print(f"{name:18} FAILED: {type(err).__name__}: {err}", flush=True)
                continue
            problems = check_table(stem)
            failed += bool(problems)
            status = "; ".join(problems) if problems else "ok"
            print(f"{name:18} {seconds:6.2f} s  {stem}.md  {status}", flush=True)
        return 1 if failed else 0
    os.environ.setdefault("FUSEC_COMMIT", commit(dirty="+dirty", missing="unknown"))
    items = [s.name for s in suites] if args.suites == ["all"] else args.suites
    chosen: list[tuple[Suite, str | None]] = []
    for item in items:
        name, _, option = item.partition(":")
        if name not in by_name:
            parser.error(f"unknown suite {name!r}; `list` names them")
        chosen.append((by_name[name], option or None))
    sides: list[tuple[str, dict[str, str]]] = [("", {})]
    if args.against:
        for suite, option in chosen:
            if not any("{out}" in a for a in suite.options.get(option or "", suite.args)):
                parser.error(f"{suite.name} writes no table under --out: it cannot be A/Bed")
        rev = _git_short(args.against)
        base = export_fusec(rev, dry_run=args.dry_run)
        path = (
            f"{base}{os.pathsep}{os.environ['PYTHONPATH']}"
            if "PYTHONPATH" in os.environ
            else str(base)
        )
        sides = [
            (f"ab-{rev}", {"PYTHONPATH": path, "FUSEC_COMMIT": rev}),
            ("ab-tree", {}),
        ]
    try:
        return _run(chosen, sides, args, extra)
    finally:
        if args.against and not args.dry_run:
            shutil.rmtree(base, ignore_errors=True)


def _run(
    chosen: list[tuple[Suite, str | None]],
    sides: list[tuple[str, dict[str, str]]],
    args: argparse.Namespace,
    extra: list[str],
) -> int:
    """Each chosen suite's full run, once or (an A/B) ``args.pairs`` times per side; the
    first non-zero exit status."""
    rc = 0
    for suite, option in chosen:
        for pair in range(max(args.pairs, 1) if args.against else 1):
            for side, side_env in sides:
                out = args.out / f"{side}-{pair + 1}" if side else args.out
                command = suite.command(option, out, extra)
                shown = [os.path.relpath(command[1], ROOT), *command[2:]]
                prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in side_env.items())
                print(f"$ {prefix}python " + " ".join(shlex.quote(c) for c in shown), flush=True)
                if args.dry_run:
                    continue
                lacking = missing_modules(suite)
                if lacking:
                    print(f"{suite.name}: skipped, needs {', '.join(lacking)}", flush=True)
                    rc = rc or 2
                    continue
                env = os.environ | suite.env.get(option or "", {}) | side_env
                out.mkdir(parents=True, exist_ok=True)
                done = subprocess.run(command, cwd=ROOT, env=env, check=False)
                rc = rc or done.returncode
    return rc


def _git_short(rev: str) -> str:
    """``rev`` as git's short hash (a name for folders and tables); an error when unknown."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"--against {rev}: not a commit here ({done.stderr.strip()})")
    return done.stdout.strip()


def export_fusec(rev: str, dry_run: bool = False) -> Path:
    """``fusec/`` of git revision ``rev`` exported to a temporary folder (the folder to put
    first on PYTHONPATH: the benchmark scripts stay this tree's, the compiler is ``rev``'s)."""
    if dry_run:
        return Path(tempfile.gettempdir()) / f"fusec-{rev}-export"
    folder = Path(tempfile.mkdtemp(prefix=f"fusec-{rev}-"))
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "fusec"], cwd=ROOT, capture_output=True, check=False
    )
    if archive.returncode:
        raise SystemExit(f"git archive {rev} fusec failed: {archive.stderr.decode()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


# -- helpers the suites' smokes share -------------------------------------------------------


def rel_l2(got: Any, want: Any) -> float:
    """Relative L2 error of ``got`` against ``want`` in float64; inf when either has a NaN
    or an infinity (a NaN never passes)."""
    import numpy as np

    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape or not (np.isfinite(g).all() and np.isfinite(w).all()):
        return float("inf")
    return float(np.linalg.norm(g - w)) / max(float(np.linalg.norm(w)), 1e-30)


def ir_inputs(text: str, seed: int = 0) -> list[Any]:
    """Fresh random inputs of the IR's entry (``fusec.tools.runner.random_inputs``)."""
    from fusec.api import parse
    from fusec.ir.module import entry_function
    from fusec.tools.runner import random_inputs

    return random_inputs(entry_function(parse(text)), seed=seed)


def reference_row(
    name: str, text: str, baseline: Callable[..., Any] | None = None, tol: float = 1e-4
) -> dict[str, Any]:
    """One cpu smoke row: ``text`` through ``fusec.compile`` on the reference target and,
    when given, the suite's baseline on the same fresh inputs; their agreement (rel L2,
    which must be under ``tol``) and one round of the shared timer for each."""
    import fusec

    args = ir_inputs(text)
    compiled = fusec.compile(text, target="reference")
    out = compiled(*args)
    first = out[0] if isinstance(out, tuple) else out
    row: dict[str, Any] = {"case": name, "fusec_ms": best_ms(lambda: compiled(*args), rounds=1)}
    if baseline is None:
        err = 0.0 if rel_l2(first, first) == 0.0 else float("inf")  # finite outputs
        row |= {"baseline_ms": None, "rel_l2": err}
    else:
        err = rel_l2(first, baseline(*args))
        row |= {"baseline_ms": best_ms(lambda: baseline(*args), rounds=1), "rel_l2": err}
    row["status"] = "ok" if err < tol else "WRONG"
    if row["status"] != "ok":
        raise AssertionError(f"{name}: fusec and the baseline differ (rel L2 {err:.3g})")
    return row


REFERENCE_COLUMNS = ["case", "fusec_ms", "baseline_ms", "rel_l2", "status"]


def cuda_row(name: str, source: Any, pipeline: str | None = None) -> dict[str, Any]:
    """One gpu smoke row: ``source`` (IR text, or a module) compiled for the cuda target
    (code generation only, for an H200's 132 SMs: nothing is launched) and, when its inputs
    are small (at most ``SMALL`` elements), run on the reference executor, whose outputs must
    be finite."""
    import math

    import numpy as np

    import fusec
    from fusec.api import parse
    from fusec.dialect.ops import spec_of
    from fusec.ir.module import entry_function
    from fusec.tools.runner import random_inputs

    module = parse(source) if isinstance(source, str) else source
    compiled = fusec.compile(
        module.clone(), target="cuda", pipeline=pipeline, sms=132, executable=False
    )
    kinds = [k.kind for k in compiled.kernels]
    if not kinds:
        raise AssertionError(f"{name}: no kernel generated")
    fn = entry_function(module)
    elements = sum(math.prod(spec_of(t).shape) for t in fn.function_type.inputs.data)
    reference = "skipped (large)"
    if elements <= SMALL:
        out = fusec.reference(module)(*random_inputs(fn, seed=0))
        outs = out if isinstance(out, tuple) else (out,)
        if not all(np.isfinite(np.asarray(o, dtype=np.float64)).all() for o in outs):
            raise AssertionError(f"{name}: the reference executor's outputs are not finite")
        reference = "finite"
    tiles = [m.group(1) for k in compiled.kernels if (m := TILE.search(k.source))]
    return {
        "case": name,
        "kernels": len(kinds),
        "kinds": sorted(set(kinds)),
        "tiles": "; ".join(dict.fromkeys(tiles)) or None,
        "reference": reference,
        "status": "ok",
    }


#: A Tensor Core kernel's tile, as its header says it (``tile 64x128x64 s8 c1 g8 epi=smem;``).
TILE = re.compile(r"\btile (\d+x\d+[^;\n]*)")


#: The most input elements a gpu smoke row runs on the reference executor.
SMALL = 1 << 18
CUDA_COLUMNS = ["case", "kernels", "kinds", "tiles", "reference", "status"]
