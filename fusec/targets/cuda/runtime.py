"""The one place that prepares the process for Numba CUDA, before its first import.

Two traps from ``shared/notes/numba-cuda.md`` are handled here, and only here:

* numba-cuda 0.30 with numpy >= 2.5 fails every kernel compile with
  ``module 'numpy' has no attribute 'row_stack'``: alias it to ``np.vstack``
  when it is missing.
* NVRTC cannot find ``crt/mma.h`` unless ``NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS``
  names the CUDA toolkit's include folder: set it (when unset) to the folder
  beside ``nvcc``.

Every fusec module that needs ``numba.cuda`` gets it from ``numba_cuda()``; no
other module imports ``numba.cuda`` at top level.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from fusec.codegen import KernelSource
from fusec.dialect.ops import spec_of
from fusec.dialect.shapes import TensorSpec
from fusec.errors import FusecError
from fusec.runtime.launch import nvtx_range
from fusec.targets.cuda.streams import (
    LEGACY,
    StreamRef,
    current_torch_ref,
    explicit_handle,
    stream_ptr,
    stream_ref,
    wait_for,
)

_SEARCH_PATH_VAR = "NUMBA_CUDA_NVRTC_EXTRA_SEARCH_PATHS"
_prepared = False


def _cuda_include_dir() -> str | None:
    """The CUDA toolkit's include folder (the one beside nvcc), if there is one."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for folder in candidates:
        if (folder / "cuda_runtime.h").is_file():
            return str(folder)
    return None


def prepare() -> None:
    """Apply the numpy shim and the NVRTC include path (idempotent)."""
    global _prepared
    if _prepared:
        return
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    if not os.environ.get(_SEARCH_PATH_VAR):
        include = _cuda_include_dir()
        if include:
            os.environ[_SEARCH_PATH_VAR] = include
    _prepared = True


def numba_cuda() -> ModuleType:
    """``numba.cuda``, imported after ``prepare()``; ImportError when numba-cuda is absent."""
    prepare()
    from numba import cuda

    return cuda


