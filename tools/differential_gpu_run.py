"""The cuda differential property over many random graphs, in parallel worker processes.

    python tools/differential_gpu_run.py --out DIR [--workers 16] [--wall 420] [--target cuda]

Each worker draws graphs from ``tests/strategies.py`` (hypothesis, its own seed,
generation only: no shrinking, no example database) and checks each one as
``tests/differential/test_cuda_differential.py`` does: compiled by the whole
pipeline for the target, at most ``kernel_budget`` kernels, run on fresh random
inputs with poisoned outputs, every result equal to the float64 reference at
the graph's tolerance. A graph counts once its check has finished (passed or
failed); graphs hypothesis rejects while drawing never reach the check and are
not counted. The kernel compiles are CPU work, so the workers run side by side
on the CPU cores and share one kernel cache folder (which also exercises the
cache across processes).

A worker stops drawing at the wall limit; one still busy then is killed, and
the graph it was checking is reported as unfinished (a hang, or a compile too
slow for the limit). Failures are kept with the graph's IR and input seed, so
each can be replayed: ``fusec run graph.mlir --random-inputs --check``, or
``Graph.inputs(seed)`` in a test.

``DIR`` gets at most four files (the device tool brings back eight):
``summary.json`` (the figures), ``summary.md`` (the same, for a results file),
``failures.txt`` (every failing or unfinished graph: IR, seed, why) and
``workers.log`` (the tail of each worker's stderr). Exit status 0 when every
graph passed, 1 otherwise.

On the CPU machine, ``--target cpu`` runs the same loop for the cpu target, and
``--target reference`` checks the IR properties of ``test_ir_properties.py`` instead
(printing round trip, idempotent pipeline, kernels <= ops, traced == written).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a worker keeps for its exit after its last graph; the parent's grace.
MARGIN = 15.0


# ------------------------------------------------------------------ a worker


#: Errors after which a process's CUDA context is unusable: the worker exits (after
#: recording the graph) and the parent starts a fresh one.
FATAL = (
    "CUDA_ERROR_ILLEGAL",
    "CUDA_ERROR_LAUNCH",
    "CUDA_ERROR_MISALIGNED",  # sticky too: one misaligned kernel failed ~1100 later graphs
    "illegal memory access",
    "unspecified launch",
    "misaligned address",
)


def _worker(name: str, seed: int, deadline: float, scratch: Path, target: str) -> None:
    """Check random graphs on ``target`` until ``deadline`` (epoch seconds)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "differential"), str(ROOT)]
    from differential import assert_matches, kernel_budget, poison
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from strategies import graphs

    import fusec
    from fusec.runtime.reference import run_reference

    results = open(scratch / f"worker-{name}.jsonl", "a", buffering=1)  # noqa: SIM115
    inflight = scratch / f"worker-{name}.inflight"
    count = 0

    def run(graph, args) -> None:
        if target == "reference":  # the IR properties (tests/differential/test_ir_properties.py)
            import test_ir_properties as properties

            for prop in (
                properties.test_printed_ir_parses_back_to_the_same_module,
                properties.test_default_pipeline_is_idempotent_with_at_most_one_kernel_per_op,
                properties.test_traced_and_written_graphs_compile_to_the_same_ir,
            ):
                prop.hypothesis.inner_test(graph)  # the property's body, on this graph
            return
        compiled = fusec.compile(graph.text(), target=target)
        budget = kernel_budget(graph)
        assert len(compiled.kernels) <= budget, f"{len(compiled.kernels)} kernels > {budget}"
        if target == "cuda":
            outputs = compiled._runner(args, poison=True)
        else:
            outputs = compiled._runner(args, alloc=poison)
        references = run_reference(fusec.parse(graph.text()), args)
        assert_matches(outputs, references, graph.dtypes())

    @settings(
        max_examples=10**7,
        derandomize=False,  # the loaded "ci" profile derandomises: seeds would not matter
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(graphs(max_ops=5), st.integers(0, 2**16))
    def check(graph, input_seed: int) -> None:
        nonlocal count
        if time.time() > deadline:
            results.close()
            os._exit(0)  # the wall limit: every finished graph is on disk already
        text = graph.text()
        inflight.write_text(json.dumps({"ir": text, "seed": input_seed}))
        start = time.perf_counter()
        error = None
        try:
            run(graph, graph.inputs(input_seed))
        except Exception as err:  # a failure of this graph, kept; the run goes on
            error = "".join(traceback.format_exception_only(err)).strip()
            if not isinstance(err, AssertionError):
                error += "\n" + "".join(traceback.format_tb(err.__traceback__)[-4:])
        seconds = time.perf_counter() - start
        count += 1
        record = {
            "n": count,
            "seconds": round(seconds, 3),
            "ops": sorted(graph.op_names()),
            "nodes": len(graph.nodes),
            "dtypes": sorted(graph.dtypes()),
            "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
            "ok": error is None,
        }
        if error is not None:
            record.update(ir=text, seed=input_seed, error=error[-4000:])
        results.write(json.dumps(record) + "\n")
        inflight.unlink(missing_ok=True)
        if error is not None and any(marker in error for marker in FATAL):
            results.close()
            os._exit(3)  # a broken context: the parent starts a fresh process

    check()
    results.close()


# ------------------------------------------------------------------ the parent


def _spawn(args: argparse.Namespace, name: str, seed: int, deadline: float, scratch: Path):
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        NUMBA_NUM_THREADS="1",  # the workers are the parallelism
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        FUSEC_CACHE_DIR=str(scratch / "cache"),
    )
    argv = [sys.executable, __file__, "--worker", name, "--deadline", str(deadline)]
    argv += ["--seed", str(seed), "--scratch", str(scratch), "--target", args.target]
    log = open(scratch / f"worker-{name}.log", "w")  # noqa: SIM115
    return subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)


