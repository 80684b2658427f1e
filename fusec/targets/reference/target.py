"""The ``reference`` target: the numpy interpreter runs the IR as written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from fusec.dialect.ops import AiOp
from fusec.target import Target


class ReferenceTarget(Target):
    """No kernels: ``fusec.runtime.reference`` interprets every op (``ai.fused``
    bodies included) in each op's declared element type. Any group the rules
    allow is fine, since nothing is generated."""

    name = "reference"
    description = "the numpy reference executor (interprets the IR)"
    generates_kernels = False

    def can_generate(self, op: Operation) -> str | None:
        if not isinstance(op, AiOp):
            return f"{op.name} is not an ai op"
        if not type(op).has_reference():
            return f"{op.name} has no numpy reference implementation"
        return None

    def can_fuse(
        self, kind: str, members: Sequence[Operation], anchor: Operation | None
    ) -> str | None:
        return None

    def program(self, module: ModuleOp, entry: str | None = None, cache: Any = None) -> Any:
        return ReferenceProgram(module, entry)


class ReferenceProgram:
    """Calls the reference executor at native precision (what the IR declares)."""

    def __init__(self, module: ModuleOp, entry: str | None) -> None:
        from fusec.ir.module import entry_function

        self.module = module
        self.entry = entry_function(module, entry).sym_name.data
        self.kernels: list = []

    def __call__(self, args: Sequence[Any]) -> tuple:
        from fusec.runtime.reference import run_reference

        return run_reference(self.module, args, entry=self.entry, precision="native")


TARGET = ReferenceTarget()
