"""The cuda kernel layer's C++ headers (``fusec/targets/cuda/include/fusec/*.cuh``): each
compiles on its own with NVRTC (no GPU), instantiated once, and they are clang-formatted.
``tests/architecture/test_cpp_strings.py`` keeps the C++ that stays in Python strings short.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fusec.targets.cuda import headers
from fusec.targets.cuda.env import simulator_enabled

#: per header, a device function using what it declares, its templates instantiated once
PROBES = {
    "fusec/common.cuh": """
extern "C" __global__ void probe(const void* x, void* y) {
  float lo, hi;
  fs_unpack_bf16(fs_pack_bf16(fs_ld_bf16(x, 0), fs_ex2(1.0f)), lo, hi);
  fs_unpack_f16(fs_pack_f16(fs_ld_f16(x, 1), fs_to_f16(lo)), lo, hi);
  fs_st2_f32(y, 0, fs_to_bf16(hi), fs_cvt_f16(fs_bits_f16(lo)) + fs_cvt_bf16(fs_bits_bf16(hi)));
  fs_st_f16(y, 2, fs_ld_f32(x, 2) * L2E);
  fusec::E4M3::st2(y, 6, fusec::E4M3::ld(x, 3), fusec::E5M2::ld(x, 4));
  fusec::E5M2::st(y, 8, (float)(fusec::E4M3::BYTES + fusec::E5M2::IS_E5M2));
  fs_st_f32(y, 5, fs_silu_mul(fs_ld_f32(x, 5), lo));
}""",
    "fusec/barrier.cuh": """
extern "C" __global__ void probe(int parity) {
  __shared__ u64 bar;
  const u32 b = fs_smem(&bar);
  if (threadIdx.x == 0) fs_bar_init(b, 1);
  fs_bar_init_fence();
  __syncthreads();
  if (threadIdx.x == 0) fs_bar_expect(b, 0);
  fs_bar_wait(b, (u32)parity);
  fs_named_sync(1, 64);
  fs_named_arrive(2, 64);
  if (fs_named_any(3, 64, parity != 0)) fs_named_sync(4, 64);
}""",
    "fusec/tma.cuh": """
extern "C" __global__ void probe(u64 map, int c) {
  __shared__ __align__(1024) unsigned char tile[1024];
  __shared__ u64 bar;
  const u32 dst = fs_smem(tile), b = fs_smem(&bar);
  fs_prefetch_map(map);
  fs_tma_load(dst, map, b, c, 0, 0);
  fs_tma_load(dst, map, b, c, 0, 0, 0);
  fs_tma_load(dst, map, b, c, 0, 0, 0, 0);
  fs_bulk_load(dst, map, 1024u, b);
  fs_fence_async_smem();
  fs_tma_store(map, dst, c, 0, 0);
  fs_bulk_commit();
  fs_bulk_wait_read<1>();
  fs_bulk_wait<0>();
}""",
    "fusec/wgmma.cuh": """
extern "C" __global__ void probe(float* out) {
  float r = out[threadIdx.x];
  fs_wg_fence();
  fs_wg_commit();
  fs_wg_wait<1>();
  fs_fence_reg(r);
  const ConsumerThread c = fs_consumer_thread<232>(threadIdx.x / 128, threadIdx.x);
  out[threadIdx.x] = r + (float)(fs_desc(1024u, 16u, 1024u) & 1023ull) + c.lane + c.cw;
}""",
    "fusec/shared.cuh": """
extern "C" __global__ void probe(u64 src, void* out, int left) {
  __shared__ __align__(16) unsigned char buf[512];
  const u32 a = fs_smem(buf) + 16u * (threadIdx.x % 16);
  fs_cp16(a, src, 16u);
  fs_cp_commit();
  fs_cp_wait_all();
  fs_st_shared2(a, fs_lds_f32(a), fs_lds_f32x2(a).y);
  fs_st_shared4(a, 1u, 2u, 3u, 4u);
  fs_st_shared1f(a, fs_ld_shared4f(a).x);
  fs_stmatrix4(a, 1u, 2u, 3u, 4u);
  fs_st16<2>(out, 8 * threadIdx.x, fs_ld_shared4(a), left);
  fs_st16<4>(out, 4 * threadIdx.x, fs_ld_shared4(a), left);
}""",
    "fusec/split_k.cuh": """