def _inflight(scratch: Path, name: str) -> dict | None:
    """The graph worker ``name`` was checking when it stopped, if any."""
    path = scratch / f"worker-{name}.inflight"
    try:
        return {"worker": name, **json.loads(path.read_text())}
    except (OSError, json.JSONDecodeError):
        return None


def _run_workers(args: argparse.Namespace, deadline: float, scratch: Path):
    """Keep ``args.workers`` workers busy until ``deadline``; a worker that dies early (a
    crash, a broken CUDA context) is replaced by a fresh one with a new seed. Returns
    every worker's exit code by name, the graphs workers died in, and the graphs still
    being checked at the wall limit."""
    running: dict[str, subprocess.Popen] = {}
    exits: dict[str, int | None] = {}
    crashed: list[dict] = []  # graphs a worker died in before the wall limit
    starts = 0
    for slot in range(args.workers):
        running[f"{slot}-0"] = _spawn(args, f"{slot}-0", args.seed + slot, deadline, scratch)
    while running and time.time() < deadline + MARGIN:
        time.sleep(1.0)
        for name, proc in list(running.items()):
            if proc.poll() is None:
                continue
            exits[name] = proc.returncode
            del running[name]
            graph = _inflight(scratch, name)
            if graph is not None:  # died inside a graph: that graph crashed it
                crashed.append({**graph, "exit": proc.returncode})
            if time.time() < deadline - MARGIN and starts < 4 * args.workers:
                starts += 1
                slot, incarnation = name.split("-")
                again = f"{slot}-{int(incarnation) + 1}"
                seed = args.seed + 1000 * starts + int(slot)
                running[again] = _spawn(args, again, seed, deadline, scratch)
    unfinished = []  # graphs a worker was still checking at the wall limit
    for name, proc in running.items():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            if (graph := _inflight(scratch, name)) is not None:
                unfinished.append(graph)
        proc.wait()
        exits[name] = proc.returncode
    return exits, crashed, unfinished