def simulator_enabled() -> bool:
    """True when Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1`` before import)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def cuda_support() -> str | None:
    """Why the CUDA compiler stack is unusable here, or None when numba-cuda imports.

    numba's own deprecated ``numba.cuda`` does not count (see ``fusec.extras``).
    """
    from fusec.extras import numba_cuda_problem

    return numba_cuda_problem()


def require_cuda_compiler(purpose: str) -> None:
    """Raise a one-line FusecError naming the ``cuda`` extra when numba-cuda is not usable."""
    from fusec.extras import install_hint

    reason = cuda_support()
    if reason is not None:
        raise FusecError(f"{purpose}: {reason} ({install_hint('cuda')})")


def driver_present() -> bool:
    """Whether the CUDA driver library exists: a cheap test before importing numba.cuda.

    Without ``libcuda`` there is no GPU to find, and importing numba.cuda would
    cost a fifth of a second of every ``fusec compile`` on a CPU-only machine.
    """
    import ctypes.util

    return ctypes.util.find_library("cuda") is not None or any(
        os.path.exists(os.path.join(d, "libcuda.so.1"))
        for d in (
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/local/nvidia/lib64",
            "/usr/lib/wsl/lib",
        )
    )


def gpu_available() -> bool:
    """True when a real CUDA GPU can run kernels (never under the simulator)."""
    if simulator_enabled() or not driver_present() or cuda_support() is not None:
        return False
    try:
        return bool(numba_cuda().is_available())
    except Exception:  # driver missing or broken: no GPU for us
        return False


# --------------------------------------------------------------------------- device


def device_key() -> str:
    """The compiled code's device in cache keys: ``sm_90`` on an H100/H200, ``sim`` under the
    simulator."""
    if simulator_enabled():
        return "sim"
    major, minor = numba_cuda().get_current_device().compute_capability
    return f"sm_{major}{minor}"


def sm_count() -> int:
    if simulator_enabled():
        return 1
    return int(numba_cuda().get_current_device().MULTIPROCESSOR_COUNT)


# ------------------------------------------------------------------------- kernels


def load_kernel_module(kernel: KernelSource, cache: Any = None) -> ModuleType:
    """Import a generated CUDA kernel module and compile its kernels for this GPU.

    The module goes through the kernel cache (written once under the cache
    folder); its kernels are compiled eagerly with their signatures, using
    Numba's own disk cache beside the module file, so a second process loads
    machine code instead of compiling (generated CUDA kernels link no code,
    so Numba can pickle them).
    """
    from fusec.runtime.cache import default_cache

    cache = cache if cache is not None else default_cache()
    module = cache.load_module(kernel.source, target="cuda", device=device_key())
    if simulator_enabled():
        return module
    for dispatcher, signature in module.KERNELS:
        if signature in _compiled.setdefault(id(dispatcher), set()):
            continue
        try:
            dispatcher.enable_caching()
        except Exception:  # a dispatcher that cannot cache: compile in memory only
            pass
        dispatcher.compile(signature)
        _compiled[id(dispatcher)].add(signature)
    return module


_compiled: dict[int, set] = {}


def emit_ptx(kernel: KernelSource, cc: tuple[int, int] = (9, 0), cache: Any = None) -> str:
    """PTX of every kernel in ``kernel``'s module for compute capability ``cc``.

    Compiled with NVVM through ``numba.cuda.compile_ptx``; needs no GPU (only the
    ``cuda`` extra). Stored in the kernel cache's blob store.
    """
    from fusec.runtime.cache import cache_key, default_cache

    require_cuda_compiler("cannot emit PTX")
    if simulator_enabled():
        raise FusecError("cannot emit PTX under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    cache = cache if cache is not None else default_cache()
    key = cache_key(kernel.source, "ptx", f"sm_{cc[0]}{cc[1]}")

    def build() -> bytes:
        cuda = numba_cuda()
        namespace: dict[str, Any] = {"__name__": f"_fusec_ptx_{kernel.name}"}
        exec(compile(kernel.source, f"<fusec kernel {kernel.name}>", "exec"), namespace)
        parts = []
        for dispatcher, signature in namespace["KERNELS"]:
            ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=cc)
            parts.append(ptx)
        return "\n".join(parts).encode()

    return cache.get_or_build(key, build).decode()


def parse_arch(arch: str) -> tuple[int, int]:
    """``sm_90`` / ``sm_90a`` / ``90`` -> (9, 0); FusecError otherwise."""
    import re

    match = re.fullmatch(r"(?:sm_|compute_)?(\d)(\d)a?", arch.strip())
    if not match:
        raise FusecError(f"bad --arch '{arch}': expected e.g. sm_90")
    return int(match.group(1)), int(match.group(2))


# ------------------------------------------------------------------- tensors


_TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def _family_of_stream(stream: Any) -> str:
    module = type(stream).__module__.split(".")[0]
    return "torch" if module == "torch" and hasattr(stream, "cuda_stream") else module


def _family(obj: Any) -> str:
    """Which library an argument comes from: torch, cupy, numba, cai, dlpack or host."""
    module = type(obj).__module__.split(".")[0]
    if module == "torch" and hasattr(obj, "is_cuda"):
        return "torch" if obj.is_cuda else "host"
    if module == "cupy":
        return "cupy"
    if module == "numba" and hasattr(obj, "__cuda_array_interface__"):
        return "numba"
    if hasattr(obj, "__cuda_array_interface__"):
        return "cai"
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        device_type, _ = obj.__dlpack_device__()
        if int(device_type) in (2, 13):  # kDLCUDA, kDLCUDAManaged
            return "dlpack"
    return "host"


class _Buffer:
    """One tensor on the device: what the caller sees (``user``), its raw address and
    element count (all a direct launch needs), and a numba view made on demand."""

    __slots__ = ("user", "ptr", "n", "spec", "_flat", "_view")

    def __init__(
        self,
        user: Any,
        spec: TensorSpec,
        *,
        flat: Any = None,
        ptr: int = 0,
        view: Callable[[], Any] | None = None,
    ) -> None:
        self.user = user
        self.spec = spec
        self._flat = flat
        self._view = view
        if flat is not None:  # (the simulator's arrays have no interface: no direct launch)
            interface = getattr(flat, "__cuda_array_interface__", None)
            ptr = interface["data"][0] if interface and flat.shape[0] else 0
        self.ptr = ptr
        self.n = math.prod(spec.shape)

    @property
    def flat(self) -> Any:
        """The flat numba device array of the storage (for copies and the slow path)."""
        if self._flat is None:
            self._flat = self._view()
        return self._flat


def _storage_np(dtype: str):
    import numpy as np

    return np.dtype(np.float32) if dtype == "f32" else np.dtype(np.int16)


class _Adapter:
    """Moves one call's tensors of one family (torch, cupy, numba/CAI, host) to and from
    the kernels' flat views, without copies for device tensors that are already
    contiguous and 16-byte aligned."""

    def __init__(self, family: str, example: Any) -> None:
        self.family = family
        self.cuda = numba_cuda()
        if family == "torch":
            import torch

            self.torch = torch
            self.device = example.device
        elif family == "cupy":
            import cupy

            self.cupy = cupy

    # ------------------------------------------------------------ streams
    def stream(self, explicit: Any) -> StreamRef:
        """The stream to launch on: ``explicit``, else the caller's current one
        (see ``fusec.targets.cuda.streams``)."""
        if simulator_enabled():  # one stream, handle 0, in the simulator
            return explicit if isinstance(explicit, StreamRef) else stream_ref(0)
        if explicit is not None:
            if isinstance(explicit, StreamRef):
                return explicit
            torch_stream = explicit if _family_of_stream(explicit) == "torch" else None
            return StreamRef(explicit_handle(explicit), torch_stream=torch_stream)
        if self.family == "torch":
            return current_torch_ref(self._raw_current(self.device.index))
        if self.family == "cupy":
            return stream_ref(explicit_handle(self.cupy.cuda.get_current_stream()))
        if self.family == "host":
            own = _own_stream()
            return StreamRef(stream_ptr(own), own)
        return stream_ref(LEGACY)  # numba / CAI / DLPack arrays: Numba's default stream

    def _raw_current(self, index: int) -> int:
        raw = getattr(self.torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(index))
        return int(self.torch.cuda.current_stream(self.device).cuda_stream)

    def torch_context(self, stream: StreamRef) -> Any:
        """A context making ``stream`` torch's current stream (for torch allocations,
        copies and PyTorch fallback groups); nothing to do when it already is."""
        import contextlib

        if stream.current:
            return contextlib.nullcontext()
        import torch

        device = self.device if self.family == "torch" else None
        return torch.cuda.stream(stream.torch_stream(torch, device))

    # ------------------------------------------------------------- inputs
    def wrap(self, obj: Any, spec: TensorSpec, stream: Any, index: int, fn_name: str) -> _Buffer:
        import numpy as np

        from fusec.runtime.dtypes import numpy_dtype

        cuda = self.cuda
        if self.family == "torch":
            torch = self.torch
            if tuple(obj.shape) != spec.shape:
                _check_shape(obj, spec, index, fn_name)
            want = getattr(torch, _TORCH_DTYPES[spec.dtype])
            _check_dtype(obj.dtype == want, obj.dtype, spec, index, fn_name)
            if not obj.is_contiguous() or obj.data_ptr() % 16:
                obj = obj.clone(memory_format=torch.contiguous_format)
            return _torch_buffer(obj, spec)
        _check_shape(obj, spec, index, fn_name)
        if self.family == "cupy":
            cp = self.cupy
            want = np.dtype(np.float32) if spec.dtype == "f32" else np.dtype(np.float16)
            ok = obj.dtype == want or (spec.dtype == "bf16" and obj.dtype.itemsize == 2)
            _check_dtype(ok, obj.dtype, spec, index, fn_name)
            if not obj.flags.c_contiguous or obj.data.ptr % 16:
                obj = cp.ascontiguousarray(obj).copy()
            view = obj.reshape(-1).view(_storage_np(spec.dtype))
            return _Buffer(obj, spec, flat=cuda.as_cuda_array(view, sync=False))
        if self.family in ("numba", "cai"):
            producer = obj.__cuda_array_interface__.get("stream")
            if producer is not None:  # CAI v3: the stream that produced the data
                wait_for(stream, int(producer))
            arr = cuda.as_cuda_array(obj, sync=False)
            ok = arr.dtype.itemsize == np.dtype(numpy_dtype(spec.dtype)).itemsize and (
                arr.dtype == numpy_dtype(spec.dtype) or arr.dtype.kind in "iuV"
            )
            _check_dtype(ok, arr.dtype, spec, index, fn_name)
            ptr = arr.__cuda_array_interface__["data"][0]
            if not arr.is_c_contiguous() or ptr % 16:
                copy = cuda.device_array(arr.shape, arr.dtype, stream=stream.numba)
                copy.copy_to_device(arr, stream=stream.numba)
                arr = copy
            return _Buffer(obj, spec, flat=arr.reshape(-1).view(_storage_np(spec.dtype)))
        host = np.asarray(obj)
        _check_dtype(host.dtype == numpy_dtype(spec.dtype), host.dtype, spec, index, fn_name)
        flat = np.ascontiguousarray(host).reshape(-1).view(_storage_np(spec.dtype))
        return _Buffer(None, spec, flat=cuda.to_device(flat, stream=stream.numba))

    def as_torch(self, buffer: _Buffer) -> Any:
        """A torch tensor (no copy) of ``buffer`` with its spec's shape and element type."""
        if _is_torch(buffer.user):
            return buffer.user
        import torch

        flat = torch.as_tensor(buffer.flat, device="cuda")
        if buffer.spec.dtype != "f32":
            flat = flat.view(getattr(torch, _TORCH_DTYPES[buffer.spec.dtype]))
        return flat.view(buffer.spec.shape)

    # ------------------------------------------------------------ outputs
    def empty(self, spec: TensorSpec, stream: Any) -> _Buffer:
        cuda = self.cuda
        if self.family == "torch":
            torch = self.torch
            t = torch.empty(
                spec.shape, dtype=getattr(torch, _TORCH_DTYPES[spec.dtype]), device=self.device
            )
            return _torch_buffer(t, spec)
        if self.family == "cupy":
            cp = self.cupy
            dtype = {"f32": cp.float32, "f16": cp.float16, "bf16": cp.int16}[spec.dtype]
            a = cp.empty(spec.shape, dtype=dtype)
            flat = cuda.as_cuda_array(a.reshape(-1).view(_storage_np(spec.dtype)), sync=False)
            return _Buffer(a, spec, flat=flat)
        flat = cuda.device_array(max(1, _size(spec)), _storage_np(spec.dtype), stream=stream.numba)
        if _size(spec) == 0:
            flat = flat[:0]
        return _Buffer(None, spec, flat=flat)

    def result(self, buffer: _Buffer, stream: Any) -> Any:
        """What the caller gets back: the same family as the inputs."""
        if self.family == "torch":
            return buffer.user
        if self.family == "cupy":
            if type(buffer.user).__module__.split(".")[0] == "cupy":
                return buffer.user
            cp = self.cupy  # a PyTorch fallback group's tensor: a cupy view of its memory
            dtype = {"f32": cp.float32, "f16": cp.float16, "bf16": cp.int16}[buffer.spec.dtype]
            return cp.asarray(buffer.flat).view(dtype).reshape(buffer.spec.shape)
        if self.family in ("numba", "cai", "dlpack"):
            shaped = buffer.flat.reshape(buffer.spec.shape) if buffer.spec.shape else buffer.flat
            if buffer.spec.dtype == "f16":
                import numpy as np

                shaped = shaped.view(np.float16)
            return shaped
        from fusec.runtime.dtypes import numpy_dtype

        host = buffer.flat.copy_to_host(stream=stream.numba)
        return host.view(numpy_dtype(buffer.spec.dtype)).reshape(buffer.spec.shape)


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "torch"


