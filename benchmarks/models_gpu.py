"""The GPU model zoo: real architectures through ONNX into fusec, against PyTorch (issue 28).

Each zoo model is built from torchvision or transformers with random weights (nothing is
downloaded), cast to fp16 or bf16, exported by one of PyTorch's exporters (``torchscript``:
``dynamo=False``; ``dynamo``: the default one) to a temporary file per (model, dtype,
exporter, batch), imported with ``fusec.from_onnx(path, input_shapes=...)``, compiled with
``fusec.compile(module, target="cuda")`` and timed in the same run against the same module
under PyTorch eager, ``torch.compile`` (default mode) and, at batch 1,
``torch.compile(mode="reduce-overhead")`` (CUDA graphs).

Errors are against the module in float32 (TF32 off) on the same inputs (the 16-bit inputs
widened, so input rounding is not counted): the relative L2 error of fusec's outputs and,
beside it, of PyTorch eager's in the same 16-bit type, the yardstick of what the type costs.
A case is ``wrong`` when fusec's output holds NaN or infinity, or its error is above
``max(1e-2, 4 x eager's)`` (``verdict``). Kernels are counted by kind, with the groups on
the PyTorch fallback (kernel header ``FALLBACK``: op by op through PyTorch) and the direct
(non-Tensor-Core) convolutions (header ``direct conv2d``) named.

Timing: CUDA events on the caller's stream (torch's current stream), the median of 50 calls
after 10 warm-up calls, and the wall clock of 20 back-to-back calls to a device-wide
synchronize, checked against the events of the same loop (``stream_timing.py``: work queued
on another stream would make the events too short). Compile times: ``fusec.compile`` plus
the first call (kernels built or loaded from ``$FUSEC_CACHE_DIR``), and ``torch.compile``'s
first call.

Every case runs in its own process with a time limit, in two passes: first fusec and eager
for every case, then the torch.compile baselines (once per model, dtype and batch: they do
not depend on the exporter), so a run cut short still has every fusec row. Each result is
appended to ``models-gpu-<suffix>.jsonl`` as soon as it is known, and the tables are
rewritten after every case; ``--resume`` continues a run from its JSON lines (trying its
time-outs again, their kernels now partly in the cache). ``--jobs N`` runs N workers at a
time: exports and compiles overlap, and a worker that times holds a file lock and stops the
other workers' process groups meanwhile (SIGSTOP/SIGCONT: no compile threads or autotuning
beside a timing; work already queued on the GPU drains during the warm-up).
Transformers are fed float ``inputs_embeds`` (``--inputs ids``: int64 token ids, an
embedding lookup fusec compiles since issue 29); the row says which.
``--torch-backend`` (issue 32) adds the same module through
``torch.compile(model, backend="fusec")`` to the torch pass, timed by the same timer under
the same lock: its ms, the ONNX path's ms over it, its error against the float32 module and
its partitions and eager nodes, as columns of the table (``torch_backend_zoo.py`` is the
backend's own table, with graph breaks and the cpu target). ``--pipeline NAME`` compiles
fusec with that pipeline instead of the target's (an opt-in one such as
``fusec-cuda-separate-rope``); with ``--target cpu`` it is the pipeline of the cuda
structure columns (what the cuda target would make of each model, no GPU needed).
``--attention-mask`` exports the transformers (BERT, GPT-2, Llama) as users do, with a
second graph input ``attention_mask`` (int64 [batch, seq]: ones, and in rows 0, 2, ... the
last seq / 8 positions zero, right padding as a tokenizer pads, so every row is padded at
batch 1 and no softmax row is fully masked; ``padding_mask``), and feeds the same mask to
the float32 module, eager, torch.compile (both modes, and ``--torch-backend``) and fusec.
Every output position is compared, padded ones included (the models compute them; they are
not discarded); where the float32 module gives NaN, fusec must give NaN too and those
positions are left out of the error (``errors``'s ``same_nan``: the transformers here give
none, not even for a fully masked row). Rows say ``mask: yes`` and their input column
``inputs_embeds+mask``; models without a mask input (the CNNs, ViT) are not run, and the
table says so. The default suffix gains ``-mask``. The flash kernel reads the mask from
memory; ``FUSEC_ATTENTION_MASKS=index`` in the environment (the workers inherit it, and the
table names it) sends those attentions to the PyTorch fallback instead, the A/B baseline
(``fusec/targets/cuda/attention/template.py``).

    python3 benchmarks/models_gpu.py --quick --budget 540 --out results/       # H200
    python3 benchmarks/models_gpu.py --models resnet50,bert --dtypes bf16 --out results/
    python3 benchmarks/models_gpu.py --quick --attention-mask
    python3 benchmarks/models_gpu.py --target cpu --smoke --out /tmp/zoo       # no GPU

``--target cpu --smoke`` runs the same script end to end on the CPU (tiny configs: one or two
layers, 64x64 images) with wall-clock timing, and records for each case the kernels the cuda
target would generate (``fusec.compile(..., target="cuda", executable=False)``), fallbacks
included, without a GPU. Writes ``models-gpu-<suffix>.md`` / ``.json`` / ``.jsonl`` and a
bar chart ``models-gpu-<suffix>.png`` (matplotlib; skipped with a note when it is missing).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# ------------------------------------------------------------------ the zoo (data)


@dataclass(frozen=True)
class ZooEntry:
    """One architecture: how it is fed and which sizes it runs at."""

    name: str
    label: str
    source: str  # "torchvision" or "transformers"
    throughput_batch: int
    full_size: str  # what the full-size build is
    smoke_size: str  # what --smoke builds instead
    attention_mask: bool = False  # takes an attention_mask input (--attention-mask)


IMAGE, SMOKE_IMAGE = 224, 64  # 64: 2x2 after five stride-2 stages, as tests/frontend/onnx/models
SEQUENCE, SMOKE_SEQUENCE = 128, 16
SMOKE_BATCH = 2

ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("resnet50", "ResNet-50", "torchvision", 32, "224x224", "channels / 8, 64x64"),
        ZooEntry(
            "mobilenet_v3_large",
            "MobileNetV3-Large",
            "torchvision",
            32,
            "224x224",
            "width 0.25, 64x64",
        ),
        ZooEntry(
            "efficientnet_b0", "EfficientNet-B0", "torchvision", 32, "224x224", "channels / 4"
        ),
        ZooEntry(
            "convnext_tiny", "ConvNeXt-T", "torchvision", 32, "224x224", "2 stages of 1 block"
        ),
        ZooEntry("vit_b_16", "ViT-B/16", "torchvision", 32, "224x224", "1 layer, width 128"),
        ZooEntry(
            "bert",
            "BERT-base encoder",
            "transformers",
            8,
            "12 layers, seq 128",
            "2 layers, hidden 128",
            attention_mask=True,
        ),
        ZooEntry(
            "gpt2",
            "GPT-2 decoder",
            "transformers",
            8,
            "12 layers, seq 128",
            "2 layers, hidden 128",
            attention_mask=True,
        ),
        ZooEntry(
            "llama",
            "Llama-style decoder",
            "transformers",
            8,
            "4 layers of TinyLlama's (hidden 2048, 32 heads, 4 KV heads), seq 128",
            "2 layers, hidden 256, 4 heads, 2 KV heads",
            attention_mask=True,
        ),
    )
}
DTYPES = ("f16", "bf16")
EXPORTERS = ("dynamo", "torchscript")
#: ``--quick``: one dtype and one exporter
QUICK_DTYPE, QUICK_EXPORTER = "f16", "dynamo"


def input_name(entry: ZooEntry, form: str) -> str:
    if entry.source == "torchvision":
        return "x"
    return "inputs_embeds" if form == "embeds" else "input_ids"


#: ``--attention-mask``: the second graph input, and how its sample pads (``padding_mask``)
MASK_INPUT = "attention_mask"
#: every other row from the first is padded, over its last 1/PAD_FRACTION positions
PAD_EVERY, PAD_FRACTION = 2, 8


def input_names(entry: ZooEntry, form: str, mask: bool = False) -> list[str]:
    """The graph inputs of ``entry``: its input, then ``attention_mask`` with ``mask``."""
    return [input_name(entry, form)] + ([MASK_INPUT] if mask else [])


def input_label(entry: ZooEntry, form: str, mask: bool = False) -> str:
    """The table's input column: the input's name, "+mask" with an attention mask."""
    return input_name(entry, form) + ("+mask" if mask else "")


def padding_lengths(batch: int, sequence: int) -> list[int]:
    """Each row's valid length in the ``attention_mask`` sample: rows 0, 2, 4, ... (so
    batch 1 too) are padded over their last ``sequence // PAD_FRACTION`` positions (at
    least one, never all), the others are full. Right padding, as tokenizers pad for
    these models: every query, padded or not, still sees key 0 and on, so no row of
    the softmax is fully masked (no NaN by construction)."""
    pad = min(max(1, sequence // PAD_FRACTION), sequence - 1)
    return [sequence - pad if row % PAD_EVERY == 0 else sequence for row in range(batch)]


def padding_mask(batch: int, sequence: int) -> Any:
    """The ``attention_mask`` sample: int64 [batch, sequence], 1 at a row's first
    ``padding_lengths`` positions and 0 after them (numpy; torch takes it as is)."""
    import numpy as np

    lengths = np.asarray(padding_lengths(batch, sequence), dtype=np.int64)
    return (np.arange(sequence, dtype=np.int64)[None, :] < lengths[:, None]).astype(np.int64)


def batches_of(entry: ZooEntry, wanted: Sequence[str], smoke: bool) -> list[int]:
    """The batch sizes of ``wanted`` ("1", "throughput" or a number) for ``entry``."""
    big = SMOKE_BATCH if smoke else entry.throughput_batch
    sizes = [big if w == "throughput" else int(w) for w in wanted]
    return list(dict.fromkeys(sizes))


# ------------------------------------------------------------------ results (pure)


@dataclass(frozen=True)
class Case:
    """One worker's job: a model in one dtype through one exporter, at some batches."""

    model: str
    dtype: str
    exporter: str
    batches: tuple[int, ...]

    @property
    def slug(self) -> str:
        exporter = "" if self.exporter == "-" else f"-{self.exporter}"  # "-": any (torch)
        return f"{self.model}-{self.dtype}{exporter}"


