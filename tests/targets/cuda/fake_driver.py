"""A recording stand-in for ``cuda.bindings.driver``: the GEMM host code without a GPU.

Every call is appended to ``calls`` as (name, args) and succeeds; handles and
addresses are fresh integers. Tests use it to check which driver calls a
launch makes (none synchronous, one ``cuLaunchKernel`` per cached call), and
``benchmarks/gemm_host_path.py`` to time fusec's own Python per call.
"""

from __future__ import annotations

import itertools
from enum import IntEnum
from types import SimpleNamespace
from typing import Any


class _Enum(IntEnum):
    CU_EVENT_DISABLE_TIMING = 2
    CU_STREAM_CAPTURE_STATUS_NONE = 0
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    CU_MEMORYTYPE_DEVICE = 2


class _Map:
    def __init__(self, key: tuple) -> None:
        self.opaque = [hash(key) & 0xFFFF] * 16


class _Memcpy2D(SimpleNamespace):
    pass


class FakeDriver:
    """Records calls; ``pending`` events report CUDA_ERROR_NOT_READY (600) when queried."""

    CUevent_flags = _Enum
    CUstreamCaptureStatus = _Enum
    CUfunction_attribute = _Enum
    CUmemorytype = _Enum
    CUtensorMapDataType = SimpleNamespace(
        CU_TENSOR_MAP_DATA_TYPE_FLOAT16=6,
        CU_TENSOR_MAP_DATA_TYPE_FLOAT32=7,
        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16=9,
    )
    CUtensorMapInterleave = SimpleNamespace(CU_TENSOR_MAP_INTERLEAVE_NONE=0)
    CUtensorMapSwizzle = SimpleNamespace(CU_TENSOR_MAP_SWIZZLE_128B=3)
    CUtensorMapL2promotion = SimpleNamespace(CU_TENSOR_MAP_L2_PROMOTION_L2_256B=3)
    CUtensorMapFloatOOBfill = SimpleNamespace(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE=0)

    def __init__(self, record: bool = True) -> None:
        self.record = record
        self.capturing: set[int] = set()  # streams a graph capture is recording
        self.calls: list[tuple[str, tuple]] = []
        self.ids = itertools.count(0x1000, 0x1000)
        self.pending: set[int] = set()
        self.host: list[Any] = []  # keeps fake pinned buffers alive

    # value types
    def CUstream(self, handle: int) -> int:  # noqa: N802 - the driver's name
        return int(handle)

    def CUdeviceptr(self, value: int) -> int:  # noqa: N802
        return int(value)

    def cuuint64_t(self, value: int) -> int:
        return int(value)

    def cuuint32_t(self, value: int) -> int:
        return int(value)

    def CUDA_MEMCPY2D(self) -> _Memcpy2D:  # noqa: N802
        return _Memcpy2D()

    def _log(self, name: str, args: tuple) -> None:
        if self.record:
            self.calls.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args: Any) -> tuple:
            self._log(name, args)
            return (0,)

        return call

    # calls that return values
    def cuMemAlloc(self, size: int) -> tuple:  # noqa: N802
        self._log("cuMemAlloc", (size,))
        return (0, next(self.ids))

    def cuMemHostAlloc(self, size: int, flags: int) -> tuple:  # noqa: N802
        import ctypes

        buffer = (ctypes.c_char * size)()
        self.host.append(buffer)
        self._log("cuMemHostAlloc", (size, flags))
        return (0, ctypes.addressof(buffer))

    def cuEventCreate(self, flags: int) -> tuple:  # noqa: N802
        event = next(self.ids)
        self._log("cuEventCreate", (flags,))
        return (0, event)

    def cuEventQuery(self, event: int) -> tuple:  # noqa: N802
        self._log("cuEventQuery", (event,))
        return (600 if event in self.pending else 0,)

    def cuStreamCreate(self, flags: int) -> tuple:  # noqa: N802
        stream = next(self.ids)
        self._log("cuStreamCreate", (flags,))
        return (0, stream)

    def cuStreamIsCapturing(self, stream: int) -> tuple:  # noqa: N802
        self._log("cuStreamIsCapturing", (stream,))
        return (0, 1 if int(stream) in self.capturing else 0)

    def cuTensorMapEncodeTiled(self, *args: Any) -> tuple:  # noqa: N802
        self._log("cuTensorMapEncodeTiled", args)
        return (0, _Map(tuple(map(str, args))))

    def cuModuleLoadData(self, image: bytes) -> tuple:  # noqa: N802
        self._log("cuModuleLoadData", ())
        return (0, next(self.ids))

    def cuModuleGetFunctionCount(self, module: int) -> tuple:  # noqa: N802
        return (0, 1)

    def cuModuleEnumerateFunctions(self, count: int, module: int) -> tuple:  # noqa: N802
        return (0, [next(self.ids)])

    def cuLaunchKernel(self, *args: Any) -> tuple:  # noqa: N802
        self._log("cuLaunchKernel", args)
        return (0,)
