"""The survey of models outside the zoo (benchmarks/models_survey.py), without torch.

Its case table (the 25 architectures the first survey ran, each with its input kinds and
exporters), the case list and its filters, the markdown of a synthetic run (its columns,
cells, details, messages, a run cut short, the prose kept from the file it replaces) and
the reading of real cuda kernel headers (generated without a GPU). The survey itself
runs with torch: ``python benchmarks/models_survey.py --models swin_t,qwen2 --no-numerics``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import models_survey as survey  # noqa: E402

import fusec  # noqa: E402

VISION = {
    "swin_t",
    "regnet_y_400mf",
    "densenet121",
    "shufflenet_v2_x1_0",
    "mnasnet1_0",
    "efficientnet_v2_s",
    "resnext50_32x4d",
    "mobilenet_v2",
    "vgg11_bn",
    "squeezenet1_1",
    "maxvit_t",
    "googlenet",
}
TEXT = {"qwen2", "mistral", "phi3", "gptneox", "gemma", "gemma2", "distilbert", "roberta", "t5"}
HF_OTHER = {"whisper": ("input_features",), "clip": ("image",), "deit": ("image",)}
HF_OTHER["beit"] = ("image",)


def test_the_case_table_holds_the_surveyed_models() -> None:
    models = survey.SURVEY
    assert {n for n, m in models.items() if m.source == "torchvision"} == VISION
    assert {n for n, m in models.items() if m.source == "transformers"} == TEXT | set(HF_OTHER)
    for name, entry in models.items():
        assert entry.name == name and entry.label
        assert set(entry.inputs) <= set(survey.INPUT_KINDS)
        assert entry.exporters == ("dynamo", "torchscript")
        if entry.source == "torchvision":
            assert entry.inputs == ("image",) and entry.constructor == name
            assert entry.input_name("image") == "x"
        else:  # a configuration class and a model class of transformers', 2 attention layers
            assert entry.config.endswith("Config") and entry.constructor.endswith("Model")
            assert entry.attention_layers == 2
            assert entry.inputs == (survey.TEXT if name in TEXT else HF_OTHER[name])
            assert entry.input_name(entry.inputs[-1]) == survey.INPUT_KINDS[entry.inputs[-1]]
    assert models["maxvit_t"].side == 224 and models["swin_t"].side == 64
    assert models["gemma2"].attention == "eager" and models["qwen2"].attention == "sdpa"
    assert models["whisper"].part == "encoder"
    assert models["deit"].model_options == {"add_pooling_layer": False}
    assert models["googlenet"].options == {"aux_logits": False, "init_weights": True}


def test_cases_and_their_filters() -> None:
    every = survey.cases()
    assert len(every) == 2 * (len(VISION) + 2 * len(TEXT) + len(HF_OTHER)) == 68
    assert every[0] == survey.Case("swin_t", "image", "dynamo")
    assert every[0].slug == "swin_t-image-dynamo"
    assert len(set(every)) == len(every)
    args = survey.parse_args(["--models", "qwen2,beit", "--exporters", "torchscript"])
    assert survey.cases(args.models, args.exporters, args.inputs) == [
        survey.Case("qwen2", "inputs_embeds", "torchscript"),
        survey.Case("qwen2", "input_ids", "torchscript"),
        survey.Case("beit", "image", "torchscript"),
    ]
    ids = survey.cases(None, ["dynamo"], ["input_ids"])
    assert {c.model for c in ids} == TEXT and {c.input for c in ids} == {"input_ids"}
    with pytest.raises(SystemExit, match="unknown model"):
        survey.cases(["alexnet"])
    with pytest.raises(SystemExit):
        survey.parse_args(["--exporters", "tflite"])
    out = survey.parse_args(["--out", "somewhere"])
    assert (out.md, out.json) == (Path("somewhere", survey.MD), Path("somewhere", survey.JSON))

    columns, planned = survey.smoke()  # a runner's smoke table of the plan
    assert [row["case"] for row in planned] == [case.slug for case in every]
    assert all(set(columns) <= set(row) and row["status"] == "planned" for row in planned)


def _plan(**facts) -> dict:
    base = {"dtype": "f16", "status": "ok", "export_s": 1.0, "import_s": 0.5, "kernels": 3}
    base |= {"kinds": {"matmul": 2, "attention": 1}, "fallbacks": [], "direct_convs": []}
    return base | {"copies": [], "flash_attention": 1, "attention_kernels": 1} | facts


def _row(model: str, kind: str, plan: dict, numerics: dict) -> dict:
    case = survey.Case(model, kind, "dynamo")
    row = survey.new_row(case, numerics=True, cuda_dtype="f16")
    row["plan"] |= plan
    row["numerics"] |= numerics
    return row


OK_NUMERICS = {"status": "ok", "import_s": 0.1, "err": 9.1e-7, "nonfinite": 0}


def synthetic_rows() -> list[dict]:
    swin = _plan(
        kernels=4,
        kinds={"copy": 2, "attention": 2},
        attention_kernels=2,
        flash_attention=0,
        fallbacks=["attention [ai.attention]: the mask is a bias"] * 2,
        copies=["ai.transpose: tensor<2x3xf16> -> tensor<3x2xf16>"] * 2,
    )
    regnet = _plan(
        kinds={"conv": 3}, attention_kernels=0, flash_attention=0, direct_convs=["8 ch (N1)"]
    )
    t5 = {"status": "refused at import", "export_s": 1.0, "message": 'node "n": i64 ReduceMax'}
    wrong = {"status": "wrong", "import_s": 0.1, "err": 2e-3, "nonfinite": 4}
    killed = survey.new_row(survey.Case("maxvit_t", "image", "dynamo"), True, "f16")
    killed["plan"] |= _plan(kinds={"matmul": 3}, attention_kernels=0, flash_attention=0)
    killed["numerics"] |= {"status": "running", "step": "compile", "import_s": 2.0}
    return [
        _row("swin_t", "image", swin, OK_NUMERICS),
        _row("regnet_y_400mf", "image", regnet, wrong),
        survey.close(killed, "timeout after 600 s"),
        _row("qwen2", "inputs_embeds", _plan(), OK_NUMERICS),
        _row("t5", "input_ids", t5, OK_NUMERICS),
    ]


def cells(line: str) -> list[str]:
    """A markdown table line's cells."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_the_markdown_of_a_synthetic_run() -> None:
    rows = synthetic_rows()
    meta = {"date": "today", "commit": "abc1234", "settings": {"FUSEC_X": "1"}}
    meta |= {"environment": {"torch": "2.x"}, "skipped": ["gemma-input_ids-dynamo"]}
    text = survey.markdown(rows, meta)
    tables = [line for line in text.splitlines() if line.startswith("|")]
    head = "| " + " | ".join(survey.COLUMNS) + " |"
    assert tables.count(head) == 2  # torchvision, then transformers
    assert all(line.count("|") == len(survey.COLUMNS) + 1 for line in tables)
    # from the import column on: import, kernels, fallbacks, direct convs, flash, copies, err
    by_model = {cells(line)[0]: cells(line)[3:] for line in tables if line != head}
    wrong = "**2.0e-03 wrong, 4 non-finite**"
    assert by_model == {
        "---": ["---"] * (len(survey.COLUMNS) - 3),
        "Swin-T": ["ok", "4 (2 attention, 2 copy)", "2", "0", "0/2", "2", "9.1e-07"],
        "RegNetY-400MF": ["ok", "3 (3 conv)", "0", "1", "-", "0", wrong],
        "MaxViT-T": ["ok", "3 (3 matmul)", "0", "0", "-", "0", "**timeout**"],
        "Qwen2": ["ok", "3 (2 matmul, 1 attention)", "0", "0", "1/2", "0", "9.1e-07"],
        "T5 encoder": ["**f16: refused at import**", "-", "-", "-", "-", "-", "9.1e-07"],
    }
    assert "- Swin-T image dynamo: 2: 2 x attention [ai.attention]: the mask is a bias" in text
    assert "- Swin-T image dynamo: 2: 2 x ai.transpose" in text
    assert "- RegNetY-400MF image dynamo: 1: 1 x 8 ch" in text
    assert '- T5 encoder input_ids dynamo (f16 cuda plan): refused at import: node "n"' in text
    timeout = "- MaxViT-T image dynamo (f32 cpu numerics): timeout: timeout after 600 s"
    assert f"{timeout} (in compile)\n" in text
    # a message on one line, once for both sides when they say the same
    both = synthetic_rows()[3]
    for side in (both["plan"], both["numerics"]):
        side |= {"status": "export error", "message": "Unsupported:\n  adaptive pool"}
    assert survey.messages([both]) == [
        "- Qwen2 inputs_embeds dynamo (f16 cuda plan and f32 cpu numerics): export error: "
        "Unsupported: adaptive pool"
    ]
    assert "Not run (over the --budget): gemma-input_ids-dynamo." in text
    assert "`FUSEC_X=1 " in text and "torch 2.x" in text and "at abc1234" in text
    assert "## Gaps" not in text
    # a run without numerics: no import failure of the f32 side, no error
    off = survey.new_row(survey.Case("qwen2", "inputs_embeds", "dynamo"), False, "f16")
    off["plan"] |= _plan()
    assert cells(survey.table_row(off))[3:] == by_model["Qwen2"][:-1] + ["-"]