def row_key(row: dict) -> tuple:
    """Rows of the same case and batch merge: fusec rows by exporter, torch rows without."""
    return (row["pass"], row["model"], row["dtype"], row.get("exporter", "-"), row["batch"])


#: the stage of a worker's first record of a row
FIRST_STAGES = ("export", "torch.compile")


def merge_records(lines: Iterable[str]) -> tuple[dict[tuple, dict], dict]:
    """The JSON lines of a run as {row key: the row's fields, later lines updating earlier
    ones} and the first environment record; a torn last line (a killed worker) is ignored."""
    rows: dict[tuple, dict] = {}
    env: dict = {}
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("pass") == "env":
            env = env or record
            continue
        if record.get("stage") in FIRST_STAGES:  # a new attempt: nothing of an earlier one
            rows[row_key(record)] = {}
        rows.setdefault(row_key(record), {}).update(record)
    return rows, env


def ratio(baseline_ms: float | None, fusec_ms: float | None) -> float | None:
    """How many times faster fusec is than a baseline (baseline time / fusec time)."""
    if baseline_ms is None or fusec_ms is None or fusec_ms <= 0:
        return None
    return baseline_ms / fusec_ms


#: fusec may lose accuracy against eager in the same type by this factor (other summation
#: orders, one rounding per fused group instead of per op); beyond it the result is wrong
WRONG_FACTOR = 4.0
#: and always this much (tests/numerics.py's 16-bit tolerance, as relative L2)
ERROR_FLOOR = 1e-2


def verdict(fusec_err: float, eager_err: float, fusec_nonfinite: int) -> str:
    """'ok' or 'wrong' for fusec's output against the float32 module (relative L2 errors of
    fusec and of eager in the same type). NaN or infinity never passes."""
    if fusec_nonfinite or not fusec_err <= max(ERROR_FLOOR, WRONG_FACTOR * eager_err):
        return "wrong"
    return "ok"


def combined_rows(rows: dict[tuple, dict]) -> list[dict]:
    """The fusec rows, each with the torch.compile baselines of its model, dtype and batch."""
    torch_rows = {k[1:3] + k[4:]: r for k, r in rows.items() if k[0] == "torch"}
    out = []
    for key, row in rows.items():
        if key[0] != "fusec":
            continue
        merged = dict(row)
        for name, value in torch_rows.get(key[1:3] + key[4:], {}).items():
            if name.startswith(("compile", "reduce_overhead", "torch_")):
                merged[name] = value
        merged["eager_over_fusec"] = ratio(merged.get("eager_ms"), merged.get("fusec_ms"))
        merged["compile_over_fusec"] = ratio(merged.get("compile_ms"), merged.get("fusec_ms"))
        merged["reduce_overhead_over_fusec"] = ratio(
            merged.get("reduce_overhead_ms"), merged.get("fusec_ms")
        )
        if "torch_backend_ms" in merged:  # fusec ms (the ONNX path) / backend ms
            merged["fusec_over_torch_backend"] = ratio(
                merged.get("fusec_ms"), merged["torch_backend_ms"]
            )
        out.append(merged)
    order = {name: n for n, name in enumerate(ZOO)}
    out.sort(
        key=lambda r: (
            order.get(r["model"], len(order)),
            r["dtype"],
            r["exporter"],
            r["batch"],
        )
    )
    return out


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def kinds_text(kinds: dict[str, int] | None) -> str:
    if not kinds:
        return "-"
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def timing_note(row: dict) -> str:
    check = row.get("stream_check")
    if not check:
        return "-"
    return "ok" if check["ok"] else f"FAILED ({check['events_ms']:.2f} / {check['wall_ms']:.2f})"


TABLE_HEAD = (
    "| model | dtype | exporter | batch | input | status | fusec ms | eager ms "
    "| compile ms | reduce-overhead ms | eager / fusec | compile / fusec | r-o / fusec "
    "| fusec err | eager err | NaN | kernels | fallback | direct conv | fusec compile s "
    "| torch.compile s | stream check | CUDA graphs |"
)


#: The columns ``--torch-backend`` adds (issue 32: the same module through
#: ``torch.compile(backend="fusec")``, timed by the torch worker).
BACKEND_HEAD = " backend ms | ONNX path / backend | backend err | backend partitions, eager nodes |"


def backend_cells(r: dict) -> list[str]:
    if r.get("torch_backend_error"):
        return ["failed", "-", "-", r["torch_backend_error"][:80].replace("|", "/")]
    parts = r.get("torch_backend_partitions")
    return [
        _f(r.get("torch_backend_ms")),
        _x(r.get("fusec_over_torch_backend")),
        _e(r.get("torch_backend_err")),
        "-" if parts is None else f"{parts}, {r.get('torch_backend_eager_nodes')}",
    ]


def table_row(r: dict, torch_backend: bool = False) -> str:
    cells = [
        ZOO[r["model"]].label if r["model"] in ZOO else r["model"],
        r["dtype"],
        r["exporter"],
        str(r["batch"]),
        r.get("input_form", "-"),
        r.get("status", "-"),
        _f(r.get("fusec_ms")),
        _f(r.get("eager_ms")),
        _f(r.get("compile_ms")),
        _f(r.get("reduce_overhead_ms")),
        _x(r.get("eager_over_fusec")),
        _x(r.get("compile_over_fusec")),
        _x(r.get("reduce_overhead_over_fusec")),
        _e(r.get("fusec_err")),
        _e(r.get("eager_err")),
        "-" if r.get("nonfinite") is None else str(r["nonfinite"]),
        f"{r['kernels']} ({kinds_text(r.get('kinds'))})" if r.get("kernels") else "-",
        "-" if r.get("fallback") is None else str(r["fallback"]),
        "-" if r.get("direct_conv") is None else str(r["direct_conv"]),
        _f(r.get("fusec_compile_s"), 1),
        _f(r.get("compile_s"), 1),
        timing_note(r),
        r.get("cuda_graphs", "-"),
    ]
    if torch_backend:
        cells += backend_cells(r)
    return "| " + " | ".join(cells) + " |"