extern "C" __global__ void probe(u64 ws, u64 counters, float* out, int kblocks) {
  float acc[1][8];
  for (int j = 0; j < 8; ++j) acc[0][j] = out[j];
  int t, kb0, kb1;
  fs_split_unit<4>(blockIdx.x, kblocks, t, kb0, kb1);
  if (fs_split_reduce<4, 128>(acc, ws, counters, t, blockIdx.x % 4, threadIdx.x, kb0 == kb1, 10))
    out[threadIdx.x] = acc[0][threadIdx.x % 8] + fs_ld_cg4f((const float4*)out).x;
}""",
    "fusec/gemm_layernorm.cuh": """
extern "C" __global__ void probe(const void* x, const void* w, float* out) {
  const int col = threadIdx.x;
  const float exact = fusec::gemm_ln_exact<fusec::F16, 1>(x, w, 1, col, 64, 128, 0.5f, 2.f);
  const float folded = fusec::gemm_ln_exact<fusec::BF16, 0>(x, w, 0, col, 64, 128, 0.f, 1.f);
  out[threadIdx.x] = fusec::gemm_ln_inexact(exact, 0.5f, 2.0f) ? exact : folded;
}""",
    "fusec/gemm_w4.cuh": """
struct W4 {
  enum : int { BM = 128, BN = 128, BK = 64, STAGES = 4, SPLIT_K = 1, GROUP_M = 8 };
  enum : int { A_BYTES = 128 * 128, B_BYTES = 128 * 128, A_K_MAJOR = 1, BATCH_A = 0 };
  enum : int { W4_BLOCK = 128, W4_SIGNED = 1, W4_ZERO_BIAS = 8, W4_MAGIC = 0x4300, W4_BF16 = 1 };
  static __device__ __forceinline__ int w4_index(int n, int blk, int N) { return blk * N + n; }
};
struct W4F16 {
  enum : int { BN = 64, BK = 64, B_BYTES = 64 * 128, W4_BLOCK = 64, W4_SIGNED = 0 };
  enum : int { W4_ZERO_BIAS = 0, W4_MAGIC = 0x6400, W4_BF16 = 0 };
  static __device__ __forceinline__ int w4_index(int n, int, int) { return n; }
};
template <class C>
__device__ void probe_step(u64 codes, u64 s, u64 z, u32 stage) {
  fusec::w4_copy<C>(stage, codes, s, z, 1, 0, 200, 256, threadIdx.x);
  fs_cp_commit();
  fusec::w4_cp_wait<0>();
  fusec::W4Step<C> st;
  fusec::w4_step<C>(st, stage, s, z, 1, 0, 200, threadIdx.x);
  fs_named_sync(fusec::W4_BARRIER, 128);
  fusec::w4_store<C>(st, stage, threadIdx.x);
}
extern "C" __global__ void probe(u64 map_a, u64 codes, u64 s, u64 z) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 base = (u32)__cvta_generic_to_shared(smem);
  probe_step<W4F16>(codes, s, z, base);
  fusec::gemm_w4_producer<W4>(base, base + 4 * W4::A_BYTES, base + 8 * W4::A_BYTES,
                              threadIdx.x, map_a, codes, s, z, 256, 512, 8, 8, 2, 2);
}""",
    "fusec/gemm_w4_rs.cuh": """
