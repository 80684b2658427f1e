"""The cpu model zoo: the GPU zoo's architectures at CPU sizes, fusec vs onnxruntime (issue 30).

The architectures of ``models_gpu.py`` (ResNet-50, MobileNetV3-Large, EfficientNet-B0,
ConvNeXt-T, ViT-B/16, BERT-base, GPT-2, a Llama-style decoder), built by its ``build`` with
random weights (``export_models.randomise``: non-trivial biases, norm scales and BatchNorm
statistics), in float32, at the sizes of ``CPU_ZOO``: the CNNs whole at 128x128 images; the
transformers at their full width with 4 layers and 128 tokens (ViT-B/16: 64 patches of a
128x128 image and its class token), fed float ``inputs_embeds`` as in the GPU zoo. Each
(model, batch) is exported once with PyTorch's dynamo exporter (static shapes) into
``$XDG_CACHE_HOME/fusec/models-cpu/torch-<version>/`` (else ``~/.cache/...``), keyed by
model, size and batch; later runs reuse the file.

Per (model, batch), every step in a process of its own (a failure is that row's message,
never the end of the run):

* **cold compile**: ``fusec.from_onnx`` + ``fusec.compile(target="cpu")`` + the first call,
  in a new process whose kernel cache (``FUSEC_CACHE_DIR``) is the model's fresh folder of
  this run (empty at batch 1; at the throughput batch it holds the batch-1 kernels, of
  which those whose code does not depend on the batch are reused); **warm compile**: the
  same in another new process, on the filled folder; **program cache**: ``fusec.compile_onnx``
  + the first call in a third new process, after one more (``fill``, not tabled) stored the
  program (a hit: no ONNX import, no pass, no code generation). All include importing fusec.
* **timing**, one process per thread count N: Numba's threads, OpenBLAS's and OpenMP's
  (environment, read at start) and onnxruntime's intra-op threads (CPU provider, default
  graph optimisations: all, no spinning, as ``models_bench.py``: on a small shared
  machine a spinning pool steals the cores of the next call) all N. fusec's outputs are
  checked against onnxruntime's on the same fresh random input (``tests/numerics.py``'s
  float32 tolerances; NaN never passes), then fusec and onnxruntime are called
  alternately (two warm-up calls each, then 5 to 20 pairs, about ``--seconds`` each):
  medians and minima of the wall clock.
* ``--torch-backend`` (issue 32, cpu): the same torch module through
  ``torch.compile(m, backend="fusec", dynamic=False)`` on the cpu target against PyTorch
  eager (``torch.set_num_threads(N)``), checked against eager's outputs and timed
  alternately with it; the backend's Dynamo graphs, fusec partitions and ATen nodes left
  to eager are counted (``fusec.torch.stats()``).

    python benchmarks/models_cpu.py --out benchmarks/results                   # the table
    python benchmarks/models_cpu.py --torch-backend --out benchmarks/results   # + column
    python benchmarks/models_cpu.py --quick --models mobilenet_v3_large,gpt2

Run it with a Python that has torch, torchvision, transformers, onnxscript and
onnxruntime beside fusec (``tests/frontend/onnx/models/export_models.py`` says how to make one).
``--quick``: batch 1, one thread, shorter timing. Writes ``<out>/models-cpu.md``, ``.json``
and the chart ``models-cpu.png`` (matplotlib; a note when it is missing), rewritten after
every step so that a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import models_gpu as zoo  # noqa: E402 - beside this script: the zoo's builders
from bench_common import commit, cpu_name, run_logged, write_results  # noqa: E402

# ------------------------------------------------------------------ the zoo at cpu sizes

IMAGE, SEQUENCE, LAYERS = 128, 128, 4


@dataclass(frozen=True)
class CpuModel:
    """One architecture of the GPU zoo at its cpu size."""

    name: str  # the key of models_gpu.ZOO
    throughput_batch: int
    size_text: str
    #: models_gpu.build's ``size`` (None: the architecture whole)
    size: dict | None = None
    hidden: int = 0  # the transformers' embedding width

    @property
    def label(self) -> str:
        return zoo.ZOO[self.name].label

    @property
    def vision(self) -> bool:
        return zoo.ZOO[self.name].source == "torchvision"

    @property
    def input_name(self) -> str:
        return zoo.input_name(zoo.ZOO[self.name], "embeds")

    def input_shape(self, batch: int) -> tuple[int, ...]:
        return (batch, 3, IMAGE, IMAGE) if self.vision else (batch, SEQUENCE, self.hidden)

    @property
    def slug(self) -> str:
        """The size in a file name: what decides the exported graph besides the batch."""
        return f"{IMAGE}px" if self.vision else f"{LAYERS}l-s{SEQUENCE}-h{self.hidden}"


WHOLE = f"whole, {IMAGE}x{IMAGE}"
CPU_ZOO: dict[str, CpuModel] = {
    m.name: m
    for m in (
        CpuModel("resnet50", 8, WHOLE),
        CpuModel("mobilenet_v3_large", 8, WHOLE),
        CpuModel("efficientnet_b0", 8, WHOLE),
        CpuModel("convnext_tiny", 8, WHOLE),
        CpuModel(
            "vit_b_16",
            4,
            f"{LAYERS} of 12 layers, {IMAGE}x{IMAGE} (65 tokens)",
            {
                "image_size": IMAGE,
                "patch_size": 16,
                "num_layers": LAYERS,
                "num_heads": 12,
                "hidden_dim": 768,
                "mlp_dim": 3072,
            },
        ),
        CpuModel(
            "bert",
            4,
            f"{LAYERS} of 12 layers, seq {SEQUENCE}",
            {"num_hidden_layers": LAYERS},
            768,
        ),
        CpuModel("gpt2", 4, f"{LAYERS} of 12 layers, seq {SEQUENCE}", {"n_layer": LAYERS}, 768),
        CpuModel(
            "llama",
            4,
            f"{LAYERS} layers, hidden 768, 12 heads, 4 KV heads, MLP 2048, seq {SEQUENCE}",
            {
                "hidden_size": 768,
                "intermediate_size": 2048,
                "num_hidden_layers": LAYERS,
                "num_attention_heads": 12,
                "num_key_value_heads": 4,
                "head_dim": 64,
            },
            768,
        ),
    )
}


def cache_folder() -> Path:
    """Where the exported models are kept: outside git, beside fusec's kernel cache."""
    xdg = Path(os.environ.get("XDG_CACHE_HOME", "")).expanduser()
    base = xdg if xdg.is_absolute() else Path.home() / ".cache"
    return base / "fusec" / "models-cpu"


