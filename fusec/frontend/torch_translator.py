"""What the PyTorch front end's lowerings build with: the ``Translator`` (one core-ATen
FX graph -> one ``func.func``: arguments, constants evaluated at import, located
diagnostics, each node's result checked against PyTorch's record of it), the
``LOWERINGS`` registry and its ``lowering`` decorator, ``UnsupportedTorch``, and the
helpers lowerings share. The lowerings are ``torch_lowerings``; ``torch_fx`` is the
entry point (``translate``, ``unsupported_reason``)."""

from __future__ import annotations

import linecache
import operator
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import fx
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    LocationAttr,
    ModuleOp,
    StringAttr,
    UnknownLoc,
)
from xdsl.ir import Block, Operation, Region, SSAValue

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of, tensor_type
from fusec.dialect.shapes import DtypeError, ShapeError, TensorSpec, shape_problem
from fusec.errors import FusecError, SourceLocation
from fusec.ir.constants import dense_constant
from fusec.ir.diagnostics import named_location, node_location, verify_module
from fusec.ir.dtypes import element_type_of_torch, numpy_dtype
from fusec.ir.tensors import dtype_of
from fusec.ir.tensors import shape_of as shape_of  # for the lowerings

#: How a graph without a file of its own is named in diagnostics.
DEFAULT_SOURCE = "<torch>"
_FRAME = re.compile(r'File "([^"\n]+)", line (\d+)')
_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
#: PyTorch's own source files: a node is located at the last frame outside them.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


class UnsupportedTorch(FusecError):
    """Valid PyTorch that fusec cannot import (an op, argument or dtype it lacks): the
    partitioner leaves such nodes to eager PyTorch. ``node`` is the FX node's name."""

    def __init__(self, message: str, location: SourceLocation | None, node: str) -> None:
        super().__init__(message, location)
        self.node = node


@dataclass
class Const:
    """A tensor known at import (a weight, or a node evaluated at import)."""

    tensor: torch.Tensor


#: What an FX node stands for during the import: an ai value, a constant, a tuple of
#: them (a multi-result op; None for a result fusec does not compute), or a Python value.
Value = Any

Lowering = Callable[["Translator", fx.Node, dict[str, Any]], Any]
LOWERINGS: dict[str, Lowering] = {}


