"""A compiled dynamic model: one specialization per set of input shapes, cached.

``fusec.compile`` of a ``DynamicModel`` (``fusec.frontend.onnx_dynamic``) returns a
``DynamicCompiledModule``. Each call reads its arguments' shapes; a set seen
before runs the module compiled for it (one dict lookup on the shapes), a new
one is checked against the symbolic signature (rank, static sizes, a named
dimension bound to one size throughout), imported for those shapes, compiled
through the usual pipeline and kept, as ``torch.compile`` recompiles per shape.
On disk the kernel cache keys each generated kernel on its text, so a shape
compiled in an earlier process loads its kernels instead of compiling them (the
import and the passes run again: they take well under the JIT's time).

A bound (default 8: ``max_specializations=``, or ``FUSEC_MAX_SPECIALIZATIONS``)
stops a caller that feeds a new shape each time from compiling without end:
past it a call is a FusecError that lists the compiled shapes and says how to
raise the bound.

A dynamic module has no one IR or kernel list: ``ir``, ``module``, ``kernels``
and ``program`` raise a FusecError that points at ``specializations`` (each one's
``compiled`` is an ordinary ``CompiledModule``) and at ``specialize``, which
compiles one set of shapes ahead of the call. ``signature`` is the symbolic IR.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusec.environ import getenv
from fusec.errors import FusecError
from fusec.frontend.onnx_dynamic import DynamicModel

ENV_VAR = "FUSEC_MAX_SPECIALIZATIONS"
DEFAULT_MAX = 8

Shape = tuple[int, ...]


def specialization_bound(given: int | None = None) -> int:
    """``given``, else ``$FUSEC_MAX_SPECIALIZATIONS``, else 8; a FusecError unless >= 1."""
    if given is None:
        text = getenv(ENV_VAR).strip()
        if not text:
            return DEFAULT_MAX
        try:
            given = int(text)
        except ValueError:
            raise FusecError(f"{ENV_VAR}={text!r}: expected a whole number >= 1") from None
        what = f"{ENV_VAR}={text!r}"
    else:
        what = f"max_specializations={given!r}"
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise FusecError(f"{what}: expected a whole number >= 1")
    return given


@dataclass(frozen=True)
class Specialization:
    """One set of input shapes of a dynamic module and the module compiled for it."""

    #: The named dimensions' sizes, e.g. {"batch": 2, "seq": 16}.
    dims: dict[str, int]
    #: Each input's shape, by its ONNX name.
    shapes: dict[str, Shape]
    #: The ``fusec.api.CompiledModule`` of these shapes.
    compiled: Any
    #: Wall-clock seconds of its import, passes and code generation (the kernels'
    #: JIT compilation, or their load from the kernel cache, is on its first call).
    seconds: float

    def describe(self) -> str:
        """``batch=2, seq=16`` (the shapes when no dimension is named)."""
        if self.dims:
            return ", ".join(f"{k}={v}" for k, v in self.dims.items())
        return ", ".join(f"{k}: {_text(v)}" for k, v in self.shapes.items())


class DynamicCompiledModule:
    """A compiled module of a model with dynamic dimensions: callable like a
    ``CompiledModule``; compiles once per new set of argument shapes, up to a bound
    (see the module docstring)."""

    def __init__(
        self,
        model: DynamicModel,
        compile_module: Callable[[Any], Any],
        *,
        target: str,
        max_specializations: int | None = None,
    ) -> None:
        self.model = model
        self.target = target
        self.entry = model.name
        self.max_specializations = specialization_bound(max_specializations)
        self._compile = compile_module
        self._by_shapes: dict[tuple[Shape, ...], Specialization] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ calling
    def __call__(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        """Run the entry function on ``args``, compiling for their shapes first if new."""
        key = tuple(shape_of(a) for a in args)
        found = self._by_shapes.get(key)
        if found is None:
            found = self._specialization(key)
        return found.compiled(*args, stream=stream, **kwargs)

    def specialize(self, *shapes: Sequence[int]) -> Any:
        """The CompiledModule for arguments of these shapes (compiled now if new)."""
        key = tuple(tuple(int(d) for d in shape) for shape in shapes)
        return self._specialization(key).compiled

    def capture(self, *args: Any) -> Any:
        """``CompiledModule.capture`` of the specialization for ``args``' shapes."""
        return self.specialize(*(shape_of(a) for a in args)).capture(*args)

    @property
    def specializations(self) -> list[Specialization]:
        """The shapes compiled so far, in the order they were first called."""
        return list(self._by_shapes.values())

    @property
    def signature(self) -> str:
        """The symbolic signature as IR text (what ``fusec import`` prints)."""
        return str(self.model)

    def _specialization(self, key: tuple[Shape, ...]) -> Specialization:
        with self._lock:  # two threads with one new shape compile it once
            found = self._by_shapes.get(key)
            if found is not None:
                return found
            dims, shapes = self.model.bind(key)
            if len(self._by_shapes) >= self.max_specializations:
                raise self._past_bound(dims, shapes)
            clock = time.perf_counter()
            compiled = self._compile(self.model.specialize(shapes))
            found = Specialization(dims, shapes, compiled, time.perf_counter() - clock)
            self._by_shapes[key] = found
            return found

    def _past_bound(self, dims: dict[str, int], shapes: dict[str, Shape]) -> FusecError:
        new = Specialization(dims, shapes, None, 0.0).describe()
        done = "; ".join(s.describe() for s in self._by_shapes.values())
        bound = self.max_specializations
        return FusecError(
            f"@{self.entry}: input shapes {new} would be specialization {bound + 1}, past the "
            f"bound of {bound} (compiled: {done}); raise it with fusec.compile(..., "
            f"max_specializations=N) or {ENV_VAR}=N, or pad the inputs to a compiled shape"
        )

    # ------------------------------------------------------------ no single IR
    def _no_single(self, what: str) -> FusecError:
        return FusecError(
            f"@{self.entry} has dynamic dimensions ({', '.join(self.model.symbols) or '?'}): "
            f"it has one {what} per set of input shapes; see .specializations[i].compiled."
            f"{what}, or .specialize(*shapes).{what} (.signature is the symbolic IR)"
        )

    @property
    def ir(self) -> str:
        raise self._no_single("ir")

    @property
    def module(self) -> Any:
        raise self._no_single("module")

    @property
    def kernels(self) -> list[Any]:
        raise self._no_single("kernels")

    @property
    def program(self) -> Any:
        raise self._no_single("program")

    def __repr__(self) -> str:
        return (
            f"DynamicCompiledModule(entry=@{self.entry}, target={self.target!r}, "
            f"specializations={len(self._by_shapes)}/{self.max_specializations})"
        )


def shape_of(value: Any) -> Shape:
    """The shape of an argument: numpy, torch, cupy, or anything with ``shape``;
    a Python number is rank 0."""
    shape = getattr(value, "shape", None)
    if shape is None:
        shape = np.shape(value)
    return tuple(int(d) for d in shape)


def _text(shape: Shape) -> str:
    return "x".join(str(d) for d in shape) or "scalar"
