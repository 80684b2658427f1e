"""``AttentionLaunch``: what a generated attention module calls (build once, then launch).

Per call, on the caller's stream: the Q, K and V tensor maps (cached by
address; ``[head size, length, batch atoms...]``, 3-D for a contiguous operand, up to
5-D for one read in place through the group's views (``AttentionSpec.view``), with
64 x 128 boxes and the 128-byte swizzle; a mask read from memory goes by its address)
and one launch of ``batch x ceil(Sq / 128)``
blocks.
"""

from __future__ import annotations

import ctypes
from typing import Any

from fusec.targets.cuda.attention.cpp import BM, BN, AttentionSpec
from fusec.targets.cuda.linked import LinkedLaunch


def map_geometry(spec: AttentionSpec, role: str) -> tuple[int, tuple, tuple, tuple]:
    """The tensor map of ``role`` (q, k or v): (byte offset from the group input's
    address, dims and box innermost first: head size, rows, the batch atoms of nonzero
    stride; byte strides of dims 1..). A batch read with no stride is one dim of 1."""
    view = spec.view(role)
    rows, box_rows = (spec.sq, BM) if role == "q" else (spec.sk, BN)
    cols = spec.dv if role == "v" else spec.d
    atoms = view.map_atoms or ((1, rows * view.row_stride, 1),)  # a 3-D map at least
    dims = (cols, rows, *(n for n, _, _ in reversed(atoms)))
    strides = (2 * view.row_stride, *(2 * s for _, s, _ in reversed(atoms)))
    return 2 * view.offset, dims, strides, (64, box_rows, *(1 for _ in atoms))


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

        def operand(role: str) -> int:
            offset, dims, strides, box = map_geometry(spec, role)
            address = inputs[self.inputs[role]] + offset
            return tensor_map(spec.dtype, address, dims, strides, box, stream)

        u64 = ctypes.c_uint64
        # a mask read from memory: its group input's address (its offset and strides are
        # in the kernel's mask_offset)
        mask = (inputs[self.inputs["mask"]],) if spec.mask else ()
        # RoPE factors: their group inputs' addresses (offsets and strides in the kernel's
        # q_cos_offset...), cos then sin, q's then k's
        rope = tuple(
            inputs[self.inputs[f"{role}_{which}"]]
            for role in "qk"
            if role in spec.rope_views
            for which in ("cos", "sin")
        )
        with kernel.lock:
            maps = (operand("q"), operand("k"), operand("v"))
            args = [(u64, v) for v in (*maps, outputs[0], *mask, *rope)]
            kernel.launch(
                kernel.function,
                spec.grid,
                spec.threads,
                spec.smem_bytes,
                kernel.stream(stream),
                args,
            )
