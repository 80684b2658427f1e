"""``torch.export`` programs -> ai modules (``fusec.from_torch``, ``fusec import x.pt2``).

An ``ExportedProgram`` is decomposed to core ATen (``run_decompositions()``, PyTorch's
default table), its parameters, buffers and constant tensors become constants, its user
inputs the function's arguments (named as PyTorch names them), and its user outputs
the results; then ``torch_fx.translate`` builds the IR. A module is exported first
(``torch.export.export``: no Dynamo graph breaks, the whole forward or an error).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp

from fusec.errors import FusecError, SourceLocation
from fusec.frontend.torch_fx import DEFAULT_SOURCE, translate

_CONSTANT_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


def load_program(path: str | Path) -> torch.export.ExportedProgram:
    """Read a program saved by ``torch.export.save``; a located error when it cannot."""
    where = SourceLocation(str(path), 0, 0)
    if Path(path).is_dir():
        raise FusecError("is a directory, not a saved torch.export program", where)
    if not Path(path).is_file():
        raise FusecError("no such file", where)
    try:
        return torch.export.load(str(path))
    except Exception as err:  # zip, pickle or version errors: the file is not one we read
        raise FusecError(f"cannot read the torch.export program: {err}", where) from None


def export_module(module: torch.nn.Module, example_inputs: Sequence[Any]) -> Any:
    """``torch.export.export`` of ``module`` on ``example_inputs``, without autograd."""
    if example_inputs is None:
        raise FusecError("from_torch of an nn.Module needs example_inputs (a tuple of tensors)")
    args = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    try:
        with torch.no_grad():
            return torch.export.export(module, args)
    except Exception as err:  # export's own diagnostics (graph breaks, data-dependent code)
        raise FusecError(f"torch.export.export failed: {type(err).__name__}: {err}") from None


def import_program(program: Any, source: str = DEFAULT_SOURCE) -> ModuleOp:
    """An ``ExportedProgram`` (any dialect) as a verified ai module."""
    from fusec.frontend.torch_attention import decompositions_keeping_attention

    decomposed = program.run_decompositions(decompositions_keeping_attention())
    signature = decomposed.graph_signature
    constants: dict[str, torch.Tensor] = {}
    for spec in signature.input_specs:
        if spec.kind.name in _CONSTANT_KINDS:
            constants[spec.arg.name] = _lookup(decomposed, spec.target, source)
        elif spec.kind.name != "USER_INPUT":
            raise FusecError(
                f"input '{spec.arg.name}' is a {spec.kind.name.lower()}: fusec imports "
                "inference programs (user inputs, parameters, buffers and constants)",
                SourceLocation(source, 0, 0),
            )
    for spec in signature.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            raise FusecError(
                f"output '{spec.arg.name}' is a {spec.kind.name.lower()} (the program "
                "mutates its state): fusec imports inference programs (export the model "
                "after model.eval())",
                SourceLocation(source, 0, 0),
            )
    return translate(decomposed.graph, constants=constants, source=source)


def _lookup(program: Any, target: str, source: str) -> torch.Tensor:
    if target in program.state_dict:
        return program.state_dict[target].detach()
    if target in program.constants:
        value = program.constants[target]
        if isinstance(value, torch.Tensor):
            return value.detach()
    raise FusecError(f"the program has no value for '{target}'", SourceLocation(source, 0, 0))


def from_torch(program_or_module: Any, example_inputs: Sequence[Any] | None = None) -> ModuleOp:
    """An ``ExportedProgram``, an ``nn.Module`` (exported on ``example_inputs``) or the
    path of a saved ``.pt2`` program, as a verified ai module."""
    source = DEFAULT_SOURCE
    if isinstance(program_or_module, str | Path):
        source = str(program_or_module)
        program_or_module = load_program(program_or_module)
    if isinstance(program_or_module, torch.nn.Module):
        program_or_module = export_module(program_or_module, example_inputs)  # type: ignore[arg-type]
    if not isinstance(program_or_module, torch.export.ExportedProgram):
        kind = type(program_or_module).__name__
        raise FusecError(
            f"from_torch takes a torch.export.ExportedProgram, an nn.Module or a .pt2 path, "
            f"got {kind}"
        )
    return import_program(program_or_module, source)
