"""``fusec.from_torch(torch.export.export(m, args))`` over the model zoo (issue 32's
"Done when": it compiles and matches for the same zoo as the backend's).

Each model of ``benchmarks/models_gpu.py`` (torchvision CNNs and ViT, HF BERT, GPT-2 and
a Llama-style decoder, random weights) at its ``--smoke`` size is exported whole
(``torch.export``: no graph breaks), imported and run on fresh random inputs: on the
``reference`` target in float32 against eager (every model), on the ``cpu`` target for
the transformers (the CNNs' cold Numba compiles take minutes on 2 cores: their cpu runs
are ``models_cpu.py --torch-backend``'s), and in fp16 on a GPU against the fp32 module
(the ``gpu`` lane, ``models_gpu.verdict``: fusec's error at most eager fp16's times the
zoo's factor). Needs torch, torchvision and transformers; slow lane (an export and an
import take seconds a model on 2 cores)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from numerics import assert_close
from torch_cases import quiet_torch_trace

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import models_gpu as zoo  # noqa: E402

try:
    zoo.import_torchvision()
except ImportError as err:
    pytest.skip(f"torchvision: {err}", allow_module_level=True)

import fusec  # noqa: E402

MODELS = list(zoo.ZOO)
CPU_MODELS = [name for name in MODELS if zoo.ZOO[name].source == "transformers"]


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


def _exported(model, x):
    with torch.no_grad():
        return fusec.from_torch(torch.export.export(model, (x,)))


def _outputs(out) -> list:
    """Outputs (torch tensors or numpy arrays, any float type) as float64 numpy."""
    return [zoo.to_numpy(o) for o in zoo.as_list(out)]


@pytest.mark.parametrize(
    "name, target",
    [(name, "reference") for name in MODELS] + [(name, "cpu") for name in CPU_MODELS],
)
def test_an_exported_zoo_model_matches_eager(name: str, target: str) -> None:
    model = zoo.build(name, True)
    module = _exported(model, zoo.sample(model, name, 2, True, "embeds", torch.float32))
    run = fusec.compile(module, target=target)
    for seed in (2, 3):  # fresh inputs: the export's batch, other values
        x = zoo.sample(model, name, 2, True, "embeds", torch.float32)
        x = x + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        got = _outputs(run(x.numpy()))
        with torch.no_grad():
            want = _outputs(model(x))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_close(g, w, dtype="f32", what=f"{name} on {target}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", MODELS)
def test_an_exported_zoo_model_in_fp16_matches_the_fp32_module_on_a_gpu(name: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch has no usable CUDA device")
    reference = zoo.build(name, True).cuda()
    half = copy.deepcopy(reference).half()
    x = zoo.sample(reference, name, 2, True, "embeds", torch.float32).cuda()
    run = fusec.compile(_exported(half, x.half()), target="cuda")
    got = _outputs(run(x.half()))
    with torch.no_grad():
        want, eager = _outputs(reference(x)), _outputs(half(x.half()))
    fusec_err, nonfinite = zoo.errors(got, want)
    eager_err, _ = zoo.errors(eager, want)
    assert zoo.verdict(fusec_err, eager_err, nonfinite) == "ok", (fusec_err, eager_err)
