"""Models outside the zoo: what fusec makes of architectures that ``models_gpu.py`` does not hold.

25 architectures (``SURVEY``: 12 torchvision models and 13 Hugging Face configurations),
random weights (``export_models.randomise``, and the transformers' 1-D norm scales drawn
too), batch 1, small inputs: images 64x64 (maxvit_t 224), sequences of 32 tokens,
transformers of 2 layers, hidden 256, heads of 64, Whisper's encoder on 80 mel bins x 64
frames. A case is one model fed one input kind (``image``, ``inputs_embeds``,
``input_ids`` or ``input_features``) through one exporter (``dynamo``: PyTorch's default,
``torchscript``: ``dynamo=False``). Each case, in a process of its own within
``--case-budget`` seconds (a time-out or a crash is that row's message, never the end of
the run):

* **the cuda plan**: the model in f16 (``--cuda-dtype bf16``), exported, imported with
  ``fusec.from_onnx`` (a refusal's text is recorded) and compiled with
  ``fusec.compile(module, target="cuda", executable=False)`` (code generation only, no
  GPU); the kernels' headers read as ``tests/targets/cuda/test_zoo_structure.py`` reads
  them: kernels by kind, the groups on the PyTorch fallback with their reasons, the
  convolutions on the direct (CUDA-core) kernel that are not depthwise, the attention
  groups on the flash kernel, and the copy kernels with what they move;
* **cpu numerics** (not with ``--no-numerics``): the model in f32, exported and imported the
  same way, compiled for the cpu target and run on a fresh random input (not the export's
  example); the relative L2 error of its outputs against the torch module's in f32
  (``models_gpu.errors``), ``wrong`` above ``tests/numerics.py``'s f32 bound or with a
  non-finite value.

    python benchmarks/models_survey.py --models swin_t,qwen2 --no-numerics
    python benchmarks/models_survey.py --md benchmarks/results/models-survey.md \\
        --json /tmp/survey.json --against /tmp/survey-before.json   # the whole survey

Run it with a Python that has torch, torchvision, transformers and onnxscript beside fusec
(``tests/frontend/onnx/models/export_models.py`` says how to make one); no GPU. The whole
survey (68 cases) took 23 min on 2 shared cores with fusec's kernel cache warm (the cpu
compiles of the large CNNs take minutes each cold); ``--no-numerics`` about 10. The
markdown (``--md FILE``: the tables, the kernels' details and the messages) and the JSON
(``--json FILE``: every case's facts, each fallback, direct conv and copy with its ops and
types) are rewritten after every case, so a run cut short keeps what it surveyed; ``--out
DIR`` is ``--md DIR/models-survey.md --json DIR/models-survey.json``. ``--against FILE``
(an earlier run's JSON, e.g. of an older tree's ``fusec/`` first on ``PYTHONPATH``) adds
what moved since, case by case; ``--from-json FILE`` writes the markdown of a run again
without running anything. Sections of an existing ``--md`` file from a heading of
``KEPT_SECTIONS`` on (its prose: ``## Notes``, ``## Gaps``) are kept below the new tables. Without
``--md`` the markdown is printed.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import models_gpu as zoo  # noqa: E402 - beside this script: export, errors, kernel_stats
from bench_common import commit, cpu_name, run_logged  # noqa: E402

# ------------------------------------------------------------------ the survey (data)

#: what a model is fed: the keyword of a Hugging Face model's forward for each kind
INPUT_KINDS = {
    "image": "pixel_values",
    "inputs_embeds": "inputs_embeds",
    "input_ids": "input_ids",
    "input_features": "input_features",
}
TEXT = ("inputs_embeds", "input_ids")
EXPORTERS = zoo.EXPORTERS
SIDE, SEQUENCE, VOCABULARY = 64, 32, 512
#: the export's example and the numerics' fresh input
EXPORT_SEED, NUMERICS_SEED = 1234, 99

#: transformers: small, no cache, no dropout
SMALL: dict[str, Any] = {"vocab_size": VOCABULARY}
DECODER: dict[str, Any] = SMALL | {
    "use_cache": False,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
ENCODER: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}
VISION = ENCODER | {"image_size": SIDE, "patch_size": 16}
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


@dataclass(frozen=True)
class SurveyModel:
    """One architecture: how it is built (a torchvision constructor and its arguments, or a
    transformers model class and its configuration's) and what it is fed."""

    name: str
    label: str
    source: str  # "torchvision" or "transformers"
    inputs: tuple[str, ...]  # of INPUT_KINDS
    #: torchvision's model function, or the transformers model class
    constructor: str
    #: the model function's arguments (torchvision) or the configuration's (transformers)
    options: Mapping[str, Any] = field(default_factory=dict)
    config: str = ""  # the transformers configuration class
    model_options: Mapping[str, Any] = field(default_factory=dict)  # the model class's
    part: str = ""  # the attribute of the built model that is surveyed (Whisper's encoder)
    attention: str = "sdpa"  # transformers' attn_implementation (the zoo's default)
    side: int = SIDE  # an image's side
    #: attention layers (transformers: each should be one flash attention kernel)
    attention_layers: int = 0
    exporters: tuple[str, ...] = EXPORTERS

    def input_name(self, kind: str) -> str:
        """The ONNX graph's input: ``x`` for torchvision (as the zoo), else the keyword."""
        return "x" if self.source == "torchvision" else INPUT_KINDS[kind]


def _vision(name: str, label: str, side: int = SIDE, **options: Any) -> SurveyModel:
    return SurveyModel(name, label, "torchvision", ("image",), name, options, side=side)


def _hf(
    name: str,
    label: str,
    constructor: str,
    config: str,
    options: Mapping[str, Any],
    inputs: tuple[str, ...] = TEXT,
    **fields: Any,
) -> SurveyModel:
    return SurveyModel(
        name,
        label,
        "transformers",
        inputs,
        constructor,
        options,
        config,
        attention_layers=2,
        **fields,
    )


SURVEY: dict[str, SurveyModel] = {
    m.name: m
    for m in (
        _vision("swin_t", "Swin-T"),
        _vision("regnet_y_400mf", "RegNetY-400MF"),
        _vision("densenet121", "DenseNet-121"),
        _vision("shufflenet_v2_x1_0", "ShuffleNetV2 x1.0"),
        _vision("mnasnet1_0", "MnasNet 1.0"),
        _vision("efficientnet_v2_s", "EfficientNetV2-S"),
        _vision("resnext50_32x4d", "ResNeXt-50 32x4d"),
        _vision("mobilenet_v2", "MobileNetV2"),
        _vision("vgg11_bn", "VGG-11 BN"),
        _vision("squeezenet1_1", "SqueezeNet 1.1"),
        _vision("maxvit_t", "MaxViT-T", side=224),  # its 7x7 windows need 224
        _vision("googlenet", "GoogLeNet", aux_logits=False, init_weights=True),
        _hf("qwen2", "Qwen2", "Qwen2Model", "Qwen2Config", DECODER | {"use_sliding_window": False}),
        _hf(
            "mistral",
            "Mistral",
            "MistralModel",
            "MistralConfig",
            DECODER | {"sliding_window": None, "head_dim": 64},
        ),
        _hf(
            "phi3",
            "Phi-3",
            "Phi3Model",
            "Phi3Config",
            DECODER | TOKENS | {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0},
        ),
        _hf(
            "gptneox",
            "GPT-NeoX",
            "GPTNeoXModel",
            "GPTNeoXConfig",
            {k: v for k, v in DECODER.items() if k != "num_key_value_heads"}
            | {"hidden_dropout": 0.0, "attention_dropout": 0.0, "bos_token_id": 0}
            | {"eos_token_id": 0},
        ),
        _hf("gemma", "Gemma", "GemmaModel", "GemmaConfig", DECODER | TOKENS | {"head_dim": 64}),
        _hf(
            "gemma2",
            "Gemma-2",
            "Gemma2Model",
            "Gemma2Config",
            DECODER | TOKENS | {"head_dim": 64},
            attention="eager",  # transformers refuses sdpa for its soft-capped scores
        ),
        _hf(
            "distilbert",
            "DistilBERT",
            "DistilBertModel",
            "DistilBertConfig",
            {
                **SMALL,
                "dim": 256,
                "n_layers": 2,
                "n_heads": 4,
                "hidden_dim": 512,
                "dropout": 0.0,
                "attention_dropout": 0.0,
                "max_position_embeddings": 256,
            },
        ),
        _hf(
            "roberta",
            "RoBERTa",
            "RobertaModel",
            "RobertaConfig",
            {**SMALL, **ENCODER, **NO_DROPOUT, "max_position_embeddings": 256}
            | {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
        ),
        _hf(
            "t5",
            "T5 encoder",
            "T5EncoderModel",
            "T5Config",
            {
                **SMALL,
                "d_model": 256,
                "d_kv": 64,
                "num_heads": 4,
                "d_ff": 512,
                "num_layers": 2,
                "dropout_rate": 0.0,
                "use_cache": False,
                "pad_token_id": 0,
                "eos_token_id": 1,
                "decoder_start_token_id": 0,
            },
        ),
        _hf(
            "whisper",
            "Whisper encoder",
            "WhisperModel",
            "WhisperConfig",
            {
                **SMALL,
                **TOKENS,
                "num_mel_bins": 80,
                "d_model": 256,
                "encoder_layers": 2,
                "decoder_layers": 1,
                "encoder_attention_heads": 4,
                "decoder_attention_heads": 4,
                "encoder_ffn_dim": 512,
                "decoder_ffn_dim": 512,
                "max_source_positions": 32,
                "max_target_positions": 32,
                "dropout": 0.0,
                "attention_dropout": 0.0,
                "activation_dropout": 0.0,
                "decoder_start_token_id": 1,
                "use_cache": False,
            },
            inputs=("input_features",),
            part="encoder",
        ),
        _hf("clip", "CLIP vision", "CLIPVisionModel", "CLIPVisionConfig", VISION, ("image",)),
        _hf(
            "deit",
            "DeiT",
            "DeiTModel",
            "DeiTConfig",
            VISION | NO_DROPOUT,
            ("image",),
            model_options={"add_pooling_layer": False},
        ),
        _hf(
            "beit",
            "BEiT",
            "BeitModel",
            "BeitConfig",
            VISION | NO_DROPOUT | {"use_relative_position_bias": True},
            ("image",),
        ),
    )
}


@dataclass(frozen=True)
class Case:
    """One row: a model fed one input kind, through one exporter."""

    model: str
    input: str
    exporter: str

    @property
    def slug(self) -> str:
        return f"{self.model}-{self.input}-{self.exporter}"


def cases(
    models: Sequence[str] | None = None,
    exporters: Sequence[str] = EXPORTERS,
    inputs: Sequence[str] | None = None,
) -> list[Case]:
    """The survey's cases in table order, of ``models`` (None: all), through ``exporters``
    (those of each model's), fed ``inputs`` (None: every kind each model takes)."""
    names = list(models) if models else list(SURVEY)
    unknown = [m for m in names if m not in SURVEY]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; the survey: {', '.join(SURVEY)}")
    return [
        Case(name, kind, exporter)
        for name in names
        for kind in SURVEY[name].inputs
        if inputs is None or kind in inputs
        for exporter in SURVEY[name].exporters
        if exporter in exporters
    ]


def smoke() -> tuple[list[str], list[dict[str, Any]]]:
    """The survey's plan as a runner's smoke table (no torch: nothing is built): every case,
    its source and input, status ``planned``."""
    planned = {"status": "planned"}
    rows = [
        asdict(case) | {"case": case.slug, "source": SURVEY[case.model].source} | planned
        for case in cases()
    ]
    if not rows or any(row["input"] not in INPUT_KINDS for row in rows):
        raise AssertionError("models_survey.py's case table is empty or feeds an unknown input")
    return ["case", "source", "input", "exporter", "status"], rows


# ------------------------------------------------------------------ kernel headers


def header(kernel: Any) -> dict[str, str]:
    """A kernel's header (``fusec.codegen.expr.header``): its ops, the types in and out, and
    the target's note (template, or the fallback and why)."""
    head = [line for line in kernel.source.splitlines()[:60] if line.startswith("#")]
    found = {"ops": "", "inputs": "", "outputs": "", "target": "", "geometry": ""}
    for line in head[1:]:
        text = line[1:].strip()
        if text.startswith("ai.") and not found["ops"]:
            found["ops"] = text
        elif text.startswith(("inputs", "outputs")) and ":" in text:
            key, _, types = text.partition(":")
            found[key.strip()] = types.strip()
        elif text.startswith("target:") and not found["target"]:
            found["target"] = text
        elif text.startswith("N") and " -> K" in text and not found["geometry"]:
            found["geometry"] = text  # a conv's: N1 C48 32x32 -> K48 16x16, 3x3, ...
    return found


def reason(target: str, marker: str) -> str:
    """The text after ``marker`` in a header's target note, without its closing ';'."""
    return target.split(marker, 1)[1].strip().rstrip(";") if marker in target else target


def plan_facts(kernels: Sequence[Any]) -> dict:
    """What the cuda target made of a program, from its kernels' headers: ``kernel_stats``'
    counts, and the fallbacks (with reasons), the non-depthwise direct convs, the attention
    groups (flash or not) and the copies (their ops and types), one text each."""
    facts = zoo.kernel_stats(kernels)
    fallbacks, direct, other_attention, copies = [], [], [], []
    flash = depthwise = 0
    for kernel in kernels:
        head = header(kernel)
        target = head["target"]
        if kernel.runs_op_by_op or "FALLBACK:" in target:
            fallbacks.append(f"{kernel.kind} [{head['ops']}]: {reason(target, 'FALLBACK:')}")
        if "direct conv2d" in target:
            if "1 input channel(s) per group" in target:
                depthwise += 1
            else:
                direct.append(f"{reason(target, '): ')} ({head['geometry'].rstrip(';')})")
        if kernel.kind == "attention":
            if "flash-style attention" in target:
                flash += 1
            elif not kernel.runs_op_by_op:  # (a fallback is listed with the fallbacks)
                other_attention.append(f"[{head['ops']}]: {target}")
        if kernel.kind == "copy":
            copies.append(f"{head['ops']}: {head['inputs']} -> {head['outputs']}")
    return facts | {
        "fallbacks": fallbacks,
        "direct_convs": direct,
        "depthwise_direct": depthwise,
        "attention_kernels": facts["kinds"].get("attention", 0),
        "flash_attention": flash,
        "other_attention": other_attention,
        "copies": copies,
    }


# ------------------------------------------------------------------ the markdown (pure)

#: --out DIR's files
MD, JSON = "models-survey.md", "models-survey.json"
#: sections of an existing --md file kept below the new tables (prose written by hand): from
#: the first of these headings to the end
KEPT_SECTIONS = ("## Notes", "## Gaps")
COLUMNS = (
    "model",
    "input",
    "exporter",
    "import",
    "cuda kernels",
    "fallbacks",
    "non-depthwise direct convs",
    "flash attention",
    "copies",
    "cpu rel err",
)
SOURCES = (("torchvision", "torchvision"), ("transformers", "Hugging Face transformers"))
#: how many distinct texts of one kind a case lists in the details
DETAILS = 6


def label(row: dict) -> str:
    entry = SURVEY.get(row["model"])
    return entry.label if entry else row["model"]


def imported(side: dict) -> bool:
    return "import_s" in side


def import_cell(row: dict) -> str:
    """``ok`` when every side that ran imported its export, else each other side's status
    (the message is below the table)."""
    sides = [(s["dtype"], s) for s in (row.get("plan"), row.get("numerics")) if s]
    sides = [(dtype, side) for dtype, side in sides if side.get("status") != "off"]
    failed = [f"{dtype}: {side.get('status', '?')}" for dtype, side in sides if not imported(side)]
    return f"**{'; '.join(failed)}**" if failed else "ok"


def kernels_cell(plan: dict) -> str:
    if plan.get("status") == "ok":
        return f"{plan['kernels']} ({zoo.kinds_text(plan['kinds'])})"
    return f"**{plan.get('status', '?')}**" if imported(plan) else "-"


def attention_cell(row: dict, plan: dict) -> str:
    """Flash attention kernels over the model's attention layers (the attention kernels
    when the model's are not known); '-' without either."""
    entry = SURVEY.get(row["model"])
    layers = (entry.attention_layers if entry else 0) or plan.get("attention_kernels", 0)
    return f"{plan.get('flash_attention', 0)}/{layers}" if layers else "-"


def numerics_cell(side: dict | None) -> str:
    if not side:
        return "-"
    status = side.get("status", "?")
    if "err" not in side:
        return "-" if status == "off" else f"**{status}**"
    err = f"{side['err']:.1e}"
    if status == "ok":
        return err
    nonfinite = f", {side['nonfinite']} non-finite" if side.get("nonfinite") else ""
    return f"**{err} {status}{nonfinite}**"


def row_cells(row: dict) -> list[str]:
    """A case's cells, in ``COLUMNS``' order."""
    plan = row.get("plan") or {}
    ok = plan.get("status") == "ok"

    def count(key: str) -> str:
        return str(len(plan[key])) if ok else "-"

    return [
        label(row),
        row["input"],
        row["exporter"],
        import_cell(row),
        kernels_cell(plan),
        count("fallbacks"),
        count("direct_convs"),
        attention_cell(row, plan) if ok else "-",
        count("copies"),
        numerics_cell(row.get("numerics")),
    ]


def table_row(row: dict) -> str:
    return "| " + " | ".join(row_cells(row)) + " |"


#: the columns ``--against`` compares (not the cpu error: a float of a random input)
COMPARED = COLUMNS[3:-1]


def changes(rows: list[dict], earlier: dict) -> list[str]:
    """What moved in the compared columns since ``earlier`` (an earlier run's JSON), a line
    a case that both ran; the import column of the cuda plan's export alone (either run may
    be ``--no-numerics``)."""
    before = {Case(r["model"], r["input"], r["exporter"]): r for r in earlier.get("rows", [])}
    no_numerics = {"numerics": None}
    lines = []
    for row in rows:
        old = before.get(Case(row["model"], row["input"], row["exporter"]))
        if old is None:
            continue
        moved = [
            f"{column} {a.strip('*')} -> {b.strip('*')}"
            for column, a, b in zip(
                COLUMNS, row_cells(old | no_numerics), row_cells(row | no_numerics), strict=True
            )
            if column in COMPARED and a != b
        ]
        if moved:
            lines.append(f"- {label(row)} {row['input']} {row['exporter']}: {'; '.join(moved)}")
    alike = sum(Case(r["model"], r["input"], r["exporter"]) in before for r in rows) - len(lines)
    head = (
        f"Against {earlier.get('commit', '?')} ({earlier.get('date', '?')}): the columns "
        f"{', '.join(COMPARED)}; {alike} case(s) alike"
    )
    return [head + (", these moved:" if lines else "."), "", *lines] if lines else [head + "."]


def grouped(texts: Iterable[str], most: int = DETAILS) -> str:
    """Identical texts counted, the most frequent first: '3 x a; 1 x b (+2 more)'."""
    counts = Counter(texts).most_common()
    shown = "; ".join(f"{n} x {text}" for text, n in counts[:most])
    return shown + (f" (+{len(counts) - most} more)" if len(counts) > most else "")


def before(separator: str) -> Callable[[str], str]:
    """A detail's text up to ``separator`` (what the markdown groups by)."""
    return lambda text: text.split(separator, 1)[0]


def details(rows: list[dict]) -> list[str]:
    """Per case with any: its fallbacks by reason, direct convs by reason, copies by ops."""
    lines: list[str] = []
    for title, key, view in (
        ("Fallbacks (cuda), by reason", "fallbacks", str),
        (
            "Non-depthwise direct convs, by reason (shapes in the JSON)",
            "direct_convs",
            before(" (N"),
        ),
        ("Attention on neither the flash kernel nor the fallback", "other_attention", str),
        ("Copies (cuda), by ops (the types in and out in the JSON)", "copies", before(": ")),
    ):
        found = [
            f"- {label(r)} {r['input']} {r['exporter']}: {len(r['plan'][key])}: "
            + grouped(view(t) for t in r["plan"][key])
            for r in rows
            if (r.get("plan") or {}).get(key)
        ]
        if found:
            lines += ["", f"### {title}", "", *found]
    return lines


def messages(rows: list[dict], most: int = 400) -> list[str]:
    """What failed, a line a case and message (one line, at most ``most`` characters; the
    JSON has it whole), the sides that said the same together."""
    lines = []
    for r in rows:
        said: dict[str, list[str]] = {}
        for what, side in (("cuda plan", r.get("plan")), ("cpu numerics", r.get("numerics"))):
            if side and side.get("message"):
                text = " ".join(f"{side['status']}: {side['message']}".split())
                said.setdefault(text[:most], []).append(f"{side['dtype']} {what}")
        lines += [
            f"- {label(r)} {r['input']} {r['exporter']} ({' and '.join(sides)}): {text}"
            for text, sides in said.items()
        ]
    return lines


def markdown(rows: list[dict], meta: dict, kept: str = "", against: dict | None = None) -> str:
    """The survey's tables (one per source), the details of each case's kernels, the
    messages of what failed, what changed since ``against`` (an earlier run's JSON), then
    ``kept`` (the prose of the file it replaces)."""
    env = meta.get("environment") or {}
    settings = "".join(f"{k}={v} " for k, v in (meta.get("settings") or {}).items())
    lines = [
        f"# Models outside the zoo: a survey on the CPU ({meta.get('date', '?')}, at "
        f"{meta.get('commit', '?')})",
        "",
        "What happens to the model a user brings that is not in `benchmarks/models_gpu.py`'s "
        "zoo: `benchmarks/models_survey.py` (its docstring is the method). Random weights, "
        "batch 1, small inputs (images 64x64, maxvit_t 224; 32 tokens; transformers of 2 "
        "layers, hidden 256, heads of 64). No GPU: the cuda columns are the plan "
        '(`fusec.compile(..., target="cuda", executable=False)`) of the '
        f"{meta.get('cuda_dtype', 'f16')} export, read from the kernels' headers; cpu rel err "
        "is the cpu target in f32 against "
        "the torch module in f32 on a fresh random input (relative L2, the worst output). "
        "flash attention: flash kernels / the model's attention layers.",
        "",
        f"Command: `{settings}{meta.get('command', '')}`; {meta.get('machine', '?')}; torch "
        f"{env.get('torch', '?')}, torchvision {env.get('torchvision', '?')}, transformers "
        f"{env.get('transformers', '?')}, onnx {env.get('onnx', '?')}.",
    ]
    head = "| " + " | ".join(COLUMNS) + " |"
    for source, title in SOURCES:
        own = [r for r in rows if r.get("source") == source]
        if own:
            lines += ["", f"## {title}", "", head, "|" + " --- |" * len(COLUMNS)]
            lines += [table_row(r) for r in own]
    more = details(rows)
    if more:
        lines += ["", "## Kernels", *more]
    notes = messages(rows)
    if notes:
        lines += ["", "## Messages", "", *notes]
    if meta.get("skipped"):
        lines += ["", f"Not run (over the --budget): {', '.join(meta['skipped'])}."]
    if against:
        lines += ["", "## Changes", "", *changes(rows, against)]
    text = "\n".join(lines) + "\n"
    return text + ("\n" + kept.rstrip("\n") + "\n" if kept.strip() else "")


def kept_sections(text: str) -> str:
    """The part of an earlier markdown from its first heading of ``KEPT_SECTIONS`` on."""
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if line.strip().startswith(KEPT_SECTIONS):
            return "\n".join(lines[n:]) + "\n"
    return ""


# ------------------------------------------------------------------ the worker (torch)


@functools.cache
def keyword_wrapper() -> type:
    """``models_gpu.hf_wrapper`` fed its ``form`` as the keyword (``pixel_values``,
    ``input_features``), without an attention mask; text models use ``hf_wrapper`` itself
    (``inputs_embeds`` or ``input_ids`` with an all-ones mask)."""
    import torch

    class Fed(zoo.hf_wrapper()):  # type: ignore[misc]
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.model(**{self.form: x}, return_dict=False)
            return tuple(t for t in out if isinstance(t, torch.Tensor))

    return Fed


def build(entry: SurveyModel, kind: str) -> Any:
    """``entry`` in float32, eval mode, random weights from fixed seeds, fed ``kind``."""
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "frontend" / "onnx" / "models"))
    from export_models import randomise

    torchvision = zoo.import_torchvision()  # also transformers' (a CUDA build beside CPU torch)
    torch.manual_seed(0)
    if entry.source == "torchvision":
        model = getattr(torchvision.models, entry.constructor)(weights=None, **entry.options)
        randomise(model)
        return model.eval()
    import transformers

    config = getattr(transformers, entry.config)(
        **entry.options, attn_implementation=entry.attention
    )
    model = getattr(transformers, entry.constructor)(config, **entry.model_options)
    model = getattr(model, entry.part) if entry.part else model
    if kind in TEXT:
        model = zoo.hf_wrapper()(model, "embeds" if kind == "inputs_embeds" else "ids")
    else:
        model = keyword_wrapper()(model, INPUT_KINDS[kind])
    randomise(model)
    randomise_norm_scales(model)
    return model.eval()


