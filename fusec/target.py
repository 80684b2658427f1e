"""Back ends: one ``Target`` per back end, found through one registry.

A target is a package under ``fusec/targets/`` whose ``target`` module
defines ``TARGET``, a ``Target`` holding

* its ``templates``, one per fused kind it generates (``Template``): where the
  code generator lives, which non-elementwise ops it lowers, whether it really
  fuses (a fallback that runs ops one by one does not), and an optional
  finer acceptance check on a group's members;
* what it can generate and fuse, *derived* from those templates and the op
  facts (``can_generate``, ``can_fuse``), which the fusion legality check
  consults, so a plan never asks a target for a kernel it cannot emit, and
  never fuses where fusing is a loss;
* how it runs a compiled function (``program``) and whether it can here
  (``unavailable_reason``: a missing extra, no GPU).

Adding a back end is one package plus one line in ``REGISTRY``. Nothing else
in fusec names a particular target: ``auto`` takes the first available one of
``AUTO_ORDER``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.codegen.expr import INDEXING_CONFLICT, indexing_conflict
from fusec.dialect.ops import AiOp, FusedOp
from fusec.errors import FusecError

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

#: Target name -> the module defining its ``TARGET`` (imported on first use).
REGISTRY: dict[str, str] = {
    "reference": "fusec.targets.reference.target",
    "cpu": "fusec.targets.cpu.target",
    "cuda": "fusec.targets.cuda.target",
}

#: ``auto`` is the first target of this list that is available.
AUTO_ORDER: tuple[str, ...] = ("cuda", "cpu")

#: A finer check of a group on a template: (members, anchor) -> None, or why not.
Acceptance = Callable[[Sequence[Operation], Operation | None], str | None]


def deferred(module: str, name: str) -> Acceptance:
    """The acceptance check ``name`` of ``module``, imported at its first call.

    A template's checks usually live with its code generator, which a target should
    import only when a compile generates that kind (``auto`` resolves every target of
    ``AUTO_ORDER``; the cuda GEMM, conv and attention generators took a tenth of a
    ``fusec compile`` on cpu, issue #26)."""

    def check(members: Sequence[Operation], anchor: Operation | None) -> str | None:
        accepts: Acceptance = getattr(importlib.import_module(module), name)
        return accepts(members, anchor)

    check.__qualname__ = f"deferred({module}:{name})"
    return check


@dataclass(frozen=True)
class Template:
    """A (target, kind) code generator and what it can take.

    ``module`` exposes ``generate(fused_op, name) -> KernelSource``. Every
    template computes elementwise ops from their scalar semantics (the op's
    ``scalar`` fact); ``lowers`` lists the other ops it handles. A template
    that does not ``fuse`` (a library fallback running the group's ops one by
    one) takes a group of its anchor alone: anything fused into it would be
    slower than a kernel of its own. ``accepts``, when given, is consulted on
    every candidate group, with the reason shown in fusion remarks.
    """

    module: str
    lowers: tuple[type[AiOp], ...] = ()
    fuses: bool = True
    accepts: Acceptance | None = None
    note: str = ""

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


def rotations_read_inputs(members: Sequence[Operation], anchor: Operation | None) -> str | None:
    """A pointwise template's acceptance of ``ai.rotate_half``: the kernel reads the
    operand at another index, so it must be a group input of the loop's whole shape (a
    value computed in the group exists at the loop's own index only)."""
    from fusec.dialect import ops as ai
    from fusec.ir.tensors import spec_of

    inside = {r for op in members for r in op.results}
    shapes = [spec_of(r.type).shape for op in members for r in op.results]
    space = max(shapes, key=len, default=())
    for op in members:
        if not isinstance(op, ai.RotateHalfOp):
            continue
        if op.input in inside:
            return (
                f"{op.name} reads its operand at another index: the operand must come from "
                "outside the group"
            )
        if spec_of(op.input.type).shape != space or any(
            len(s) == len(space) and s != space for s in shapes
        ):
            return f"{op.name} reads an operand of another shape than the group's loop"
    return None


class Target:
    """A back end: its templates, what it can generate and fuse, how it runs."""

    name: str = ""
    description: str = ""
    templates: Mapping[str, Template] = {}
    #: Kernels are generated from IR alone (no device needed) and can be printed.
    generates_kernels: bool = True
    #: Passes this target contributes to the pipelines, pass name -> "module:Class"
    #: (imported when a pipeline names the pass): ``target_passes`` gathers them.
    passes: Mapping[str, str] = {}
    #: Named pipelines of this target, name -> pass-pipeline spec (which may name other
    #: pipelines): ``target_pipelines`` gathers them beside ``fusec.passes.PIPELINES``.
    pipelines: Mapping[str, str] = {}
    #: The named pass pipeline (``fusec.passes.PIPELINES`` or its own ``pipelines``)
    #: compiling for this target
    #: when the caller names none.
    pipeline: str = "fusec-default"
    #: Values of fusion-rule parameters for this target (``param`` lines of the rules
    #: file), in place of the file's; a pass option (``fuse{softmax_tile_limit=N}``)
    #: still overrides them.
    rule_params: Mapping[str, int] = {}
    #: Array device types (``torch.device.type``) whose data this target computes on
    #: in place: ``auto`` picks this target for arguments living there.
    devices: tuple[str, ...] = ()

    # ------------------------------------------------------------ availability
    def unavailable_reason(self, *, device: bool = True) -> str | None:
        """Why this target cannot run here (a missing extra, no device), or None.

        ``device=False`` asks about its software only: whether it compiles here
        (generates and assembles kernels, runs them under an emulator), a device
        present or not.
        """
        return None

    def is_available(self) -> bool:
        return self.unavailable_reason() is None

    def auto_selectable(self) -> bool:
        """Whether ``auto`` may pick this target (available, and not an emulation)."""
        return self.is_available()

    # ---------------------------------------------------------- capabilities
    def can_generate(self, op: Operation) -> str | None:
        """None when some template of this target computes ``op``, else why not."""
        if not isinstance(op, AiOp):
            return f"{op.name} is not an ai op"
        if self.name in op.UNSUPPORTED:
            reason = op.UNSUPPORTED[self.name]
            return f"{op.name} is not supported on target '{self.name}': {reason}"
        if op.has_scalar() or any(type(op) in t.lowers for t in self.templates.values()):
            return None
        return f"target '{self.name}' has no template that computes {op.name}"

    def can_fuse(
        self, kind: str, members: Sequence[Operation], anchor: Operation | None
    ) -> str | None:
        """None when this target's ``kind`` template generates ``members`` as one
        kernel worth having, else the reason (for the planner and ``--remarks``)."""
        template = self.templates.get(kind)
        if template is None:
            return f"target '{self.name}' has no {kind} template"
        for op in members:
            reason = self.can_generate(op)
            if reason is not None:
                return reason
            if isinstance(op, AiOp) and not op.has_scalar() and type(op) not in template.lowers:
                return f"the {self.name} {kind} template does not compute {op.name}"
        elementwise = [op for op in members if isinstance(op, AiOp) and op.has_scalar()]
        if (conflict := indexing_conflict(elementwise)) is not None:
            return f"{conflict.name} {INDEXING_CONFLICT}"
        if not template.fuses and len(members) > 1:
            what = anchor.name if anchor is not None else "its ops"
            return (
                f"the {self.name} {kind} template runs {what} alone ({template.note}): fused "
                "work would run op by op, slower than a separate kernel"
            )
        if template.accepts is not None:
            return template.accepts(members, anchor)
        return None

    def resolve_sms(self, sms: int) -> int:
        """The SM count the passes choose tiles for, resolved once by ``fusec.compile``
        (``sms`` when given; a GPU target asks its device when 0): no pass asks the
        machine."""
        return sms

    # --------------------------------------------------------------- codegen
    def generate(self, fused_op: FusedOp, name: str) -> KernelSource:
        """The kernel of ``fused_op``; ``name`` must be a generated identifier."""
        from fusec.codegen.expr import error_at, is_identifier

        if not is_identifier(name):
            raise ValueError(f"kernel name {name!r} is not an identifier")
        for op in fused_op.block.ops:
            if isinstance(op, AiOp) and self.name in op.UNSUPPORTED:
                reason = op.UNSUPPORTED[self.name]
                raise error_at(op, f"is not supported on target '{self.name}': {reason}")
        template = self.templates.get(fused_op.kind_name)
        if template is None:
            kinds = sorted(self.templates) or ["none"]
            raise error_at(
                fused_op,
                f"kind {fused_op.kind_name!r} has no '{self.name}' template "
                f"(kinds with one: {', '.join(kinds)})",
            )
        return template.load().generate(fused_op, name)

    def assembly(self, kernel: KernelSource, arch: str) -> str:
        """The kernel compiled to this target's assembly for ``arch`` (e.g. PTX)."""
        raise FusecError(f"target '{self.name}' has no assembly to emit")

    def native_source(self, kernel: KernelSource) -> str | None:
        """Source in another language that the kernel's module compiles and links (the
        CUDA C++ of a Tensor Core GEMM), or None when it has none."""
        return None

    def tune(self, module: ModuleOp, entry: str | None = None, reps: int = 20) -> list:
        """Time candidate configurations of the entry function's kernels on this machine
        and record the fastest for later compilations; one result per tuned kernel."""
        raise FusecError(f"target '{self.name}' has nothing to tune")

    # --------------------------------------------------------------- runtime
    def backend(self, cache: Any = None) -> Any:
        """The ``fusec.runtime.launch.Backend`` that loads and runs this target's kernels."""
        raise FusecError(f"target '{self.name}' runs no generated kernels")

    def program(self, module: ModuleOp, entry: str | None = None, cache: Any = None) -> Any:
        """A callable running the entry function of ``module`` on this target (usually a
        ``fusec.runtime.launch.Program``: one launch per group, on ``backend``)."""
        raise NotImplementedError


def target_names() -> tuple[str, ...]:
    """Every registered target, and ``auto``."""
    return ("auto", *REGISTRY)


@cache
def get_target(name: str) -> Target:
    """The registered target ``name`` (not ``auto``: see ``resolve_target``)."""
    if name not in REGISTRY:
        raise FusecError(f"unknown target '{name}': expected one of {', '.join(target_names())}")
    target = importlib.import_module(REGISTRY[name]).TARGET
    assert isinstance(target, Target) and target.name == name
    return target


def resolve_target(name: str, *, available: bool = True) -> Target:
    """The target for ``name``: ``auto`` is the first available of ``AUTO_ORDER``;
    with ``available`` a named target must be usable here (else why it is not)."""
    if not isinstance(name, str):
        raise FusecError(f"a target must be a string, got {type(name).__name__}")
    if name == "auto":
        for candidate in AUTO_ORDER:
            target = get_target(candidate)
            if target.auto_selectable():
                return target
        raise FusecError(f"no target is available (tried {', '.join(AUTO_ORDER)})")
    target = get_target(name)
    if available and (reason := target.unavailable_reason()) is not None:
        raise FusecError(f"target '{name}' is not usable here: {reason}")
    return target


def target_passes() -> dict[str, str]:
    """The passes of every registered target, pass name -> "module:Class"."""
    return _contributions("passes")


def target_pipelines() -> dict[str, str]:
    """The named pipelines of every registered target, name -> pass-pipeline spec."""
    return _contributions("pipelines")


def _contributions(what: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in REGISTRY:
        for key, value in getattr(get_target(name), what).items():
            if found.setdefault(key, value) != value:
                raise FusecError(f"two targets define the {what[:-1]} '{key}' differently")
    return found


def target_for_device(device: str) -> str | None:
    """The registered target computing on arrays of ``device`` in place, if any."""
    return next((name for name in REGISTRY if device in get_target(name).devices), None)


def generate(fused_op: FusedOp, target: str, name: str) -> KernelSource:
    """Kernel source of ``fused_op`` on the registered target ``target``."""
    return get_target(target).generate(fused_op, name)
