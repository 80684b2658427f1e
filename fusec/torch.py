"""``torch.compile(model, backend="fusec")``: fusec as a TorchDynamo backend.

Dynamo hands the backend FX graphs of torch-level ops with real example inputs.
Each graph goes through AOTAutograd with PyTorch's core-ATen decompositions
(functionalised: in-place ops become pure ones), inference only: a graph that
needs gradients runs in eager PyTorch, with a remark. The core-ATen graph is split
by ``CapabilityBasedPartitioner``: every node ``torch_fx.unsupported_reason`` accepts
joins a partition, each partition becomes one ai module compiled by fusec for the
inputs' device (``cuda`` or ``cpu``), and the rest runs in eager PyTorch, so
nothing that eager runs fails. Parameters and buffers are frozen into the IR as
constants (BatchNorm folds into its conv, weights are packed once), and before the
split every node whose inputs are all constants (a weight's transpose or cast, a mask
of ``arange``s) is evaluated once by PyTorch and becomes one too, so no such node runs
per call, in fusec or in eager, nor splits a partition (``_fold_constants``); each call picks
the graph's compilation for its parameter tensors (instances of one model class share
Dynamo's graph: each set of tensors has its own), checks that they are unmodified
(``Tensor._version``), and compiles again if not.

Tensors cross without copies: on ``cpu`` as numpy views (``Tensor.numpy()``,
``torch.from_numpy``), on ``cuda`` as torch tensors, used in place on the caller's
stream. A graph with symbolic sizes (``dynamic=True``, or Dynamo's automatic dynamic
shapes) is compiled once per concrete signature it is called with.

``stats()`` counts graphs, partitions and the nodes left to eager, and lists the
remarks saying which node and why; ``compiled_partitions()`` gives the partitions'
compiled modules (their kernels, on cuda their programs' CUDA graph replays).
Options (``torch.compile(..., options={...})``):
``target`` ("cpu", "cuda", "reference"; default: the inputs' device), ``pipeline``,
``freeze`` (default True; False passes parameters and buffers as arguments on every
call, for weights changed through ``.data``, which no version counter sees),
``precision`` ("ieee", the default, or "tf32": ``fusec.compile``'s, f32 matmuls on the
cuda target's Tensor Cores in tf32).
"""

from __future__ import annotations

import logging
import operator
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx

from fusec.errors import FusecError

_LOG = logging.getLogger("fusec.torch")
#: Ops a partition made of these alone does not pay a kernel launch for.
_NON_COMPUTE = (
    *(
        f"torch.ops.aten.{name}"
        for name in (
            "view.default", "_unsafe_view.default", "reshape.default", "permute.default",
            "expand.default", "unsqueeze.default", "squeeze.dim", "squeeze.dims",
            "clone.default", "alias.default", "t.default", "transpose.int", "slice.Tensor",
            "select.int", "_to_copy.default",
        )
    ),
    "_operator.getitem",
)  # fmt: skip


@dataclass
class Stats:
    """What the backend did since the last ``reset_stats()``."""

    #: FX graphs Dynamo handed to the backend (one per graph break + 1, per frame).
    graphs: int = 0
    #: Graphs run wholly in eager PyTorch (training graphs).
    eager_graphs: int = 0
    #: Partitions compiled by fusec.
    partitions: int = 0
    #: Partitions fusec could not compile, run in eager PyTorch.
    eager_partitions: int = 0
    #: ATen nodes left outside every partition (eager PyTorch).
    eager_nodes: int = 0
    #: ATen nodes inside compiled partitions.
    compiled_nodes: int = 0
    #: ATen nodes evaluated once at compile time (their inputs all constants).
    folded_nodes: int = 0
    #: Compilations for one more concrete signature of a graph with symbolic sizes.
    specializations: int = 0
    #: Recompilations after a parameter or buffer changed.
    refreezes: int = 0
    #: Partitions whose compiled program came from the program cache (cpu target).
    cached_partitions: int = 0
    #: Compiled partitions by the fusec target they run on.
    targets: dict[str, int] = field(default_factory=dict)
    #: One line per decision: which node or partition runs in eager, and why.
    remarks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            k: (type(v)(v) if isinstance(v, list | dict) else v) for k, v in self.__dict__.items()
        }