def onnx_path(model: CpuModel, batch: int, torch_version: str) -> Path:
    """The cached export of ``model`` at ``batch``, keyed by model, size, batch and torch."""
    return cache_folder() / f"torch-{torch_version}" / f"{model.name}-{model.slug}-b{batch}.onnx"


def batches_of(model: CpuModel, wanted: Sequence[str]) -> list[int]:
    """The batch sizes of ``wanted`` ("1", "throughput" or a number) for ``model``."""
    sizes = [model.throughput_batch if w == "throughput" else int(w) for w in wanted]
    return list(dict.fromkeys(sizes))


# ------------------------------------------------------------------ results (pure)


def first_line(err: BaseException) -> str:
    """An error as the table shows it: its type and the first line of its message."""
    text = zoo.short(str(err)).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def merge(records: Iterable[dict]) -> tuple[list[dict], dict]:
    """The table's rows, one per (model, batch, threads), from a run's records: each row
    with its (model, batch)'s export and compile records, and the torch backend's record of
    its thread count; plus the environment records merged."""
    exports: dict[tuple, dict] = {}
    compiles: dict[tuple, dict] = {}
    timings: dict[tuple, dict] = {}
    backend: dict[tuple, dict] = {}
    env: dict = {}
    for r in records:
        kind = r.get("kind")
        if kind == "env":
            env |= {k: v for k, v in r.items() if k != "kind"}
        elif kind == "export":
            exports.setdefault((r["model"], r["batch"]), {}).update(r)
        elif kind == "compile":
            compiles.setdefault((r["model"], r["batch"]), {})[r["cache"]] = r
        elif kind == "time":
            timings.setdefault((r["model"], r["batch"], r["threads"]), {}).update(r)
        elif kind == "torch":
            backend.setdefault((r["model"], r["batch"], r["threads"]), {}).update(r)
    keys = list(dict.fromkeys([*timings, *backend]))
    keys += [
        (m, b, None) for (m, b) in [*exports, *compiles] if not any(k[:2] == (m, b) for k in keys)
    ]
    rows = []
    for model, batch, threads in keys:
        row: dict[str, Any] = {"model": model, "batch": batch, "threads": threads}
        export = exports.get((model, batch), {})
        row |= {k: export[k] for k in ("onnx_nodes", "opset", "export_s") if k in export}
        for cache, rec in compiles.get((model, batch), {}).items():
            row[f"{cache}_s"] = rec.get("total_s")
            if rec.get("status") != "ok":
                row.setdefault("messages", []).append(f"{cache} compile: {rec.get('message')}")
        if export.get("status", "ok") != "ok":
            row.setdefault("messages", []).append(f"export: {export.get('message')}")
        timing = timings.get((model, batch, threads), {})
        row |= {k: v for k, v in timing.items() if k not in ("kind", "message", "status")}
        if timing.get("status", "ok") != "ok":
            row.setdefault("messages", []).append(f"fusec: {timing.get('message')}")
        torch_rec = backend.get((model, batch, threads), {})
        row |= {f"tb_{k}": v for k, v in torch_rec.items() if k not in BASE_KEYS}
        if torch_rec.get("status", "ok") != "ok":
            row.setdefault("messages", []).append(f"torch backend: {torch_rec.get('message')}")
        row["status"] = row_status(row, export, compiles.get((model, batch), {}), timing)
        rows.append(row)
    order = {name: n for n, name in enumerate(CPU_ZOO)}
    rows.sort(key=lambda r: (order.get(r["model"], len(order)), r["batch"], r["threads"] or 0))
    return rows, env