def randomise_norm_scales(model: Any) -> None:
    """The 1-D norm scales ``randomise`` leaves at 1 (RMSNorm's) drawn from [0.5, 1.5], and
    those stored as an offset from 1 (Gemma's zeros) from [-0.5, 0.5]."""
    import torch

    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1 and not name.endswith("bias") and "norm" in name.lower():
                low = 0.5 if param.abs().sum() > 0 else -0.5
                param.uniform_(low, low + 1.0, generator=generator)


def sample(entry: SurveyModel, model: Any, kind: str, dtype: Any, seed: int) -> Any:
    """A random input of ``kind`` for ``model`` (float ones in ``dtype``), batch 1."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    if kind == "input_ids":
        return torch.randint(3, VOCABULARY, (1, SEQUENCE), generator=generator)
    if kind == "image":
        shape: tuple[int, ...] = (1, 3, entry.side, entry.side)
    else:
        config = model.model.config
        if kind == "inputs_embeds":
            shape = (1, SEQUENCE, config.hidden_size)
        else:  # input_features: the mel bins by twice the encoder's positions (a stride-2 conv)
            shape = (1, config.num_mel_bins, 2 * config.max_source_positions)
    return torch.randn(*shape, generator=generator).to(dtype)


class Failed(Exception):
    """A step of a side failed: its status and message are in the side."""


STEP_STATUS = {"export": "export error", "import": "import error", "compile": "compile error"}


def step(side: dict, name: str, save: Callable[[], None], fn: Callable[[], Any]) -> Any:
    """``fn()`` as ``side``'s step ``name`` (saved first: a killed worker says where it
    stopped), its seconds in the side; a failure is the side's status (a refusal at import
    is fusec's ``refused at import``), then ``Failed``."""
    from fusec.errors import FusecError

    side["step"] = name
    save()
    t0 = time.perf_counter()
    try:
        value = fn()
    except Exception as err:
        if name == "import" and isinstance(err, FusecError):
            side |= {"status": "refused at import", "message": zoo.short(str(err))}
        else:
            side |= zoo.failure(STEP_STATUS.get(name, f"{name} error"), err)
        raise Failed(name) from err
    side[f"{name}_s"] = round(time.perf_counter() - t0, 2)
    return value