def structure_row(r: dict) -> str:
    cuda = r["cuda_structure"]
    if "kernels" not in cuda:
        kernels, fallback, direct = f"{cuda.get('status')}: {cuda.get('message')}", "-", "-"
    else:
        kernels = f"{cuda['kernels']} ({kinds_text(cuda['kinds'])})"
        fallback, direct = str(cuda["fallback"]), str(cuda["direct_conv"])
    label = ZOO[r["model"]].label if r["model"] in ZOO else r["model"]
    cells = [label, r["dtype"], r["exporter"], str(r["batch"]), kernels, fallback, direct]
    return "| " + " | ".join(cells) + " |"


def markdown(rows: list[dict], meta: dict) -> str:
    """The table of a run, with what was measured how, and each non-ok row's message."""
    env = meta.get("environment", {})
    backend = bool(meta.get("torch_backend"))
    head = TABLE_HEAD + (BACKEND_HEAD if backend else "")
    lines = [
        f"# fusec model zoo on {meta.get('device', '?')}, {meta.get('date', '?')}",
        "",
        f"Device: {meta.get('device', '?')}, driver {meta.get('driver', '?')}; commit "
        f"{meta.get('commit', '?')}; torch {env.get('torch', '?')}, torchvision "
        f"{env.get('torchvision', '?')}, transformers {env.get('transformers', '?')}, onnx "
        f"{env.get('onnx', '?')}. Target {meta.get('target', '?')}"
        f"{' (smoke sizes)' if meta.get('smoke') else ''}. Command: `{meta.get('command', '')}`.",
        "",
        "Random weights (torchvision `weights=None`, transformers from configs), exported to "
        "ONNX per (model, dtype, exporter, batch) with static shapes, imported with "
        "`fusec.from_onnx`. ms: median of CUDA events on the caller's stream after warm-up "
        "(wall clock on cpu); the stream check compares the events of 20 back-to-back calls "
        "with their wall clock. Ratios are baseline / fusec (above 1: fusec is faster). "
        "err: relative L2 error against the module in float32 on the same inputs, for fusec "
        "and for eager in the same dtype; NaN: non-finite outputs of fusec. fallback: kernels "
        "run op by op through PyTorch; direct conv: convolutions not on the Tensor Cores. "
        "Compile s: fusec.compile plus the first call; torch.compile's first call. "
        "CUDA graphs: how fusec's timed calls ran (replays of its whole-program graph, or "
        "why not). "
        f"Workers at a time: {meta.get('jobs', 1)} (exporting and compiling side by side; "
        "timing one at a time).",
        *mask_paragraph(meta),
        "",
        head,
        "|" + " --- |" * (head.count("|") - 1),
    ]
    lines += [table_row(r, backend) for r in rows]
    notes = [
        f"- {ZOO[r['model']].label if r['model'] in ZOO else r['model']} {r['dtype']} "
        f"{r['exporter']} batch {r['batch']}: {r.get('status')}: {r.get('message', '')}"
        for r in rows
        if r.get("status") != "ok" and r.get("message")
    ]
    notes += [
        f"- {ZOO[r['model']].label if r['model'] in ZOO else r['model']} {r['dtype']} "
        f"batch {r['batch']}: {key}: {r[key]}"
        for r in rows
        for key in ("compile_error", "reduce_overhead_error", "torch_error")
        if r.get(key)
    ]
    fallbacks = sorted(
        {
            reason
            for r in rows
            for stats in (r, r.get("cuda_structure") or {})
            for reason in stats.get("fallback_reasons", [])
        }
    )
    structure = [r for r in rows if r.get("cuda_structure")]
    if structure:
        lines += [
            "",
            "The kernels the cuda target generates for these graphs (`fusec.compile(..., "
            'target="cuda", executable=False)`, no GPU needed):',
            "",
            "| model | dtype | exporter | batch | cuda kernels | fallback | direct conv |",
            "|" + " --- |" * 7,
            *[structure_row(r) for r in structure],
        ]
    notes = list(dict.fromkeys(notes))  # a torch.compile error repeats per exporter
    if notes:
        lines += ["", "Messages:", "", *notes]
    if fallbacks:
        lines += ["", "Fallback reasons (kernel headers):", "", *[f"- {f}" for f in fallbacks]]
    if meta.get("skipped"):
        lines += ["", f"Not run (over the --budget): {', '.join(meta['skipped'])}."]
    if meta.get("mask_skipped"):
        lines += [
            "",
            f"Not run with --attention-mask (no {MASK_INPUT} input): "
            f"{', '.join(meta['mask_skipped'])}.",
        ]
    if meta.get("chart_note"):
        lines += ["", meta["chart_note"]]
    return "\n".join(lines) + "\n"


def mask_paragraph(meta: dict) -> list[str]:
    """What ``--attention-mask`` fed, as lines before the table (none without it)."""
    if not meta.get("attention_mask"):
        return []
    kernel = meta.get("attention_masks_env") or "unset (tensor)"
    return [
        "",
        f"Attention masks: the transformers take a second input `{MASK_INPUT}` (int64 "
        f"[batch, seq]; ones, the last 1/{PAD_FRACTION} of the positions zero in rows 0, "
        f"{PAD_EVERY}, ...: right padding, no fully masked softmax row), fed the same to "
        "the float32 module, eager, torch.compile and fusec; every position is compared, "
        "padded ones included (their outputs are computed, not discarded), and where the "
        "float32 module gives NaN, fusec must too, those positions left out of the error "
        f"(none with this padding). `$FUSEC_ATTENTION_MASKS`: {kernel}.",
    ]


def write_results(out: Path, suffix: str, rows: list[dict], meta: dict) -> tuple[Path, Path]:
    """Write ``models-gpu-<suffix>.md`` and ``.json``; return their paths."""
    from bench_common import write_results as write_files

    base = out / f"models-gpu-{suffix}"
    write_files(base, {**meta, "rows": rows}, markdown(rows, meta))
    return base.with_suffix(".md"), base.with_suffix(".json")


BASELINES = (
    ("eager_over_fusec", "eager / fusec"),
    ("compile_over_fusec", "torch.compile / fusec"),
    ("reduce_overhead_over_fusec", "reduce-overhead / fusec"),
)


def chart_series(rows: list[dict]) -> tuple[list[str], dict[str, list[float | None]]]:
    """Bar labels and, per baseline, fusec's speed-up over it (None: not measured)."""
    measured = [r for r in rows if r.get("status") == "ok" and r.get("fusec_ms")]
    labels = [
        f"{ZOO[r['model']].label if r['model'] in ZOO else r['model']} {r['dtype']} "
        f"{r['exporter']} b{r['batch']}"
        for r in measured
    ]
    return labels, {name: [r.get(key) for r in measured] for key, name in BASELINES}


def bar_chart(rows: list[dict], path: Path, title: str) -> str | None:
    """fusec's speed-up over each baseline per measured row as a horizontal bar chart (log
    scale, 1 = as fast) in ``path``; returns why not when there is nothing to draw or no
    matplotlib."""
    labels, series = chart_series(rows)
    return draw_bars(labels, series, path, title)