def _torch_buffer(t: Any, spec: TensorSpec) -> _Buffer:
    """A buffer over a contiguous torch tensor of ``spec``'s shape and element type."""

    def view() -> Any:
        import torch

        flat = t.reshape(-1).view(torch.float32 if spec.dtype == "f32" else torch.int16)
        return numba_cuda().as_cuda_array(flat, sync=False)

    return _Buffer(t, spec, ptr=t.data_ptr(), view=view)


def _size(spec: TensorSpec) -> int:
    return math.prod(spec.shape)


def _check_shape(obj: Any, spec: TensorSpec, index: int, fn_name: str) -> None:
    shape = tuple(int(d) for d in getattr(obj, "shape", ()))
    if not hasattr(obj, "shape"):
        import numpy as np

        shape = np.shape(obj)
    if shape != spec.shape:
        raise FusecError(
            f"@{fn_name}: argument #{index} has shape {shape}, expected {spec.shape} ({spec})"
        )


def _check_dtype(ok: bool, got: Any, spec: TensorSpec, index: int, fn_name: str) -> None:
    if not ok:
        raise FusecError(f"@{fn_name}: argument #{index} has dtype {got}, expected {spec}")


_own: list[Any] = []


def _own_stream() -> Any:
    """fusec's stream for numpy/numba inputs (non-default, so other work is not serialised)."""
    if not _own:
        _own.append(numba_cuda().stream())
    return _own[0]


