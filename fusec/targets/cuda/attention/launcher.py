"""``AttentionLaunch``: what a generated attention module calls (build once, then launch).

Per call, on the caller's stream: the Q, K and V tensor maps (cached by
address; 3-D ``[head size, length, batch]`` with 64 x 128 boxes and the
128-byte swizzle) and one launch of ``batch x ceil(Sq / 128)`` blocks.
"""

from __future__ import annotations

import ctypes
from typing import Any

from fusec.targets.cuda.attention.cpp import BM, BN, AttentionSpec
from fusec.targets.cuda.linked import LinkedLaunch


class AttentionLaunch(LinkedLaunch):
    """One attention group: its spec and which group inputs are q, k and v."""

    what = "attention"

    def __init__(self, spec: AttentionSpec, inputs: dict[str, int]) -> None:
        super().__init__(spec)
        self.inputs = inputs

    def make_kernel(self, cubin: bytes) -> Any:
        from fusec.targets.cuda.tensormaps import LinkedKernel

        return LinkedKernel(cubin, self.spec.smem_bytes)

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        """Queue the kernel on the raw stream handle ``stream`` with raw device addresses."""
        from fusec.targets.cuda.tensormaps import tensor_map_nd as tensor_map

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
