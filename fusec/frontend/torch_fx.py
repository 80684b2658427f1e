"""The PyTorch front end: a core-ATen FX graph -> a verified ``func.func`` of ``ai`` ops.

``torch.export`` (``fusec.from_torch``) and the ``torch.compile`` backend
(``fusec.torch``) both hand this module an FX graph of core ATen ops: placeholders
(run-time inputs, or parameters and buffers known as constants), ``call_function``
nodes on ``torch.ops.aten.*`` and ``operator.getitem``, and one output. Each ATen
overload has one short lowering in ``LOWERINGS`` (``torch_lowerings``) that builds
ai ops with the dialect's builders, so result shapes come from (and are checked by)
the same shape functions as the ONNX importer's and the tracer's. Every node's
result is then checked against the shape and dtype PyTorch recorded for it
(``node.meta["val"]``): a lowering that disagrees is a refusal, never a wrong graph.

A node whose tensor inputs are all constants (weights, ``full``, ``arange``) is
evaluated at import with PyTorch itself and becomes a constant; a constant reaches
the IR (a dense ``arith.constant``) only when an op uses it.

Each op is located at the user's source line that made it (the last frame of the
node's ``stack_trace``), else at ``loc("node name"("<torch>":0:0))``. What fusec
cannot lower raises ``UnsupportedTorch``, a ``FusecError`` naming the ATen op, the
FX node and its input types; the backend's partitioner asks ``unsupported_reason``
node by node and leaves those to eager PyTorch.

This module is the entry point: the ``Translator`` and what lowerings share are in
``torch_translator``, the lowerings in ``torch_lowerings``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import torch
from torch import fx
from xdsl.dialects.builtin import ModuleOp

from fusec.errors import FusecError
from fusec.frontend.torch_translator import (
    DEFAULT_SOURCE,
    LOWERINGS,
    Const,
    Translator,
    UnsupportedTorch,
    describe,
    dtype_name,
    dtype_of,
    lowering,
    op_name,
    shape_of,
    to_numpy,
)

__all__ = [
    "Const",
    "DEFAULT_SOURCE",
    "LOWERINGS",
    "Translator",
    "UnsupportedTorch",
    "describe",
    "dtype_name",
    "dtype_of",
    "lowering",
    "op_name",
    "shape_of",
    "to_numpy",
    "translate",
    "unsupported_reason",
]


def translate(
    graph: fx.Graph,
    *,
    constants: Mapping[str, torch.Tensor] | None = None,
    inputs: Sequence[fx.Node] | None = None,
    source: str = DEFAULT_SOURCE,
    name: str = "main",
) -> ModuleOp:
    """Import a core-ATen FX graph as a verified ai module. ``constants`` maps
    placeholder names to their values (parameters and buffers); the other
    placeholders (or ``inputs``, in that order) become the function's arguments."""
    from fusec.frontend import torch_lowerings, torch_strided  # noqa: F401  (register LOWERINGS)

    return Translator(graph, constants=constants, source=source, name=name).run(inputs)


def unsupported_reason(node: fx.Node) -> str | None:
    """Why fusec cannot lower ``node`` on its own (None: it can): the node's lowering
    run on arguments of its inputs' recorded types, so the same code decides."""
    from fusec.frontend import torch_lowerings, torch_strided  # noqa: F401  (register LOWERINGS)

    if node.op != "call_function":
        return f"FX '{node.op}' node"
    if node.target is operator.getitem:
        return None
    graph = fx.Graph()
    clones: dict[fx.Node, fx.Node] = {}
    for arg in node.all_input_nodes:
        clone = graph.placeholder(arg.name)
        clone.meta = dict(arg.meta)
        clones[arg] = clone
    copy = graph.node_copy(node, lambda n: clones[n])
    copy.meta = dict(node.meta)
    scratch = Translator(graph)
    try:
        for arg in node.all_input_nodes:
            if isinstance(arg.meta.get("val"), tuple | list):
                return f"{describe(node)}: an input is a tuple"
            scratch.add_argument(clones[arg])
        scratch.lower(copy)
        used = {u.args[1] for u in node.users if u.target is operator.getitem}
        result = scratch.env[copy]
        for index in used:
            if isinstance(result, tuple) and result[index] is None:
                return f"{describe(node)}: its result #{index} is used, and fusec lacks it"
    except FusecError as err:
        return err.message if hasattr(err, "message") else str(err)
    except Exception as err:  # noqa: BLE001 - a lowering's bug must not fail the model
        return f"{describe(node)}: the lowering failed: {type(err).__name__}: {err}"
    return None