# ------------------------------------------------------------------ programs


class CudaBackend:
    """The ``cuda`` target of ``fusec.runtime.launch.Program``: Numba CUDA kernels."""

    target = "cuda"

    def __init__(self, cache: Any = None) -> None:
        from fusec.runtime.cache import default_cache

        require_cuda_compiler("target 'cuda' is not usable")
        if not simulator_enabled() and not gpu_available():
            raise FusecError("target 'cuda' needs an NVIDIA GPU, and none is usable here")
        self.cache = cache if cache is not None else default_cache()
        self.sms = sm_count()

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        module = load_kernel_module(kernel, self.cache)
        if getattr(module, "TORCH_FALLBACK", False):
            return TorchGroup(module, kernel)
        if not simulator_enabled() and hasattr(module, "launch_raw"):
            return _RawLaunch(module, self.sms)
        if simulator_enabled() or len(getattr(module, "KERNELS", ())) != 1:
            return getattr(module, kernel.entry)
        return _DirectLaunch(module, self.sms)

    def run(self, launch: Any, fn: Callable[..., Any], inputs: list, alloc: Any) -> list:
        """Numpy in, numpy out (the generic ``Program`` path; ``CudaProgram`` keeps data on
        the device between launches instead)."""
        adapter = _Adapter("host", None)
        stream = adapter.stream(None)
        specs = launch.kernel.inputs
        bufs = [
            adapter.wrap(a, spec, stream, k, "group")
            for k, (a, spec) in enumerate(zip(inputs, specs, strict=True))
        ]
        outs = [adapter.empty(spec, stream) for spec in launch.kernel.outputs]
        fn(*(b.flat for b in bufs), *(o.flat for o in outs), stream=stream.numba, sms=self.sms)
        results = [adapter.result(o, stream) for o in outs]
        stream.synchronize()
        return results

    def to_host(self, value: Any) -> Any:
        import numpy as np

        return np.asarray(value)