struct Rs {
  enum : int { BM = 16, BN = 128, BK = 64, STAGES = 4, SPLIT_K = 1, GROUP_M = 8 };
  enum : int { A_BYTES = 16 * 128, B_BYTES = 128 * 128, A_K_MAJOR = 1, BATCH_A = 0 };
  enum : int { W4_BLOCK = 128, W4_SIGNED = 1, W4_ZERO_BIAS = 8, W4_MAGIC = 0x4300, W4_BF16 = 1 };
  using Out = fusec::BF16;
  static __device__ __forceinline__ int w4_index(int n, int blk, int N) { return blk * N + n; }
  static __device__ __forceinline__ void mma_rs(float* d, const u32* a, u64 db, int scale_d) {
    asm volatile(
        "{.reg .pred p; setp.ne.b32 p, %13, 0; wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16"
        " {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
  }
};
struct Relu {
  __device__ float operator()(float acc, int, int, int, u32, u32) const { return fmaxf(acc, 0.f); }
};
extern "C" __global__ void probe(u64 map_a, u64 codes, u64 s, u64 z, u64 out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 base = (u32)__cvta_generic_to_shared(smem);
  const u32 sb = base + 4 * Rs::A_BYTES, bars = sb + 4 * Rs::B_BYTES;
  if (threadIdx.x < 128) {
    if (threadIdx.x == 0) fusec::gemm_w4_rs_producer<Rs>(base, sb, bars, map_a, codes, 6, 8, 3, 2);
  } else {
    const int lt = threadIdx.x % 128;
    fusec::gemm_w4_rs_consumer<Rs>(Relu{}, base, sb, bars, out, s, z, threadIdx.x / 128 - 1, lt,
                                   lt / 32, lt % 32, 6, 8, 3, 2, 40, 200, 0, 0, 10);
  }
}""",
    "fusec/gemm_walk.cuh": """
struct Walk {
  enum : int { BM = 128, BN = 128, BK = 64, SPLIT_K = 2, GROUP_M = 8, SWIGLU = 0 };
  enum : int { B_K_MAJOR = 0 };
};
struct Gated {
  enum : int { BM = 128, BN = 128, BK = 64, SPLIT_K = 1, GROUP_M = 8, SWIGLU = 1 };
  enum : int { B_K_MAJOR = 1 };
};
extern "C" __global__ void probe(u64 map, int* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 dst = (u32)__cvta_generic_to_shared(smem);
  fusec::GemmWalk<Walk> walk;
  int steps = 0;
  if (fusec::gemm_walk_start<Walk>(walk, 12, 8, 3, 2)) {
    do {
      fusec::gemm_load<Walk, true, Walk::BM>(dst, map, dst + 65536, walk.kb, walk.w.pm, 0);
      fusec::gemm_load_b<Walk>(dst, map, dst + 65536, walk.kb, walk.w.pn, 0, 256);
      fusec::gemm_load_b<Gated>(dst, map, dst + 65536, walk.kb, walk.w.pn, 0, 256);
      ++steps;
    } while (fusec::gemm_walk_next<Walk>(walk, 12, 8, 3, 2));
  }
  out[threadIdx.x] = steps;
}""",
    "fusec/reduce.cuh": """
extern "C" __global__ void probe(float* out) {
  const float s = fs_warp_sum(out[threadIdx.x]);
  fs_red4(out, s, s, s, s);
}""",
}


def _instantiation(source: str, name: str) -> str:
    """A template's generated source without its include line of ``name`` (the test's)."""
    assert f'#include "{name}"\n' in source
    return source.replace(f'#include "{name}"\n', "")


def _template_probes() -> dict[str, str]:
    """Each template header's instantiation for a small spec, as its template writes it."""
    from fusec.targets.cuda.attention import cpp as attention
    from fusec.targets.cuda.conv.config import ConvGeometry
    from fusec.targets.cuda.conv.cpp import ConvSpec, DirectConvSpec, generate, generate_direct
    from fusec.targets.cuda.conv.im2col import Im2col
    from fusec.targets.cuda.conv.transpose import RelayoutSpec
    from fusec.targets.cuda.experts.cpp import MoeKernelSpec
    from fusec.targets.cuda.gemm import aux, cpp

    specs = {
        "fusec/attention.cuh": attention.generate(attention.AttentionSpec(2, 200, 200, 64, 128)),
        "fusec/conv.cuh": generate(
            ConvSpec(ConvGeometry(2, 64, 13, 9, 64, 3, 3, 1, 1, 1, 1, 1, 1), input="given")
        ),
        "fusec/conv_direct.cuh": generate_direct(
            DirectConvSpec(ConvGeometry(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, groups=8), "bf16")
        ),
        # the NHWC depthwise kernel (channel pairs)
        "fusec/conv_depthwise_nhwc.cuh": generate_direct(
            DirectConvSpec(
                ConvGeometry(2, 96, 14, 14, 96, 7, 7, 1, 1, 3, 3, 3, 3, groups=96),
                "f16",
                layout="nhwc",
            )
        ),
        "fusec/gemm.cuh": cpp.generate(cpp.GemmSpec()),
        "fusec/im2col.cuh": Im2col(ConvGeometry(2, 3, 15, 17, 8, 7, 7, 2, 2, 3, 3, 3, 3)).kernel(
            "probe"
        ),
        "fusec/layernorm_prep.cuh": aux.LayerNormPrep("bf16", "f32", "bf16", "k", 1e-5).generate(),
        # both copies: 8 x 8 blocks (16- and 2-byte loads) and few pixels
        "fusec/relayout.cuh": RelayoutSpec(2, 64, 1000).generate()
        + RelayoutSpec(4, 64, 9).generate(),
        "fusec/transpose_f32.cuh": aux.TransposeF32().generate(),
        # the four stages of the experts layer (routing, gather, SwiGLU, combine)
        "fusec/moe.cuh": "".join(
            MoeKernelSpec(stage, "bf16", "f16", 4, 8, 64).generate()
            for stage in ("route", "gather", "swiglu", "combine")
        ),
        "fusec/softmax_finalise.cuh": aux.SoftmaxFinalise(
            "bf16", "y = s * fs_ld_f32(e0, col);", ("f32",)
        ).generate(),
    }
    return {name: _instantiation(source, name) for name, source in specs.items()}