def imported_module(
    entry: SurveyModel, case: Case, model: Any, x: Any, side: dict, save: Callable[[], None]
) -> Any:
    """``model`` exported on ``x`` by the case's exporter, and fusec's import of it."""
    import torch

    import fusec

    name = entry.input_name(case.input)
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{case.slug}-{side['dtype']}.onnx"
        step(side, "export", save, lambda: zoo.export(model, x, path, case.exporter, name))
        side |= zoo.onnx_facts(path)
        shapes = {name: tuple(x.shape)}
        return step(side, "import", save, lambda: fusec.from_onnx(path, input_shapes=shapes))


def survey_plan(
    entry: SurveyModel, case: Case, model: Any, side: dict, save: Callable[[], None]
) -> None:
    """The cuda plan of ``model`` in the side's 16-bit type: the kernels' facts."""
    import torch

    import fusec

    model = model.to(getattr(torch, zoo.TORCH_DTYPES[side["dtype"]]))
    x = sample(entry, model, case.input, next(model.parameters()).dtype, EXPORT_SEED)
    module = imported_module(entry, case, model, x, side, save)
    compiled = step(
        side, "compile", save, lambda: fusec.compile(module, target="cuda", executable=False)
    )
    side |= plan_facts(compiled.kernels) | {"status": "ok"}


