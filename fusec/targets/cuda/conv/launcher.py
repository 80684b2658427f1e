"""``ConvLaunch`` and ``RelayoutLaunch``: what a generated conv or channels-last copy
module calls (build once, then launch)."""

from __future__ import annotations

import threading
from typing import Any

from fusec.targets.cuda.conv.cpp import ConvSpec, DirectConvSpec
from fusec.targets.cuda.conv.transpose import RelayoutSpec


def _address(array: Any) -> int:
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError("the conv kernel takes device arrays")
    return int(interface["data"][0])


class ConvLaunch:
    """One conv group: its spec and which group inputs are the input, the weights and the
    epilogue's extra inputs. The cubin is built (or read from the cache) on the first call."""

    def __init__(
        self, spec: ConvSpec | DirectConvSpec, *, x: int, w: int, extras: tuple[int, ...]
    ) -> None:
        self.spec = spec
        self.x, self.w, self.extras = x, w, extras
        self.kernel: Any = None
        self.sms = 132
        self.lock = threading.Lock()

    def load(self, sms: int | None = None) -> Any:
        """Build (or read from the cache) and load the cubin; ``sms`` sizes the grid."""
        with self.lock:
            if sms is not None:
                self.sms = sms
            if self.kernel is None:
                from fusec.targets.cuda.conv import host
                from fusec.targets.cuda.gemm import build

                cubin = build.build(self.spec).cubin
                if isinstance(self.spec, ConvSpec):
                    self.kernel = host.ConvKernel(self.spec, cubin)
                else:
                    self.kernel = host.DirectConvKernel(self.spec, cubin)
            return self.kernel

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        """Queue the conv on the raw stream handle ``stream`` with raw device addresses."""
        kernel = self.kernel or self.load()
        extras = tuple(inputs[i] for i in self.extras)
        kernel(inputs[self.x], inputs[self.w], outputs[0], extras, stream, self.sms)

    def direct(self, stream: int, inputs: list, outputs: list) -> None:
        """The runtime's launch: ``inputs``/``outputs`` are buffers with ``.ptr``."""
        self.raw(stream, [b.ptr for b in inputs], [b.ptr for b in outputs])

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0, sms: int = 132) -> None:
        from fusec.targets.cuda.streams import explicit_handle

        self.sms = sms
        self.raw(explicit_handle(stream), [_address(a) for a in inputs], [_address(output)])


class RelayoutLaunch:
    """One channels-last transpose group (``conv-layout``'s conversions): its input to its
    output. The cubin is built (or read from the cache) on the first call."""

    def __init__(self, spec: RelayoutSpec) -> None:
        self.spec = spec
        self.kernel: Any = None
        self.lock = threading.Lock()

    def load(self, sms: int | None = None) -> Any:
        """Build (or read from the cache) and load the cubin (``sms`` is not used)."""
        with self.lock:
            if self.kernel is None:
                from fusec.targets.cuda.conv import host
                from fusec.targets.cuda.gemm import build

                self.kernel = host.RelayoutKernel(self.spec, build.build(self.spec).cubin)
            return self.kernel

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        (self.kernel or self.load())(inputs[0], outputs[0], stream)

    def direct(self, stream: int, inputs: list, outputs: list) -> None:
        """The runtime's launch: ``inputs``/``outputs`` are buffers with ``.ptr``."""
        self.raw(stream, [b.ptr for b in inputs], [b.ptr for b in outputs])

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0, sms: int = 132) -> None:
        from fusec.targets.cuda.streams import explicit_handle

        self.raw(explicit_handle(stream), [_address(a) for a in inputs], [_address(output)])
