"""``@fusec.fuse``: trace a Python function once per signature and run it compiled.

A call looks its arguments' signature up (shapes, dtypes, array kind and
device, and the values of non-array arguments) in an in-memory table; on a
hit it goes straight to the compiled module. On a miss the function is traced
(``fusec.frontend.tracer``), or its traced IR is read back from the on-disk
trace cache, then compiled with ``fusec.api.compile``.

The disk cache key is a fingerprint of the function (its bytecode, line
table, defaults, closure cells and the globals it names, followed into user
code; numpy arrays by content) plus the signature and the fusec version, so
a new process skips tracing. A function that reaches values that cannot be
fingerprinted across processes (objects, user classes) is cached in memory
only. Constants captured from closures and globals are taken at trace time.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fusec.dialect.shapes import TensorSpec, shape_problem
from fusec.errors import FusecError
from fusec.fingerprint import function_fingerprint
from fusec.frontend.tracer import ArgSpec, Traced, TracedFunction, trace_function, user_error
from fusec.ir.dtypes import ELEMENT_TYPES, element_type_of
from fusec.trace_cache import TRACE_FORMAT, read_trace, tracer_version, write_trace

_TORCH_DTYPES = {f"torch.{t.torch}": name for name, t in ELEMENT_TYPES.items()}


def fuse(
    fn: Callable[..., Any] | None = None,
    *,
    target: str = "auto",
    pipeline: str | None = None,
    disk_cache: bool = True,
) -> Any:
    """Decorator: run ``fn`` as fused kernels. ``@fuse`` or ``@fuse(target=..., pipeline=...)``."""
    from fusec.target import target_names

    if not isinstance(target, str) or target not in target_names():
        names = ", ".join(target_names())
        raise user_error(f"unknown target {target!r}: expected one of {names}")
    if pipeline is not None and not isinstance(pipeline, str):
        raise user_error(f"pipeline must be a pass-pipeline string, got {type(pipeline).__name__}")

    def wrap(f: Callable[..., Any]) -> FusedFunction:
        if not callable(f) or isinstance(f, np.ufunc):
            what = f"numpy ufunc {f.__name__}" if isinstance(f, np.ufunc) else type(f).__name__
            raise user_error(f"@fusec.fuse needs a Python function, got {what}")
        return FusedFunction(f, target=target, pipeline=pipeline, disk_cache=disk_cache)

    return wrap if fn is None else wrap(fn)


class _Inline(Exception):
    """A traced tensor was passed: we are inside another trace, so trace through."""


class _Launch:
    """One compiled signature, for one way of calling (positional/keyword layout)."""

    __slots__ = ("compiled", "traced_ir", "getters", "direct", "outputs")

    def __init__(self, compiled, traced_ir: str, getters, direct: bool, outputs: str) -> None:
        self.compiled = compiled
        self.traced_ir = traced_ir
        self.getters = getters
        self.direct = direct
        self.outputs = outputs

    def run(self, args: tuple, kwargs: dict) -> Any:
        if self.direct:
            out = self.compiled(*args)
        else:
            out = self.compiled(*[get(args, kwargs) for get in self.getters])
        if self.outputs == "single":
            return out
        items = out if isinstance(out, tuple) else (out,)
        return list(items) if self.outputs == "list" else items


class _Compiled:
    """What one canonical signature compiles to, shared by its call layouts."""

    def __init__(self, traced: TracedFunction, compiled, traced_ir: str) -> None:
        self.traced = traced
        self.compiled = compiled
        self.traced_ir = traced_ir


class FusedFunction:
    """A ``@fusec.fuse`` function: call it like the original.

    ``ir(*args)``, ``fused_ir(*args)`` and ``kernels(*args)`` show the traced
    IR, the IR after the pipeline and the generated kernels for the signature
    of ``args``; ``trace_count`` says how often the function was traced.
    """

    def __init__(
        self, fn: Callable[..., Any], *, target: str, pipeline: str | None, disk_cache: bool
    ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.target = target
        self.pipeline = pipeline
        self.disk_cache = disk_cache
        self.trace_count = 0
        self._signature = inspect.signature(fn)
        self._launches: dict[Any, _Launch] = {}
        self._compiled: dict[Any, _Compiled] = {}
        self._lock = threading.RLock()
        self._fingerprint: str | None | bool = False  # False: not computed yet

    # ------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            key = (tuple(map(_fast_key, args)), tuple(_kw_keys(kwargs)) if kwargs else ())
            launch = self._launches.get(key)
        except _Inline:
            return self.fn(*args, **kwargs)
        except TypeError:  # an unhashable non-array argument
            key, launch = None, None
        if launch is None:
            launch = self._launch(key, args, kwargs)
        return launch.run(args, kwargs)

    def ir(self, *args: Any, **kwargs: Any) -> str:
        """The traced ``ai`` IR for the signature of these arguments."""
        return self._launch_for(args, kwargs).traced_ir

    def fused_ir(self, *args: Any, **kwargs: Any) -> str:
        """The IR after the pass pipeline (the fusion groups) for these arguments."""
        return self._launch_for(args, kwargs).compiled.ir

    def kernels(self, *args: Any, **kwargs: Any) -> list:
        """The generated kernels (``fusec.api.Kernel``) for these arguments."""
        return list(self._launch_for(args, kwargs).compiled.kernels)

    def compiled(self, *args: Any, **kwargs: Any):
        """The ``CompiledModule`` these arguments run on."""
        return self._launch_for(args, kwargs).compiled

    def clear_cache(self) -> None:
        """Forget the in-memory traces (the disk cache is left alone)."""
        with self._lock:
            self._launches.clear()
            self._compiled.clear()

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """As a method: the instance is an argument like any other (part of the signature)."""
        return self if instance is None else functools.partial(self, instance)

    def fingerprint_parts(self) -> tuple[str, str | None, Callable[..., Any]]:
        """What a fused function's fingerprint depends on (``fusec.fingerprint``)."""
        return self.target, self.pipeline, self.fn

    def __repr__(self) -> str:
        return f"<fusec.fuse {getattr(self.fn, '__qualname__', self.fn)!r} target={self.target!r}>"

    def _launch_for(self, args: tuple, kwargs: dict) -> _Launch:
        try:
            key = (tuple(map(_fast_key, args)), tuple(_kw_keys(kwargs)) if kwargs else ())
        except _Inline:
            message = "ir()/fused_ir()/kernels() need concrete arrays, not traced tensors"
            raise user_error(message) from None
        except TypeError:
            key = None
        return self._launches.get(key) or self._launch(key, args, kwargs)

    # -------------------------------------------------------------- misses
    def _launch(self, key: Any, args: tuple, kwargs: dict) -> _Launch:
        with self._lock:
            call = _Call.bind(self, args, kwargs)
            canonical = (tuple(call.specs), call.static_key, call.target)
            entry = self._compiled.get(canonical)
            if entry is None:
                entry = self._compile(call)
                self._compiled[canonical] = entry
            launch = call.launch(entry)
            if key is not None:
                self._launches[key] = launch
            return launch

    def _compile(self, call: _Call) -> _Compiled:
        from fusec.api import compile as fusec_compile
        from fusec.api import print_ir

        disk_key = self._disk_key(call) if self.disk_cache else None
        traced = read_trace(disk_key) if disk_key else None
        if traced is None:
            self.trace_count += 1
            name = getattr(self.fn, "__name__", "fn")
            traced = trace_function(self.fn, call.specs, call.invoke, name)
            if disk_key:
                write_trace(disk_key, traced)
        try:
            compiled = fusec_compile(traced.module, target=call.target, pipeline=self.pipeline)
        except FusecError as err:
            if err.location is not None:
                raise
            raise user_error(err.message) from None  # e.g. a bad pipeline: at the user's call
        return _Compiled(traced, compiled, print_ir(traced.module))

    def _disk_key(self, call: _Call) -> str | None:
        if self._fingerprint is False:
            self._fingerprint = function_fingerprint(self.fn)
        if self._fingerprint is None or call.static_text is None:
            return None
        signature = [(a.name, list(a.spec.shape), a.spec.dtype) for a in call.specs]
        text = json.dumps(
            [TRACE_FORMAT, tracer_version(), self._fingerprint, signature, call.static_text]
        )
        return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------ argument keys