_STATS = Stats()
_STATS_LOCK = threading.Lock()


def stats() -> dict[str, Any]:
    """The backend's counters and remarks since the last ``reset_stats()``."""
    with _STATS_LOCK:
        return _STATS.as_dict()


def reset_stats() -> None:
    global _STATS
    with _STATS_LOCK:
        _STATS = Stats()
        _PARTITIONS.clear()


#: The compiled partitions since the last ``reset_stats()``, held weakly.
_PARTITIONS: list[weakref.ref] = []


def compiled_partitions() -> list[Any]:
    """The ``fusec.CompiledModule`` of each partition compiled since the last
    ``reset_stats()`` that is still alive: its kernels, and on cuda its program's CUDA
    graphs (``.program.graphs.recorded``, each with its ``replays``)."""
    with _STATS_LOCK:
        live = [ref() for ref in _PARTITIONS]
    return [c for c in live if c is not None]


def _remark(text: str) -> None:
    with _STATS_LOCK:
        _STATS.remarks.append(text)
    _LOG.info("fusec: %s", text)


def _count(name: str, n: int = 1) -> None:
    with _STATS_LOCK:
        setattr(_STATS, name, getattr(_STATS, name) + n)


# ------------------------------------------------------------------ the backend


#: The backend's options (``torch.compile(..., options={...})``).
OPTIONS = ("target", "pipeline", "freeze", "precision")


def fusec_backend(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    options: dict[str, Any] | None = None,
    mode: str | None = None,
    **settings: Any,
) -> Callable:
    """The Dynamo backend: a callable that runs ``gm`` with fusec's kernels where it can.
    ``torch.compile`` passes its ``options`` dict (and ``mode``, which names inductor's
    modes and is ignored here); called directly, the options may be keywords."""
    options = {**(options or {}), **settings}
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise FusecError(
            f"unknown option(s) of the fusec backend: {', '.join(unknown)} "
            f"(it takes {', '.join(OPTIONS)})"
        )
    if "precision" in options:
        from fusec.ir.module import check_precision

        check_precision(options["precision"])
    _count("graphs")
    if torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs
    ):
        _count("eager_graphs")
        _remark(
            f"graph of {_op_count(gm)} ops runs in eager PyTorch: it needs gradients "
            "(fusec compiles inference: torch.no_grad() or torch.inference_mode())"
        )
        return gm.forward
    if _is_dynamic(example_inputs):
        return _PerSignature(gm, options)
    return _compile_graph(gm, list(example_inputs), options)


def _is_dynamic(inputs: Sequence[Any]) -> bool:
    for t in inputs:
        if isinstance(t, torch.SymInt):
            return True
        if isinstance(t, torch.Tensor) and any(not isinstance(d, int) for d in t.shape):
            return True
    return False


