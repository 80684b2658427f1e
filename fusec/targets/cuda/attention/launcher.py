"""``AttentionLaunch``: what a generated attention module calls (build once, then launch).

Per call, on the caller's stream: the Q, K and V tensor maps (cached by
address; 3-D ``[head size, length, batch]`` with 64 x 128 boxes and the
128-byte swizzle) and one launch of ``batch x ceil(Sq / 128)`` blocks.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from fusec.targets.cuda.attention.cpp import BM, BN, AttentionSpec


def _address(array: Any) -> int:
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError("the attention kernel takes device arrays")
    return int(interface["data"][0])


class AttentionLaunch:
    """One attention group: its spec and which group inputs are q, k and v."""

    def __init__(self, spec: AttentionSpec, inputs: dict[str, int]) -> None:
        self.spec = spec
        self.inputs = inputs
        self.kernel: Any = None
        self.lock = threading.Lock()

    def load(self, sms: int | None = None) -> Any:
        """Build (or read from the cache) and load the cubin (the grid does not use ``sms``)."""
        with self.lock:
            if self.kernel is None:
                from fusec.targets.cuda.conv.host import LinkedKernel
                from fusec.targets.cuda.gemm import build

                self.kernel = LinkedKernel(build.build(self.spec).cubin, self.spec.smem_bytes)
            return self.kernel

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        """Queue the kernel on the raw stream handle ``stream`` with raw device addresses."""
        from fusec.targets.cuda.conv.host import tensor_map

        kernel = self.kernel or self.load()
        spec = self.spec

        def operand(role: str, rows: int, cols: int, box_rows: int) -> int:
            pitch = cols * 2
            return tensor_map(
                spec.dtype,
                inputs[self.inputs[role]],
                (cols, rows, spec.batch),
                (pitch, pitch * rows),
                (64, box_rows, 1),
                stream,
            )

        u64 = ctypes.c_uint64
        with kernel.lock:
            maps = (
                operand("q", spec.sq, spec.d, BM),
                operand("k", spec.sk, spec.d, BN),
                operand("v", spec.sk, spec.dv, BN),
            )
            args = [(u64, v) for v in (*maps, outputs[0])]
            kernel.launch(
                kernel.function,
                spec.grid,
                spec.threads,
                spec.smem_bytes,
                kernel.stream(stream),
                args,
            )

    def direct(self, stream: int, inputs: list, outputs: list) -> None:
        """The runtime's launch: ``inputs``/``outputs`` are buffers with ``.ptr``."""
        self.raw(stream, [b.ptr for b in inputs], [b.ptr for b in outputs])

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0) -> None:
        from fusec.targets.cuda.streams import explicit_handle

        self.raw(explicit_handle(stream), [_address(a) for a in inputs], [_address(output)])
