"""What the templates of one linked cubin share (conv, attention, the channels-last copy).

A generated module of such a group holds a launcher object (``ConvLaunch``,
``AttentionLaunch``, ``RelayoutLaunch``) that builds the group's cubin on first use
(or reads it from the kernel cache) and queues it on the caller's stream; the module's
``launch`` calls it and ``LINKED`` names it for the runtime, which launches it by
address (``direct``). ``LinkedLaunch`` is that object's build/launch plumbing,
``linked_kernel_source`` the module around it.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, ClassVar

from fusec.codegen import KernelSource, io_specs
from fusec.dialect import ops as ai
from fusec.environ import switch
from fusec.ir.constants import is_constant
from fusec.targets.cuda.caps import H200

#: ``$FUSEC_EARLY_WEIGHTS``: "on" (``EARLY_WEIGHTS_DEFAULT``) lets a GEMM or implicit-GEMM
#: conv whose weights are a constant of the program issue their first stages' loads before
#: it waits for the kernels before it (``GemmSpec.early_b``, ``ConvSpec.early_w``: their
#: ``waits_in_body``; ``fusec.targets.cuda.dependent``); "off" waits first, as every other
#: kernel (the A/B switch). H100, one process, 31 alternating rounds (2026-12-06,
#: ``benchmarks/results/models-gpu.md``): Llama-style decoder b1 0.456 -> 0.443 ms a call
#: (0.383 -> 0.366 in bursts of 20), MobileNetV3-Large b1 0.439 -> 0.412 (0.290 -> 0.281);
#: the GPU tests that reach constant weights (136) passed with it on.
EARLY_WEIGHTS_ENV = "FUSEC_EARLY_WEIGHTS"
EARLY_WEIGHTS_DEFAULT = "on"


def loads_early(fused_op: ai.FusedOp, index: int) -> bool:
    """Whether a group's kernel may read its input ``index`` before the grid dependency
    wait: the input is a constant of the program (``arith.constant``: written at load, by
    no kernel) and ``$FUSEC_EARLY_WEIGHTS`` is on. The template decides whether its kernel
    reads that input as given (no re-layout or pre-pass kernel writing a copy first)."""
    choices = ("on", "off") if EARLY_WEIGHTS_DEFAULT == "on" else ("off", "on")
    if switch(EARLY_WEIGHTS_ENV, choices) == "off":  # (the first choice is the default)
        return False
    return is_constant(fused_op.operands[index].owner)


def device_address(array: Any, what: str) -> int:
    """The device address of ``array`` (``__cuda_array_interface__``)."""
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(f"the {what} kernel takes device arrays")
    return int(interface["data"][0])


def content_key(spec: object) -> str:
    """The 16 hex digits naming a linked kernel spec (a frozen dataclass): a hash of its
    ``repr``, so that two specs share a device function, and a cache entry, only when equal."""
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:16]


class LinkedSpec:
    """What names a linked kernel's spec (a frozen dataclass: GEMM, conv, attention, the
    relayout copy, the GEMM's auxiliary kernels): ``key``, the hash of its ``repr``
    (``content_key``), and ``function_name``, ``fusec_<PREFIX>_<key>``."""

    PREFIX: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return content_key(self)

    @property
    def function_name(self) -> str:
        return f"fusec_{self.PREFIX}_{self.key}"

    @property
    def waits_in_body(self) -> bool:
        """Whether the C++ body waits for the kernels before it itself (a GEMM that loads
        constant weights first); otherwise the Numba wrapper's first statement does."""
        return False


class LinkedLaunch:
    """Builds ``spec``'s cubin once (``make_kernel`` loads it) and launches it: ``raw``
    (subclasses) with raw addresses, ``direct`` for the runtime, ``__call__`` for the
    module's ``launch``. ``sms`` is the GPU's SM count, for the kernels whose grid uses it."""

    what = "linked"  # the kernel's name in errors

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.kernel: Any = None
        self.sms = H200.sms
        self.lock = threading.Lock()

    def make_kernel(self, cubin: bytes) -> Any:
        raise NotImplementedError

    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        raise NotImplementedError

    def load(self, sms: int | None = None) -> Any:
        """Build (or read from the cache) and load the cubin; ``sms`` sizes a grid that
        depends on it."""
        with self.lock:
            if sms is not None:
                self.sms = sms
            if self.kernel is None:
                from fusec.targets.cuda import build

                self.kernel = self.make_kernel(build.build(self.spec).cubin)
            return self.kernel

    def direct(self, stream: int, inputs: list, outputs: list) -> None:
        """The runtime's launch: ``inputs``/``outputs`` are buffers with ``.ptr``."""
        self.raw(stream, [b.ptr for b in inputs], [b.ptr for b in outputs])

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0, sms: int = H200.sms) -> None:
        from fusec.targets.cuda.streams import explicit_handle

        self.sms = sms
        addresses = [device_address(a, self.what) for a in inputs]
        self.raw(explicit_handle(stream), addresses, [device_address(output, self.what)])


def linked_kernel_source(
    fused_op: ai.FusedOp,
    name: str,
    kind: str,
    lines: list[str],
    *,
    var: str,
    launcher: str,
    spec: Any,
    launch_args: str = "stream, sms",
    tail: tuple[str, ...] = (),
    more_specs: tuple = (),
) -> KernelSource:
    """The kernel module of a group run by the launcher object ``var`` (a ``launcher``),
    which ``lines`` (header, imports, construction) define: then ``launch``, ``LINKED``,
    ``KERNELS`` and ``tail``; the C++ of ``spec`` and of ``more_specs`` (a launcher of
    several linked kernels, in launch order after ``spec``) travels with it."""
    inputs = ", ".join(f"in{k}" for k in range(len(fused_op.inputs)))
    cubins = f"{1 + len(more_specs)} linked cubins" if more_specs else "a linked cubin"
    names = ", ".join(s.function_name for s in (spec, *more_specs))
    source = "\n".join(
        [
            *lines,
            "",
            "",
            f"def launch({inputs}, out0, stream=0, sms={H200.sms}):",
            f"    {var}(({inputs},), out0, {launch_args})",
            "",
            "",
            f"LINKED = {var}  # the runtime launches it by address ({var}.direct)",
            "",
            f"KERNELS = []  # {cubins}, launched by {launcher} ({names})",
            *tail,
            "",
        ]
    )
    ins, outs = io_specs(fused_op)
    specs = (spec, *more_specs)
    cpp = tuple(("cuda-c++", s.cpp_source()) for s in specs)
    return KernelSource(
        name, kind, "cuda", source, ins, outs, array_dtype=None, extra_sources=cpp, specs=specs
    )