class TorchGroup:
    """A conv/matmul group that runs through PyTorch (``fusec.targets.cuda.torch_fallback``).

    Called with torch tensors of the group's operand types, on torch's current
    stream (the caller arranges that it is the call's stream); returns
    PyTorch's result tensors, checked against the group's result types.
    """

    def __init__(self, module: ModuleType, kernel: KernelSource) -> None:
        from fusec.extras import require

        require(
            "gpu",
            "conv/matmul groups on the cuda target run through PyTorch until their Tensor "
            "Core templates exist; this",
        )
        import torch

        self.torch = torch
        self.run = module.run
        self.outputs = kernel.outputs
        self.name = kernel.name
        self.dtypes = [getattr(torch, _TORCH_DTYPES[spec.dtype]) for spec in kernel.outputs]

    def __call__(self, tensors: list[Any]) -> list[Any]:
        results = list(self.run(self.torch, *tensors))
        for k, (t, spec, dtype) in enumerate(zip(results, self.outputs, self.dtypes, strict=True)):
            if tuple(t.shape) != spec.shape or t.dtype != dtype:  # a code generator bug
                raise FusecError(
                    f"kernel {self.name}: result #{k} is {tuple(t.shape)} {t.dtype}, "
                    f"expected {spec}"
                )
            if not t.is_contiguous():
                results[k] = t.contiguous()
        return results


