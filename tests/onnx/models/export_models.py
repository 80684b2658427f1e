"""Export the small real models of tests/onnx/models with both PyTorch exporters.

Not run by the test suite (it needs torch, torchvision and transformers, which
fusec does not depend on): run it by hand in a separate environment, e.g.

    python3 -m venv /work/venvs/export
    /work/venvs/export/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        transformers onnx onnxscript onnxruntime
    /work/venvs/export/bin/python tests/onnx/models/export_models.py

Every model has random weights from a fixed seed and is shrunk (widths, layer
counts, input sizes) so that each file stays well under a few MB, yet keeps its
family's architecture: the graph the exporter writes is the one a user gets
from the full-size model, with the same operators and the same patterns.

Each model is written twice, ``NAME.torchscript.onnx`` (``dynamo=False``) and
``NAME.dynamo.onnx`` (the default, dynamo-based exporter), with a dynamic batch
dimension (and a dynamic sequence length for the transformers), as models are
usually exported: ``fusec.from_onnx(path, input_shapes=...)`` fixes them.
``manifest.json`` records the input names, the example shapes and the versions.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import onnx
import torch
import torchvision
import transformers
from torch import nn

HERE = Path(__file__).resolve().parent
SEED = 0


def narrow(model: nn.Module, factor: int) -> nn.Module:
    """Divide the channel counts of every Conv2d, BatchNorm2d and the Linear
    input of a torchvision CNN by ``factor`` (the RGB input stays 3 channels).

    The forward code of torchvision's CNNs does not depend on channel counts,
    so this keeps the architecture (depth, strides, residuals) at 1/factor**2
    of the weights.
    """
    for name, child in model.named_children():
        if isinstance(child, nn.Conv2d):
            in_ch = child.in_channels if child.in_channels == 3 else child.in_channels // factor
            groups = child.groups if child.groups == 1 else child.groups // factor
            setattr(
                model,
                name,
                nn.Conv2d(
                    in_ch,
                    child.out_channels // factor,
                    child.kernel_size,
                    child.stride,
                    child.padding,
                    child.dilation,
                    groups,
                    child.bias is not None,
                ),
            )
        elif isinstance(child, nn.BatchNorm2d):
            setattr(model, name, nn.BatchNorm2d(child.num_features // factor))
        elif isinstance(child, nn.Linear):
            setattr(model, name, nn.Linear(child.in_features // factor, child.out_features))
        else:
            narrow(child, factor)
    return model


def randomise(model: nn.Module) -> None:
    """Non-trivial biases, norm scales and running statistics.

    Initialisers set biases to 0, norm scales to 1 and BatchNorm statistics to
    (0, 1), which would hide mistakes (a bias on the wrong axis, a folding
    error) and lets the exporters merge identical zero tensors. Some zero a
    whole weight (torchvision's ViT head: its logits would be the bias for any
    input, so no check could see the network) or scale a residual branch by
    1e-6 (ConvNeXt's layer scale: the blocks would be the identity to any
    tolerance); those get random values too.
    """
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1, generator=generator)
            elif name.endswith("layer_scale"):
                param.uniform_(0.05, 0.2, generator=generator)
            elif param.dim() >= 2 and not param.any():
                param.normal_(0.0, 0.02, generator=generator)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d | nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5, generator=generator)
            if isinstance(module, nn.BatchNorm2d):
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.3)
                module.running_var.copy_(torch.rand(n, generator=generator) * 1.5 + 0.5)


class Encoder(nn.Module):
    """A Hugging Face model fed with ``inputs_embeds`` (float), returning a tuple.

    Token ids would make the graph start with an integer ``Gather`` on an input
    (an embedding lookup), which fusec does not compile; everything after it is
    the model's float data path. The attention mask says every token is valid,
    as a tokenizer's mask for unpadded text does; it is built from the input's
    shape, so the mask arithmetic is a constant once the shape is known.
    (Without a mask, transformers probes the position ids for packed sequences
    with ``torch.diff``, which the TorchScript exporter cannot export.)
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs_embeds: torch.Tensor):
        mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        out = self.model(inputs_embeds=inputs_embeds, attention_mask=mask, return_dict=False)
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def mobilenet_v2() -> nn.Module:
    return torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=16)


