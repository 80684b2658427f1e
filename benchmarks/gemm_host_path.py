"""fusec's own host cost per call of a GEMM group, measured without a GPU.

    python benchmarks/gemm_host_path.py [--calls 20000] [--profile-calls 5000]

A call through ``CudaProgram`` (torch tensors in, a torch tensor out, the
caller's stream) is timed with a stand-in ``torch`` (tensors that only carry
shape, dtype, device and an address) and the recording fake driver of the
tests (``tests/targets/cuda/fake_driver.py``, not recording), so the number is the
Python work fusec does per call: argument checks, output allocation call,
prepared-launch lookup, the ``cuLaunchKernel`` call's argument passing. The
real torch allocation and driver call add to it on a GPU machine (there,
``benchmarks/gemm_bench.py`` reports ``host_us`` per call). A cProfile of the
same loop says where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATMUL = """func.func @f(%a: tensor<4096x4096xf16>, %b: tensor<4096x4096xf16>) -> tensor<4096x4096xf16> {
  %c = ai.matmul %a, %b : tensor<4096x4096xf16> * tensor<4096x4096xf16>
  return %c : tensor<4096x4096xf16>
}"""  # noqa: E501


class _Device(tuple):
    """torch.device's part fusec reads: hashable, with ``.index``."""

    def __new__(cls, kind: str, index: int = 0):
        return super().__new__(cls, (kind, index))

    @property
    def index(self) -> int:
        return self[1]


def fake_torch() -> types.ModuleType:
    """A module named torch whose CUDA tensors are plain records."""
    torch = types.ModuleType("torch")
    addresses = itertools.count(0x7E0000000000, 0x1000000)

    class Tensor:
        def __init__(self, shape, dtype, device, ptr=None) -> None:
            self.shape, self.dtype, self.device = tuple(shape), dtype, device
            self.is_cuda = True
            self._ptr = next(addresses) if ptr is None else ptr

        def is_contiguous(self) -> bool:
            return True

        def data_ptr(self) -> int:
            return self._ptr

    Tensor.__module__ = "torch"
    torch.Tensor = Tensor
    torch.int16 = "i16"
    from fusec.ir.dtypes import ELEMENT_TYPES  # every dtype fusec's adapters look up

    for name, element in ELEMENT_TYPES.items():
        setattr(torch, element.torch, name)
    torch.contiguous_format = object()
    torch.device = _Device
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0)
    freed = Tensor((1,), None, None)  # a caching allocator hands back the block just freed
    torch.empty = lambda shape, dtype=None, device=None: Tensor(shape, dtype, device, freed._ptr)
    return torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="timed calls")
    parser.add_argument("--profile-calls", type=int, default=5000, help="profiled calls (0: none)")
    args = parser.parse_args()
    sys.modules["torch"] = torch = fake_torch()
    sys.path.insert(0, str(ROOT / "tests" / "targets" / "cuda"))
    from fake_driver import FakeDriver

    import fusec
    from fusec.dialect.ops import spec_of
    from fusec.runtime.launch import plan_launches
    from fusec.runtime.reference import entry_function
    from fusec.target import resolve_target
    from fusec.targets.cuda import tensormaps
    from fusec.targets.cuda.gemm import host
    from fusec.targets.cuda.program import CudaProgram

    driver = FakeDriver(record=False)
    tensormaps.driver = lambda: driver
    tensormaps.make_context_current = lambda: None
    compiled = fusec.compile(MATMUL, target="cuda", executable=False)

    class Backend:  # loads the GEMM module's launcher onto the fake driver
        target, sms = "cuda", 132

        def load(self, kernel):
            namespace: dict = {}
            exec(compile(kernel.source, kernel.name, "exec"), namespace)
            gemm = namespace["GEMM"]
            gemm.kernel = host.GemmKernel(gemm.spec, b"")
            return gemm

    program = object.__new__(CudaProgram)  # CudaProgram.__init__ wants a GPU backend
    planned = plan_launches(compiled.module, None, resolve_target("cuda", available=False))
    program.function = entry_function(compiled.module)
    program.backend = Backend()
    program.constants, program.launches = {}, planned.launches
    program.returns = planned.returns
    program.call_bytes = getattr(planned, "call_bytes", 0)
    program.graphs = None  # the launch path itself, not a whole-program CUDA graph replay
    program._fns, program._lock = None, threading.Lock()
    program._specs = [spec_of(p) for p in program.function.function_type.inputs.data]
    program._name, program._constants, program._keep = "f", {}, None
    program._plan_slots()
    device = _Device("cuda", 0)
    a = torch.Tensor((4096, 4096), torch.float16, device)
    b = torch.Tensor((4096, 4096), torch.float16, device)
    for _ in range(200):
        program([a, b])
    calls = args.calls
    start = time.perf_counter()
    for _ in range(calls):
        program([a, b])
    per_call = (time.perf_counter() - start) / calls * 1e6
    print(f"fusec host work per GEMM call (stand-in torch and driver): {per_call:.1f} us")
    if not args.profile_calls:
        return 0
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.profile_calls):
        program([a, b])
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