class _DirectLaunch:
    """Launch a generated module's one kernel straight through the driver.

    Same effect as the module's ``launch`` (same kernel, grid and stream), but
    without building numba device arrays or re-dispatching on argument types
    per call. The kernel's parameters follow Numba's array ABI (meminfo,
    parent, nitems, itemsize, data, shape, strides: seven 64-bit values per
    flat array); shapes are static, so a call only writes the data addresses
    into a prepared parameter block and makes one ``cuLaunchKernel`` call.
    """

    def __init__(self, module: ModuleType, sms: int) -> None:
        import ctypes
        import threading

        from cuda.bindings import driver as drv

        self.module = module
        self.drv = drv
        ((dispatcher, _signature),) = module.KERNELS
        overload = next(iter(dispatcher.overloads.values()))
        handle = overload._codelibrary.get_cufunc().handle
        self.function = drv.CUfunction(int(handle))
        self.blocks, self.threads = module.config(sms)
        self.count = len(overload.argument_types)
        self.values = (ctypes.c_int64 * (7 * self.count))()
        base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_void_p * (7 * self.count))(
            *(base + 8 * k for k in range(7 * self.count))
        )
        self.params = ctypes.addressof(self.pointers)
        self.lock = threading.Lock()
        self.streams: dict[int, Any] = {}
        self.sized = False

    def __call__(self, *arrays: Any, stream: Any = 0, sms: int = 0) -> None:
        """``arrays``: inputs then outputs, numba device arrays (the module's own order)."""
        self.module.launch(*arrays, stream=stream, sms=sms)

    def direct(self, stream: int, inputs: list[_Buffer], outputs: list[_Buffer]) -> None:
        """Launch on the raw stream handle ``stream`` with the buffers' addresses."""
        buffers = (*outputs, *inputs)  # kernel parameter order: outputs first
        if len(buffers) != self.count:
            raise FusecError(f"kernel takes {self.count} arrays, got {len(buffers)}")
        handle = self.streams.get(stream)
        if handle is None:
            handle = self.streams[stream] = self.drv.CUstream(stream)
        values = self.values
        with self.lock:
            if not self.sized:  # shapes are static: sizes are written once
                for k, buf in enumerate(buffers):
                    size = 4 if buf.spec.dtype == "f32" else 2
                    values[7 * k + 2] = values[7 * k + 5] = buf.n
                    values[7 * k + 3] = values[7 * k + 6] = size
                self.sized = True
            for k, buf in enumerate(buffers):
                values[7 * k + 4] = buf.ptr
            (err,) = self.drv.cuLaunchKernel(
                self.function, self.blocks, 1, 1, self.threads, 1, 1, 0, handle, self.params, 0
            )
        if int(err) != 0:
            raise FusecError(f"CUDA kernel launch failed: {err}")


class _RawLaunch:
    """A module that launches its own kernels from raw device addresses (``launch_raw``:
    the linked-cubin templates), so a call builds no numba device arrays."""

    def __init__(self, module: ModuleType, sms: int) -> None:
        self.module = module
        self.sms = sms

    def __call__(self, *arrays: Any, stream: Any = 0, sms: int = 0) -> None:
        self.module.launch(*arrays, stream=stream, sms=sms or self.sms)

    def direct(self, stream: int, inputs: list[_Buffer], outputs: list[_Buffer]) -> None:
        self.module.launch_raw(stream, [b.ptr for b in inputs], [b.ptr for b in outputs], self.sms)


def _program_base():
    from fusec.runtime.launch import Program

    return Program


