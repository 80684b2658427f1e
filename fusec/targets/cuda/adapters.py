"""Arguments and results of a CUDA program: numpy arrays (copied), torch and cupy
tensors, ``__cuda_array_interface__`` and DLPack objects (used in place), each
wrapped as a device buffer with its stream; results come back as the same kind."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

from fusec.dialect.shapes import TensorSpec
from fusec.errors import FusecError
from fusec.ir.dtypes import ELEMENT_TYPES, INT4_TYPES
from fusec.targets.cuda.env import numba_cuda, simulator_enabled
from fusec.targets.cuda.streams import (
    LEGACY,
    StreamRef,
    current_torch_ref,
    explicit_handle,
    stream_ptr,
    stream_ref,
    wait_for,
)

#: The torch dtype of each element type's tensors; 4-bit integers are a byte each, as on
#: the device (torch's int4/uint4 hold no usable tensors: a caller passes int8/uint8).
TORCH_DTYPES = {
    name: t.storage if name in ("i4", "ui4") else t.torch for name, t in ELEMENT_TYPES.items()
}
_NO_CONTEXT = contextlib.nullcontext()  # reusable: nothing to enter


def _family_of_stream(stream: Any) -> str:
    module = type(stream).__module__.split(".")[0]
    return "torch" if module == "torch" and hasattr(stream, "cuda_stream") else module


#: type -> its library, for the types whose library alone decides (per-call fast path)
_LIBRARY_OF_TYPE: dict[type, str] = {}


def _family(obj: Any) -> str:
    """Which library an argument comes from: torch, cupy, numba, cai, dlpack or host."""
    library = _LIBRARY_OF_TYPE.get(type(obj))
    if library == "torch":
        return "torch" if obj.is_cuda else "host"
    if library is not None:
        return library
    module = type(obj).__module__.split(".")[0]
    if module == "torch" and hasattr(obj, "is_cuda"):
        _LIBRARY_OF_TYPE[type(obj)] = "torch"
        return "torch" if obj.is_cuda else "host"
    if module == "cupy":
        _LIBRARY_OF_TYPE[type(obj)] = "cupy"
        return "cupy"
    if module == "numba" and hasattr(obj, "__cuda_array_interface__"):
        _LIBRARY_OF_TYPE[type(obj)] = "numba"
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

    __slots__ = ("user", "ptr", "spec", "_flat", "_view")

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

    @property
    def n(self) -> int:
        """Element count."""
        return math.prod(self.spec.shape)

    def reshaped(self, spec: TensorSpec) -> _Buffer:
        """The same storage under another shape (a reshape: no copy)."""
        user = None if self.user is None else self.user.reshape(spec.shape)
        return _Buffer(user, spec, flat=self._flat, ptr=self.ptr, view=self._view)

    @property
    def flat(self) -> Any:
        """The flat numba device array of the storage (for copies and the slow path)."""
        if self._flat is None:
            self._flat = self._view() if self._view is not None else _torch_view(self)
        return self._flat


def _storage_np(dtype: str):
    """The numpy dtype kernels store ``dtype`` as: 16-bit floats as their int16 bits,
    bools as uint8, the others as themselves (``ElementType.storage``)."""
    import numpy as np

    return np.dtype(ELEMENT_TYPES[dtype].storage)


def host_storage(array: Any, dtype: str) -> Any:
    """The numpy ``array`` of element type ``dtype`` as kernels store it, contiguous, in
    its shape: 16-bit floats as their int16 bits, float8 as uint8 bits, bools as uint8,
    4-bit codes by value (a byte each, not ml_dtypes' bits), the others as themselves."""
    import numpy as np

    host = np.ascontiguousarray(array)
    if dtype in INT4_TYPES:
        return host.astype(_storage_np(dtype))
    return host.view(_storage_np(dtype))


class _Adapter:
    """Moves one call's tensors of one family (torch, cupy, numba/CAI, host) to and from
    the kernels' flat views, without copies for device tensors that are already
    contiguous and 16-byte aligned."""

    def __init__(self, family: str, example: Any) -> None:
        self.family = family
        self.cuda = numba_cuda()
        self.simulated = simulator_enabled()  # read once, as Numba does at its import
        if family == "torch":
            import torch

            self.torch = torch
            self.device = example.device
            self.torch_dtypes = {k: getattr(torch, v) for k, v in TORCH_DTYPES.items()}
        elif family == "cupy":
            import cupy

            self.cupy = cupy

    # ------------------------------------------------------------ streams
    def stream(self, explicit: Any) -> StreamRef:
        """The stream to launch on: ``explicit``, else the caller's current one
        (see ``fusec.targets.cuda.streams``)."""
        if self.simulated:  # one stream, handle 0, in the simulator
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
        if stream.current:
            return _NO_CONTEXT
        import torch

        device = self.device if self.family == "torch" else None
        return torch.cuda.stream(stream.torch_stream(torch, device))

    # ------------------------------------------------------------- inputs
    def wrap(self, obj: Any, spec: TensorSpec, stream: Any, index: int, fn_name: str) -> _Buffer:
        if self.family == "torch":  # the per-call path of torch callers: no imports, no copies
            if obj.shape != spec.shape:  # (torch.Size is a tuple)
                _check_shape(obj, spec, index, fn_name)
            if obj.dtype != self.torch_dtypes[spec.dtype]:
                _check_dtype(False, obj.dtype, spec, index, fn_name)
            ptr = obj.data_ptr()
            if not obj.is_contiguous() or ptr % 16:
                obj = obj.clone(memory_format=self.torch.contiguous_format)
                ptr = obj.data_ptr()
            return _Buffer(obj, spec, ptr=ptr)
        import numpy as np

        from fusec.ir.dtypes import numpy_dtype

        cuda = self.cuda
        _check_shape(obj, spec, index, fn_name)
        if self.family == "cupy":
            cp = self.cupy
            want = np.dtype(np.float16) if spec.dtype == "bf16" else numpy_dtype(spec.dtype)
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
        flat = host_storage(host, spec.dtype).reshape(-1)
        return _Buffer(None, spec, flat=cuda.to_device(flat, stream=stream.numba))

    def as_torch(self, buffer: _Buffer) -> Any:
        """A torch tensor (no copy) of ``buffer`` with its spec's shape and element type."""
        if _is_torch(buffer.user):
            return buffer.user
        import torch

        flat = torch.as_tensor(buffer.flat, device="cuda")
        if buffer.spec.dtype != "f32":
            flat = flat.view(getattr(torch, TORCH_DTYPES[buffer.spec.dtype]))
        return flat.view(buffer.spec.shape)

    # ------------------------------------------------------------ outputs
    def empty(self, spec: TensorSpec, stream: Any) -> _Buffer:
        if self.family == "torch":
            dtype = self.torch_dtypes[spec.dtype]
            t = self.torch.empty(spec.shape, dtype=dtype, device=self.device)
            return _Buffer(t, spec, ptr=t.data_ptr())
        cuda = self.cuda
        if self.family == "cupy":
            cp = self.cupy
            a = cp.empty(spec.shape, dtype=_cupy_dtype(spec.dtype))
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
            dtype = _cupy_dtype(buffer.spec.dtype)
            return cp.asarray(buffer.flat).view(dtype).reshape(buffer.spec.shape)
        if self.family in ("numba", "cai", "dlpack"):
            shaped = buffer.flat.reshape(buffer.spec.shape) if buffer.spec.shape else buffer.flat
            if buffer.spec.dtype == "f16":
                import numpy as np

                shaped = shaped.view(np.float16)
            return shaped
        from fusec.ir.dtypes import numpy_dtype

        host = buffer.flat.copy_to_host(stream=stream.numba)
        return host.view(numpy_dtype(buffer.spec.dtype)).reshape(buffer.spec.shape)


def _cupy_dtype(dtype: str) -> Any:
    """The dtype of a cupy array of element type ``dtype`` (bf16: its int16 bits)."""
    import numpy as np

    from fusec.ir.dtypes import numpy_dtype

    return np.dtype(np.int16) if dtype == "bf16" else numpy_dtype(dtype)


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "torch"


def _torch_buffer(t: Any, spec: TensorSpec) -> _Buffer:
    """A buffer over a contiguous torch tensor of ``spec``'s shape and element type."""
    return _Buffer(t, spec, ptr=t.data_ptr())


def _torch_view(buffer: _Buffer) -> Any:
    """The flat numba view of a torch buffer's storage (made only when needed)."""
    import torch

    flat = buffer.user.reshape(-1)
    flat = flat.view(getattr(torch, str(_storage_np(buffer.spec.dtype))))
    return numba_cuda().as_cuda_array(flat, sync=False)


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


_NAN_BITS = {name: t.nan_bits for name, t in ELEMENT_TYPES.items()}


def _fill_nan(buffer: _Buffer, stream: Any) -> None:
    import numpy as np

    n = buffer.flat.shape[0]
    if buffer.spec.dtype == "f32":
        host = np.full(n, np.nan, dtype=np.float32)
    else:  # 16-bit NaN bits, or an integer's poison value (ElementType.nan_bits)
        storage = _storage_np(buffer.spec.dtype)
        bits = _NAN_BITS[buffer.spec.dtype]
        host = np.full(n, bits, dtype=storage.str.replace("i", "u")).view(storage)
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


def _device_copy(arg: Any) -> Any:
    """A device-resident argument for graph capture: numpy arrays are uploaded as the
    kernels store their element type (``host_storage``), in their shape."""
    if _family(arg) != "host" or simulator_enabled():  # (simulated arrays are host ones)
        return arg
    from fusec.ir.dtypes import element_type_of

    dtype = element_type_of(arg.dtype, floats_only=False)
    if dtype is None:
        raise FusecError(f"an argument of numpy dtype {arg.dtype} has no fusec element type")
    return numba_cuda().to_device(host_storage(arg, dtype))


def _check(result: Any) -> Any:
    """Unwrap a cuda-python ``(CUresult, value...)`` tuple, raising on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise FusecError(f"CUDA driver error {int(err)} ({err})")
    return values[0] if len(values) == 1 else tuple(values) if values else None