def resnet18() -> nn.Module:
    return narrow(torchvision.models.resnet18(num_classes=16), 4)


def bert() -> nn.Module:
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return Encoder(transformers.BertModel(config))


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return Encoder(transformers.GPT2Model(config))


#: name -> (builder, input name, example shape, dynamic dims {axis: name}, output names)
MODELS = {
    "mobilenet_v2": (mobilenet_v2, "x", (2, 3, 64, 64), {0: "batch"}, ["logits"]),
    "resnet18": (resnet18, "x", (2, 3, 64, 64), {0: "batch"}, ["logits"]),
    "bert": (
        bert,
        "inputs_embeds",
        (2, 16, 64),
        {0: "batch", 1: "sequence"},
        ["last_hidden_state", "pooler_output"],
    ),
    "gpt2": (
        gpt2,
        "inputs_embeds",
        (2, 16, 64),
        {0: "batch", 1: "sequence"},
        ["last_hidden_state"],
    ),
}

#: (exporter, opset or None for the exporter's default): what every model gets
EXPORTS = [("torchscript", None), ("dynamo", None)]
#: older opsets, as older PyTorch versions write by default: without the Gelu
#: operator (opset < 20) BERT's GELU is written with Erf, and without
#: LayerNormalization (opset < 17) LayerNorm is written with ReduceMean, Pow and
#: Sqrt. (GPT-2 writes its tanh GELU with Pow/Tanh at every opset, so its dynamo
#: export at opset 18 is its opset 20 graph; it is not repeated.)
OLDER_EXPORTS = {
    "bert": [("torchscript", 14), ("dynamo", 18)],
    "gpt2": [("torchscript", 14)],
}


def build(name: str) -> nn.Module:
    torch.manual_seed(SEED)
    model = MODELS[name][0]()
    randomise(model)
    return model.eval()


def file_name(name: str, exporter: str, opset: int | None) -> str:
    return f"{name}.{exporter}{'' if opset is None else f'-opset{opset}'}.onnx"


def export(name: str, exporter: str, opset: int | None) -> Path:
    _, input_name, shape, dynamic, outputs = MODELS[name]
    model = build(name)
    example = (torch.randn(*shape, generator=torch.Generator().manual_seed(SEED)),)
    path = HERE / file_name(name, exporter, opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(
                model,
                example,
                str(path),
                dynamo=False,
                opset_version=opset,
                input_names=[input_name],
                output_names=outputs,
                dynamic_axes={input_name: dynamic},
            )
        else:
            dims = {axis: torch.export.Dim(dim, min=1, max=64) for axis, dim in dynamic.items()}
            program = torch.onnx.export(
                model,
                example,
                dynamo=True,
                opset_version=opset,
                input_names=[input_name],
                output_names=outputs,
                dynamic_shapes=(dims,),
                external_data=False,
            )
            program.save(str(path), external_data=False)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    return path


def main() -> int:
    manifest = {
        "versions": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "transformers": transformers.__version__,
            "onnx": onnx.__version__,
        },
        "seed": SEED,
        "models": {},
    }
    for name in sys.argv[1:] or list(MODELS):
        _, input_name, shape, dynamic, outputs = MODELS[name]
        params = sum(p.numel() for p in build(name).parameters())
        files = {}
        for exporter, opset in EXPORTS + OLDER_EXPORTS.get(name, []):
            path = export(name, exporter, opset)
            model = onnx.load(str(path))
            variant = path.name.removeprefix(f"{name}.").removesuffix(".onnx")
            files[variant] = {
                "file": path.name,
                "exporter": exporter,
                "bytes": path.stat().st_size,
                "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                "nodes": len(model.graph.node),
            }
            print(f"{path.name}: {files[variant]}")
        manifest["models"][name] = {
            "input": input_name,
            "example_shape": list(shape),
            "dynamic": {str(k): v for k, v in dynamic.items()},
            "outputs": outputs,
            "parameters": params,
            "files": files,
        }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