def _fast_key(a: Any) -> Any:
    if type(a) is np.ndarray:
        return (a.shape, a.dtype)
    return _key(a)


def _kw_keys(kwargs: dict) -> Any:
    for name, value in kwargs.items():
        yield name, _fast_key(value)


def _array_kind(a: Any) -> str | None:
    """'numpy', 'torch' or 'cupy' for an array argument, None for anything else."""
    if isinstance(a, np.ndarray):
        return "numpy"
    root = type(a).__module__.partition(".")[0]
    if root in ("torch", "cupy") and hasattr(a, "shape") and hasattr(a, "dtype"):
        return root
    return None


def _key(a: Any) -> Any:
    """A hashable description of an argument: what decides the trace."""
    if isinstance(a, Traced):
        raise _Inline
    kind = _array_kind(a)
    if kind == "numpy":
        return ("ndarray", a.shape, a.dtype)
    if kind is not None:
        return (kind, tuple(a.shape), str(a.dtype), str(getattr(a, "device", "cuda")))
    if isinstance(a, (tuple, list)):
        return (type(a), tuple(_key(x) for x in a))
    if isinstance(a, dict):
        return (dict, tuple((k, _key(v)) for k, v in a.items()))
    hash(a)  # TypeError for unhashable values: the slow path reports them
    return (type(a), a)