def _op_count(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function")


class _PerSignature:
    """A graph with symbolic sizes, compiled once per concrete signature it meets."""

    def __init__(self, gm: fx.GraphModule, options: dict[str, Any]) -> None:
        self.gm = gm
        self.options = options
        self.compiled: dict[tuple, Callable] = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple(
            (tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args
        )
        run = self.compiled.get(key)
        if run is None:
            _count("specializations")
            run = self.compiled[key] = _compile_graph(self.gm, list(args), self.options)
        return run(*args)


def _compile_graph(gm: fx.GraphModule, inputs: list[Any], options: dict[str, Any]) -> Callable:
    """AOTAutograd to core ATen, then ``_compile_aten`` on the forward graph."""
    from torch._functorch.aot_autograd import aot_module_simplified

    from fusec.frontend.torch_attention import core_decompositions_keeping_attention, keep_attention

    keep_attention(gm)  # SDPA stays one op (ai.attention), not its decomposed maths
    frozen = _frozen_positions(gm, inputs) if options.get("freeze", True) else []

    def forward_compiler(aten: fx.GraphModule, _fake_inputs: Sequence[Any]) -> Callable:
        return _Frozen(aten, inputs, frozen, options)

    return aot_module_simplified(
        gm,
        inputs,
        fw_compiler=forward_compiler,
        decompositions=core_decompositions_keeping_attention(),
    )


def _frozen_positions(gm: fx.GraphModule, inputs: Sequence[Any]) -> list[int]:
    """The inputs that are the model's parameters and buffers (frozen into the IR)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    positions = []
    for index, (node, value) in enumerate(zip(placeholders, inputs, strict=False)):
        if isinstance(value, torch.nn.Parameter):
            positions.append(index)
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "name", "")
        name = name() if callable(name) else name  # a method in older PyTorch
        if isinstance(value, torch.Tensor) and "_buffers" in str(name):
            positions.append(index)
    return positions


class _Frozen:
    """The compiled forward graph with its parameters and buffers as constants. Dynamo
    hands every instance of a model class the same graph (parameters are its inputs), so
    each set of parameter tensors (by identity) has its own compiled variant, up to
    ``VARIANTS`` of them (the oldest dropped); a call whose parameters were modified in
    place compiles its variant again.

    The check runs on every call, over every parameter (hundreds in a transformer), so it
    is C-level work alone: the tensors picked by one ``itemgetter``, their ids and
    version counters read by ``map`` (``_Frozen.check``), no Python frame per tensor."""

    #: The most parameter sets one graph keeps compiled.
    VARIANTS = 8

    def __init__(
        self,
        aten: fx.GraphModule,
        inputs: list[Any],
        frozen: list[int],
        options: dict[str, Any],
    ) -> None:
        self.aten = aten
        self.options = options
        placeholders = [n for n in aten.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs):  # AOTAutograd changed the inputs: freeze none
            frozen = []
        self.frozen = frozen
        self.pick = _picker(frozen)
        self.placeholders = placeholders
        # (ids of the frozen tensors) -> the variant. Compiled on a call, which has real
        # tensors (the compiler runs under AOTAutograd's fake tensor mode); holding the
        # tensors keeps their ids unique.
        self.variants: dict[tuple[int, ...], _Variant] = {}

    def freeze(self, inputs: Sequence[Any]) -> Callable:
        tensors = self.pick(inputs)
        key = tuple(map(id, tensors))
        constants = {self.placeholders[i].name: inputs[i].detach() for i in self.frozen}
        run = _compile_aten(self.aten, constants, inputs, self.options)
        # an inference tensor has no version counter (nothing outside inference mode can
        # modify it): the others are checked
        versioned = [t for t in tensors if not t.is_inference()]
        variant = _Variant(tensors, versioned, list(map(_VERSION, versioned)), run)
        self.variants.pop(key, None)
        while len(self.variants) >= self.VARIANTS:
            self.variants.pop(next(iter(self.variants)))
        self.variants[key] = variant
        return run

    def check(self, args: Sequence[Any]) -> Callable | None:
        """The compiled variant for ``args``' parameters when they are unmodified."""
        variant = self.variants.get(tuple(map(id, self.pick(args))))
        if variant is None:
            if self.variants:
                _count("refreezes")
                _remark("other parameter or buffer tensors: the graph is compiled for them")
            return None
        if list(map(_VERSION, variant.versioned)) != variant.versions:
            _count("refreezes")
            _remark("a parameter or buffer changed: the graph is compiled again")
            return None
        return variant.run

    def __call__(self, *args: Any) -> Any:
        run = self.check(args)
        if run is None:
            run = self.freeze(args)
        return run(*args)


@dataclass
class _Variant:
    """One set of parameter tensors' compiled graph, with their versions at compilation."""

    tensors: tuple[Any, ...]  # held: their ids stay theirs
    versioned: list[Any]
    versions: list[int]
    run: Callable


#: A tensor's in-place version counter (C-level attribute access).
_VERSION = operator.attrgetter("_version")


def _picker(positions: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``args -> tuple(args[i] for i in positions)``, one C call."""
    if not positions:
        return lambda args: ()
    if len(positions) == 1:
        (only,) = positions
        return lambda args: (args[only],)
    return operator.itemgetter(*positions)


# ------------------------------------------------------------------ partitioning


class _Support:
    """The partitioner's question: can fusec lower this node? (The translator decides.)"""

    def __init__(self) -> None:
        self.verdicts: dict[fx.Node, str | None] = {}  # node -> why not (None: supported)

    @property
    def reasons(self) -> dict[fx.Node, str]:
        return {node: why for node, why in self.verdicts.items() if why is not None}

    def reason(self, node: fx.Node) -> str | None:
        from fusec.frontend.torch_fx import unsupported_reason

        if node not in self.verdicts:
            self.verdicts[node] = unsupported_reason(node)
        return self.verdicts[node]

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:  # asked before its source (reverse order)
            source = node.args[0]
            return isinstance(source, fx.Node) and self.reason(source) is None
        return self.reason(node) is None


def _compile_aten(
    aten: fx.GraphModule,
    constants: dict[str, torch.Tensor],
    inputs: Sequence[Any],
    options: dict[str, Any],
) -> Callable:
    """Partition the core-ATen graph; compile each partition with fusec."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(_Support, OperatorSupportBase):
        pass

    support = Support()
    aten = _copy(aten)  # the partitioner rewrites its module in place: keep the original
    constants = dict(constants)
    _count("folded_nodes", _fold_constants(aten, constants))
    partitioner = CapabilityBasedPartitioner(aten, support, allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions() if _computes(p.nodes)]
    fused = partitioner.fuse_partitions(partitions)
    _note_eager_nodes(support)
    device = _device_of(inputs)
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and str(node.target).startswith("fused_"):
            _compile_partition(fused, node, constants, device, options)
    fused.recompile()
    return _direct_call(fused) or fused


def _direct_call(fused: fx.GraphModule) -> Callable | None:
    """A call of ``fused`` that skips its Python frame when the graph is one compiled
    partition of the graph's inputs whose results are the graph's (every model of the
    zoo): the partition's run-time inputs picked from the arguments by one ``itemgetter``,
    its results returned in the output's order. The module's frame passes every frozen
    parameter through (a call of ~270 arguments on MobileNetV3, ~17 us of the ~290 us of
    host work a call through Dynamo takes on 2 cores). A partition that failed, or fails
    now, runs the module instead, which runs it in eager."""
    nodes = list(fused.graph.nodes)
    calls = [n for n in nodes if n.op == "call_module"]
    if len(calls) != 1 or nodes[-1].op != "output":
        return None
    (call,) = calls
    partition = getattr(fused, str(call.target))
    results = nodes[-1].args[0]
    if not isinstance(partition, _FusecCall) or not isinstance(results, tuple | list):
        return None
    found = [_result_index(node, call, partition.tuple_out) for node in results]
    picks = [k for k in found if k is not None]
    extra = [n for n in nodes if n.op not in ("placeholder", "get_attr", "output")]
    getitems = [n for n in extra if n.target is operator.getitem and n.args[0] is call]
    if len(picks) != len(found) or len(getitems) != len(extra) - 1:
        return None
    position = {n: k for k, n in enumerate(n for n in nodes if n.op == "placeholder")}
    sources = [call.args[k] for k in partition.dynamic]
    if not all(isinstance(n, fx.Node) and n in position for n in sources):
        return None
    pick = _picker([position[n] for n in sources])
    box = type(results)

    def direct(*args: Any) -> Any:
        if not partition.failed:
            try:
                out = partition.run(list(pick(args)))
            except Exception as err:  # noqa: BLE001 - as _FusecCall.forward: eager from now
                partition.fail(err)
            else:
                return box(out[k] for k in picks)
        return fused(*args)

    return direct


def _result_index(node: Any, call: fx.Node, tuple_out: bool) -> int | None:
    """Which of the partition's results the graph's result ``node`` is (None: not one)."""
    if node is call and not tuple_out:
        return 0
    if (
        tuple_out
        and isinstance(node, fx.Node)
        and node.target is operator.getitem
        and node.args[0] is call
        and isinstance(node.args[1], int)
    ):
        return node.args[1]
    return None


#: The prefix of a folded constant's attribute (and get_attr node) in the aten module.
FOLDED = "_fusec_folded_"


def _foldable(node: fx.Node, known: dict[fx.Node, Any]) -> bool:
    """Whether ``node`` is an ATen op of constants alone that PyTorch may evaluate once:
    not random, not mutating, not read by the graph's output (a result the caller gets
    is made on every call, as eager makes it, never one tensor shared by all calls)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if any(user.op == "output" for user in node.users):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags or target._schema.is_mutable:
        return False
    if target.namespace != "aten" or target._schema.name.startswith("aten::empty"):
        return False  # fusec's own ops stay whole; empty's values are undefined
    return all(arg in known for arg in node.all_input_nodes)


def _fold_constants(aten: fx.GraphModule, constants: dict[str, torch.Tensor]) -> int:
    """Evaluate, with PyTorch, every ATen node whose inputs are all constants (the frozen
    parameters and buffers in ``constants``, or nodes folded before it), and replace
    those read by other nodes with a ``get_attr`` of the value, added to ``constants``
    (the partitions freeze it like a weight; eager reads the attribute). As the ONNX
    importer evaluates constant subgraphs at import. Returns the nodes folded."""
    known: dict[fx.Node, Any] = {
        n: constants[n.name]
        for n in aten.graph.nodes
        if n.op == "placeholder" and n.name in constants
    }
    folded: list[fx.Node] = []
    with torch.no_grad():
        for node in aten.graph.nodes:
            if not _foldable(node, known):
                continue
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: known[n])
            try:
                value = node.target(*args, **kwargs)
            except Exception:  # noqa: BLE001 - what PyTorch cannot evaluate now runs later
                continue
            if isinstance(value, torch.Tensor):
                known[node] = value
                folded.append(node)
    fold = set(folded)
    for node in folded:
        if all(user in fold for user in node.users):
            continue  # read only by other folded nodes
        name = f"{FOLDED}{len(constants)}"
        aten.register_buffer(name, known[node], persistent=False)
        with aten.graph.inserting_before(node):
            attr = aten.graph.get_attr(name)
        attr.meta = dict(node.meta)
        node.replace_all_uses_with(attr)
        constants[attr.name] = known[node]
    for node in reversed(folded):
        aten.graph.erase_node(node)
    aten.recompile()
    return len(folded)


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A new module of a copy of ``gm``'s graph (node metadata shared, not copied)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


def _computes(nodes: Any) -> bool:
    """Whether a partition does arithmetic (one of views and copies alone stays eager)."""
    from torch.fx.node import _get_qualified_name

    return any(
        n.op == "call_function" and _get_qualified_name(n.target) not in _NON_COMPUTE for n in nodes
    )


def _note_eager_nodes(support: _Support) -> None:
    for reason in support.reasons.values():
        _count("eager_nodes")
        _remark(f"eager: {reason}")


def _device_of(inputs: Sequence[Any]) -> torch.device:
    devices = {t.device for t in inputs if isinstance(t, torch.Tensor)}
    return devices.pop() if len(devices) == 1 else torch.device("cpu")


def _compile_partition(
    fused: fx.GraphModule,
    call: fx.Node,
    constants: dict[str, torch.Tensor],
    device: torch.device,
    options: dict[str, Any],
) -> None:
    """Replace the partition's submodule by its fusec program (eager on failure)."""
    from fusec.api import compile as compile_module
    from fusec.frontend.torch_fx import translate

    sub = getattr(fused, str(call.target))
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    sub_constants, dynamic = {}, []
    for position, (placeholder, outer) in enumerate(zip(placeholders, call.args, strict=True)):
        if isinstance(outer, fx.Node) and outer.name in constants:
            sub_constants[placeholder.name] = constants[outer.name]
        else:
            dynamic.append(position)
    ops = _op_count(sub)
    target = options.get("target") or ("cuda" if device.type == "cuda" else "cpu")
    pipeline = options.get("pipeline")
    precision = options.get("precision", "ieee")

    def build() -> Any:
        module = translate(
            sub.graph,
            constants=sub_constants,
            inputs=[placeholders[i] for i in dynamic],
            name=_symbol(str(call.target)),
        )
        return compile_module(module, target=target, pipeline=pipeline, precision=precision)

    try:
        compiled = _cached_compile(sub, sub_constants, target, pipeline, build, precision)
    except Exception as err:  # noqa: BLE001 - anything fusec cannot do runs in eager
        _count("eager_partitions")
        _remark(f"eager: partition {call.target} ({ops} ops): {_reason(err)}")
        return
    output = next(n for n in sub.graph.nodes if n.op == "output")
    tuple_out = isinstance(output.args[0], tuple | list)
    setattr(
        fused, str(call.target), _FusecCall(compiled, sub, dynamic, tuple_out, str(call.target))
    )
    _count("partitions")
    _count("compiled_nodes", ops)
    with _STATS_LOCK:
        _STATS.targets[compiled.target] = _STATS.targets.get(compiled.target, 0) + 1
        _PARTITIONS.append(weakref.ref(compiled))


def _cached_compile(
    sub: fx.GraphModule,
    constants: dict[str, torch.Tensor],
    target: str,
    pipeline: str | None,
    build: Callable[[], Any],
    precision: str = "ieee",
) -> Any:
    """``build()`` through the program cache (``fusec.targets.cpu.program_cache``, the
    one ``fusec.compile_onnx`` uses) on the cpu target: a partition compiled before, in
    any process, with the same graph, recorded types and layouts, constants, pipeline
    and fusec comes back ready to run, without translation, passes or code generation;
    its IR is built again when asked. ``FUSEC_PROGRAM_CACHE=0`` turns it off."""
    from fusec.api import CachedCompiledModule, CompiledModule
    from fusec.targets.cpu import program_cache as programs

    if target != "cpu" or not programs.enabled():
        return build()
    from fusec.runtime.cache import default_cache

    cache = default_cache()
    options = {"front end": "torch", "target": target, "pipeline": pipeline}
    if precision != "ieee":  # recorded on the module: another program (same keys otherwise)
        options["precision"] = precision
    key = programs.program_key(_partition_digest(sub, constants), options)
    program = programs.load(cache, key)
    if program is not None:
        _count("cached_partitions")
        return CachedCompiledModule(program, build, target=target, pipeline=pipeline)
    compiled = build()
    if isinstance(compiled, CompiledModule) and compiled.program is not None:
        programs.store(cache, key, compiled.program)
    return compiled


def _partition_digest(sub: fx.GraphModule, constants: dict[str, torch.Tensor]) -> str:
    """SHA-256 of what a partition's program depends on: its code, each node's recorded
    type and layout (a lowering may read strides), and its constants' values."""
    import hashlib

    from fusec.frontend.torch_fx import to_numpy

    digest = hashlib.sha256(b"fusec.torch partition 1\0")
    digest.update(sub.code.encode())
    for node in sub.graph.nodes:
        for val in _values(node.meta.get("val")):
            layout = (val.dtype, tuple(val.shape), tuple(val.stride()), val.storage_offset())
            digest.update(f"{node.name}:{layout}\0".encode())
    for name in sorted(constants):
        tensor = constants[name]
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\0".encode())
        digest.update(np.ascontiguousarray(to_numpy(tensor)).reshape(-1).view(np.uint8).data)
    return digest.hexdigest()


def _values(val: Any) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, tuple | list):
        return [t for v in val for t in _values(v)]
    return []