def test_the_prose_of_the_replaced_file_is_kept(tmp_path: Path) -> None:
    old = "# old title\n\n| old | table |\n\n## Gaps, largest first\n1. **masks** (fixed)\n"
    kept = survey.kept_sections(old)
    assert kept == "## Gaps, largest first\n1. **masks** (fixed)\n"
    assert survey.kept_sections("# nothing kept\n") == ""
    notes = "# t\n\n## Kernels\n\n## Notes\nhow\n\n## Gaps\nwhat\n"
    assert survey.kept_sections(notes) == "## Notes\nhow\n\n## Gaps\nwhat\n"
    rows = synthetic_rows()
    text = survey.markdown(rows, {}, kept)
    assert text.endswith("\n\n## Gaps, largest first\n1. **masks** (fixed)\n")
    # --from-json renders an earlier run's JSON into --md, keeping its prose
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({"date": "d", "commit": "c", "rows": rows}))
    md = tmp_path / "models-survey.md"
    md.write_text(old)
    assert survey.render(survey.parse_args(["--from-json", str(saved), "--md", str(md)])) == 0
    again = md.read_text()
    assert again.startswith("# Models outside the zoo: a survey on the CPU (d, at c)")
    assert again.endswith(kept) and "| Swin-T | image |" in again


T = "tensor<1x2x16x64xf16>"
PROGRAM = f"""func.func @f(%x: tensor<1x64x8x8xf16>, %k: tensor<64x8x3x3xf16>,
    %d: tensor<64x1x3x3xf16>, %q: {T}, %m: tensor<1x1x16x16xf16>)
    -> (tensor<1x8x8x64xf16>, {T}, {T}) {{
  %c = ai.conv2d %x, %k {{strides = array<i64: 1, 1>, padding = array<i64: 1, 1>,
                         groups = 8 : i64}} : tensor<1x64x8x8xf16> * tensor<64x8x3x3xf16>
  %r = ai.relu %c : tensor<1x64x8x8xf16>
  %e = ai.conv2d %r, %d {{strides = array<i64: 1, 1>, padding = array<i64: 1, 1>,
                         groups = 64 : i64}} : tensor<1x64x8x8xf16> * tensor<64x1x3x3xf16>
  %t = ai.transpose %e {{perm = array<i64: 0, 2, 3, 1>}} : tensor<1x64x8x8xf16>
  %z = arith.constant dense<0.0> : tensor<f16>
  %a = ai.attention %q, %q, %q, %z {{scale = 0.125 : f32}} : {T} * {T} * {T} * tensor<f16>
  %b = ai.attention %q, %q, %q, %m {{scale = 0.125 : f32}}
       : {T} * {T} * {T} * tensor<1x1x16x16xf16>
  return %t, %a, %b : tensor<1x8x8x64xf16>, {T}, {T}
}}"""


