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
    epilogue's extra inputs. The cubin is built (or read from the cache) on the first call."""

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

    def load(self) -> host.GemmKernel:
        with self.lock:
            if self.kernel is None:
                from fusec.targets.cuda.gemm import build

                self.kernel = host.GemmKernel(self.spec, build.build(self.spec).cubin)
            return self.kernel

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0, sms: int = 132) -> None:
        from fusec.targets.cuda.streams import stream_ptr

        kernel = self.kernel or self.load()
        a_index, a_rows, a_cols, a_batch = self.a
        b_index, b_rows, b_cols, b_batch = self.b
        op_a = host.Operand(_address(inputs[a_index]), a_rows, a_cols, a_batch)
        op_b = host.Operand(_address(inputs[b_index]), b_rows, b_cols, b_batch)
        extras = tuple(_address(inputs[i]) for i in self.extras)
        kernel(
            op_a,
            op_b,
            _address(output),
            extras,
            self.m,
            self.n,
            self.k,
            self.batches,
            stream_ptr(stream),
            sms,
        )