def numerics_verdict(err: float, nonfinite: int) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from numerics import REL_L2

    return "ok" if not nonfinite and err < REL_L2["f32"] else "wrong"


def survey_numerics(
    entry: SurveyModel, case: Case, model: Any, side: dict, save: Callable[[], None]
) -> None:
    """The cpu target's outputs on a fresh input against the float32 module's."""
    import torch

    import fusec

    x = sample(entry, model, case.input, torch.float32, EXPORT_SEED)
    module = imported_module(entry, case, model, x, side, save)
    compiled = step(side, "compile", save, lambda: fusec.compile(module, target="cpu"))
    fresh = sample(entry, model, case.input, torch.float32, NUMERICS_SEED)
    got = step(side, "run", save, lambda: zoo.as_list(compiled(fresh.numpy())))
    with torch.no_grad():
        want = zoo.as_list(model(fresh))
    err, nonfinite = zoo.errors(got, want)
    side |= {"err": err, "nonfinite": nonfinite, "outputs": [list(w.shape) for w in want]}
    side |= {"cpu_kernels": len(compiled.kernels), "status": numerics_verdict(err, nonfinite)}


def new_row(case: Case, numerics: bool, cuda_dtype: str) -> dict:
    entry = SURVEY[case.model]
    row: dict[str, Any] = asdict(case) | {"label": entry.label, "source": entry.source}
    row["plan"] = {"dtype": cuda_dtype, "status": "not started"}
    row["numerics"] = {"dtype": "f32", "status": "not started" if numerics else "off"}
    return row