def draw_bars(
    labels: list[str], series: dict[str, list[float | None]], path: Path, title: str
) -> str | None:
    """Speed-ups as grouped horizontal bars (one group per label, one bar per series; log
    scale, 1 = as fast) in ``path``; returns why not when there is nothing to draw or no
    matplotlib."""
    if not labels:
        return "No chart: no row was measured."
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "No chart: matplotlib is not installed."
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(labels)))
    for n, (name, values) in enumerate(series.items()):
        ys = [i + n * height for i in range(len(labels))]
        ax.barh(ys, [v or 0.0 for v in values], height=height, label=name)
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(labels))], labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("baseline time / fusec time (above 1: fusec faster)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ------------------------------------------------------------------ kernels


def kernel_stats(kernels: Sequence[Any]) -> dict:
    """Kernel count by kind, the groups on the PyTorch fallback (with the reasons their
    headers give) and the direct (non-Tensor-Core) convolutions of a compiled program."""
    kinds: dict[str, int] = {}
    reasons: set[str] = set()
    fallback = direct = 0
    for kernel in kernels:
        kinds[kernel.kind] = kinds.get(kernel.kind, 0) + 1
        head = [line for line in kernel.source.splitlines()[:40] if line.startswith("#")]
        if kernel.runs_op_by_op:
            fallback += 1
            reasons.update(
                f"{kernel.kind}: {line.split('FALLBACK:', 1)[1].strip()}"
                for line in head
                if "FALLBACK:" in line
            )
        if any("direct conv2d" in line for line in head):
            direct += 1
    return {
        "kernels": len(kernels),
        "kinds": kinds,
        "fallback": fallback,
        "direct_conv": direct,
        "fallback_reasons": sorted(reasons),
    }


# ------------------------------------------------------------------ the worker (torch)


def build(
    name: str, smoke: bool, form: str = "embeds", size: dict | None = None, mask: bool = False
) -> Any:
    """The zoo model ``name`` in float32, eval mode, random weights from a fixed seed.

    ``size``: the configuration's size fields instead of the full or smoke ones (the cpu
    zoo's sizes, ``models_cpu.py``): a transformers config's, or ViT's constructor's; the
    other CNNs take none (their size is the input's). ``mask``: a transformer takes its
    ``attention_mask`` as a second input (``masked_wrapper``; the same weights)."""
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "frontend" / "onnx" / "models"))
    from export_models import narrow, randomise

    torch.manual_seed(0)
    if ZOO[name].source == "torchvision":
        model = _torchvision_model(name, smoke, narrow, size)
    else:
        wrapper = masked_wrapper() if mask else hf_wrapper()
        model = wrapper(_transformers_model(name, smoke, size), form)
    randomise(model)  # non-trivial biases, norm scales and BatchNorm statistics
    return model.eval()


def import_torchvision() -> Any:
    """torchvision, also where its build is CUDA's beside a CPU torch: its C extension then
    cannot load (libc10_cuda), and its import fails registering fake kernels for two ops
    the extension would define. The models need none of its ops: the two schemas are
    defined here and the import tried again."""
    import torch

    try:
        import torchvision
    except RuntimeError as err:
        if "torchvision::nms" not in str(err):
            raise
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        library = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEEP.append(library)
        import torchvision
    return torchvision


_KEEP: list[Any] = []  # the library above lives as long as the process


def _torchvision_model(name: str, smoke: bool, narrow: Callable, size: dict | None) -> Any:
    torchvision = import_torchvision()
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    models = torchvision.models
    if name == "resnet50":
        return narrow(models.resnet50(weights=None), 8) if smoke else models.resnet50()
    if name == "mobilenet_v3_large":
        return models.mobilenet_v3_large(weights=None, width_mult=0.25 if smoke else 1.0)
    if name == "efficientnet_b0":
        model = models.efficientnet_b0(weights=None)
        return narrow(model, 4) if smoke else model
    if name == "convnext_tiny":
        if smoke:
            stages = [CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)]
            return ConvNeXt(stages, num_classes=16)
        return models.convnext_tiny(weights=None)
    if name == "vit_b_16":
        if size:
            return models.VisionTransformer(**size)
        if smoke:
            return models.VisionTransformer(
                image_size=SMOKE_IMAGE,
                patch_size=16,
                num_layers=1,
                num_heads=2,
                hidden_dim=128,  # heads of 64, as fusec's flash attention takes
                mlp_dim=256,
                num_classes=16,
            )
        return models.vit_b_16(weights=None)
    raise KeyError(name)