def _stable_text(value: Any) -> Any:
    """A JSON-able description of a non-array argument that is the same in every process,
    or None when there is none (such signatures are cached in memory only)."""
    if value is None or isinstance(value, (bool, int, str)):
        return [type(value).__name__, value]
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return [str(value.dtype), repr(value.item())]
    if isinstance(value, (tuple, list)):
        items = [_stable_text(v) for v in value]
        return None if None in items else [type(value).__name__, items]
    return None


class _Probe:
    """Stands for an argument while binding, to learn where each parameter came from."""

    __slots__ = ("path",)

    def __init__(self, path: tuple) -> None:
        self.path = path


class _Leaf:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Call:
    """One call's arguments: the array leaves (in signature order), the static values,
    where each leaf sits in ``(args, kwargs)``, and the target."""

    def __init__(self, owner: FusedFunction) -> None:
        self.owner = owner
        self.specs: list[ArgSpec] = []
        self.paths: list[tuple] = []
        self.devices: set[str] = set()
        self.statics: list[tuple[str, Any]] = []
        self.template: dict[str, Any] = {}
        self.target = owner.target
        self.layout = (0, 0)

    @classmethod
    def bind(cls, owner: FusedFunction, args: tuple, kwargs: dict) -> _Call:
        call = cls(owner)
        call.layout = (len(args), len(kwargs))
        sig = owner._signature
        name = getattr(owner.fn, "__name__", "function")
        try:
            probes = sig.bind(
                *[_Probe(("arg", i)) for i in range(len(args))],
                **{k: _Probe(("kw", k)) for k in kwargs},
            )
        except TypeError as err:
            raise user_error(f"{name}(): {err}") from None
        bound = sig.bind(*args, **kwargs)
        probes.apply_defaults()
        bound.apply_defaults()
        for pname, value in bound.arguments.items():
            call.template[pname] = call._walk(pname, value, probes.arguments[pname])
        if len(call.devices) > 1:
            raise user_error(f"{name}(): the arrays are on different devices ({call.devices})")
        if owner.target == "auto" and call.devices:
            from fusec.target import target_for_device

            call.target = target_for_device(next(iter(call.devices))) or "auto"
        return call

    def _walk(self, name: str, value: Any, probe: Any) -> Any:
        """Record ``value`` (with its position ``probe``); return it with leaves marked."""
        path = probe.path if isinstance(probe, _Probe) else ("value", value)
        kind = _array_kind(value)
        if kind is not None:
            self.specs.append(ArgSpec(name, _leaf_spec(self.owner, name, value, kind)))
            self.paths.append(path)
            self.devices.add(_device(value, kind))
            return _Leaf(len(self.specs) - 1)
        if isinstance(value, Traced):
            raise user_error("a traced tensor inside a container argument is not supported")
        if isinstance(value, (tuple, list, dict)) and _has_array(value):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            sub = {}
            for k, item in items:
                if isinstance(probe, _Probe):
                    inner: Any = _Probe((*probe.path, k))
                elif isinstance(probe, (tuple, list, dict)):
                    inner = probe[k]  # *args / **kwargs: each item has its own probe
                else:
                    inner = item
                sub[k] = self._walk(f"{name}_{k}", item, inner)
            if isinstance(value, dict):
                return sub
            return type(value)(sub[i] for i in range(len(value)))
        try:
            hash(_key(value))
        except TypeError:
            raise user_error(
                f"argument '{name}' of type {type(value).__name__} is neither an array nor a "
                "hashable value (non-array arguments are part of the trace signature)"
            ) from None
        self.statics.append((name, value))
        return value

    @property
    def static_key(self) -> tuple:
        return tuple((name, _key(value)) for name, value in self.statics)

    @property
    def static_text(self) -> list | None:
        texts = [[name, _stable_text(value)] for name, value in self.statics]
        return None if any(t is None for _, t in texts) else texts

    def invoke(self, tracers: Sequence[Any]) -> Any:
        """Run the user's function with the leaves replaced by ``tracers``."""
        args, kwargs = [], {}
        for param in self.owner._signature.parameters.values():
            if param.name not in self.template:
                continue
            value = _substitute(self.template[param.name], tracers)
            if param.kind is param.VAR_POSITIONAL:
                args.extend(value)
            elif param.kind is param.VAR_KEYWORD:
                kwargs.update(value)
            elif param.kind is param.KEYWORD_ONLY:
                kwargs[param.name] = value
            else:
                args.append(value)
        return self.owner.fn(*args, **kwargs)

    def launch(self, entry: _Compiled) -> _Launch:
        """How this call layout feeds ``entry``: plain positional arrays go straight in."""
        params = entry.traced.params
        getters = [_getter(self.paths[leaf], shape) for leaf, shape in params]
        paths = [self.paths[leaf] for leaf, _ in params]
        direct = (
            self.layout == (len(params), 0)
            and all(shape is None for _, shape in params)
            and paths == [("arg", i) for i in range(len(params))]
        )
        return _Launch(entry.compiled, entry.traced_ir, getters, direct, entry.traced.outputs)


