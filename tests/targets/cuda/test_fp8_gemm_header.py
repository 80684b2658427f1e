"""The fp8 GEMM main loop of the cuda kernel layer (``fusec/fp8_gemm.cuh``, issue 31):
wgmma ``m64n64k32`` with e4m3 and e5m2 operands in every combination, f32 accumulation,
the scales and the output rounding in the epilogue. No GPU runs it here: the tests compile
it for sm_90a with NVRTC, check the PTX holds the fp8 wgmma of each operand pair and the
saturating float8 conversions, and link it to a cubin with nvJitLink (ptxas), which must
neither serialise the wgmma nor spill.
"""

from __future__ import annotations

import re

import pytest

from fusec.targets.cuda import headers
from fusec.targets.cuda.env import simulator_enabled

pytestmark = [
    pytest.mark.requires_target("cuda"),
    pytest.mark.skipif(
        simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1 is set: no NVRTC under the simulator"
    ),
]

PAIRS = [("E4M3", "E4M3"), ("E4M3", "E5M2"), ("E5M2", "E4M3"), ("E5M2", "E5M2")]
OUTPUTS = {"E4M3": "F32", "E5M2": "BF16"}


def _source() -> str:
    """One kernel per operand pair (the output type varies too: f32, bf16, f16, e4m3)."""
    outs = ["F32", "BF16", "F16", "E4M3"]
    kernels = []
    for (ta, tb), out in zip(PAIRS, outs, strict=True):
        name = f"fp8_{ta}_{tb}_{out}".lower()
        kernels.append(
            f'extern "C" __global__ void __launch_bounds__(128, 1)\n'
            f"{name}(const unsigned char* a, const unsigned char* b, void* c, int m, int n,"
            " int k, float sa, const float* sb) {\n"
            "  __shared__ __align__(1024) unsigned char smem[2 * fusec::FP8_STAGE_BYTES];\n"
            "  const fusec::ScaleEpilogue epi{sa, 1.0f, sb};\n"
            f"  fusec::fp8_gemm_tile<fusec::{ta}, fusec::{tb}, fusec::{out}>(a, b, c, m, n, k,"
            " 64 * blockIdx.y, 64 * blockIdx.x, epi, smem);\n"
            "}\n"
        )
    return headers.expand('#include "fusec/fp8_gemm.cuh"\n' + "\n".join(kernels))


@pytest.fixture(scope="module")
def ptx() -> str:
    from cuda.bindings import nvrtc

    source = _source()
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), b"fp8_gemm.cu", 0, [], [])
    options = [b"-arch=sm_90a", b"-rdc=true", b"-std=c++17"]
    (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    assert int(err) == 0, f"NVRTC rejected the fp8 GEMM:\n{log.decode(errors='replace')}"
    _, size = nvrtc.nvrtcGetPTXSize(program)
    text = b" " * size
    nvrtc.nvrtcGetPTX(program, text)
    nvrtc.nvrtcDestroyProgram(program)
    return text.rstrip(b"\x00").decode()


def _kernel(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start : end if end != -1 else len(ptx)]


@pytest.mark.parametrize(("ta", "tb"), PAIRS)
def test_each_operand_pair_is_an_fp8_wgmma_with_f32_accumulators(ptx, ta, tb):
    out = ["F32", "BF16", "F16", "E4M3"][PAIRS.index((ta, tb))]
    body = _kernel(ptx, f"fp8_{ta}_{tb}_{out}".lower())
    kind = f"{ta.lower()}.{tb.lower()}"
    steps = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.f32\.{kind}\b", body)
    assert len(steps) == 4  # a stage of 128 codes: four k32 steps, unrolled
    assert "wgmma.fence.sync.aligned" in body and "wgmma.wait_group.sync.aligned 0" in body
    assert "cp.async.cg.shared.global" in body and "fence.proxy.async.shared::cta" in body


def test_a_float8_output_is_converted_with_saturation(ptx):
    body = _kernel(ptx, "fp8_e5m2_e5m2_e4m3")
    assert "cvt.rn.satfinite.e4m3x2.f32" in body


def test_the_kernels_link_for_sm90a_without_spills_or_serialised_wgmma(ptx):
    """ptxas (through nvJitLink) takes every kernel for sm_90a: the wgmma are not
    serialised (fusec.targets.cuda.build fails a GEMM that is) and nothing spills."""
    try:
        from cuda.core import Linker, LinkerOptions, ObjectCode
    except ImportError:  # older cuda-core, as fusec.targets.cuda.build
        from cuda.core.experimental import Linker, LinkerOptions, ObjectCode

    options = LinkerOptions(arch="sm_90a", verbose=True)
    linker = Linker(ObjectCode.from_ptx(ptx.encode(), name="fp8_gemm"), options=options)
    cubin = linker.link("cubin")
    log = linker.get_info_log() or ""
    assert bytes(cubin.code), log
    assert not re.search(r"wgmma[^\n]*serializ|serializ[^\n]*wgmma", log, re.IGNORECASE), log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert spills and all(s == ("0", "0") for s in spills), log