@pytest.mark.requires_target("cuda")
def test_plan_facts_read_the_cuda_kernel_headers(monkeypatch) -> None:
    """A grouped conv of 8 channels a group on the direct kernel (a depthwise one is
    counted apart), the NCHW -> NHWC transpose as a copy with its types, one attention on
    the flash kernel and one with a run-time mask on the PyTorch fallback (masks computed
    by index only: ``FUSEC_ATTENTION_MASKS=index``; by default the flash kernel reads it)."""
    from fusec.targets.cuda.attention.template import MASKS_ENV

    monkeypatch.delenv(MASKS_ENV, raising=False)
    compiled = fusec.compile(PROGRAM, target="cuda", executable=False)
    facts = survey.plan_facts(compiled.kernels)
    assert (facts["attention_kernels"], facts["flash_attention"]) == (2, 2)
    assert facts["fallbacks"] == []
    monkeypatch.setenv(MASKS_ENV, "index")
    compiled = fusec.compile(PROGRAM, target="cuda", executable=False)
    facts = survey.plan_facts(compiled.kernels)
    assert facts["kernels"] == len(compiled.kernels) == sum(facts["kinds"].values())
    (direct,) = facts["direct_convs"]
    assert direct.startswith("8 input channel(s) per group is not a Tensor Core GEMM (N1 C64")
    assert "groups 8" in direct and facts["depthwise_direct"] == 1
    assert facts["copies"] == ["ai.transpose: tensor<1x64x8x8xf16> -> tensor<1x8x8x64xf16>"]
    assert (facts["attention_kernels"], facts["flash_attention"]) == (2, 1)
    (fallback,) = facts["fallbacks"]
    assert fallback.startswith("attention [ai.attention]: the Tensor Core template cannot")
    assert "the mask is neither zero nor a causal constant" in fallback
    assert facts["other_attention"] == []