def _has_array(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return any(
        _array_kind(v) is not None or (isinstance(v, (tuple, list, dict)) and _has_array(v))
        for v in items
    )


def _substitute(template: Any, tracers: Sequence[Any]) -> Any:
    if isinstance(template, _Leaf):
        return tracers[template.index]
    if isinstance(template, dict):
        return {k: _substitute(v, tracers) for k, v in template.items()}
    if isinstance(template, (tuple, list)):
        return type(template)(_substitute(v, tracers) for v in template)
    return template


def _getter(path: tuple, shape: tuple[int, ...] | None) -> Callable[[tuple, dict], Any]:
    """A function (args, kwargs) -> the array at ``path``, viewed as ``shape``."""
    kind, where, *rest = path

    def get(args: tuple, kwargs: dict) -> Any:
        value = args[where] if kind == "arg" else kwargs[where] if kind == "kw" else where
        for k in rest:
            value = value[k]
        return value if shape is None else value.reshape(shape)

    return get


def _leaf_spec(owner: FusedFunction, name: str, value: Any, kind: str) -> TensorSpec:
    if kind == "torch":
        dtype = _TORCH_DTYPES.get(str(value.dtype))
    else:
        dtype = element_type_of(value.dtype, floats_only=False)
    if dtype is None:
        fname = getattr(owner.fn, "__name__", "function")
        raise user_error(
            f"{fname}(): argument '{name}' has dtype {value.dtype}; fusec supports float16, "
            "bfloat16, float32, int64, int32 and bool"
        )
    shape = tuple(int(d) for d in value.shape)
    problem = shape_problem(shape)
    if problem is not None:
        fname = getattr(owner.fn, "__name__", "function")
        raise user_error(f"{fname}(): argument '{name}' (shape {shape}) {problem}")
    return TensorSpec(shape, dtype)


def _device(value: Any, kind: str) -> str:
    if kind == "numpy":
        return "cpu"
    if kind == "cupy":
        return "cuda"
    return "cuda" if getattr(value, "is_cuda", False) else "cpu"