def run_case(spec: dict) -> dict:
    """One case, both sides, its row saved to ``spec["result"]`` after every step."""
    import onnx
    import torch
    import transformers

    case = Case(**spec["case"])
    entry = SURVEY[case.model]
    row = new_row(case, spec["numerics"], spec["cuda_dtype"])
    row["environment"] = {
        "torch": torch.__version__,
        "torchvision": zoo.import_torchvision().__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
    }
    result = Path(spec["result"])

    def save() -> None:  # whole or not at all: the parent may read it after a kill
        partial = result.with_suffix(".part")
        partial.write_text(json.dumps(row, default=str))
        partial.replace(result)

    sides: list[tuple[str, Callable[..., None]]] = [("plan", survey_plan)]
    if spec["numerics"]:
        sides.append(("numerics", survey_numerics))
    for key, survey in sides:
        side = row[key]
        side["status"] = "running"
        try:
            survey(entry, case, build(entry, case.input), side, save)
        except Failed:
            pass
        except Exception as err:  # outside a step (building the model, reading the kernels
            # or the outputs): the side's failure, with where it was raised
            side |= zoo.failure("error" if "step" in side else "build error", err)
        side.pop("step", None)
        save()
    return row


def close(row: dict, why: str) -> dict:
    """A row whose worker ended early: each side it left running says why, at its step."""
    status = "timeout" if why.startswith("timeout") else "crashed"
    for key in ("plan", "numerics"):
        side = row.get(key) or {}
        if side.get("status") in ("running", "not started"):
            side["message"] = f"{why} (in {side.pop('step', 'start')})"
            side["status"] = status if side["status"] == "running" else "not run"
    return row


