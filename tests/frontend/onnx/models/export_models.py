"""Export the small real models of tests/frontend/onnx/models with both PyTorch exporters.

Not run by the test suite (it needs torch, torchvision and transformers, which
fusec does not depend on): run it by hand in a separate environment, e.g.

    python3 -m venv /work/venvs/export
    /work/venvs/export/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        transformers onnx onnxscript onnxruntime
    /work/venvs/export/bin/python tests/frontend/onnx/models/export_models.py

Every model has random weights from a fixed seed and is shrunk (widths, layer
counts, input sizes) so that each file stays well under a few MB, yet keeps its
family's architecture: the graph the exporter writes is the one a user gets
from the full-size model, with the same operators and the same patterns.

Each model is written twice, ``NAME.torchscript.onnx`` (``dynamo=False``) and
``NAME.dynamo.onnx`` (the default, dynamo-based exporter), with a dynamic batch
dimension (and a dynamic sequence length for the transformers), as models are
usually exported: ``fusec.from_onnx(path, input_shapes=...)`` fixes them.
``manifest.json`` records the input names, the example shapes and the versions.

The token-id models (``bert.ids``, ``gpt2.ids``, ``llama.ids``) are fed as users
feed them: ``input_ids`` (int64) and an ``attention_mask`` input (int64, with
padding), so the graph starts with the embedding lookup and computes its masks at
run time. They need torch and transformers only:

    python3 -m venv /tmp/vexport
    /tmp/vexport/bin/pip install torch==2.13.0 transformers onnx onnxscript onnxruntime
    /tmp/vexport/bin/python tests/frontend/onnx/models/export_models.py bert.ids gpt2.ids llama.ids

Exporting some models updates their entries of ``manifest.json`` and keeps the
others' (each entry records the versions it was exported with).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import onnx
import torch
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
    (an embedding lookup: see TokenModel for that form); everything after it is
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


class TokenModel(nn.Module):
    """A Hugging Face model fed with ``input_ids`` and ``attention_mask``, returning a tuple.

    What users export: the graph starts with the embedding lookup (an integer
    ``Gather`` at run-time ids), and the attention masks (padding, causal) are
    computed from the ``attention_mask`` input at run time. The example mask has
    padding (zeros at the end of a row), so that a tracing exporter records the
    padded path, not a shortcut taken for an all-ones mask.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def mobilenet_v2() -> nn.Module:
    import torchvision  # the CNNs only: the token-id models export without it

    return torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=16)


def resnet18() -> nn.Module:
    import torchvision

    return narrow(torchvision.models.resnet18(num_classes=16), 4)


def bert_config(vocab: int = 64) -> transformers.BertConfig:
    return transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def bert() -> nn.Module:
    return Encoder(transformers.BertModel(bert_config()))