class CudaProgram(_program_base()):  # type: ignore[misc]
    """A compiled function on the GPU: its launches, in order, on one stream.

    Arguments may be numpy arrays (copied in; results copied back, the only
    synchronisation), torch or cupy tensors, or any ``__cuda_array_interface__``
    / DLPack object (used in place; results of the same kind, on the caller's
    current stream, no synchronisation). Intermediate tensors between groups
    stay on the device.
    """

    #: ``CompiledModule(..., stream=s)`` queues the work on ``s``.
    takes_stream = True

    def __init__(
        self, module: Any, entry: str | None = None, target: str = "cuda", cache: Any = None
    ) -> None:
        super().__init__(module, entry, "cuda", cache)
        self._specs = [spec_of(p) for p in self.function.function_type.inputs.data]
        self._name = self.function.sym_name.data
        self._constants: dict[int, _Buffer] = {}
        self._keep: list | None = None  # set while capturing: every buffer stays alive
        self._plan_slots()

    def _plan_slots(self) -> None:
        """Number every value once, so that a call indexes a list (no IR objects)."""
        slot = {arg: k for k, arg in enumerate(self.function.body.block.args)}
        self._constant_slots = []
        for value in self.constants:
            slot[value] = len(slot)
            self._constant_slots.append((slot[value], self.constants[value]))
        self._steps = []
        for launch in self.launches:
            ins = [slot[v] for v in launch.operands]
            outs = []
            for value in launch.results:
                slot[value] = len(slot)
                outs.append(slot[value])
            self._steps.append((ins, outs, launch.kernel.outputs, launch.label))
        self._return_slots = [slot[v] for v in self.returns]
        self._slot_count = len(slot)

    def __call__(
        self, args: Sequence[Any], *, alloc: Any = None, stream: Any = None, poison: bool = False
    ) -> tuple:
        """Run on ``args``; ``poison`` (or any ``alloc``, as tests pass) fills every output
        with NaN first, so that an element no kernel writes shows up."""
        poison = poison or alloc is not None
        if len(args) != len(self._specs):
            raise FusecError(f"@{self._name} takes {len(self._specs)} argument(s), got {len(args)}")
        families = [_family(a) for a in args]
        if "dlpack" in families:
            pairs = zip(args, families, strict=True)
            args = [_from_dlpack(a) if f == "dlpack" else a for a, f in pairs]
            families = [_family(a) for a in args]
        first = next((k for k, f in enumerate(families) if f != "host"), None)
        adapter = _adapter_for(
            "host" if first is None else families[first], None if first is None else args[first]
        )
        stream_ref = adapter.stream(stream)
        fns = self._fns if self._fns is not None else self.load()  # compiled on first use
        if adapter.family == "torch" or self._torch_groups:  # torch work: on the call's stream
            with adapter.torch_context(stream_ref):
                return self._run(args, adapter, stream_ref, fns, poison)
        return self._run(args, adapter, stream_ref, fns, poison)

    @property
    def _torch_groups(self) -> bool:
        return any(isinstance(fn, TorchGroup) for fn in self._fns or ())

    def _run(
        self, args: Sequence[Any], adapter: _Adapter, stream_ref: StreamRef, fns: list, poison: bool
    ) -> tuple:
        values: list[Any] = [None] * self._slot_count
        for index, arg in enumerate(args):
            values[index] = adapter.wrap(arg, self._specs[index], stream_ref, index, self._name)
        for index, buffer in self._device_constants(stream_ref).items():
            values[index] = buffer
        for fn, (ins, outs, out_specs, label) in zip(fns, self._steps, strict=True):
            inputs = [values[k] for k in ins]
            with nvtx_range(label):
                if isinstance(fn, TorchGroup):
                    results = fn([adapter.as_torch(b) for b in inputs])
                    pairs = zip(results, out_specs, strict=True)
                    outputs = [_torch_buffer(t, spec) for t, spec in pairs]
                else:
                    outputs = self._launch(fn, adapter, stream_ref, inputs, out_specs, poison)
            for k, out in zip(outs, outputs, strict=True):
                values[k] = out
        if self._keep is not None:
            self._keep.extend(v for v in values if v is not None)
        results = tuple(adapter.result(values[k], stream_ref) for k in self._return_slots)
        if adapter.family == "host":
            stream_ref.synchronize()
        return results

    def _launch(
        self, fn: Any, adapter: _Adapter, stream: StreamRef, inputs: list, specs, poison: bool
    ) -> list[_Buffer]:
        """One Numba kernel group: outputs allocated (poisoned on request), one launch."""
        outputs = [adapter.empty(spec, stream) for spec in specs]
        if poison:
            for out in outputs:
                _fill_nan(out, stream)
        if isinstance(fn, (_DirectLaunch, _RawLaunch)):
            fn.direct(stream.ptr, inputs, outputs)
        else:
            fn(
                *(b.flat for b in inputs),
                *(o.flat for o in outputs),
                stream=stream.numba,
                sms=self.backend.sms,
            )
        return outputs

    def _device_constants(self, stream: StreamRef) -> dict[int, _Buffer]:
        """The module's arith.constant tensors, uploaded once (slot -> buffer).

        Later calls may run on other streams, so the upload is waited for once.
        """
        if not self._constants and self._constant_slots:
            host = _Adapter("host", None)
            from fusec.runtime.dtypes import element_type_of

            for index, array in self._constant_slots:
                spec = TensorSpec(tuple(array.shape), element_type_of(array.dtype) or "f32")
                self._constants[index] = host.wrap(array, spec, stream, 0, "constant")
            stream.synchronize()
        return self._constants

    def capture(self, *args: Any, stream: Any = None) -> CudaGraph:
        """Record one call on ``args`` as a CUDA graph (see ``CudaGraph``)."""
        return CudaGraph(self, args, stream)