def lowering(*names: str) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the lowering of the ATen overloads ``names``
    (``"add.Tensor"``: an overload's ``__name__``)."""

    def register(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name] = fn
        return fn

    return register


def op_name(target: Any) -> str | None:
    """The lowering key of an ATen overload (``"convolution.default"``) or of one of
    fusec's own ops (``"fusec.sdpa.default"``), else None."""
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace == "aten":
            return str(target.__name__)
        if target.namespace == "fusec":
            return f"fusec.{target.__name__}"
    return None


def dtype_name(dtype: torch.dtype) -> str | None:
    return element_type_of_torch(dtype)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU copy-free numpy view where possible (bfloat16 through its bits)."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(numpy_dtype("bf16"))
    return t.numpy()


# ------------------------------------------------------------------ the translator


class Translator:
    """Builds one ``func.func`` from one FX graph of core ATen ops."""

    def __init__(
        self,
        graph: fx.Graph,
        *,
        constants: Mapping[str, torch.Tensor] | None = None,
        source: str = DEFAULT_SOURCE,
        name: str = "main",
    ) -> None:
        self.graph = graph
        self.constants = dict(constants or {})
        self.source = source
        self.name = name
        self.block = Block()
        self.env: dict[fx.Node, Value] = {}
        self.materialized: dict[int, SSAValue] = {}  # id(Const) -> its arith.constant
        self.node: fx.Node | None = None
        self.location: LocationAttr = UnknownLoc()
        self.folded = 0

    # ------------------------------------------------------------ diagnostics
    def error(self, message: str, node: fx.Node | None = None) -> UnsupportedTorch:
        """An UnsupportedTorch at ``node`` (default: the node being lowered)."""
        node = node if node is not None else self.node
        if node is None:
            return UnsupportedTorch(message, SourceLocation(self.source, 0, 0), "")
        where, line = self.user_location(node)
        error = UnsupportedTorch(f"{describe(node)}: {message}", where, node.name)
        if line is not None:
            error.source_line = line
        return error

    def user_location(self, node: fx.Node) -> tuple[SourceLocation, str | None]:
        """Where the user wrote the node (its stack trace's last frame), else its name."""
        trace = node.meta.get("stack_trace") or ""
        frames = _FRAME.findall(trace)
        users = [f for f in frames if not f[0].startswith(_TORCH_DIR)]  # not nn/modules/...
        if frames:
            file, line = (users or frames)[-1][0], int((users or frames)[-1][1])
            text = linecache.getline(file, line).rstrip("\n") or None
            col = len(text) - len(text.lstrip()) + 1 if text else 1
            return SourceLocation(file, line, col), text
        return named_location(self.source, node.name), None

    def op_location(self, node: fx.Node) -> LocationAttr:
        where, _ = self.user_location(node)
        return node_location(node.name, where)

    # ------------------------------------------------------------ building
    def emit(self, op_type: type[Operation], *args: Any, **attrs: Any) -> SSAValue:
        """Build ``op_type(*args, **attrs)`` at the current node and return its result."""
        try:
            op = op_type(*args, **attrs)
        except (DtypeError, ShapeError) as err:
            raise self.error(str(err)) from None
        op.location = self.location
        self.block.add_op(op)
        return op.results[0]

    def constant(self, array: np.ndarray, dtype: str) -> SSAValue:
        """A dense ``arith.constant`` holding ``array`` converted to ``dtype``."""
        data = np.asarray(array)
        if (problem := shape_problem(data.shape)) is not None:
            raise self.error(f"a constant of shape {list(data.shape)} {problem}")
        op = dense_constant(data, dtype)
        op.location = self.location
        self.block.add_op(op)
        return op.results[0]

    def scalar(self, number: float | int | bool, dtype: str) -> SSAValue:
        """A rank-0 constant of element type ``dtype``."""
        return self.constant(np.asarray(number, dtype=np.float64), dtype)

    # ------------------------------------------------------------ operands
    def tensor(self, arg: Any, dtype: str | None = None) -> SSAValue:
        """The ai value of a tensor argument (a constant is materialised here), cast to
        ``dtype`` when given and different."""
        if isinstance(arg, fx.Node):
            value = self.env[arg]
        else:
            value = arg
        if isinstance(value, Const):
            value = self.materialize(value)
        elif isinstance(value, bool | int | float) and dtype is not None:
            return self.scalar(value, dtype)
        if not isinstance(value, SSAValue):
            raise self.error(f"expected a tensor, got {type(value).__name__}")
        return self.cast(value, dtype) if dtype is not None else value

    def materialize(self, const: Const) -> SSAValue:
        key = id(const)
        if key not in self.materialized:
            dtype = dtype_name(const.tensor.dtype)
            if dtype is None:
                raise self.error(f"a constant of dtype {const.tensor.dtype} is used as data")
            self.materialized[key] = self.constant(to_numpy(const.tensor), dtype)
        return self.materialized[key]

    def cast(self, value: SSAValue, dtype: str) -> SSAValue:
        from fusec.dialect import ops as ai

        return value if dtype_of(value) == dtype else self.emit(ai.CastOp, value, dtype)

    def optional(self, arg: Any) -> SSAValue | None:
        return None if arg is None else self.tensor(arg)

    def const_of(self, arg: Any) -> torch.Tensor | None:
        """The value of a tensor argument known at import, else None."""
        value = self.env.get(arg) if isinstance(arg, fx.Node) else None
        return value.tensor if isinstance(value, Const) else None

    def val(self, node: fx.Node | None = None) -> Any:
        """What PyTorch recorded for the node's result (a fake tensor, or a tuple)."""
        node = node if node is not None else self.node
        assert node is not None
        return node.meta.get("val")

    def out_dtype(self) -> str:
        """The element type PyTorch gives the node's (first) result."""
        val = self.val()
        if isinstance(val, tuple | list):
            val = val[0]
        name = dtype_name(val.dtype) if isinstance(val, torch.Tensor) else None
        if name is None:
            raise self.error(f"its result has dtype {getattr(val, 'dtype', None)}")
        return name

    def out_shape(self) -> tuple[int, ...]:
        val = self.val()
        if isinstance(val, tuple | list):
            val = val[0]
        return static_shape(self, val)

    # ------------------------------------------------------------ the graph
    def run(self, inputs: Sequence[fx.Node] | None = None) -> ModuleOp:
        """Import the whole graph: ``inputs`` (default: every placeholder that is not a
        constant) become the function's arguments, in order."""
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        args = (
            list(inputs)
            if inputs is not None
            else [n for n in placeholders if n.name not in self.constants]
        )
        for node in placeholders:
            if node.name in self.constants:
                self.env[node] = Const(self.constants[node.name])
            elif node not in args:
                raise self.error("a placeholder is neither an input nor a constant", node)
        for node in args:
            self.add_argument(node)
        output = None
        for node in self.graph.nodes:
            if node.op == "output":
                output = node
            elif node.op != "placeholder":
                self.lower(node)
        assert output is not None, "an FX graph has an output node"
        return self.finish(output, args)

    def add_argument(self, node: fx.Node) -> None:
        val = self.val(node)
        if not isinstance(val, torch.Tensor):
            raise self.error(f"input of kind {type(val).__name__}: fusec takes tensors", node)
        dtype = dtype_name(val.dtype)
        if dtype is None:
            raise self.error(f"input of dtype {val.dtype}: fusec has no such tensors", node)
        spec = TensorSpec(static_shape(self, val, node), dtype)
        if (problem := shape_problem(spec.shape)) is not None:
            raise self.error(f"input of shape {list(spec.shape)} {problem}", node)
        arg = self.block.insert_arg(tensor_type(spec), len(self.block.args))
        arg.name_hint = value_name(node.name)
        self.env[node] = arg

    def finish(self, output: fx.Node, args: Sequence[fx.Node]) -> ModuleOp:
        self.node, self.location = output, UnknownLoc()
        flat = list(_flatten(output.args[0]))
        results = [self.tensor(v) for v in flat]
        self.block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp(
            self.name,
            ([a.type for a in self.block.args], [r.type for r in results]),
            Region(self.block),
            arg_attrs=ArrayAttr([_name_attr(n.name) for n in args]),
            res_attrs=ArrayAttr(
                [
                    _name_attr(v.name if isinstance(v, fx.Node) else f"out{i}")
                    for i, v in enumerate(flat)
                ]
            ),
        )
        module = ModuleOp([fn])
        verify_module(module)
        return module

    def lower(self, node: fx.Node) -> None:
        """Lower one node into ``self.env[node]``."""
        self.node, self.location = node, self.op_location(node)
        if node.op == "get_attr":
            self.env[node] = Const(_attribute(node))
            return
        if node.op != "call_function":
            raise self.error(f"FX '{node.op}' nodes are not supported")
        if node.target is operator.getitem:
            self.env[node] = self.getitem(node)
            return
        if self.fold(node):
            return
        name = op_name(node.target)
        if name is None or name not in LOWERINGS:
            raise self.error("fusec has no lowering for this op")
        result = LOWERINGS[name](self, node, bind_arguments(node))
        self.check_result(node, result)
        self.env[node] = result

    def getitem(self, node: fx.Node) -> Value:
        source, index = node.args
        values = self.env[source]
        if not isinstance(values, tuple | list):
            raise self.error("getitem of a value that is not a tuple")
        item = values[index]
        if item is None and not node.users:  # an unused result (SDPA's log-sum-exp)
            return None
        if item is None:
            raise self.error(f"result #{index} of {describe(source)} is not supported")
        return item

    def fold(self, node: fx.Node) -> bool:
        """Evaluate ``node`` with PyTorch when its tensor inputs are all constants."""
        inputs = [a for a in node.all_input_nodes]
        if any(not isinstance(self.env.get(a), Const) for a in inputs):
            return False
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            return False  # random numbers: not a constant
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: self.env[n].tensor)
        with torch.no_grad():
            out = node.target(*args, **kwargs)
        self.env[node] = _wrap_constants(out)
        self.folded += 1
        return True

    def check_result(self, node: fx.Node, result: Value) -> None:
        """The lowering's result types against what PyTorch recorded for the node."""
        val = self.val(node)
        pairs = zip(_flatten(result), _flatten(val), strict=False)
        for ours, theirs in pairs:
            if not isinstance(ours, SSAValue) or not isinstance(theirs, torch.Tensor):
                continue
            want = TensorSpec(static_shape(self, theirs), dtype_name(theirs.dtype) or "?")
            have = spec_of(ours.type)
            if have != want:
                raise self.error(f"the lowering gives {have} but PyTorch computes {want}")


