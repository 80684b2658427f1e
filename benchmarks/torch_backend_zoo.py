"""The model zoo through ``torch.compile(model, backend="fusec")`` (issue 32).

Each model of the GPU model zoo (``models_gpu.py``: torchvision and transformers
architectures, random weights) is cast to fp16 or bf16 and run on the same inputs
through the fusec backend, in PyTorch eager and through ``torch.compile`` with the
default backend (inductor, default mode), at batch 1 and at the model's throughput
batch (``--batches 1,throughput``, the zoo's 32 for CNNs and 8 for transformers), and
on cuda at batch 1 also with ``mode="reduce-overhead"`` (inductor with CUDA graphs, as
fusec's programs replay theirs). Every comparison is of the same process, model,
input and timer; a baseline that fails is a note in its row (``inductor_error``), not
a lost row. Errors are relative L2 against the float32 module (TF32 off); times are
medians of CUDA events after warm-up (``models_gpu.Timer``).
Each row also counts what the backend did (``fusec.torch.stats()``): Dynamo graphs,
fusec partitions, ATen nodes left to eager, and the first remark; and of its compiled
partitions (``fusec.torch.compiled_partitions()``): the groups on the PyTorch fallback
(any of them turns a cuda program's CUDA graphs off, so each call runs launch by launch)
and the CUDA graph replays of the timed calls (0 on cuda: not replayed).

    python3 benchmarks/torch_backend_zoo.py --out benchmarks/results/          # H200
    python3 benchmarks/torch_backend_zoo.py --models resnet50,gpt2 --batches 1,8
    python3 benchmarks/torch_backend_zoo.py --models bert,gpt2 --merge   # add to the table
    python3 benchmarks/torch_backend_zoo.py --target cpu --smoke --models tiny  # no GPU
    python3 benchmarks/torch_backend_zoo.py --dry-run    # the plan; imports no torch
    python3 benchmarks/torch_backend_zoo.py --onnx-table benchmarks/results/models-gpu-X.json

``--onnx-table`` (a ``models_gpu.py`` results file of the same machine) adds the ONNX
path's fusec time of each row's model, dtype and batch (the dynamo export when there
are several) and the ratio to the backend's, the issue's "at least as fast as through
the ONNX path" column.

``--models tiny`` runs the test suite's small models (MLP, CNN, transformer blocks and
``branchy``, a Python branch on data and an op fusec lacks: a graph break and an eager
node, counted in the table; ``tests/frontend/torch/test_torch_backend.py``) instead of
the zoo: a check of this script that needs neither torchvision nor transformers. Tiny and
zoo names mix (``--models resnet50,branchy``). Every case runs in this process, one after
another; a case that fails is a row with its error, and the rest go on. Writes
``torch-backend.md`` and ``.json`` (``torch-backend-<suffix>`` with ``--suffix``);
``--merge`` keeps the rows of that ``.json`` whose model, dtype and batch this run does
not make, so one table can be filled by several device calls. The table is written after
every row (a run killed at a device call's limit leaves the rows it made); past
``--budget`` seconds no case starts and no baseline is compiled (the row says so).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import models_gpu as zoo  # noqa: E402

TINY = ("mlp", "cnn", "block", "sdpa_block", "branchy")
#: The throughput batch of the tiny models (``--batches throughput``).
TINY_THROUGHPUT = 8


def tiny_model(name: str) -> tuple[Any, Callable[[int], tuple[int, ...]]]:
    """A small model of the tests and the input shape for a batch."""
    sys.path[:0] = [str(ROOT / "tests" / "frontend" / "torch"), str(ROOT / "tests")]
    import torch
    from test_torch_backend import MLP, Block, Branchy, SmallCNN

    class HalfBranchy(Branchy):
        """The tests' Branchy with an op fusec lacks that PyTorch has in f16 and bf16 on
        cpu and cuda (bessel_j0 has neither): ``flip``, left to eager."""

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.a(x))
            if y.sum() > 0:  # data-dependent: Dynamo breaks the graph here
                y = y * 2
            return torch.tanh(self.b(torch.flip(y, dims=(-1,))))

    torch.manual_seed(0)
    made: dict[str, tuple[Any, Callable[[int], tuple[int, ...]]]] = {
        "mlp": (MLP(), lambda b: (b, 16)),
        "cnn": (SmallCNN(), lambda b: (b, 3, 32, 32)),
        "block": (Block(dim=128, heads=2), lambda b: (b, 64, 128)),
        "sdpa_block": (Block(dim=128, heads=2, sdpa=True), lambda b: (b, 64, 128)),
        "branchy": (HalfBranchy(), lambda b: (b, 8)),
    }
    return made[name]


def models_and_inputs(name: str, dtype: Any, batch: int, smoke: bool, device: Any) -> tuple:
    """(float32 module, module in ``dtype``, input in ``dtype``, float32 input)."""
    import copy

    import torch

    if name in TINY:
        model, shape = tiny_model(name)
        reference = model.eval().to(device)
        x = torch.randn(*shape(batch), generator=torch.Generator().manual_seed(batch))
    else:
        reference = zoo.build(name, smoke).to(device)
        x = zoo.sample(reference, name, batch, smoke, "embeds", torch.float32)
    low = copy.deepcopy(reference).to(dtype)
    x = x.to(device)
    return reference, low, x.to(dtype), x


def run_case(name: str, dtype_name: str, batch: int, args: argparse.Namespace) -> dict:
    import torch

    import fusec.torch as fusec_torch

    torch_, device = zoo.torch_setup(args.target)
    dtype = getattr(torch, zoo.TORCH_DTYPES[dtype_name])
    reference, low, x, x32 = models_and_inputs(name, dtype, batch, args.smoke, device)
    timer = zoo.Timer(args.target, args.smoke)
    row: dict[str, Any] = {"model": name, "dtype": dtype_name, "batch": batch}
    with torch.no_grad():
        want = zoo.as_list(reference(x32))
        eager = zoo.as_list(low(x))
        row["eager_err"] = zoo.errors(eager, want)[0]
        row["eager_ms"] = timer(lambda: low(x))["ms"]
        torch._dynamo.reset()
        fusec_torch.reset_stats()
        compiled = torch.compile(low, backend="fusec", dynamic=False)
        got, row["fusec_first_s"], timed = zoo.first_call_and_time(
            torch, compiled, x, timer, args.target
        )
        row["fusec_err"], row["fusec_nonfinite"] = zoo.errors(zoo.as_list(got), want)
        row["fusec_ms"] = timed["ms"]
        stats = fusec_torch.stats()
        for key in ("graphs", "partitions", "eager_partitions", "eager_nodes", "compiled_nodes"):
            row[key] = stats[key]
        row.update(partition_facts(fusec_torch.compiled_partitions()))
        row["remark"] = stats["remarks"][0] if stats["remarks"] else ""
        row["verdict"] = zoo.verdict(row["fusec_err"], row["eager_err"], row["fusec_nonfinite"])
        for key, mode in baseline_modes(args, batch):
            if over_budget(args):  # fusec's numbers first: a baseline is what gives way
                row[f"{key}_error"] = "not run: over --budget"
                continue
            row.update(inductor_timing(torch_, low, x, mode, key, timer, args.target))
    return row


def over_budget(args: argparse.Namespace) -> bool:
    """Whether ``--budget`` seconds have passed since the run started (``args.start``)."""
    start = getattr(args, "start", None)
    return args.budget is not None and start is not None and time.monotonic() - start > args.budget


def baseline_modes(args: argparse.Namespace, batch: int) -> list[tuple[str, str]]:
    """The torch.compile baselines of a row: (row key, mode). Inductor's default mode at
    every batch; reduce-overhead (CUDA graphs) at batch 1 on cuda."""
    if args.no_inductor:
        return []
    modes = [("inductor", "default")]
    if batch == 1 and args.target == "cuda" and not args.no_reduce_overhead:
        modes.append(("reduce_overhead", "reduce-overhead"))
    return modes


def inductor_timing(
    torch: Any, model: Any, x: Any, mode: str, key: str, timer: Any, target: str
) -> dict[str, Any]:
    """``torch.compile(model, mode=mode)`` timed as ``models_gpu`` times it (first call's
    seconds, median ms), or ``{key}_error``: a baseline that fails keeps the row."""
    try:
        return zoo.compiled_timing(torch, model, x, mode, key, timer, target)
    except Exception as err:  # noqa: BLE001 - inductor's failure is a fact of the row
        return {f"{key}_error": zoo.short(f"{type(err).__name__}: {err}")[:300]}
    finally:
        torch._dynamo.reset()


def partition_facts(partitions: Sequence[Any]) -> dict[str, int]:
    """The compiled partitions' groups on the PyTorch fallback (which turn a cuda
    program's CUDA graphs off) and their programs' CUDA graph replays so far."""
    fallbacks = replays = 0
    for compiled in partitions:
        fallbacks += sum(1 for k in compiled.kernels if k.runs_op_by_op)
        graphs = getattr(compiled.program, "graphs", None)
        if graphs is not None:
            replays += sum(r.replays for r in graphs.recorded.values())
    return {"fallback_groups": fallbacks, "graph_replays": replays}


def onnx_path_times(
    path: str | None, target: str, smoke: bool
) -> dict[tuple[str, str, int], float]:
    """{(model, dtype, batch): the ONNX path's fusec ms} from a models_gpu results file
    (its ``rows``: fusec rows by exporter; the dynamo export's time wins). A file of
    another target or size (``smoke``) than this run's is refused."""
    if not path:
        return {}
    table = json.loads(Path(path).read_text())
    theirs = (table.get("target"), bool(table.get("smoke", False)))
    if theirs != (target, smoke):
        raise SystemExit(
            f"{path} is a table of target {theirs[0]}, smoke {theirs[1]}; this run is "
            f"target {target}, smoke {smoke}: its ONNX-path times do not compare"
        )
    rows = table.get("rows", [])
    times: dict[tuple[str, str, int], float] = {}
    for row in sorted(rows, key=lambda r: r.get("exporter") == "dynamo"):  # dynamo last
        if row.get("pass", "fusec") == "fusec" and row.get("fusec_ms") is not None:
            times[(row["model"], row["dtype"], int(row["batch"]))] = float(row["fusec_ms"])
    return times


def plan(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """The (model, dtype, batch) cases, checked against the zoo and the dtypes."""
    names = list(TINY) if args.models == "tiny" else args.models.split(",")
    unknown = [n for n in names if n not in TINY and n not in zoo.ZOO]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}: the zoo has {', '.join(zoo.ZOO)}")
    dtypes = args.dtypes.split(",")
    bad = [d for d in dtypes if d not in zoo.TORCH_DTYPES]
    if bad:
        raise SystemExit(f"unknown dtype(s) {', '.join(bad)}: {', '.join(zoo.TORCH_DTYPES)}")
    wanted = args.batches.split(",")
    bad = [b for b in wanted if b != "throughput" and not (b.isdigit() and int(b) > 0)]
    if bad:
        raise SystemExit(f"bad batch size(s) {', '.join(bad)}: positive numbers or 'throughput'")
    return [(n, d, b) for n in names for d in dtypes for b in batches_of(n, wanted, args.smoke)]


def batches_of(name: str, wanted: Sequence[str], smoke: bool) -> list[int]:
    """The batch sizes of ``wanted`` ("1", "throughput" or a number) for model ``name``."""
    if name in TINY:
        big = zoo.SMOKE_BATCH if smoke else TINY_THROUGHPUT
        return list(dict.fromkeys(big if w == "throughput" else int(w) for w in wanted))
    return zoo.batches_of(zoo.ZOO[name], wanted, smoke)


def row_key(row: dict) -> tuple[str, str, int]:
    return (row["model"], row["dtype"], int(row["batch"]))


def merged_rows(old: Sequence[dict], new: Sequence[dict]) -> list[dict]:
    """``old``'s rows that ``new`` does not remake, then ``new``'s, in the zoo's order
    (model as the zoo lists it, dtype, batch). A new row that was not run (over the
    budget) does not replace an old one."""
    skipped = {row_key(r) for r in new if str(r.get("error", "")).startswith("not run")}
    kept = {row_key(r) for r in old} & skipped
    new = [r for r in new if row_key(r) not in kept]
    made = {row_key(r) for r in new}
    rows = [r for r in old if row_key(r) not in made] + list(new)
    order = {name: k for k, name in enumerate((*zoo.ZOO, *TINY))}
    return sorted(rows, key=lambda r: (order.get(r["model"], len(order)), r["dtype"], r["batch"]))


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f'# torch.compile(backend="fusec") on the model zoo ({meta["date"]})',
        "",
        f"Target {meta['target']}, torch {meta['torch']}"
        + (f", {meta['device']}" if "device" in meta else "")
        + ". Times: median ms; errors: relative L2 against the float32 module.",
        "",
        "'vs X' is X's time over fusec's (above 1.00x: fusec is faster). Inductor: "
        "torch.compile's default backend in its default mode at every batch; r-o: its "
        "reduce-overhead mode (CUDA graphs), at batch 1 on cuda.",
        "",
        "| model | dtype | batch | fusec ms | eager ms | inductor ms | r-o ms | onnx path ms "
        "| vs eager | vs inductor | vs r-o | vs onnx path | fusec err | eager err | verdict "
        "| graphs | partitions | eager nodes | fallback groups | graph replays | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            error = str(r["error"])
            error = error if error.startswith("not run") else f"failed: {error}"
            lines.append(f"| {r['model']} | {r['dtype']} | {r['batch']} | {error} |")
            continue
        lines.append(
            f"| {r['model']} | {r['dtype']} | {r['batch']} | {zoo._f(r['fusec_ms'])} "
            f"| {zoo._f(r['eager_ms'])} | {_baseline(r, 'inductor')} "
            f"| {_baseline(r, 'reduce_overhead')} | {zoo._f(r.get('onnx_path_ms'))} "
            f"| {zoo._x(zoo.ratio(r['eager_ms'], r['fusec_ms']))} "
            f"| {zoo._x(zoo.ratio(r.get('inductor_ms'), r['fusec_ms']))} "
            f"| {zoo._x(zoo.ratio(r.get('reduce_overhead_ms'), r['fusec_ms']))} "
            f"| {zoo._x(zoo.ratio(r.get('onnx_path_ms'), r['fusec_ms']))} "
            f"| {zoo._e(r['fusec_err'])} | {zoo._e(r['eager_err'])} | {r['verdict']} "
            f"| {r['graphs']} | {r['partitions']} | {r['eager_nodes']} "
            f"| {r.get('fallback_groups', '')} | {r.get('graph_replays', '')} "
            f"| {_note(r)} |"
        )
    return "\n".join(lines) + "\n"


def _baseline(row: dict, key: str) -> str:
    """A baseline's median ms, 'failed' (its error in the note) or '-' (not run)."""
    error = row.get(f"{key}_error")
    if error:
        return "not run" if error.startswith("not run") else "failed"
    return zoo._f(row.get(f"{key}_ms"))


def _note(row: dict) -> str:
    """The backend's first remark, then a failed baseline's error."""
    parts = [row.get("remark", "")[:80]]
    for key, label in (("inductor", "inductor"), ("reduce_overhead", "r-o")):
        if row.get(f"{key}_error"):
            parts.append(f"{label}: {row[f'{key}_error'][:80]}")
    return "; ".join(p for p in parts if p).replace("|", "/")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.ZOO), help="zoo names, or 'tiny'")
    parser.add_argument("--dtypes", default="f16", help="f16, bf16 (comma-separated)")
    parser.add_argument(
        "--batches", default="1,throughput", help='comma-separated sizes or "throughput"'
    )
    parser.add_argument("--target", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smoke", action="store_true", help="the zoo's small configurations")
    parser.add_argument("--no-inductor", action="store_true", help="no torch.compile baselines")
    parser.add_argument(
        "--no-reduce-overhead", action="store_true", help="no reduce-overhead at batch 1"
    )
    parser.add_argument("--out", default=str(HERE / "results"), help="folder of the tables")
    parser.add_argument("--suffix", default="", help="torch-backend-<suffix>.md (default: none)")
    parser.add_argument(
        "--merge", action="store_true", help="keep the table's rows this run does not remake"
    )
    parser.add_argument("--onnx-table", help="a models_gpu.py results .json: the ONNX path")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    parser.add_argument(
        "--budget", type=float, help="seconds after which no new case starts (a row says so)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cases = plan(args)
    onnx_times = onnx_path_times(args.onnx_table, args.target, args.smoke)
    if args.dry_run:
        for name, dtype, batch in cases:
            known = onnx_times.get((name, dtype, batch))
            print(f"{name} {dtype} batch {batch} on {args.target}: onnx path {zoo._f(known)} ms")
        return 0
    import torch

    meta = {"date": datetime.date.today().isoformat(), "target": args.target}
    meta |= {"smoke": args.smoke, "torch": torch.__version__}
    if args.onnx_table:
        meta["onnx_table"] = args.onnx_table
    if args.target == "cuda":
        meta["device"] = torch.cuda.get_device_name()
    stem, old = open_table(Path(args.out), args.suffix, meta, args.merge)
    rows: list[dict] = []
    args.start = time.monotonic()
    for name, dtype, batch in cases:
        if over_budget(args):
            row = {"model": name, "dtype": dtype, "batch": batch}
            row["error"] = "not run: over --budget"
        else:
            row = run_row(name, dtype, batch, args, onnx_times)
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_table(stem, old, rows, meta)  # after every row: a killed run leaves a table
    print(f"wrote {stem}.md")
    return 0


def run_row(
    name: str,
    dtype: str,
    batch: int,
    args: argparse.Namespace,
    onnx_times: dict[tuple[str, str, int], float],
) -> dict[str, Any]:
    """One case's row, or its error: one broken case must not stop the table."""
    try:
        row = run_case(name, dtype, batch, args)
    except Exception as err:  # noqa: BLE001 - reported in the row
        traceback.print_exc()
        return {
            "model": name,
            "dtype": dtype,
            "batch": batch,
            "error": zoo.short(f"{type(err).__name__}: {err}"),
        }
    row["onnx_path_ms"] = onnx_times.get((name, dtype, batch))
    return row


def open_table(out: Path, suffix: str, meta: dict, merge: bool) -> tuple[Path, list[dict]]:
    """The stem of ``torch-backend[-suffix]`` and, with ``merge``, the rows its ``.json``
    holds (a file of another target or size is refused; its date joins ``meta``'s
    ``merged``); without, none: the run's rows replace the table."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / ("torch-backend" + (f"-{suffix}" if suffix else ""))
    path = stem.with_suffix(".json")
    if not merge or not path.exists():
        return stem, []
    old = json.loads(path.read_text())
    theirs = (old["meta"].get("target"), bool(old["meta"].get("smoke", False)))
    if theirs != (meta.get("target"), bool(meta.get("smoke", False))):
        raise SystemExit(f"{path} holds another target or size ({theirs}): not merged")
    meta["merged"] = sorted({*old["meta"].get("merged", []), old["meta"]["date"]})
    return stem, old["rows"]


def write_table(stem: Path, old: Sequence[dict], rows: Sequence[dict], meta: dict) -> None:
    """Write ``stem.json`` and ``.md``: ``old``'s rows that ``rows`` do not remake, and
    ``rows``."""
    table = merged_rows(old, rows)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": table}, indent=1))
    stem.with_suffix(".md").write_text(markdown(table, meta))


if __name__ == "__main__":
    sys.exit(main())
