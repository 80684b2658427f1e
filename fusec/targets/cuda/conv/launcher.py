"""``ConvLaunch`` and ``RelayoutLaunch``: what a generated conv or channels-last copy
module calls (build once, then launch)."""

from __future__ import annotations

from typing import Any

from fusec.targets.cuda.conv.cpp import ConvSpec, DirectConvSpec
from fusec.targets.cuda.conv.transpose import RelayoutSpec
from fusec.targets.cuda.linked import LinkedLaunch


class ConvLaunch(LinkedLaunch):
    """One conv group: its spec and which group inputs are the input, the weights and the
    epilogue's extra inputs. The cubin is built (or read from the cache) on the first call."""

    what = "conv"

    def __init__(
        self, spec: ConvSpec | DirectConvSpec, *, x: int, w: int, extras: tuple[int, ...]
    ) -> None:
        super().__init__(spec)
        self.x, self.w, self.extras = x, w, extras

    def make_kernel(self, cubin: bytes) -> Any:
        from fusec.targets.cuda.conv import host

        if isinstance(self.spec, ConvSpec):
            return host.ConvKernel(self.spec, cubin)
        return host.DirectConvKernel(self.spec, cubin)

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        """Queue the conv on the raw stream handle ``stream`` with raw device addresses."""
        kernel = self.kernel or self.load()
        extras = tuple(inputs[i] for i in self.extras)
        kernel(inputs[self.x], inputs[self.w], outputs[0], extras, stream, self.sms)


class RelayoutLaunch(LinkedLaunch):
    """One channels-last transpose group (``conv-layout``'s conversions): its input to its
    output. The cubin is built (or read from the cache) on the first call."""

    what = "channels-last copy"
    spec: RelayoutSpec

    def make_kernel(self, cubin: bytes) -> Any:
        from fusec.targets.cuda.conv import host

        return host.RelayoutKernel(self.spec, cubin)

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        (self.kernel or self.load())(inputs[0], outputs[0], stream)