def gpt2_config(vocab: int = 64) -> transformers.GPT2Config:
    return transformers.GPT2Config(
        vocab_size=vocab,
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


def gpt2() -> nn.Module:
    return Encoder(transformers.GPT2Model(gpt2_config()))


#: the token-id models' vocabulary (a real lookup table: 512 rows of 64)
VOCAB = 512


def bert_ids() -> nn.Module:
    return TokenModel(transformers.BertModel(bert_config(VOCAB)))


def gpt2_ids() -> nn.Module:
    return TokenModel(transformers.GPT2Model(gpt2_config(VOCAB)))


def llama_ids() -> nn.Module:
    """A Llama-style decoder: grouped-query attention (2 K/V heads for 4 query
    heads), rotary position embeddings, RMSNorm and a SwiGLU MLP."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        attention_dropout=0.0,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return TokenModel(transformers.LlamaModel(config))


def mixtral_moe() -> nn.Module:
    """A Mixtral sparse-MoE block (8 experts, top-2, SwiGLU experts) with transformers'
    ``batched_mm`` experts: the experts code both exporters take (the default loop over
    experts has data-dependent shapes; ``grouped_mm`` neither exports). Hidden 32, FFN
    48. Its expert weights are ``torch.empty`` until a model's init runs: set here."""
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    config = transformers.MixtralConfig(
        hidden_size=32, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2
    )
    config._experts_implementation = "batched_mm"
    block = MixtralSparseMoeBlock(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for param in block.parameters():
            param.normal_(0.0, 0.1, generator=generator)
    return block


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
    "mixtral_moe": (
        mixtral_moe,
        "hidden_states",
        (2, 16, 32),
        {0: "batch", 1: "sequence"},
        ["output"],
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

#: token-id models: name -> (builder, output names); each takes ``input_ids`` and
#: ``attention_mask`` of [batch, sequence] (int64), both dims dynamic
TOKEN_MODELS = {
    "bert.ids": (bert_ids, ["last_hidden_state", "pooler_output"]),
    "gpt2.ids": (gpt2_ids, ["last_hidden_state"]),
    "llama.ids": (llama_ids, ["last_hidden_state"]),
}
TOKEN_INPUTS = ["input_ids", "attention_mask"]
TOKEN_DYNAMIC = {0: "batch", 1: "sequence"}
#: the example's valid length per row: padding (zeros at the end of the mask) in
#: all but the first row, so tracing records the padded path
TOKEN_LENGTHS = [16, 11, 5]


def build(name: str) -> nn.Module:
    torch.manual_seed(SEED)
    model = (TOKEN_MODELS[name] if name in TOKEN_MODELS else MODELS[name])[0]()
    randomise(model)
    return model.eval()


def file_name(name: str, exporter: str, opset: int | None) -> str:
    return f"{name}.{exporter}{'' if opset is None else f'-opset{opset}'}.onnx"


def token_example() -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids and a mask with padding: row r is valid for TOKEN_LENGTHS[r] tokens."""
    generator = torch.Generator().manual_seed(SEED)
    shape = (len(TOKEN_LENGTHS), max(TOKEN_LENGTHS))
    ids = torch.randint(0, VOCAB, shape, generator=generator)
    mask = (torch.arange(shape[1])[None, :] < torch.tensor(TOKEN_LENGTHS)[:, None]).long()
    return ids, mask


def signature(name: str) -> tuple[tuple[torch.Tensor, ...], list[str], list[str], dict]:
    """(example inputs, input names, output names, dynamic dims {axis: name})."""
    if name in TOKEN_MODELS:
        return token_example(), TOKEN_INPUTS, TOKEN_MODELS[name][1], TOKEN_DYNAMIC
    _, input_name, shape, dynamic, outputs = MODELS[name]
    example = (torch.randn(*shape, generator=torch.Generator().manual_seed(SEED)),)
    return example, [input_name], outputs, dynamic


def export(name: str, exporter: str, opset: int | None) -> Path:
    example, inputs, outputs, dynamic = signature(name)
    model = build(name)
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
                input_names=inputs,
                output_names=outputs,
                dynamic_axes={input_name: dynamic for input_name in inputs},
            )
        else:
            # one Dim object per name: inputs that share a name share the dimension
            dims = {dim: torch.export.Dim(dim, min=1, max=64) for dim in dynamic.values()}
            shapes = tuple({axis: dims[dim] for axis, dim in dynamic.items()} for _ in inputs)
            program = torch.onnx.export(
                model,
                example,
                dynamo=True,
                opset_version=opset,
                input_names=inputs,
                output_names=outputs,
                dynamic_shapes=shapes,
                external_data=False,
            )
            program.save(str(path), external_data=False)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    return path


def versions(names: list[str]) -> dict[str, str]:
    found = {"torch": torch.__version__, "transformers": transformers.__version__}
    if any(name not in TOKEN_MODELS for name in names):
        import torchvision

        found["torchvision"] = torchvision.__version__
    return {**found, "onnx": onnx.__version__}


def export_files(name: str) -> dict[str, dict]:
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
    return files


def main() -> int:
    names = sys.argv[1:] or list(MODELS) + list(TOKEN_MODELS)
    path = HERE / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {"seed": SEED, "models": {}}
    every_model = set(MODELS) <= set(names)
    if every_model:
        manifest["versions"] = versions(list(MODELS))  # the float-input models'
    for name in names:
        params = sum(p.numel() for p in build(name).parameters())
        if name in TOKEN_MODELS:
            example, inputs, outputs, dynamic = signature(name)
            manifest.setdefault("token_models", {})[name] = {
                "inputs": inputs,
                "example_shape": list(example[0].shape),
                "example_lengths": TOKEN_LENGTHS,
                "vocab": VOCAB,
                "dynamic": {str(k): v for k, v in dynamic.items()},
                "outputs": outputs,
                "parameters": params,
                "versions": versions([name]),
                "files": export_files(name),
            }
            continue
        _, input_name, shape, dynamic, outputs = MODELS[name]
        manifest["models"][name] = {
            "input": input_name,
            "example_shape": list(shape),
            "dynamic": {str(k): v for k, v in dynamic.items()},
            "outputs": outputs,
            "parameters": params,
            "files": export_files(name),
        }
        if not every_model:  # exported on its own: its versions, not the shared ones
            manifest["models"][name]["versions"] = versions([name])
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