def _symbol(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "main"


def _reason(err: BaseException) -> str:
    if isinstance(err, FusecError):
        return err.message
    return f"{type(err).__name__}: {err}"


class _FusecCall(torch.nn.Module):
    """One compiled partition: torch tensors in, torch tensors out, no copies. A call
    that fails runs the partition in eager PyTorch from then on, with a remark."""

    def __init__(
        self,
        compiled: Any,
        eager: fx.GraphModule,
        dynamic: list[int],
        tuple_out: bool,
        name: str,
    ) -> None:
        super().__init__()
        self.compiled = compiled
        self.eager = eager
        self.dynamic = dynamic
        self.tuple_out = tuple_out
        self.name = name
        self.failed = False

    def forward(self, *args: Any) -> Any:
        if self.failed:
            return self.eager(*args)
        try:
            results = self.run([args[i] for i in self.dynamic])
        except Exception as err:  # noqa: BLE001 - a failed kernel must not fail the model
            self.fail(err)
            return self.eager(*args)
        return tuple(results) if self.tuple_out else results[0]

    def fail(self, err: BaseException) -> None:
        """Run in eager PyTorch from now on, with a remark saying why."""
        self.failed = True
        _count("eager_partitions")
        _remark(f"eager: partition {self.name} failed when run: {_reason(err)}")

    def run(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.compiled.target == "cuda":
            out = self.compiled(*[t.contiguous() for t in tensors])
            return list(out) if isinstance(out, tuple) else [out]
        device = tensors[0].device if tensors else torch.device("cpu")
        threads = torch.get_num_threads()
        out = self.compiled(*[_numpy_view(t) for t in tensors])
        if torch.get_num_threads() != threads:
            # Numba's OpenMP pool, started by the first kernel, sets the process's
            # OpenMP thread count, which PyTorch shares: the caller's setting comes back
            # (else eager ops change speed, and Dynamo's guard on it recompiles the graph)
            torch.set_num_threads(threads)
        arrays = list(out) if isinstance(out, tuple) else [out]
        return [_from_numpy(a, device) for a in arrays]


def _numpy_view(t: torch.Tensor) -> Any:
    """``torch_fx.to_numpy`` with its common case first, as every call of a cpu partition
    converts its inputs: a contiguous CPU tensor that needs no grad, of a type numpy
    has, is ``t.numpy()`` (a view; ~1 us instead of ~4)."""
    if t.is_cpu and t.dtype is not torch.bfloat16 and not t.requires_grad and t.is_contiguous():
        return t.numpy()
    from fusec.frontend.torch_fx import to_numpy

    return to_numpy(t)


#: numpy's bfloat16 (ml_dtypes), looked up once: ``dtype.name`` costs ~4 us a call.
_BF16: Any = None


def _from_numpy(array: Any, device: torch.device) -> torch.Tensor:
    """A torch view of a numpy result (bfloat16 through its bits)."""
    global _BF16
    if _BF16 is None:
        from fusec.ir.dtypes import numpy_dtype

        _BF16 = numpy_dtype("bf16")
    a = np.asarray(array)
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a).copy()
    if a.dtype == _BF16:
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a)
    return t if device.type == "cpu" else t.to(device)


def _register() -> None:
    """Register the backend as ``"fusec"`` unless the package's entry point does."""
    from torch._dynamo import list_backends, register_backend

    if "fusec" not in list_backends(exclude_tags=()):
        register_backend(fusec_backend, name="fusec")


_register()