BASE_KEYS = ("kind", "model", "batch", "threads")


def row_status(row: dict, export: dict, compiles: dict, timing: dict) -> str:
    """What the row says of fusec: ok, wrong (its check failed), or where it stopped."""
    if export.get("status", "ok") != "ok":
        return export["status"]
    if timing.get("status") and timing["status"] != "ok":
        return timing["status"]
    if "passed" in row:
        return "ok" if row["passed"] else "wrong"
    failed = [c["status"] for c in compiles.values() if c.get("status") != "ok"]
    return failed[0] if failed else "not timed"


def _ms(value: float | None, low: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if low is None else f"{value:.2f} ({low:.2f})"


def label(row: dict) -> str:
    model = CPU_ZOO.get(row["model"])
    return model.label if model else row["model"]


def table_row(r: dict, torch_backend: bool) -> str:
    check = "-"
    if "passed" in r:
        check = f"{'PASS' if r['passed'] else 'FAIL'} ({zoo._e(r.get('rel_l2'))})"
    cells = [
        label(r),
        str(r["batch"]),
        "-" if r["threads"] is None else str(r["threads"]),
        r["status"],
        _ms(r.get("fusec_ms"), r.get("fusec_min_ms")),
        _ms(r.get("ort_ms"), r.get("ort_min_ms")),
        zoo._x(zoo.ratio(r.get("ort_ms"), r.get("fusec_ms"))),
        zoo._x(zoo.ratio(r.get("ort_min_ms"), r.get("fusec_min_ms"))),
        check,
        f"{r['kernels']} ({zoo.kinds_text(r.get('kinds'))})" if r.get("kernels") else "-",
        zoo._f(r.get("cold_s"), 1),
        zoo._f(r.get("warm_s"), 1),
        zoo._f(r.get("program_s"), 1),
    ]
    if torch_backend:
        cells += torch_cells(r)
    return "| " + " | ".join(cells) + " |"


def torch_cells(r: dict) -> list[str]:
    if "tb_fusec_ms" not in r:  # not run, or failed: the messages say why
        return [r.get("tb_status", "-"), *["-"] * 5]
    check = f"{'PASS' if r['tb_passed'] else 'FAIL'} ({zoo._e(r.get('tb_rel_l2'))})"
    counts = f"{r['tb_graphs']} / {r['tb_partitions']} / {r['tb_eager_nodes']}"
    return [
        _ms(r["tb_fusec_ms"], r.get("tb_fusec_min_ms")),
        _ms(r.get("tb_eager_ms"), r.get("tb_eager_min_ms")),
        zoo._x(zoo.ratio(r.get("tb_eager_ms"), r["tb_fusec_ms"])),
        check,
        counts,
        zoo._f(r.get("tb_first_s"), 1),
    ]


HEAD = (
    "| model | batch | threads | status | fusec ms (min) | onnxruntime ms (min) "
    "| ort / fusec (median) | ort / fusec (min) | check vs ort (rel L2) | fusec kernels "
    "| cold compile s | warm compile s | program cache s |"
)
TORCH_HEAD = (
    " backend=fusec ms (min) | eager ms (min) | eager / backend | check vs eager (rel L2) "
    "| graphs / partitions / eager nodes | first call s |"
)


def markdown(rows: list[dict], meta: dict) -> str:
    """The table of a run, how it was measured, the sizes, and each failure's message."""
    env = meta.get("environment", {})
    torch_backend = meta.get("torch_backend", False)
    head = HEAD + (TORCH_HEAD if torch_backend else "")
    lines = [
        f"# fusec cpu model zoo vs onnxruntime, {meta.get('date', '?')}",
        "",
        f"Machine: {meta.get('machine', '?')}; load average at the start "
        f"{meta.get('load_start', '?')}, at the end {meta.get('load_end', '?')} (1 min; the "
        f"machine may be shared). Commit {meta.get('commit', '?')}; torch "
        f"{env.get('torch', '?')}, torchvision {env.get('torchvision', '?')}, transformers "
        f"{env.get('transformers', '?')}, onnxruntime {env.get('onnxruntime', '?')}, Numba "
        f"{env.get('numba', '?')}, numpy {env.get('numpy', '?')}. Command: "
        f"`{meta.get('command', '')}` ({meta.get('seconds', 0):.0f} s).",
        "",
        "float32, random weights, dynamo ONNX exports with static shapes. fusec's cpu target "
        "vs onnxruntime's CPU provider (default graph optimisations, no spinning), the same "
        "thread count for both (Numba, OpenBLAS, OpenMP and onnxruntime's intra-op pool), "
        "one process per thread count; called alternately on the same input: median (min) "
        "ms of the wall clock. Ratios above 1: fusec is faster. The check compares fusec's "
        "outputs with onnxruntime's (tests/numerics.py, float32: rtol 1e-4, atol 1e-4 of "
        "the output's RMS; NaN fails). Compile s: a new process importing fusec, importing "
        "the ONNX file, compiling and making the first call, with an empty kernel cache "
        "(cold; at the throughput batch the batch-1 kernels are cached) and again from the "
        "filled cache (warm); program cache: `fusec.compile_onnx` and the first call in a new "
        "process, the program stored by the process before (no ONNX import, pass or code "
        "generation).",
        "",
        "Sizes: "
        + "; ".join(f"{m.label}: {m.size_text}" for m in CPU_ZOO.values())
        + ". Throughput batch: "
        + ", ".join(f"{m.label} {m.throughput_batch}" for m in CPU_ZOO.values())
        + ".",
    ]
    if torch_backend:
        lines += [
            "",
            '`torch.compile(m, backend="fusec", dynamic=False)` on the cpu target vs PyTorch '
            "eager (`torch.set_num_threads` = threads) on the same module and input, "
            "alternately; checked against eager's outputs; graphs: Dynamo graphs handed to "
            "the backend, partitions: compiled by fusec, eager nodes: ATen nodes left to "
            "eager; first call: Dynamo + AOTAutograd + fusec compile + the first run.",
        ]
    lines += ["", head, "|" + " --- |" * (head.count("|") - 1)]
    lines += [table_row(r, torch_backend) for r in rows]
    notes = [f"- {label(r)} batch {r['batch']}: {m}" for r in rows for m in r.get("messages", [])]
    notes += [
        f"- {label(r)} batch {r['batch']}: torch backend remark: {r['tb_remark']}"
        for r in rows
        if r.get("tb_remark")
    ]
    notes = list(dict.fromkeys(notes))  # a compile failure repeats per thread count
    if notes:
        lines += ["", "Messages (the first line of each error):", "", *notes]
    if meta.get("chart_note"):
        lines += ["", meta["chart_note"]]
    return "\n".join(lines) + "\n"


def chart_series(rows: list[dict]) -> tuple[list[str], dict[str, list[float | None]]]:
    """Bar labels and fusec's speed-up over onnxruntime (and over eager, through the
    backend) of the rows fusec got right."""
    measured = [r for r in rows if r["status"] == "ok" and r.get("fusec_ms")]
    labels = [f"{label(r)} b{r['batch']} t{r['threads']}" for r in measured]
    series = {"onnxruntime / fusec": [zoo.ratio(r.get("ort_ms"), r["fusec_ms"]) for r in measured]}
    if any(r.get("tb_fusec_ms") for r in measured):
        series["eager / backend=fusec"] = [
            zoo.ratio(r.get("tb_eager_ms"), r.get("tb_fusec_ms")) for r in measured
        ]
    return labels, series


# ------------------------------------------------------------------ timing


def alternate(fns: dict[str, Callable[[], Any]], seconds: float, warmup: int = 2) -> dict:
    """Call ``fns`` in turn (``warmup`` rounds untimed, then 5 to 20 timed rounds, until
    about ``seconds`` of them): each one's median and minimum ms and its number of runs."""
    import statistics

    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    start = time.perf_counter()
    rounds = 0
    while rounds < 5 or (rounds < 20 and time.perf_counter() - start < seconds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
        rounds += 1
    return {
        name: {"ms": statistics.median(t), "min_ms": min(t), "runs": len(t)}
        for name, t in times.items()
    }


def check(got: Sequence[Any], want: Sequence[Any]) -> dict:
    """fusec's outputs against the baseline's: passed, the largest rel L2, the first
    failure's description."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from numerics import compare

    if len(got) != len(want):
        return {"passed": False, "rel_l2": None, "why": f"{len(got)} outputs, {len(want)} wanted"}
    results = [
        compare(np.asarray(g), np.asarray(w), dtype="f32") for g, w in zip(got, want, strict=True)
    ]
    failed = [str(c) for c in results if not c.passed]
    return {
        "passed": not failed,
        "rel_l2": max(c.rel_l2 for c in results),
        **({"why": failed[0]} if failed else {}),
    }


# ------------------------------------------------------------------ workers


class Worker:
    """One step of the run in its own process: it appends its records to ``results``."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.model = CPU_ZOO[spec["model"]]
        self.results = Path(spec["results"])

    def emit(self, record: dict) -> None:
        base = {"model": self.model.name}
        with self.results.open("a") as f:
            f.write(json.dumps(base | record, default=str) + "\n")

    def sample(self, batch: int) -> Any:
        import numpy as np

        rng = np.random.default_rng(1000 + batch)
        return rng.standard_normal(self.model.input_shape(batch)).astype(np.float32)

    def guarded(self, record: dict, step: Callable[[], dict], status: str) -> dict:
        """``record`` with what ``step`` measured, or with ``status`` and the error's first
        line when it raised (FusecError: fusec's refusal)."""
        try:
            return record | {"status": "ok"} | step()
        except Exception as err:
            return record | failure(err, status)


def failure(err: BaseException, status: str) -> dict:
    """A step's failure as its record says it (FusecError: fusec's refusal), the
    traceback in the step's log."""
    from fusec.errors import FusecError

    traceback.print_exception(err)
    why = "refused" if isinstance(err, FusecError) else status
    return {"status": why, "message": first_line(err)}


def run_export(w: Worker) -> None:
    """Export each batch that is not in the cache (one torch build for all)."""
    import torch

    zoo.import_torchvision()
    w.emit(
        {"kind": "env"} | {k: v for k, v in zoo.environment(torch, "cpu").items() if k != "pass"}
    )
    model = zoo.build(w.model.name, False, "embeds", w.model.size)
    for batch, path in zip(w.spec["batches"], w.spec["paths"], strict=True):
        path = Path(path)
        if path.exists():
            w.emit({"kind": "export", "batch": batch, "cached": True} | zoo.onnx_facts(path))
            continue

        def step(batch: int = batch, path: Path = path) -> dict:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial.onnx")
            x = torch.from_numpy(w.sample(batch))
            t0 = time.perf_counter()
            with torch.no_grad():
                zoo.export(model, x, partial, "dynamo", w.model.input_name)
            partial.replace(path)  # a killed export leaves no file that looks whole
            return {"export_s": time.perf_counter() - t0} | zoo.onnx_facts(path)

        w.emit(w.guarded({"kind": "export", "batch": batch}, step, "export error"))


#: the compile steps through ``fusec.compile_onnx``: the one that stores the program, then
#: the one timed from the program cache
PROGRAM_CACHE = ("fill", "program")
COMPILE_STEPS = ("cold", "warm", *PROGRAM_CACHE)


def run_compile(w: Worker) -> None:
    """Import, compile and call once, timed from before fusec is imported."""
    t0 = time.perf_counter()
    batch = w.spec["batch"]
    record = {"kind": "compile", "batch": batch, "cache": w.spec["cache"]}

    def step() -> dict:
        import fusec

        imported = time.perf_counter()
        shapes = {w.model.input_name: w.model.input_shape(batch)}
        if w.spec["cache"] in PROGRAM_CACHE:  # the program cache's path
            read = imported
            compiled = fusec.compile_onnx(w.spec["path"], input_shapes=shapes, target="cpu")
        else:
            module = fusec.from_onnx(w.spec["path"], input_shapes=shapes)
            read = time.perf_counter()
            compiled = fusec.compile(module, target="cpu")
        compiled(w.sample(batch))
        end = time.perf_counter()
        return {
            "import_fusec_s": imported - t0,
            "from_onnx_s": read - imported,
            "compile_call_s": end - read,
            "total_s": end - t0,
            "kernels": len(compiled.kernels),
        }

    w.emit(w.guarded(record, step, "compile error"))


def run_time(w: Worker) -> None:
    """fusec against onnxruntime at each batch, with ``threads`` threads each."""
    import numba
    import numpy as np
    import onnxruntime

    threads = w.spec["threads"]
    w.emit(
        {
            "kind": "env",
            "onnxruntime": onnxruntime.__version__,
            "numba": numba.__version__,
            "numpy": np.__version__,
        }
    )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for batch, path in zip(w.spec["batches"], w.spec["paths"], strict=True):
        record = {"kind": "time", "batch": batch, "threads": threads}

        def step(batch: int = batch, path: str = path) -> dict:
            x = w.sample(batch)
            session = onnxruntime.InferenceSession(
                path, options, providers=["CPUExecutionProvider"]
            )
            feeds = {w.model.input_name: x}
            calls = {"ort": lambda: session.run(None, feeds)}
            try:  # onnxruntime is timed even where fusec fails: the row shows what it missed
                compiled, result = fusec_checked(w.model, path, x, session.run(None, feeds))
                calls = {"fusec": lambda: compiled(x)} | calls
            except Exception as err:
                result = failure(err, "error")
            timed = alternate(calls, w.spec["seconds"])
            for name, t in timed.items():
                result |= {f"{name}_ms": t["ms"], f"{name}_min_ms": t["min_ms"]}
            return result | {"runs": timed["ort"]["runs"]}

        w.emit(w.guarded(record, step, "error"))


def fusec_checked(model: CpuModel, path: str, x: Any, want: list) -> tuple[Any, dict]:
    """fusec's compiled ``path`` for ``x`` and its first call checked against ``want``."""
    import fusec

    t0 = time.perf_counter()
    module = fusec.from_onnx(path, input_shapes={model.input_name: x.shape})
    compiled = fusec.compile(module, target="cpu")
    got = zoo.as_list(compiled(x))
    result = check(got, want) | {"first_call_s": time.perf_counter() - t0}
    return compiled, result | zoo.kernel_stats(compiled.kernels)


def run_torch(w: Worker) -> None:
    """The torch module through torch.compile(backend="fusec") against eager."""
    import torch

    import fusec.torch as fusec_torch

    zoo.import_torchvision()
    threads = w.spec["threads"]
    torch.set_num_threads(threads)
    model = zoo.build(w.model.name, False, "embeds", w.model.size)
    for batch in w.spec["batches"]:
        record = {"kind": "torch", "batch": batch, "threads": threads}

        def step(batch: int = batch) -> dict:
            x = torch.from_numpy(w.sample(batch))
            with torch.no_grad():
                want = [t.numpy() for t in zoo.as_list(model(x))]
                torch._dynamo.reset()
                fusec_torch.reset_stats()
                compiled = torch.compile(model, backend="fusec", dynamic=False)
                t0 = time.perf_counter()
                got = [t.numpy() for t in zoo.as_list(compiled(x))]
                result = check(got, want) | {"first_s": time.perf_counter() - t0}
                timed = alternate(
                    {"fusec": lambda: compiled(x), "eager": lambda: model(x)}, w.spec["seconds"]
                )
            for name, t in timed.items():
                result |= {f"{name}_ms": t["ms"], f"{name}_min_ms": t["min_ms"]}
            stats = fusec_torch.stats()
            result |= {k: stats[k] for k in ("graphs", "partitions", "eager_nodes")}
            return result | {"remark": stats["remarks"][0] if stats["remarks"] else ""}

        w.emit(w.guarded(record, step, "error"))


STEPS = {"export": run_export, "compile": run_compile, "time": run_time, "torch": run_torch}


def main_worker(text: str) -> int:
    spec = json.loads(text)
    STEPS[spec["step"]](Worker(spec))
    return 0


# ------------------------------------------------------------------ the parent


def thread_env(threads: int) -> dict[str, str]:
    """Every cpu pool of a worker at ``threads`` threads (read when each pool starts)."""
    keys = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return {key: str(threads) for key in keys}


class Run:
    """The parent: the steps of every model in order, the tables after each."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.results = work / "records.jsonl"
        self.start = time.monotonic()
        import torch  # the export folder's key; the parent imports nothing else of it

        self.torch_version = torch.__version__
        self.meta = {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit(dirty="+dirty", paths=("fusec",), missing="unknown"),
            "machine": f"{cpu_name()}, {os.cpu_count()} cores",
            "load_start": f"{os.getloadavg()[0]:.2f}",
            "command": " ".join(["benchmarks/models_cpu.py", *sys.argv[1:]]),
            "torch_backend": args.torch_backend,
            "export_cache": str(cache_folder()),
        }

    def step(self, spec: dict, env: dict[str, str], what: str) -> None:
        spec = spec | {"results": str(self.results)}
        log = self.work / f"{spec['model']}.log"
        print(f"== {spec['model']} {what}", flush=True)
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
        why = run_logged(command, log, self.args.step_limit, env)
        if why:  # the step's process ended early: a record says so (its own may be missing)
            print(f"== {spec['model']} {what}: {why}", flush=True)
            status = "timeout" if why.startswith("timeout") else "crashed"
            kind = spec["step"]
            for batch in spec.get("batches", [spec.get("batch")]):
                record = {"kind": kind, "model": spec["model"], "batch": batch}
                record |= {"status": status, "message": why}
                if kind == "compile":
                    record["cache"] = spec["cache"]
                if kind in ("time", "torch"):
                    record["threads"] = spec["threads"]
                if not self.recorded(record):
                    with self.results.open("a") as f:
                        f.write(json.dumps(record) + "\n")
        self.report()

    def recorded(self, record: dict) -> bool:
        """Whether the step already wrote this record, finished (its own message wins)."""
        keys = ("kind", "model", "batch", "cache", "threads")
        return any(
            all(r.get(k) == record.get(k) for k in keys) and "status" in r for r in self.records()
        )

    def records(self) -> list[dict]:
        lines = self.results.read_text().splitlines() if self.results.exists() else []
        return [json.loads(line) for line in lines if line.strip().endswith("}")]

    def model(self, model: CpuModel) -> None:
        batches = batches_of(model, self.args.batch_list)
        paths = [str(onnx_path(model, b, self.torch_version)) for b in batches]
        base: dict[str, Any] = {"model": model.name}
        self.step(base | {"step": "export", "batches": batches, "paths": paths}, {}, "export")
        exported = {r["batch"] for r in self.records() if r.get("kind") == "export"
                    and r["model"] == model.name and r.get("status", "ok") == "ok"}  # fmt: skip
        cache = Path(tempfile.mkdtemp(prefix=f"cache-{model.name}-", dir=self.work))
        fusec_env = {"FUSEC_CACHE_DIR": str(cache)}
        most = thread_env(max(self.args.thread_list))
        for batch, path in zip(batches, paths, strict=True):
            if batch not in exported:
                continue
            for kind in COMPILE_STEPS:
                spec = base | {"step": "compile", "batch": batch, "path": path, "cache": kind}
                self.step(spec, most | fusec_env, f"{kind} compile, batch {batch}")
        ok = [(b, p) for b, p in zip(batches, paths, strict=True) if b in exported]
        timed = base | {"batches": [b for b, _ in ok], "paths": [p for _, p in ok]}
        timed["seconds"] = self.args.seconds
        for threads in self.args.thread_list:
            if ok:
                spec = timed | {"step": "time", "threads": threads}
                self.step(spec, thread_env(threads) | fusec_env, f"timing, {threads} thread(s)")
            if self.args.torch_backend:
                spec = timed | {"step": "torch", "threads": threads, "batches": batches}
                self.step(spec, thread_env(threads) | fusec_env, f"torch backend, {threads} t")
        shutil.rmtree(cache, ignore_errors=True)

    def report(self) -> Path | None:
        rows, env = merge(self.records())
        meta = self.meta | {
            "environment": env,
            "load_end": f"{os.getloadavg()[0]:.2f}",
            "seconds": time.monotonic() - self.start,
        }
        if self.args.out is None:
            return None
        self.args.out.mkdir(parents=True, exist_ok=True)
        stem = self.args.out / self.args.name
        labels, series = chart_series(rows)
        title = f"fusec cpu model zoo, {meta['machine']}"
        meta["chart_note"] = zoo.draw_bars(labels, series, Path(f"{stem}.png"), title)
        write_results(stem, meta | {"rows": rows}, markdown(rows, meta))
        return Path(f"{stem}.md")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help=f"comma-separated, of {', '.join(CPU_ZOO)} (default: all)")
    parser.add_argument(
        "--batches", default="1,throughput", help='comma-separated sizes or "throughput"'
    )
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument(
        "--quick", action="store_true", help="batch 1, 1 thread, about 1 s of timing per row"
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="timing per row (about)")
    parser.add_argument(
        "--torch-backend", action="store_true", help='and torch.compile(backend="fusec")'
    )
    parser.add_argument("--out", type=Path, help="write <out>/<name>.md/.json/.png")
    parser.add_argument("--name", default="models-cpu", help="the tables' file name")
    parser.add_argument("--step-limit", type=float, default=900.0, help="one process's limit, s")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (logs)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.threads, args.seconds = "1", "1", 1.0
    args.batch_list = args.batches.split(",")
    args.thread_list = [int(t) for t in args.threads.split(",")]
    names = args.models.split(",") if args.models else list(CPU_ZOO)
    unknown = [m for m in names if m not in CPU_ZOO]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; the zoo: {', '.join(CPU_ZOO)}")
    args.model_list = [CPU_ZOO[m] for m in names]
    return args


def main_parent(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="fusec-models-cpu-"))
    print(f"== logs in {work}; exports cached in {cache_folder()}", flush=True)
    run = Run(args, work)
    for model in args.model_list:
        run.model(model)
    md = run.report()
    rows, _ = merge(run.records())
    if md is not None:
        print(md.read_text(), flush=True)
    else:
        print(markdown(rows, run.meta), flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.worker:  # its environment is the parent's: nothing of fusec is loaded yet
        raise SystemExit(main_worker(arguments.worker))
    from fusec.targets.cpu.threads import configure

    configure()  # passive OpenMP/OpenBLAS waits, in the environment the workers inherit
    raise SystemExit(main_parent(arguments))