PROBES.update(_template_probes())

pytestmark = [
    pytest.mark.requires_target("cuda"),
    pytest.mark.skipif(
        simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1 is set: no NVRTC under the simulator"
    ),
]


def _nvrtc_ptx(source: str, name: str) -> str:
    """PTX for sm_90a of ``source``, compiled as the linked kernels are (``build.ptx``'s
    options) with the layer's include folder as NVRTC's include path."""
    from cuda.bindings import nvrtc

    _, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    options = [b"-arch=sm_90a", b"-rdc=true", b"-std=c++17", f"-I{headers.INCLUDE_DIR}".encode()]
    (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    assert int(err) == 0, f"NVRTC rejected {name}:\n{log.decode(errors='replace')}"
    _, size = nvrtc.nvrtcGetPTXSize(program)
    text = b" " * size
    nvrtc.nvrtcGetPTX(program, text)
    nvrtc.nvrtcDestroyProgram(program)
    return text.rstrip(b"\x00").decode()


def test_every_header_has_a_probe() -> None:
    assert sorted(PROBES) == headers.header_names()


@pytest.mark.parametrize("name", sorted(PROBES))
def test_header_compiles_on_its_own(name: str) -> None:
    """The header alone (its own includes through NVRTC's include path, not ``expand``),
    every function of it used and every template instantiated once."""
    ptx = _nvrtc_ptx(f'#include "{name}"\n{PROBES[name]}\n', f"probe_{Path(name).stem}.cu")
    assert ".entry probe" in ptx or ".func  (.param .b32 func_retval0) fusec_" in ptx


@pytest.mark.parametrize("name", sorted(PROBES))
def test_expand_inlines_the_header_once_without_include_lines(name: str) -> None:
    source = headers.expand(f'#include "{name}"\n#include "{name}"\n{PROBES[name]}\n')
    assert "#include" not in source and "#pragma once" not in source
    text = (headers.INCLUDE_DIR / name).read_text().replace("#pragma once\n", "")
    assert source.count(text[: text.index("#include") if "#include" in text else -1]) == 1
    ptx = _nvrtc_ptx(source, "expanded.cu")
    assert ".entry probe" in ptx or ".func  (.param .b32 func_retval0) fusec_" in ptx


def test_expand_refuses_an_unknown_header() -> None:
    with pytest.raises(ValueError, match="no kernel-layer header 'fusec/nope.cuh'"):
        headers.expand('#include "fusec/nope.cuh"\n')


def test_headers_are_clang_formatted() -> None:
    # the test extra's clang-format sits beside the interpreter, also when the venv is
    # not activated (README's test command runs .venv/bin/python)
    beside = Path(sys.executable).parent / "clang-format"
    tool = str(beside) if beside.exists() else shutil.which("clang-format")
    if tool is None:
        pytest.skip("clang-format is not installed (pip install clang-format)")
    for name in headers.header_names():
        path = headers.INCLUDE_DIR / name
        formatted = subprocess.run(
            [tool, f"--style=file:{headers.INCLUDE_DIR / '.clang-format'}", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert formatted == path.read_text(), f"{name} is not clang-formatted"