# ------------------------------------------------------------------ the parent


def write(args: argparse.Namespace, rows: list[dict], meta: dict, kept: str) -> str:
    meta = meta | {"environment": next((r["environment"] for r in rows if "environment" in r), {})}
    text = markdown(rows, meta, kept, earlier(args))
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(meta | {"rows": rows}, indent=1, default=str) + "\n")
    return text


def earlier(args: argparse.Namespace) -> dict | None:
    """The JSON of ``--against`` (an earlier run), if given."""
    return json.loads(args.against.read_text()) if args.against else None


def render(args: argparse.Namespace) -> int:
    """The markdown of an earlier run's JSON (``--from-json``), nothing run."""
    saved = json.loads(args.from_json.read_text())
    kept = kept_sections(args.md.read_text()) if args.md and args.md.exists() else ""
    text = markdown(saved.pop("rows"), saved, kept, earlier(args))
    if args.md:
        args.md.write_text(text)
    else:
        print(text, flush=True)
    return 0


def main_parent(args: argparse.Namespace) -> int:
    todo = cases(args.models, args.exporters, args.inputs)
    work = Path(tempfile.mkdtemp(prefix="fusec-models-survey-"))
    print(f"== {len(todo)} case(s); logs in {work}", flush=True)
    kept = kept_sections(args.md.read_text()) if args.md and args.md.exists() else ""
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "commit": commit(dirty="+dirty", paths=("fusec",), missing="unknown"),
        "machine": f"{cpu_name()}, {os.cpu_count()} cores",
        "command": " ".join(["benchmarks/models_survey.py", *sys.argv[1:]]),
        "settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("FUSEC_")},
        "cuda_dtype": args.cuda_dtype,
        "skipped": [],
    }
    rows: list[dict] = []
    start = time.monotonic()
    for case in todo:
        left = args.budget - (time.monotonic() - start)
        if left < 20:
            meta["skipped"].append(case.slug)
            continue
        limit = min(left, args.case_budget)
        print(f"== {case.slug} (limit {limit:.0f} s)", flush=True)
        result = work / f"{case.slug}.json"
        spec = {"case": asdict(case), "numerics": not args.no_numerics, "result": str(result)}
        spec["cuda_dtype"] = args.cuda_dtype
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
        why = run_logged(command, work / f"{case.slug}.log", limit)
        if result.exists():
            row = json.loads(result.read_text())
        else:
            row = new_row(case, not args.no_numerics, args.cuda_dtype)
        rows.append(close(row, why) if why else row)
        print(f"== {case.slug}: {why or 'done'}", flush=True)
        write(args, rows, meta, kept)
    text = write(args, rows, meta, kept)
    if not args.md:
        print(text, flush=True)
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help=f"comma-separated, of {', '.join(SURVEY)} (default: all)")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument(
        "--inputs", help=f"comma-separated input kinds, of {', '.join(INPUT_KINDS)} (default: all)"
    )
    parser.add_argument("--no-numerics", action="store_true", help="the cuda plan only")
    parser.add_argument("--cuda-dtype", choices=("f16", "bf16"), default="f16")
    parser.add_argument("--md", type=Path, help="write the markdown here (default: print it)")
    parser.add_argument("--json", type=Path, help="write every case's facts here")
    parser.add_argument("--out", type=Path, help="--md/--json as DIR/models-survey.md/.json")
    parser.add_argument("--budget", type=float, default=5400.0, help="start nothing after S s")
    parser.add_argument("--case-budget", type=float, default=600.0, help="one case's limit, s")
    parser.add_argument(
        "--against", type=Path, help="an earlier run's --json FILE: what moved since (## Changes)"
    )
    parser.add_argument(
        "--from-json", type=Path, help="no run: the markdown of an earlier run's --json FILE"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out:
        args.md = args.md or args.out / MD
        args.json = args.json or args.out / JSON
    args.models = args.models.split(",") if args.models else None
    args.exporters = args.exporters.split(",")
    args.inputs = args.inputs.split(",") if args.inputs else None
    for given, known, what in (
        (args.exporters, EXPORTERS, "exporter"),
        (args.inputs or [], INPUT_KINDS, "input kind"),
    ):
        if set(given) - set(known):
            parser.error(f"unknown {what}(s) {', '.join(set(given) - set(known))}")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.worker:
        run_case(json.loads(arguments.worker))
        raise SystemExit(0)
    raise SystemExit(render(arguments) if arguments.from_json else main_parent(arguments))