def _transformers_model(name: str, smoke: bool, size: dict | None = None) -> Any:
    try:  # transformers imports torchvision where it is installed: a CUDA build of it
        import_torchvision()  # beside a CPU torch fails there without this
    except ImportError:
        pass  # no torchvision: transformers does without
    import transformers as hf

    common = {"vocab_size": 512, "use_cache": False}
    if name == "bert":
        if size is None:
            size = (
                {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
                | {"intermediate_size": 256}
                if smoke
                else {}
            )
        config = hf.BertConfig(
            **common, **size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
        )
        return hf.BertModel(config)
    if name == "gpt2":
        if size is None:
            size = {"n_embd": 128, "n_layer": 2, "n_head": 2} if smoke else {}
        dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
        tokens = {"bos_token_id": 0, "eos_token_id": 0}  # within the small vocabulary
        config = hf.GPT2Config(**common, **size, **dropout, **tokens)
        return hf.GPT2Model(config)
    if name == "llama":
        if size is not None:  # the size fields and the heads' together
            heads = {}
        elif smoke:
            size = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2}
            heads = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}
        else:  # TinyLlama-1.1B's layer, four of them
            size = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 4}
            heads = {"num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 64}
        config = hf.LlamaConfig(**common, **size, **heads, max_position_embeddings=2048)
        return hf.LlamaModel(config)
    raise KeyError(name)


@functools.cache
def hf_wrapper() -> type:
    """A Hugging Face model fed with ``inputs_embeds`` (float) or ``input_ids``, with an
    all-ones attention mask built from the input's shape, returning a tuple of tensors
    (as ``tests/frontend/onnx/models/export_models.Encoder``); a class made once torch is
    imported."""
    import torch

    class HFWrapper(torch.nn.Module):
        def __init__(self, model: torch.nn.Module, form: str) -> None:
            super().__init__()
            self.model = model
            self.form = form

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            mask = torch.ones(x.shape[:2], dtype=torch.long, device=x.device)
            feed = {"inputs_embeds": x} if self.form == "embeds" else {"input_ids": x}
            out = self.model(**feed, attention_mask=mask, return_dict=False)
            return tuple(t for t in out if isinstance(t, torch.Tensor))

    return HFWrapper


@functools.cache
def masked_wrapper() -> type:
    """``hf_wrapper``'s model fed its attention mask as a second input (int64 [batch,
    seq], 1: a token, 0: padding) instead of the all-ones mask (``--attention-mask``)."""
    import torch

    class MaskedWrapper(hf_wrapper()):  # type: ignore[misc]
        def forward(  # type: ignore[override]
            self, x: torch.Tensor, attention_mask: torch.Tensor
        ) -> tuple[torch.Tensor, ...]:
            feed = {"inputs_embeds": x} if self.form == "embeds" else {"input_ids": x}
            out = self.model(**feed, attention_mask=attention_mask, return_dict=False)
            return tuple(t for t in out if isinstance(t, torch.Tensor))

    return MaskedWrapper


def sample(model: Any, name: str, batch: int, smoke: bool, form: str, dtype: Any) -> Any:
    """A fresh random input (fixed seed per batch) for ``model``; float inputs in ``dtype``."""
    import torch

    generator = torch.Generator().manual_seed(1000 + batch)
    if ZOO[name].source == "torchvision":
        side = SMOKE_IMAGE if smoke else IMAGE
        return torch.randn(batch, 3, side, side, generator=generator).to(dtype)
    sequence = SMOKE_SEQUENCE if smoke else SEQUENCE
    config = model.model.config
    if form == "ids":
        return torch.randint(0, config.vocab_size, (batch, sequence), generator=generator)
    return torch.randn(batch, sequence, config.hidden_size, generator=generator).to(dtype)


def sample_inputs(
    model: Any, name: str, batch: int, smoke: bool, form: str, dtype: Any, mask: bool = False
) -> tuple[Any, ...]:
    """``sample``'s input, then with ``mask`` the ``padding_mask`` of its batch and
    sequence (a torch int64 tensor): the module's and the graph's inputs in order."""
    x = sample(model, name, batch, smoke, form, dtype)
    if not mask:
        return (x,)
    import torch

    return x, torch.from_numpy(padding_mask(*x.shape[:2]))


def as_args(x: Any) -> tuple[Any, ...]:
    """A module's inputs as a tuple: ``x`` itself when it is one, else ``(x,)``."""
    return x if isinstance(x, tuple) else (x,)


def widened(x: Any) -> tuple[Any, ...]:
    """The inputs ``x`` (one tensor or a tuple) for the float32 module: float ones in
    float32, integer ones (ids, a mask) as they are."""
    return tuple(t.float() if t.is_floating_point() else t for t in as_args(x))


def export(model: Any, example: Any, path: Path, exporter: str, name: str | Sequence[str]) -> None:
    """Write ``model`` on ``example`` (static shapes) to ``path`` with one exporter;
    ``example`` a tensor or a tuple of them (the inputs in order, one ``name`` each).

    nn.MultiheadAttention's inference fast path (ViT's attention under no_grad) is one
    ``aten::_native_multi_head_attention`` call that the TorchScript exporter cannot write:
    the export traces the module's ordinary path, the same function."""
    import warnings

    import torch

    fastpath = torch.backends.mha.get_fastpath_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            _export(torch, model, example, path, exporter, name)
        finally:
            torch.backends.mha.set_fastpath_enabled(fastpath)


def _export(
    torch: Any, model: Any, example: Any, path: Path, exporter: str, name: str | Sequence[str]
) -> None:
    args, names = as_args(example), [name] if isinstance(name, str) else list(name)
    if exporter == "torchscript":
        torch.onnx.export(model, args, str(path), dynamo=False, input_names=names)
    else:
        program = torch.onnx.export(
            model, args, dynamo=True, input_names=names, external_data=False
        )
        program.save(str(path), external_data=False)


def as_list(out: Any) -> list:
    return list(out) if isinstance(out, tuple | list) else [out]


def to_numpy(value: Any) -> Any:
    """An output (torch tensor or numpy array, any float type) as float64 numpy."""
    import numpy as np

    if hasattr(value, "detach"):
        return value.detach().float().cpu().numpy().astype(np.float64)
    return np.asarray(value).astype(np.float64)


def fusec_argument(x: Any, target: str) -> Any:
    """``x`` as fusec's compiled module takes it: the torch tensor on cuda, numpy on cpu
    (bfloat16 through ml_dtypes, which numpy lacks)."""
    import torch

    if target == "cuda":
        return x.contiguous()
    if x.dtype == torch.bfloat16:
        import ml_dtypes

        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def errors(got: list, want: list, same_nan: bool = False) -> tuple[float, int]:
    """(largest relative L2 error over the outputs, non-finite elements of ``got``).

    ``same_nan`` (``--attention-mask``): where ``want`` is NaN (a softmax row with every key
    masked, in a model that leaves it NaN), ``got`` must be NaN too and the position is
    left out of the error; ``got`` finite there counts as non-finite (a mismatch)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from numerics import compare

    if len(got) != len(want):
        return float("inf"), 0
    worst, bad = 0.0, 0
    for g, w in zip(got, want, strict=True):
        a, b = to_numpy(g), to_numpy(w)
        if same_nan and a.shape == b.shape:
            hole = np.isnan(b)
            bad += int(np.count_nonzero(~np.isnan(a[hole])))
            a, b = a[~hole], b[~hole]
        bad += int(np.count_nonzero(~np.isfinite(a)))
        worst = max(worst, compare(a, b, dtype="f32").rel_l2)
    return worst, bad


class Registry:
    """The process groups of a run's live workers, one empty file per group in ``folder``:
    what a worker that times stops meanwhile (``Timer.exclusive``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def join(self) -> None:
        """Register this process's group (a worker's, from ``run_logged``) until it exits."""
        import atexit

        self.folder.mkdir(exist_ok=True)
        entry = self.folder / str(os.getpgid(0))
        entry.touch()
        atexit.register(entry.unlink, missing_ok=True)

    def groups(self) -> list[int]:
        if not self.folder.is_dir():
            return []
        return [int(p.name) for p in self.folder.iterdir() if p.name.isdigit()]

    def signal_others(self, signum: int) -> list[int]:
        """Send ``signum`` to every registered group but this process's own; those it
        reached."""
        own = os.getpgid(0)
        return self.signal([g for g in self.groups() if g != own], signum)

    def signal(self, groups: Iterable[int], signum: int) -> list[int]:
        reached = []
        for group in groups:
            try:
                os.killpg(group, signum)
                reached.append(group)
            except (ProcessLookupError, PermissionError):  # ended unregistered (killed), or
                (self.folder / str(group)).unlink(missing_ok=True)  # an id reused by another
        return reached


@contextlib.contextmanager
def holding(lock: Path) -> Iterator[None]:
    """The run's timing lock (``flock`` on ``lock``), held for the ``with`` block."""
    import fcntl

    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


class Timer:
    """Medians after warm-up: CUDA events on torch's current stream, checked against the wall
    clock of a back-to-back loop (cuda); wall clock alone (cpu)."""

    WARMUP, REPS, LOOP = 10, 50, 20

    def __init__(self, target: str, smoke: bool, lock: Path | None = None) -> None:
        self.cuda = target == "cuda"
        self.lock = lock
        if smoke:
            self.WARMUP, self.REPS, self.LOOP = 2, 7, 5

    def __call__(self, fn: Callable[[], Any]) -> dict:
        """Time ``fn`` holding the run's timing lock: with --jobs above 1, other workers
        export and compile meanwhile, but no two time at once."""
        with self.exclusive():
            return self._time(fn)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the run's timing lock, and stop every other worker meanwhile: for timing,
        and for other long GPU work (a profile run).

        The lock alone kept two workers from timing at once, but not one worker's compile
        (inductor's compile threads and its autotuning runs on the GPU, NVRTC) from running
        beside another's timing: in one H200 run (2026-12-03 21:42) eager ResNet-50 at batch 32
        timed 9.19 ms, 4.97 in the run before, and eager BERT at batch 1 11.7 ms against 5.1;
        torch.compile's rows moved as much both ways. Every worker is a process group of its
        own (``run_logged``) and registers it (``Registry``); the holder sends the others'
        groups SIGSTOP after taking the lock and SIGCONT before letting it go (the parent
        sends SIGCONT too after each worker ends, should one be killed while holding it).
        Work another worker had already queued on the GPU still drains during the warm-up."""
        if self.lock is None:
            yield
            return
        registry = Registry(self.lock.with_suffix(".workers"))
        with holding(self.lock):
            stopped = registry.signal_others(signal.SIGSTOP)
            try:
                yield
            finally:
                registry.signal(stopped, signal.SIGCONT)

    def _time(self, fn: Callable[[], Any]) -> dict:
        import torch

        for _ in range(self.WARMUP):
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.REPS):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return {"ms": statistics.median(times), "min_ms": min(times)}
        sys.path.insert(0, str(HERE))
        from stream_timing import checked_loop

        stream = torch.cuda.current_stream()
        pairs = []
        for _ in range(self.REPS):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in pairs]
        events, wall, ok = checked_loop(fn, self.LOOP, warmup=1)
        return {
            "ms": statistics.median(times),
            "min_ms": min(times),
            "wall_ms": wall / self.LOOP,
            "stream_check": {
                "events_ms": events,
                "wall_ms": wall,
                "ok": ok,
            },
        }


@dataclass
class Worker:
    """What one worker process does, from the parent's JSON."""

    job: str  # "fusec" or "torch"
    case: Case
    target: str
    smoke: bool
    form: str
    results: Path
    reduce_overhead: bool = True
    profile: bool = False
    torch_backend: bool = False
    pipeline: str | None = None  # fusec's pipeline (None: the target's)
    attention_mask: bool = False  # --attention-mask: an attention_mask input too

    @property
    def timer(self) -> Timer:
        return Timer(self.target, self.smoke, self.results.with_suffix(".lock"))

    def emit(self, row: dict) -> None:
        with self.results.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")

    def base(self, batch: int) -> dict:
        exporter = self.case.exporter if self.job == "fusec" else "-"
        return {
            "pass": self.job,
            "model": self.case.model,
            "dtype": self.case.dtype,
            "exporter": exporter,
            "batch": batch,
        }


def torch_setup(target: str) -> tuple[Any, Any]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference is IEEE float32
    torch.backends.cudnn.allow_tf32 = False
    return torch, torch.device("cuda" if target == "cuda" else "cpu")


TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def environment(torch: Any, target: str) -> dict:
    import onnx
    import transformers

    torchvision = import_torchvision()

    env = {
        "pass": "env",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "python": sys.version.split()[0],
    }
    if target == "cuda":
        env["device"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def prepare(
    name: str, dtype: str, smoke: bool, form: str, device: Any, mask: bool = False
) -> tuple[Any, Any]:
    """(the float32 module, the same weights in ``dtype``) on ``device``; ``mask``: fed an
    ``attention_mask`` too."""
    import torch

    reference = build(name, smoke, form, mask=mask).to(device)
    model = build(name, smoke, form, mask=mask).to(
        device=device, dtype=getattr(torch, TORCH_DTYPES[dtype])
    )
    return reference, model


@dataclass
class Checked:
    """A case's row and, when fusec ran it, what timing it needs: its input as fusec and
    as torch take it, and with ``--attention-mask`` the mask likewise."""

    row: dict
    compiled: Any = None
    arg: Any = None
    x: Any = None
    mask_arg: Any = None
    mask: Any = None

    @property
    def args(self) -> tuple[Any, ...]:
        """fusec's arguments in the graph's order."""
        return (self.arg,) if self.mask_arg is None else (self.arg, self.mask_arg)

    @property
    def xs(self) -> tuple[Any, ...]:
        """The torch module's inputs in order."""
        return (self.x,) if self.mask is None else (self.x, self.mask)


def check_fusec(
    reference: Any,
    model: Any,
    row: dict,
    *,
    target: str,
    smoke: bool,
    form: str,
    emit: Callable[[dict], None],
    pipeline: str | None = None,
    mask: bool = False,
) -> Checked:
    """Export ``model`` at ``row``'s batch, import, compile and run it with fusec, and
    compare fusec and eager with the float32 ``reference``; each stage is announced by
    ``emit`` first (a killed worker says where it stopped), a failure is the row's status.
    ``mask``: ``model`` and ``reference`` take an ``attention_mask`` (``masked_wrapper``),
    the graph has it as its second input, and NaN of the reference must be NaN in fusec
    (``errors``'s ``same_nan``)."""
    import torch

    import fusec
    from fusec.errors import FusecError

    entry = ZOO[row["model"]]
    name = input_name(entry, form)
    names = input_names(entry, form, mask)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    xs = tuple(
        t.to(device)
        for t in sample_inputs(model, row["model"], row["batch"], smoke, form, dtype, mask)
    )
    x = xs[0]
    row |= {"input_form": input_label(entry, form, mask), "input": list(x.shape)}
    if mask:
        row |= {
            "mask": "yes",
            "padded_rows": sum(1 for n in padding_lengths(*x.shape[:2]) if n < x.shape[1]),
        }
    row["stage"] = "export"
    emit(row)
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        want = as_list(reference(*widened(xs)))
        if mask:
            row["reference_nan"] = sum(int(torch.isnan(t).sum()) for t in want)
        row["eager_err"], row["eager_nonfinite"] = errors(as_list(model(*xs)), want, mask)
        path = Path(tmp) / f"{row['model']}-b{row['batch']}.onnx"
        t0 = time.perf_counter()
        try:
            export(model, xs if mask else x, path, row["exporter"], names if mask else name)
        except Exception as err:  # the exporter's own failure, not fusec's
            return Checked(row | failure("export error", err))
        row["export_s"] = time.perf_counter() - t0
        row |= onnx_facts(path)
        emit(row | {"stage": "import"})
        t0 = time.perf_counter()
        try:
            shapes = {n: tuple(t.shape) for n, t in zip(names, xs, strict=True)}
            module = fusec.from_onnx(path, input_shapes=shapes)
        except FusecError as err:
            return Checked(row | {"status": "refused at import", "message": short(str(err))})
        except Exception as err:
            return Checked(row | failure("import error", err))
    row["import_s"] = time.perf_counter() - t0
    if target != "cuda":  # what the cuda target would make of it, without a GPU
        row["cuda_structure"] = cuda_structure(module, pipeline)
        pipeline = None  # (a cuda pipeline: the cpu target compiles with its own)
    emit(row | {"stage": "compile"})
    args = tuple(fusec_argument(t, target) for t in xs)
    try:
        t0 = time.perf_counter()
        compiled = fusec.compile(module, target=target, pipeline=pipeline)
        got = as_list(compiled(*args))
        if target == "cuda":
            torch.cuda.synchronize()
        row["fusec_compile_s"] = time.perf_counter() - t0
    except Exception as err:
        return Checked(row | failure("compile error", err))
    row |= kernel_stats(compiled.kernels)
    row["fusec_err"], row["nonfinite"] = errors(got, want, mask)
    row["status"] = verdict(row["fusec_err"], row["eager_err"], row["nonfinite"])
    if mask:
        return Checked(row, compiled, args[0], x, args[1], xs[1])
    return Checked(row, compiled, args[0], x)


def cuda_graph_state(program: Any) -> str:
    """How the timed calls ran: replays of the program's CUDA graph, why its capture
    failed, or why it was not used (off, a PyTorch fallback group, not on cuda)."""
    graphs = getattr(program, "graphs", None)
    if graphs is None:
        return "off" if hasattr(program, "graphs") else "-"
    if graphs.failed:
        return "capture failed: " + short(next(iter(graphs.failed.values())))
    replays = sum(r.replays for r in graphs.recorded.values())
    if replays:
        return f"{replays} replays"
    return "not used (fallback groups)" if program._torch_groups else "not used"


def profile_case(w: Worker, checked: Checked, batch: int) -> str:
    """``fusec profile`` of the case (per-kernel times, CUDA graphs off while it runs):
    its table in the worker's log, its JSON beside the results; the file's name."""
    import numpy as np

    from fusec.tools.profile import profile

    hosts = [
        arg.detach().cpu().numpy() if hasattr(arg, "detach") else np.asarray(arg)
        for arg in checked.args
    ]
    with w.timer.exclusive():  # its sleep kernels and timed calls load the GPU
        prof = profile(checked.compiled, inputs=hosts, repeat=10, warmup=2)
    print(f"== profile of {w.case.slug} batch {batch}\n{prof.table()}", flush=True)
    path = w.results.parent / f"profile-{w.case.slug}-b{batch}.json"
    path.write_text(json.dumps(prof.to_dict(), indent=1, default=str))
    return path.name


def run_fusec_job(w: Worker) -> None:
    """Check, then time fusec and eager, for each batch of the case."""
    torch, device = torch_setup(w.target)
    w.emit(environment(torch, w.target))
    reference, model = prepare(
        w.case.model, w.case.dtype, w.smoke, w.form, device, w.attention_mask
    )
    timer = w.timer
    for batch in w.case.batches:
        checked = check_fusec(
            reference,
            model,
            w.base(batch),
            target=w.target,
            smoke=w.smoke,
            form=w.form,
            emit=w.emit,
            pipeline=w.pipeline,
            mask=w.attention_mask,
        )
        row = checked.row
        if checked.compiled is not None:
            w.emit(row | {"stage": "timing"})
            with torch.no_grad():
                fusec_t = timer(functools.partial(checked.compiled, *checked.args))
                eager_t = timer(functools.partial(model, *checked.xs))
            row["fusec_ms"], row["fusec_min_ms"] = fusec_t["ms"], fusec_t["min_ms"]
            row["fusec_wall_ms"] = fusec_t.get("wall_ms")
            row["stream_check"] = fusec_t.get("stream_check")
            row["eager_ms"], row["eager_min_ms"] = eager_t["ms"], eager_t["min_ms"]
            row["eager_wall_ms"] = eager_t.get("wall_ms")
            row["cuda_graphs"] = cuda_graph_state(checked.compiled.program)
            if w.profile:  # after the timing, which a failed profile must not lose
                try:
                    row["profile"] = profile_case(w, checked, batch)
                except Exception as err:  # noqa: BLE001 - reported in the row
                    row["profile"] = f"failed: {short(f'{type(err).__name__}: {err}')}"
        w.emit(row | {"stage": "done"})


def run_torch_job(w: Worker) -> None:
    """torch.compile (default mode) at each batch and mode="reduce-overhead" at batch 1,
    each compiled afresh for its static shape; compile time = the first call."""
    torch, device = torch_setup(w.target)
    dtype = getattr(torch, TORCH_DTYPES[w.case.dtype])
    mask = w.attention_mask
    if w.torch_backend:  # the float32 module too: the backend's error
        reference, model = prepare(w.case.model, w.case.dtype, w.smoke, w.form, device, mask)
    else:
        reference, model = None, build(w.case.model, w.smoke, w.form, mask=mask).to(device, dtype)
    timer = w.timer
    for batch in w.case.batches:
        row = w.base(batch) | {"stage": "torch.compile"}
        if mask:
            row["mask"] = "yes"
        w.emit(row)
        if mask:  # the module's inputs as a tuple (first_call_and_time's *x)
            x = tuple(
                t.to(device)
                for t in sample_inputs(model, w.case.model, batch, w.smoke, w.form, dtype, True)
            )
        else:
            x = sample(model, w.case.model, batch, w.smoke, w.form, dtype).to(device)
        modes = [("compile", "default")]
        if batch == 1 and w.reduce_overhead:
            modes.append(("reduce_overhead", "reduce-overhead"))
        for key, mode in modes:
            try:
                row |= compiled_timing(torch, model, x, mode, key, timer, w.target)
            except Exception as err:
                row[f"{key}_error"] = f"{type(err).__name__}: {str(err)[:300]}"
                w.emit(row)
                continue
            w.emit(row | {"stage": f"{mode} done"})
        if w.torch_backend:
            try:
                row |= backend_timing(torch, model, reference, x, timer, w.target)
            except Exception as err:
                row["torch_backend_error"] = f"{type(err).__name__}: {str(err)[:300]}"
        w.emit(row | {"stage": "done"})


def first_call_and_time(
    torch: Any, fn: Callable[[Any], Any], x: Any, timer: Timer, target: str
) -> tuple[Any, float, dict]:
    """A compiled ``fn``'s first call on ``x`` (where it compiles; a tuple: its inputs in
    order): its result and seconds (to the device's end on cuda), then ``timer``'s figures
    of the calls after it."""
    args = as_args(x)
    t0 = time.perf_counter()
    out = fn(*args)
    if target == "cuda":
        torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    return out, first_s, timer(lambda: fn(*args))


def backend_timing(
    torch: Any, model: Any, reference: Any, x: Any, timer: Timer, target: str
) -> dict:
    """``torch.compile(model, backend="fusec")`` for ``x``'s shape (a tuple: the inputs in
    order): its first call's seconds, median ms and error against the float32
    ``reference``, and what the backend did (Dynamo graphs, fusec partitions, ATen nodes
    left to eager)."""
    import fusec.torch as fusec_torch

    torch._dynamo.reset()
    fusec_torch.reset_stats()
    fn = torch.compile(model, backend="fusec", dynamic=False)
    with torch.no_grad():
        got, first_s, timed = first_call_and_time(torch, fn, x, timer, target)
        want = as_list(reference(*widened(x)))
    err, nonfinite = errors(as_list(got), want, isinstance(x, tuple))
    stats = fusec_torch.stats()
    return {
        "torch_backend_s": first_s,
        "torch_backend_ms": timed["ms"],
        "torch_backend_err": err,
        "torch_backend_nonfinite": nonfinite,
        "torch_backend_graphs": stats["graphs"],
        "torch_backend_partitions": stats["partitions"],
        "torch_backend_eager_nodes": stats["eager_nodes"],
    }


#: what inductor says of a cache file that a worker killed at its time limit left half written
BROKEN_CACHE = ("file too short", "invalid ELF header")


def compiled_timing(
    torch: Any, model: Any, x: Any, mode: str, key: str, timer: Timer, target: str
) -> dict:
    """torch.compile ``model`` in ``mode`` for ``x``'s shape: the first call's seconds and
    the median ms. A half-written cache file (a worker killed earlier) is compiled past
    once, with inductor's caches off."""
    try:
        return _compile_and_time(torch, model, x, mode, key, timer, target)
    except Exception as err:
        if not any(text in str(err) for text in BROKEN_CACHE):
            raise
    torch._inductor.config.force_disable_caches = True
    return _compile_and_time(torch, model, x, mode, key, timer, target)


def _compile_and_time(
    torch: Any, model: Any, x: Any, mode: str, key: str, timer: Timer, target: str
) -> dict:
    torch._dynamo.reset()
    fn = torch.compile(model, mode=mode, dynamic=False)
    with torch.no_grad():
        _, first_s, timed = first_call_and_time(torch, fn, x, timer, target)
    return {f"{key}_s": first_s, f"{key}_ms": timed["ms"], f"{key}_wall_ms": timed.get("wall_ms")}


def short(message: str) -> str:
    """A diagnostic without the temporary file's folder and the list of supported
    operators that follows an unsupported one."""
    message = message.split("; fusec evaluates any operator at import", 1)[0]
    head, sep, rest = message.partition(".onnx: ")
    if sep:
        message = Path(head).name + sep + rest
    return message[:600]


def failure(status: str, err: BaseException) -> dict:
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    at = f" (at {Path(where[0].filename).name}:{where[0].lineno})" if where else ""
    return {"status": status, "message": f"{type(err).__name__}: {short(str(err))}{at}"}


def onnx_facts(path: Path) -> dict:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"onnx_nodes": len(model.graph.node), "opset": opset}


def cuda_structure(module: Any, pipeline: str | None = None) -> dict:
    """The kernels the cuda target generates for ``module`` (no GPU needed), with
    ``pipeline`` (None: the target's)."""
    import fusec

    try:
        compiled = fusec.compile(module, target="cuda", executable=False, pipeline=pipeline)
    except Exception as err:
        return failure("cuda compile error", err)
    return kernel_stats(compiled.kernels)


# ------------------------------------------------------------------ the parent


def driver() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else "n/a"


def wanted_models(args: argparse.Namespace) -> list[str]:
    models = args.models.split(",") if args.models else list(ZOO)
    unknown = [m for m in models if m not in ZOO]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; the zoo: {', '.join(ZOO)}")
    return models


def mask_skipped(args: argparse.Namespace) -> list[str]:
    """The wanted models that ``--attention-mask`` leaves out: they take no mask."""
    if not getattr(args, "attention_mask", False):
        return []
    return [m for m in wanted_models(args) if not ZOO[m].attention_mask]


def plan(args: argparse.Namespace) -> list[Case]:
    skip = mask_skipped(args)
    models = [m for m in wanted_models(args) if m not in skip]
    dtypes = [QUICK_DTYPE] if args.quick else args.dtypes.split(",")
    exporters = [QUICK_EXPORTER] if args.quick else args.exporters.split(",")
    wanted = ["1", "throughput"] if args.quick else args.batches.split(",")
    return [
        Case(m, d, e, tuple(batches_of(ZOO[m], wanted, args.smoke)))
        for m in models
        for d in dtypes
        for e in exporters
    ]


def run_worker(job: str, case: Case, args: argparse.Namespace, results: Path, limit: float) -> str:
    """Run one job in its own process group within ``limit`` seconds; '' or why it ended."""
    spec = {
        "job": job,
        "case": asdict(case),
        "target": args.target,
        "smoke": args.smoke,
        "form": args.inputs,
        "results": str(results),
        "reduce_overhead": not args.no_reduce_overhead,
        "profile": args.profile,
        "torch_backend": args.torch_backend,
        "pipeline": args.pipeline,
    }
    if args.attention_mask:
        spec["attention_mask"] = True
    from bench_common import run_logged

    log = results.parent / "logs" / f"{case.slug}-{job}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("")
    # a process group: its compile workers (inductor, nvcc) go with it
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    why = run_logged(command, log, limit)
    resume_workers(results.with_suffix(".lock"))
    return why


def resume_workers(lock: Path) -> None:
    """SIGCONT every registered worker, holding the timing lock (so that none is timing
    and has others stopped): a worker killed while it held the lock left them stopped."""
    registry = Registry(lock.with_suffix(".workers"))
    with holding(lock):
        registry.signal(registry.groups(), signal.SIGCONT)


def close_unfinished(job: str, case: Case, why: str, results: Path) -> None:
    """Close every row of ``case`` that its worker left unfinished (no "done" stage): a
    fusec row that had no failure of its own becomes a timeout or a crash, at its stage."""
    rows, _ = merge_records(results.read_text().splitlines() if results.exists() else [])
    exporter = case.exporter if job == "fusec" else "-"
    with results.open("a") as f:
        for batch in case.batches:
            row = rows.get((job, case.model, case.dtype, exporter, batch)) or {}
            if row.get("stage") == "done":
                continue
            note = f"{why or 'the worker ended early'} (in {row.get('stage', 'start')})"
            closing = {
                "pass": job,
                "model": case.model,
                "dtype": case.dtype,
                "exporter": exporter,
                "batch": batch,
                "stage": "done",
            }
            if job == "torch":
                closing["torch_error"] = note
            else:
                closing["status"] = "timeout" if why.startswith("timeout") else "crashed"
                closing["message"] = note
            f.write(json.dumps(closing) + "\n")


def done(job: str, case: Case, rows: dict[tuple, dict], retry: bool = False) -> bool:
    """Whether every row of the job is closed (``retry``: and not by a time-out or a
    crash, which a resumed run tries again, its kernels now partly cached)."""
    exporter = case.exporter if job == "fusec" else "-"
    keys = [(job, case.model, case.dtype, exporter, b) for b in case.batches]
    closed = [rows.get(k, {}) for k in keys]
    return all(r.get("stage") == "done" for r in closed) and not (
        retry
        and any(r.get("status") in ("timeout", "crashed") or r.get("torch_error") for r in closed)
    )


def wants_torch(case: Case, rows: dict[tuple, dict]) -> bool:
    """torch.compile is timed once per model, dtype and batch, where fusec ran."""
    return any(
        r.get("fusec_ms") is not None
        for k, r in rows.items()
        if k[0] == "fusec" and k[1:3] == (case.model, case.dtype)
    )


def torch_cases(cases: list[Case]) -> list[Case]:
    seen: dict[tuple, Case] = {}
    for c in cases:
        seen.setdefault((c.model, c.dtype), Case(c.model, c.dtype, "-", c.batches))
    return list(seen.values())


def report(args: argparse.Namespace, results: Path, meta: dict, skipped: list[str]) -> Path:
    rows, env = merge_records(results.read_text().splitlines() if results.exists() else [])
    table = combined_rows(rows)
    meta = meta | {"environment": env, "skipped": skipped}
    if env.get("device"):
        meta["device"] = env["device"]
    chart = results.with_suffix(".png")
    meta["chart_note"] = bar_chart(table, chart, f"fusec vs PyTorch, {meta['device']}")
    md, _ = write_results(args.out, args.suffix, table, meta)
    return md


def mask_conflict(rows: dict[tuple, dict], mask: bool) -> str | None:
    """Why ``--resume`` must not add to these rows: fusec rows of the other ``--attention-
    mask`` setting (rows do not key on it), or None."""
    other = [
        row_key(r) for r in rows.values() if "input_form" in r and (r.get("mask") == "yes") != mask
    ]
    if not other:
        return None
    was = "with" if not mask else "without"
    return f"--resume: the run's rows were made {was} --attention-mask (e.g. {other[0]})"


def main_parent(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / f"models-gpu-{args.suffix}.jsonl"
    if results.exists() and not args.resume:
        results.unlink()
    if results.exists():
        rows, _ = merge_records(results.read_text().splitlines())
        conflict = mask_conflict(rows, args.attention_mask)
        if conflict:
            raise SystemExit(conflict)
    cases = plan(args)
    from bench_common import commit

    meta = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(dirty="+dirty", paths=("fusec",), missing="unknown"),
        "device": "cpu" if args.target == "cpu" else "?",
        "driver": driver() if args.target == "cuda" else "n/a",
        "target": args.target,
        "smoke": args.smoke,
        "command": " ".join(["benchmarks/models_gpu.py", *sys.argv[1:]]),
        "jobs": args.jobs,
        "torch_backend": args.torch_backend,
        "pipeline": args.pipeline,
    }
    if args.attention_mask:  # (the workers inherit the environment, and its kernel choice)
        from fusec.targets.cuda.attention.template import MASKS_ENV

        meta |= {"attention_mask": True, "attention_masks_env": os.environ.get(MASKS_ENV)}
        meta["mask_skipped"] = [ZOO[m].label for m in mask_skipped(args)]
    start = time.monotonic()
    skipped: list[str] = []
    passes = [[("fusec", c) for c in cases]]
    if not args.no_torch_compile:  # after every fusec case: it needs their results
        passes.append([("torch", c) for c in torch_cases(cases)])
    for jobs in passes:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for _ in pool.map(lambda job: run_job(job, args, results, start, skipped), jobs):
                with REPORTING:  # the tables after every case, one writer at a time
                    report(args, results, meta, skipped)
    md = report(args, results, meta, skipped)
    print(md.read_text(), flush=True)
    return 0


REPORTING = threading.Lock()


def run_job(
    job: tuple[str, Case], args: argparse.Namespace, results: Path, start: float, skipped: list
) -> None:
    """Run one job unless it is done or the budget is spent; close what it left open."""
    kind, case = job
    rows, _ = merge_records(results.read_text().splitlines() if results.exists() else [])
    if done(kind, case, rows, retry=args.resume):
        return
    if kind == "torch" and not wants_torch(case, rows):
        return
    left = args.budget - (time.monotonic() - start)
    if left < 20:
        skipped.append(f"{case.slug} ({kind})")
        return
    limit = min(left, args.case_budget)
    print(f"== {kind} {case.slug} {list(case.batches)} (limit {limit:.0f} s)", flush=True)
    why = run_worker(kind, case, args, results, limit)
    close_unfinished(kind, case, why, results)
    print(f"== {kind} {case.slug}: {why or 'done'}", flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--suffix", help="name the files models-gpu-<suffix>.* (default: date)")
    parser.add_argument("--models", help=f"comma-separated, of {', '.join(ZOO)} (default: all)")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument(
        "--batches", default="1,throughput", help='comma-separated sizes or "throughput"'
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_DTYPE}, the {QUICK_EXPORTER} exporter, batch 1 and the throughput batch",
    )
    parser.add_argument("--budget", type=float, default=540.0, help="start nothing after S s")
    parser.add_argument("--case-budget", type=float, default=180.0, help="one worker's limit")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="workers at a time (export and compile overlap; timing never does)",
    )
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also run fusec profile on each fusec case (its table in the worker's log, "
        "profile-<case>-b<batch>.json beside the results)",
    )
    parser.add_argument(
        "--no-reduce-overhead", action="store_true", help="no reduce-overhead at batch 1"
    )
    parser.add_argument(
        "--torch-backend",
        action="store_true",
        help="also time torch.compile(model, backend='fusec') in the torch worker (issue 32): "
        "columns backend ms, backend / fusec (the ONNX path) and backend err",
    )
    parser.add_argument(
        "--pipeline",
        default=None,
        help="compile fusec with this pipeline (e.g. fusec-cuda-separate-rope) instead of "
        "the target's; with --target cpu, the cuda structure columns' pipeline",
    )
    parser.add_argument(
        "--inputs",
        choices=("embeds", "ids"),
        default="embeds",
        help="transformers' input: float inputs_embeds, or int64 input_ids (issue 29)",
    )
    parser.add_argument(
        "--attention-mask",
        action="store_true",
        help=f"the transformers take a second input {MASK_INPUT} (int64 [batch, seq], right "
        "padding in every other row); models without one are not run. Default suffix: "
        "<date>[-smoke]-mask",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny configs (cpu end to end)")
    parser.add_argument("--resume", action="store_true", help="keep the JSON lines of a run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.suffix is None:
        day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        args.suffix = f"{day}-smoke" if args.smoke else day
        if args.attention_mask:
            args.suffix += "-mask"
    return args


def main_worker(text: str) -> int:
    spec = json.loads(text)
    case = spec.pop("case")
    worker = Worker(
        case=Case(**{**case, "batches": tuple(case["batches"])}),
        **{**spec, "results": Path(spec["results"])},
    )
    Registry(worker.results.with_suffix(".workers")).join()
    (run_fusec_job if worker.job == "fusec" else run_torch_job)(worker)
    return 0


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.worker:
        raise SystemExit(main_worker(arguments.worker))
    raise SystemExit(main_parent(arguments))