def test_changes_against_an_earlier_run() -> None:
    """--against: the compared columns of each case both runs have, what moved."""
    rows = synthetic_rows()
    old = json.loads(json.dumps(rows))
    old[0]["plan"]["copies"] = ["ai.concat: a -> b"] * 3  # Swin-T: 3 copies then
    old[3]["plan"] = {"dtype": "f16", "status": "refused at import", "export_s": 1.0}
    old[3]["numerics"]["err"] = 1e-3  # not compared
    old.pop(1)  # RegNetY: not in the earlier run
    lines = survey.changes(rows, {"commit": "0ff976e", "date": "d", "rows": old})
    assert lines == [
        "Against 0ff976e (d): the columns import, cuda kernels, fallbacks, non-depthwise "
        "direct convs, flash attention, copies; 2 case(s) alike, these moved:",
        "",
        "- Swin-T image dynamo: copies 3 -> 2",
        "- Qwen2 inputs_embeds dynamo: import f16: refused at import -> ok; cuda kernels - -> "
        "3 (2 matmul, 1 attention); fallbacks - -> 0; non-depthwise direct convs - -> 0; "
        "flash attention - -> 1/2; copies - -> 0",
    ]
    assert survey.changes(rows, {"commit": "c", "rows": rows}) == [
        "Against c (?): the columns import, cuda kernels, fallbacks, non-depthwise direct "
        "convs, flash attention, copies; 5 case(s) alike."
    ]
    # the import column compares the cuda plan's export alone: a run without numerics (or
    # with its f32 export failing) is alike
    no_numerics = json.loads(json.dumps(rows))
    no_numerics[0]["numerics"] = {"dtype": "f32", "status": "export error", "message": "x"}
    assert survey.changes(no_numerics, {"commit": "c", "rows": rows})[0].endswith(
        "5 case(s) alike."
    )
    text = survey.markdown(rows, {}, "## Gaps\n", {"commit": "0ff976e", "rows": old})
    assert text.index("## Changes") < text.index("## Gaps")