_NAN_BITS = {"f16": 0x7E00, "bf16": 0x7FC0}


def _fill_nan(buffer: _Buffer, stream: Any) -> None:
    import numpy as np

    n = buffer.flat.shape[0]
    if buffer.spec.dtype == "f32":
        host = np.full(n, np.nan, dtype=np.float32)
    else:
        host = np.full(n, _NAN_BITS[buffer.spec.dtype], dtype=np.int16)
    buffer.flat.copy_to_device(host, stream=stream.numba)


_adapters: dict[Any, _Adapter] = {}


def _adapter_for(family: str, example: Any) -> _Adapter:
    """One adapter per family (and torch device), reused across calls."""
    key = (family, getattr(example, "device", None) if family == "torch" else None)
    adapter = _adapters.get(key)
    if adapter is None:
        adapter = _adapters[key] = _Adapter(family, example)
    return adapter


def _from_dlpack(obj: Any) -> Any:
    try:
        import torch

        return torch.from_dlpack(obj)
    except ImportError:
        import cupy

        return cupy.from_dlpack(obj)


class CudaGraph:
    """A captured call: replaying it relaunches every kernel with one graph launch.

    The inputs given at capture are the graph's (static) inputs: write new data
    into them (``graph.inputs[k][...] = ...``) and ``replay()``; the results
    are ``graph.outputs``, overwritten by each replay. Everything is recorded
    on a stream of its own, after one warm-up call that compiles and loads.
    """

    def __init__(self, program: CudaProgram, args: Sequence[Any], stream: Any = None) -> None:
        from cuda.bindings import driver as drv

        self.drv = drv
        cuda = numba_cuda()
        device_args = [_device_copy(a) for a in args]
        self.inputs = device_args
        program(device_args, stream=stream)  # warm-up: module load outside the capture
        if program._torch_groups:
            raise FusecError(
                "CUDA graph capture of conv/matmul groups that run through PyTorch is not "
                "supported (their Tensor Core templates will be capturable)"
            )
        capture_stream = cuda.stream()
        cuda.synchronize()
        handle = drv.CUstream(stream_ptr(capture_stream))
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        _check(drv.cuStreamBeginCapture(handle, mode))
        program._keep = self.buffers = []  # intermediates must outlive the capture
        # torch allocations stay on torch's current stream, outside the capture: the
        # buffers are kept alive above, and the kernels are what is recorded
        capture = StreamRef(stream_ptr(capture_stream), capture_stream, current=True)
        try:
            outputs = program(device_args, stream=capture)
        except BaseException:
            drv.cuStreamEndCapture(handle)
            raise
        finally:
            program._keep = None
        graph = _check(drv.cuStreamEndCapture(handle))
        self.graph_exec = _check(drv.cuGraphInstantiate(graph, 0))
        self.graph = graph
        self.outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        self.stream = capture_stream

    def replay(self, stream: Any = None) -> tuple:
        """Launch the graph on ``stream`` (default: its capture stream); no synchronisation."""
        target = self.stream if stream is None else stream
        handle = self.drv.CUstream(explicit_handle(target))
        _check(self.drv.cuGraphLaunch(self.graph_exec, handle))
        return self.outputs


def _device_copy(arg: Any) -> Any:
    """A device-resident argument for graph capture: numpy arrays are uploaded (as their
    storage: float32, or the raw bits of 16-bit floats)."""
    if _family(arg) != "host":
        return arg
    import numpy as np

    host = np.ascontiguousarray(arg)
    storage = np.float32 if host.dtype == np.float32 else np.int16
    return numba_cuda().to_device(host.view(storage))


def _check(result: Any) -> Any:
    """Unwrap a cuda-python ``(CUresult, value...)`` tuple, raising on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise FusecError(f"CUDA driver error {int(err)} ({err})")
    return values[0] if len(values) == 1 else tuple(values) if values else None
