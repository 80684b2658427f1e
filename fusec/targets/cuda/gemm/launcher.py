"""``GemmLaunch``: what a generated matmul kernel module calls (build once, then launch)."""

from __future__ import annotations

import threading
from typing import Any

from fusec.targets.cuda.gemm import cpp, host


def _address(array: Any) -> int:
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError("the GEMM kernel takes device arrays")
    return int(interface["data"][0])


class GemmLaunch:
    """One GEMM group: its spec, problem sizes and which group inputs are A, B and the
    epilogue's extra inputs. The cubin is built (or read from the cache) on the first call.

    The runtime calls ``direct`` with raw addresses (no array objects are made per
    call); ``__call__`` takes device arrays (the module's ``launch``, for other callers).
    """

    def __init__(
        self,
        spec: cpp.GemmSpec,
        *,
        a: tuple[int, int, int, int],
        b: tuple[int, int, int, int],
        extras: tuple[int, ...],
        m: int,
        n: int,
        k: int,
        batches: int,
    ) -> None:
        self.spec = spec
        self.a, self.b, self.extras = a, b, extras  # (input index, rows, cols, batch)
        self.m, self.n, self.k, self.batches = m, n, k, batches
        self.kernel: host.GemmKernel | None = None
        self.lock = threading.Lock()
        self.sms = 132
        #: (stream, input addresses, output address) -> prepared launch: the per-call path
        self.prepared: dict[tuple, host.Prepared] = {}

    def load(self, sms: int | None = None) -> host.GemmKernel:
        """Build (or read from the cache) and load the cubin; ``sms`` sizes the grid."""
        with self.lock:
            if sms is not None:
                self.sms = sms
            if self.kernel is None:
                from fusec.targets.cuda.gemm import build

                self.kernel = host.GemmKernel(self.spec, build.build(self.spec).cubin)
            return self.kernel

    def direct(self, stream: int, inputs: list, outputs: list) -> None:
        """Launch on the raw stream handle ``stream``; ``inputs``/``outputs`` have ``.ptr``."""
        key = (stream, outputs[0].ptr, *[b.ptr for b in inputs])
        prepared = self.prepared.get(key)
        if prepared is None or prepared.generation != host.maps_generation():
            prepared = self._prepare(key)
        if prepared is not None:  # None: an empty problem, nothing to launch
            self.kernel.launch(prepared)

    def _prepare(self, key: tuple) -> host.Prepared | None:
        kernel = self.kernel or self.load()
        if self.m <= 0 or self.n <= 0 or self.batches <= 0:
            return None
        stream, out, *addresses = key
        a, b, extras = self._operands(addresses)
        prepared = kernel.prepare(
            stream, a, b, out, extras, self.m, self.n, self.k, self.batches, self.sms
        )
        if len(self.prepared) >= 64:
            self.prepared.clear()
        self.prepared[key] = prepared
        return prepared

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0, sms: int = 132) -> None:
        from fusec.runtime.cuda import stream_ptr

        kernel = self.kernel or self.load()
        addresses = [_address(x) for x in inputs]
        self._launch(kernel, addresses, _address(output), stream_ptr(stream), sms)

    def _operands(self, addresses: list[int]) -> tuple[host.Operand, host.Operand, tuple]:
        a_index, a_rows, a_cols, a_batch = self.a
        b_index, b_rows, b_cols, b_batch = self.b
        return (
            host.Operand(addresses[a_index], a_rows, a_cols, a_batch),
            host.Operand(addresses[b_index], b_rows, b_cols, b_batch),
            tuple(addresses[i] for i in self.extras),
        )

    def _launch(self, kernel: host.GemmKernel, addresses: list[int], out: int, stream, sms):
        a, b, extras = self._operands(addresses)
        kernel(a, b, out, extras, self.m, self.n, self.k, self.batches, stream, sms)
