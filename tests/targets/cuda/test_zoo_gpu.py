"""Every model of the GPU zoo (benchmarks/models_gpu.py) through ONNX and fusec's cuda target,
against the same module in float32 (issue 28).

Small builds of each architecture (``--smoke`` sizes: one or two layers, 64x64 images) in
f16, exported by the dynamo exporter (the transformers also by the TorchScript one),
imported, compiled for cuda and run on fresh random inputs; fusec's output must hold no NaN
or infinity and its relative L2 error against the float32 module must stay within
``max(1e-2, 4 x eager f16's own error)``
(``models_gpu.verdict``). Needs torch, torchvision and transformers (skipped without them)
and a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")  # the dynamo exporter

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import models_gpu as zoo  # noqa: E402


@pytest.fixture(scope="module")
def device():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch.device("cuda")


#: zoo models fusec refuses today, and why (strict: the test fails once they import)
REFUSED: dict[str, str] = {}


#: the transformers also from the TorchScript exporter, whose f16 attention is upcast to f32
#: around the softmax with an f32 tail after it: fusec runs it as the f16 flash attention
#: and the tail in f16 (recognize_attention, demote-upcasts; issue 28)
TORCHSCRIPT = ("bert", "gpt2", "llama")


@pytest.mark.parametrize(
    "name, exporter",
    [
        pytest.param(n, "dynamo", marks=pytest.mark.xfail(reason=REFUSED[n], strict=True))
        if n in REFUSED
        else (n, "dynamo")
        for n in zoo.ZOO
    ]
    + [(n, "torchscript") for n in TORCHSCRIPT],
)
def test_zoo_model_matches_the_float32_module(name: str, exporter: str, device) -> None:
    reference, model = zoo.prepare(name, "f16", smoke=True, form="embeds", device=device)
    row = {"pass": "fusec", "model": name, "dtype": "f16", "exporter": exporter, "batch": 2}
    checked = zoo.check_fusec(
        reference, model, row, target="cuda", smoke=True, form="embeds", emit=lambda r: None
    )
    result = checked.row
    assert result["status"] == "ok", (
        f"{name}: {result['status']}: {result.get('message', '')} fusec error "
        f"{result.get('fusec_err')} vs eager f16 {result.get('eager_err')}, "
        f"{result.get('nonfinite')} non-finite"
    )
    # a second call on fresh inputs: the same function of its input, not a stale result
    x = torch.randn_like(checked.x)
    with torch.no_grad():
        want = zoo.as_list(reference(x.float()))
        eager_err, _ = zoo.errors(zoo.as_list(model(x)), want)
        got = zoo.as_list(checked.compiled(x.contiguous()))
    torch.cuda.synchronize()
    err, nonfinite = zoo.errors(got, want)
    assert zoo.verdict(err, eager_err, nonfinite) == "ok", (err, eager_err, nonfinite)