def _collect(scratch: Path) -> list[dict]:
    """Every finished graph's record."""
    records = []
    for path in sorted(scratch.glob("worker-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by the kill
                pass
    return records


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(args, records, unfinished, crashed, wall: float, device: str) -> dict:
    seconds = [r["seconds"] for r in records]
    ops = collections.Counter(op for r in records for op in r["ops"])
    failures = [r for r in records if not r["ok"]]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "target": args.target,
        "device": device,
        "commit": _commit(),
        "workers": args.workers,
        "wall_limit_s": args.wall,
        "wall_s": round(wall, 1),
        "graphs_run": len(records),
        "graphs_passed": len(records) - len(failures),
        "graphs_failed": len(failures),
        "graphs_unfinished": len(unfinished),
        "graphs_crashing_a_worker": len(crashed),
        "distinct_graphs": len({r["digest"] for r in records}),
        "graphs_per_second": round(len(records) / wall, 2) if wall else 0.0,
        "seconds_per_graph": {
            "median": _percentile(seconds, 0.5),
            "p90": _percentile(seconds, 0.9),
            "max": max(seconds, default=0.0),
        },
        "graphs_by_dtype": dict(
            collections.Counter(d for r in records for d in r["dtypes"]).most_common()
        ),
        "graphs_with_op": dict(ops.most_common()),
        "failure_kinds": dict(
            collections.Counter(r["error"].splitlines()[0][:160] for r in failures).most_common()
        ),
    }


def _commit() -> str:
    """``FUSEC_COMMIT`` when set (a copy of the tree without its own .git would otherwise
    report an enclosing repository's HEAD), else git's HEAD of ``ROOT``."""
    if os.environ.get("FUSEC_COMMIT"):
        return os.environ["FUSEC_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _device(target: str) -> str:
    if target != "cuda":
        return f"CPU ({os.cpu_count()} cores)"
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return done.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown GPU"


def _markdown(summary: dict) -> str:
    lines = [
        f"# Differential run on `{summary['target']}` ({summary['date']})",
        "",
        f"Device: {summary['device']}; commit {summary['commit']}; {summary['workers']} "
        f"worker processes; wall {summary['wall_s']} s (limit {summary['wall_limit_s']} s).",
        "",
        "| graphs run | passed | failed | unfinished | distinct | graphs/s | s/graph p50 | p90 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {summary['graphs_run']} | {summary['graphs_passed']} | {summary['graphs_failed']} "
        f"| {summary['graphs_unfinished']} + {summary['graphs_crashing_a_worker']} crashed "
        f"| {summary['distinct_graphs']} "
        f"| {summary['graphs_per_second']} | {summary['seconds_per_graph']['median']} "
        f"| {summary['seconds_per_graph']['p90']} |",
        "",
        "Graphs per op: " + ", ".join(f"{op} {n}" for op, n in summary["graphs_with_op"].items()),
        "",
    ]
    if summary["failure_kinds"]:
        lines += ["Failures:", ""]
        lines += [f"- {n} x `{kind}`" for kind, n in summary["failure_kinds"].items()]
        lines.append("")
    return "\n".join(lines)


def _failures_text(records: list[dict], unfinished: list[dict], crashed: list[dict]) -> str:
    parts = [
        f"// WORKER DIED (exit {c['exit']}, input seed {c['seed']})\n{c['ir']}" for c in crashed
    ]
    for r in records:
        if not r["ok"]:
            parts.append(f"// FAILED (input seed {r['seed']}): {r['error']}\n{r['ir']}")
    for u in unfinished:
        parts.append(f"// UNFINISHED at the wall limit (worker {u['worker']}, input seed "
                     f"{u['seed']})\n{u['ir']}")  # fmt: skip
    text = "\n".join(parts)
    return text[: 15 << 20]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for the summary and failures")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--wall", type=float, default=420.0, help="seconds, start to summary")
    parser.add_argument("--target", default="cuda", choices=["cuda", "cpu", "reference"])
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args.worker, args.seed, args.deadline, args.scratch, args.target)
        return 0
    if args.out is None:
        parser.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + args.wall - 2 * MARGIN  # the last graph, the kill and the summary
    scratch = Path(tempfile.mkdtemp(prefix="fusec-diff-"))
    print(f"{args.workers} workers on {args.target} until the wall limit of {args.wall:.0f} s, "
          f"seeds from {args.seed}", flush=True)  # fmt: skip
    exits, crashed, unfinished = _run_workers(args, deadline, scratch)
    records = _collect(scratch)
    wall = time.time() - start
    summary = _summary(args, records, unfinished, crashed, wall, _device(args.target))
    summary["worker_exit_codes"] = exits
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(_markdown(summary))
    (args.out / "failures.txt").write_text(_failures_text(records, unfinished, crashed))
    logs = []
    for name, code in exits.items():
        log = scratch / f"worker-{name}.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        logs.append(f"==== worker {name} (exit {code})\n{tail}")
    (args.out / "workers.log").write_text("\n".join(logs)[-(15 << 20) :])
    shutil.rmtree(scratch, ignore_errors=True)
    print(_markdown(summary))
    bad = summary["graphs_failed"] + summary["graphs_unfinished"] + len(crashed)
    return 0 if bad == 0 and summary["graphs_run"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
