"""fusec: a Python-native operator-fusion compiler for AI graphs, built on xDSL.

The public API is imported lazily so that ``import fusec`` (and the CLI) start
fast; see ``fusec.api`` for the functions themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fusec._version import __version__ as __version__
from fusec.errors import FusecError, SourceLocation

__all__ = [
    "CompiledModule",
    "FusecError",
    "Kernel",
    "SourceLocation",
    "compile",
    "compile_onnx",
    "from_onnx",
    "from_torch",
    "fuse",
    "ops",
    "parse",
    "profile",
    "reference",
]

_API_NAMES = {
    "parse",
    "compile",
    "compile_onnx",
    "reference",
    "from_onnx",
    "from_torch",
    "CompiledModule",
    "Kernel",
}

if TYPE_CHECKING:
    from fusec import ops  # noqa: F401
    from fusec.api import (  # noqa: F401
        CompiledModule,
        Kernel,
        compile,
        compile_onnx,
        from_onnx,
        from_torch,
        parse,
        reference,
    )
    from fusec.decorator import fuse  # noqa: F401
    from fusec.tools.profile import profile  # noqa: F401


def __getattr__(name: str) -> Any:
    if name == "fuse":  # the decorator builds on the API, not the other way round
        from fusec.decorator import fuse

        return fuse
    if name == "profile":  # a tool over the API: per-kernel times of a compiled program
        from fusec.tools.profile import profile

        return profile
    if name in _API_NAMES:
        from fusec import api

        return getattr(api, name)
    if name == "ops":
        import fusec.ops

        return fusec.ops
    raise AttributeError(f"module 'fusec' has no attribute '{name}'")
