"""The model zoo through ``torch.compile(model, backend="fusec")`` (issue 32).

Each model of the GPU model zoo (``models_gpu.py``: torchvision and transformers
architectures, random weights) is cast to fp16 or bf16 and run three ways on the same
inputs: through the fusec backend, in PyTorch eager and through ``torch.compile``
with the default backend (inductor). Errors are relative L2 against the float32 module
(TF32 off); times are medians of CUDA events after warm-up (``models_gpu.Timer``).
Each row also counts what the backend did (``fusec.torch.stats()``): Dynamo graphs,
fusec partitions, ATen nodes left to eager, and the first remark; and of its compiled
partitions (``fusec.torch.compiled_partitions()``): the groups on the PyTorch fallback
(any of them turns a cuda program's CUDA graphs off, so each call runs launch by launch)
and the CUDA graph replays of the timed calls (0 on cuda: not replayed).

    python3 benchmarks/torch_backend_zoo.py --out benchmarks/results/          # H200
    python3 benchmarks/torch_backend_zoo.py --models resnet50,gpt2 --batches 1,8
    python3 benchmarks/torch_backend_zoo.py --target cpu --smoke --models tiny  # no GPU
    python3 benchmarks/torch_backend_zoo.py --dry-run    # the plan; imports no torch
    python3 benchmarks/torch_backend_zoo.py --onnx-table benchmarks/results/models-gpu-X.json

``--onnx-table`` (a ``models_gpu.py`` results file of the same machine) adds the ONNX
path's fusec time of each row's model, dtype and batch (the dynamo export when there
are several) and the ratio to the backend's, the issue's "at least as fast as through
the ONNX path" column.

``--models tiny`` runs the test suite's small models (MLP, CNN, transformer blocks:
``tests/frontend/torch/test_torch_backend.py``) instead of the zoo: a check of this script
that needs neither torchvision nor transformers. Every case runs in this process, one
after another; a case that fails is a row with its error, and the rest go on. Writes
``torch-backend-<suffix>.md`` and ``.json``.
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

TINY = ("mlp", "cnn", "block", "sdpa_block")


def tiny_model(name: str) -> tuple[Any, Callable[[int], tuple[int, ...]]]:
    """A small model of the tests and the input shape for a batch."""
    sys.path[:0] = [str(ROOT / "tests" / "frontend" / "torch"), str(ROOT / "tests")]
    import torch
    from test_torch_backend import MLP, Block, SmallCNN

    torch.manual_seed(0)
    made: dict[str, tuple[Any, Callable[[int], tuple[int, ...]]]] = {
        "mlp": (MLP(), lambda b: (b, 16)),
        "cnn": (SmallCNN(), lambda b: (b, 3, 32, 32)),
        "block": (Block(dim=128, heads=2), lambda b: (b, 64, 128)),
        "sdpa_block": (Block(dim=128, heads=2, sdpa=True), lambda b: (b, 64, 128)),
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
        t0 = time.perf_counter()
        got = zoo.as_list(compiled(x))
        if args.target == "cuda":
            torch.cuda.synchronize()
        row["fusec_first_s"] = time.perf_counter() - t0
        row["fusec_err"], row["fusec_nonfinite"] = zoo.errors(got, want)
        row["fusec_ms"] = timer(lambda: compiled(x))["ms"]
        stats = fusec_torch.stats()
        for key in ("graphs", "partitions", "eager_partitions", "eager_nodes", "compiled_nodes"):
            row[key] = stats[key]
        row.update(partition_facts(fusec_torch.compiled_partitions()))
        row["remark"] = stats["remarks"][0] if stats["remarks"] else ""
        row["verdict"] = zoo.verdict(row["fusec_err"], row["eager_err"], row["fusec_nonfinite"])
        if not args.no_inductor:
            timed = zoo.compiled_timing(torch_, low, x, "default", "inductor", timer, args.target)
            row.update(timed)
    return row


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
    batches = [int(b) for b in args.batches.split(",")]
    return [(n, d, b) for n in names for d in dtypes for b in batches]


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f'# torch.compile(backend="fusec") on the model zoo ({meta["date"]})',
        "",
        f"Target {meta['target']}, torch {meta['torch']}"
        + (f", {meta['device']}" if "device" in meta else "")
        + ". Times: median ms; errors: relative L2 against the float32 module.",
        "",
        "| model | dtype | batch | fusec ms | eager ms | inductor ms | onnx path ms | vs eager "
        "| vs inductor | vs onnx path | fusec err | eager err | verdict | graphs | partitions "
        "| eager nodes | fallback groups | graph replays | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['dtype']} | {r['batch']} | failed: {r['error']} |")
            continue
        lines.append(
            f"| {r['model']} | {r['dtype']} | {r['batch']} | {zoo._f(r['fusec_ms'])} "
            f"| {zoo._f(r['eager_ms'])} | {zoo._f(r.get('inductor_ms'))} "
            f"| {zoo._f(r.get('onnx_path_ms'))} "
            f"| {zoo._x(zoo.ratio(r['eager_ms'], r['fusec_ms']))} "
            f"| {zoo._x(zoo.ratio(r.get('inductor_ms'), r['fusec_ms']))} "
            f"| {zoo._x(zoo.ratio(r.get('onnx_path_ms'), r['fusec_ms']))} "
            f"| {zoo._e(r['fusec_err'])} | {zoo._e(r['eager_err'])} | {r['verdict']} "
            f"| {r['graphs']} | {r['partitions']} | {r['eager_nodes']} "
            f"| {r.get('fallback_groups', '')} | {r.get('graph_replays', '')} "
            f"| {r['remark'][:80].replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.ZOO), help="zoo names, or 'tiny'")
    parser.add_argument("--dtypes", default="f16", help="f16, bf16 (comma-separated)")
    parser.add_argument("--batches", default="1", help="batch sizes (comma-separated)")
    parser.add_argument("--target", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smoke", action="store_true", help="the zoo's small configurations")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile default")
    parser.add_argument("--out", default=str(HERE / "results"), help="folder of the tables")
    parser.add_argument("--suffix", default=datetime.date.today().isoformat())
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

    meta = {"date": args.suffix, "target": args.target, "torch": torch.__version__}
    if args.onnx_table:
        meta["onnx_table"] = args.onnx_table
    if args.target == "cuda":
        meta["device"] = torch.cuda.get_device_name()
    rows = []
    start = time.monotonic()
    for name, dtype, batch in cases:
        if args.budget is not None and time.monotonic() - start > args.budget:
            rows.append(
                {"model": name, "dtype": dtype, "batch": batch, "error": "not run: over --budget"}
            )
            continue
        try:
            row = run_case(name, dtype, batch, args)
            row["onnx_path_ms"] = onnx_times.get((name, dtype, batch))
        except Exception as err:  # one broken case must not stop the table
            traceback.print_exc()
            row = {
                "model": name,
                "dtype": dtype,
                "batch": batch,
                "error": zoo.short(f"{type(err).__name__}: {err}"),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"torch-backend-{args.suffix}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    stem.with_suffix(".md").write_text(markdown(rows, meta))
    print(f"wrote {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