def bind_arguments(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in (Nodes stay Nodes)."""
    schema = node.target._schema
    bound: dict[str, Any] = {}
    for index, arg in enumerate(schema.arguments):
        if index < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[index]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def describe(node: fx.Node) -> str:
    """``aten.add.Tensor (FX node 'add_1', inputs f32[2, 3], 3)``: what the node is."""
    target = node.target
    name = op_name(target)
    what = (name if name.startswith("fusec.") else f"aten.{name}") if name else None
    what = what or getattr(target, "__name__", str(target))
    shown = []
    for arg in node.args:
        if isinstance(arg, fx.Node):
            shown.append(_val_text(arg.meta.get("val")))
        elif isinstance(arg, list | tuple) and any(isinstance(a, fx.Node) for a in arg):
            shown.append(
                "[" + ", ".join(_val_text(getattr(a, "meta", {}).get("val")) for a in arg) + "]"
            )
        else:
            shown.append(repr(arg))
    return f"{what} (FX node '{node.name}', inputs {', '.join(shown) or 'none'})"


def _val_text(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        dtype = dtype_name(val.dtype) or str(val.dtype).removeprefix("torch.")
        return f"{dtype}{list(val.shape)}"
    return type(val).__name__


def static_shape(t: Translator, val: Any, node: fx.Node | None = None) -> tuple[int, ...]:
    """The static shape of a recorded tensor; a symbolic size is a refusal."""
    dims = []
    for d in val.shape:
        if not isinstance(d, int):
            raise t.error(f"dynamic size {d}: fusec compiles static shapes", node)
        dims.append(int(d))
    return tuple(dims)


def value_name(name: str) -> str:
    """An SSA name hint from an FX name (letters, digits and underscores only)."""
    cleaned = _IDENTIFIER.sub("_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"v_{cleaned}"


def _name_attr(name: str) -> DictionaryAttr:
    return DictionaryAttr({"fusec.name": StringAttr(name)})


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, tuple | list):
        return [x for item in value for x in _flatten(item)]
    return [value]


def _wrap_constants(out: Any) -> Value:
    if isinstance(out, torch.Tensor):
        return Const(out)
    if isinstance(out, tuple | list):
        return tuple(_wrap_constants(o) for o in out)
    return out


def _attribute(node: fx.Node) -> torch.Tensor:
    owner = node.graph.owning_module
    value: Any = owner
    for part in str(node.target).split("."):
        value = getattr(value, part)
    return value.detach()


# ------------------------------------------------------------------ entry points


def reshape(t: Translator, x: SSAValue, shape: Sequence[int]) -> SSAValue:
    """``x`` reshaped to ``shape`` (itself when it has that shape already)."""
    shape = tuple(int(d) for d in shape)
    return x if shape == shape_of(x) else t.emit(ai.ReshapeOp, x, shape=shape)
