"""A linked kernel's generated CUDA C++ run on the host, for machines without a GPU.

The generated source (its ``#include "fusec/..."`` lines unexpanded) is compiled by g++
against a host stand-in for ``fusec/common.cuh`` (the same loads, stores and 16-bit
conversions in plain C++: ``_Float16`` rounds to nearest even as ``cvt.rn.f16.f32``
does, bf16 by the same bit arithmetic) and the kernel-layer header under test, copied
beside it. A driver runs the ``extern "C"`` device function once per CUDA thread, each
on a thread of its own, block after block: ``threadIdx``/``blockIdx`` are thread-local,
``__syncthreads`` a ``std::barrier`` of the block's threads, the dynamic shared memory a
buffer per block. So the kernel's own C++ (tiling, shared-memory staging, index
arithmetic, bounds, the barrier discipline) runs, not a model of it; what it cannot
show is the device's timing, memory model and code generation (the ``@pytest.mark.gpu``
tests do). Keep shapes small: a CUDA thread is an OS thread here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from fusec.targets.cuda.headers import INCLUDE_DIR

COMMON = r"""// host stand-in for fusec/common.cuh (tests/targets/cuda/host_cuda.py)
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct fs_dim3 { unsigned x, y, z; };
extern thread_local fs_dim3 threadIdx;
extern thread_local fs_dim3 blockIdx;
extern fs_dim3 blockDim, gridDim;
extern std::barrier<>* fs_block_barrier;
inline void __syncthreads() { fs_block_barrier->arrive_and_wait(); }

template <class T> inline T __ldg(const T* p) { return *p; }
inline float __uint_as_float(u32 u) { float f; std::memcpy(&f, &u, 4); return f; }
inline u32 __float_as_uint(float f) { u32 u; std::memcpy(&u, &f, 4); return u; }

inline float fs_cvt_f16(u32 h) {
  u16 b = (u16)h;
  _Float16 v;
  std::memcpy(&v, &b, 2);
  return (float)v;
}
inline float fs_cvt_bf16(u32 h) { return __uint_as_float(h << 16); }
inline u16 fs_bits_f16(float v) {
  _Float16 h = (_Float16)v;
  u16 b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline u16 fs_bits_bf16(float v) {
  if (std::isnan(v)) return 0x7FC0;
  u32 u = __float_as_uint(v);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (u16)(u >> 16);
}
inline float fs_ld_f32(const void* p, long long i) { return ((const float*)p)[i]; }
inline float fs_ld_f16(const void* p, long long i) { return fs_cvt_f16(((const u16*)p)[i]); }
inline float fs_ld_bf16(const void* p, long long i) { return fs_cvt_bf16(((const u16*)p)[i]); }
inline u32 fs_pack_f16(float lo, float hi) {
  return fs_bits_f16(lo) | ((u32)fs_bits_f16(hi) << 16);
}
inline u32 fs_pack_bf16(float lo, float hi) {
  return fs_bits_bf16(lo) | ((u32)fs_bits_bf16(hi) << 16);
}
inline void fs_unpack_f16(u32 w, float& lo, float& hi) {
  lo = fs_cvt_f16(w & 0xFFFF);
  hi = fs_cvt_f16(w >> 16);
}
inline void fs_unpack_bf16(u32 w, float& lo, float& hi) {
  lo = fs_cvt_bf16(w & 0xFFFF);
  hi = fs_cvt_bf16(w >> 16);
}
inline float fs_to_f32(float v) { return v; }
inline float fs_to_f16(float v) { return fs_cvt_f16(fs_bits_f16(v)); }
inline float fs_to_bf16(float v) { return fs_cvt_bf16(fs_bits_bf16(v)); }
inline void fs_st_f32(void* p, long long i, float v) { ((float*)p)[i] = v; }
inline void fs_st2_f32(void* p, long long i, float a, float b) {
  ((float*)p)[i] = a;
  ((float*)p)[i + 1] = b;
}
inline void fs_st_f16(void* p, long long i, float v) { ((u16*)p)[i] = fs_bits_f16(v); }
inline void fs_st2_f16(void* p, long long i, float a, float b) {
  *(u32*)((u16*)p + i) = fs_pack_f16(a, b);
}
inline void fs_st_bf16(void* p, long long i, float v) { ((u16*)p)[i] = fs_bits_bf16(v); }
inline void fs_st2_bf16(void* p, long long i, float a, float b) {
  *(u32*)((u16*)p + i) = fs_pack_bf16(a, b);
}

namespace fusec {
struct F32 {
  enum : int { BYTES = 4, IS_BF16 = 0 };
  static float ld(const void* p, long long i) { return fs_ld_f32(p, i); }
  static void st(void* p, long long i, float v) { fs_st_f32(p, i, v); }
  static void st2(void* p, long long i, float a, float b) { fs_st2_f32(p, i, a, b); }
  static float to(float v) { return v; }
};
struct F16 {
  enum : int { BYTES = 2, IS_BF16 = 0 };
  static float ld(const void* p, long long i) { return fs_ld_f16(p, i); }
  static void st(void* p, long long i, float v) { fs_st_f16(p, i, v); }
  static void st2(void* p, long long i, float a, float b) { fs_st2_f16(p, i, a, b); }
  static float to(float v) { return fs_to_f16(v); }
  static u32 pack(float lo, float hi) { return fs_pack_f16(lo, hi); }
  static void unpack(u32 w, float& lo, float& hi) { fs_unpack_f16(w, lo, hi); }
  static float cvt(u32 h) { return fs_cvt_f16(h); }
  static u16 bits(float v) { return fs_bits_f16(v); }
};
struct BF16 {
  enum : int { BYTES = 2, IS_BF16 = 1 };
  static float ld(const void* p, long long i) { return fs_ld_bf16(p, i); }
  static void st(void* p, long long i, float v) { fs_st_bf16(p, i, v); }
  static void st2(void* p, long long i, float a, float b) { fs_st2_bf16(p, i, a, b); }
  static float to(float v) { return fs_to_bf16(v); }
  static u32 pack(float lo, float hi) { return fs_pack_bf16(lo, hi); }
  static void unpack(u32 w, float& lo, float& hi) { fs_unpack_bf16(w, lo, hi); }
  static float cvt(u32 h) { return fs_cvt_bf16(h); }
  static u16 bits(float v) { return fs_bits_bf16(v); }
};
}  // namespace fusec
"""

DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

thread_local fs_dim3 threadIdx;
thread_local fs_dim3 blockIdx;
fs_dim3 blockDim, gridDim;
std::barrier<>* fs_block_barrier;

static void* load(const char* path, long long bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  FILE* f = std::fopen(path, "rb");
  if (!f || std::fread(p, 1, bytes, f) != (size_t)bytes) { std::perror(path); std::exit(2); }
  std::fclose(f);
  return p;
}

int main(int argc, char** argv) {
  // argv: grid threads smem, then (path bytes) per buffer in parameter order
  const int grid = std::atoi(argv[1]), threads = std::atoi(argv[2]);
  const long long smem = std::atoll(argv[3]);
  const int nbuf = (argc - 4) / 2;
  std::vector<void*> bufs(nbuf);
  for (int i = 0; i < nbuf; ++i) bufs[i] = load(argv[4 + 2 * i], std::atoll(argv[5 + 2 * i]));
  gridDim = {(unsigned)grid, 1, 1};
  blockDim = {(unsigned)threads, 1, 1};
  void* shared = std::aligned_alloc(128, (smem + 127) / 128 * 128 + 128);
  for (int b = 0; b < grid; ++b) {
    std::memset(shared, 0xFF, (smem + 127) / 128 * 128);  // stale shared memory: NaN bits
    std::barrier<> bar(threads);
    fs_block_barrier = &bar;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        threadIdx = {(unsigned)t, 0, 0};
        blockIdx = {(unsigned)b, 0, 0};
        int ret = 0;
        FUNCTION(&ret, (u64)shared CALL_ARGS);
      });
    }
    for (auto& th : pool) th.join();
  }
  for (int i = 0; i < nbuf; ++i) {
    FILE* f = std::fopen(argv[4 + 2 * i], "wb");
    std::fwrite(bufs[i], 1, std::atoll(argv[5 + 2 * i]), f);
    std::fclose(f);
  }
  return 0;
}
"""


def available() -> bool:
    return shutil.which("g++") is not None


def run(
    source: str,
    function: str,
    header: str,
    buffers: list[np.ndarray],
    grid: int,
    threads: int,
    smem: int,
    workdir: Path,
) -> list[np.ndarray]:
    """Compile ``source`` (a linked kernel's unexpanded C++ whose kernel-layer header is
    ``header``, e.g. ``"conv_depthwise_nhwc"``) with the driver, run ``function`` on
    ``grid`` blocks of ``threads`` with ``smem`` bytes of shared memory over ``buffers``
    (its u64 parameters, in order) and return the buffers as the kernel left them."""
    include = workdir / "fusec"
    include.mkdir(parents=True, exist_ok=True)
    (include / "common.cuh").write_text(COMMON)
    shutil.copy(INCLUDE_DIR / "fusec" / f"{header}.cuh", include / f"{header}.cuh")
    call_args = "".join(f", (u64)bufs[{i}]" for i in range(len(buffers)))
    driver = DRIVER.replace("FUNCTION", function).replace("CALL_ARGS", call_args)
    cpp = workdir / "kernel.cpp"
    cpp.write_text(source.replace('extern "C" __device__', 'extern "C"') + driver)
    exe = workdir / "kernel"
    cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-w", f"-I{workdir}", str(cpp), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    args = [str(grid), str(threads), str(smem)]
    for k, array in enumerate(buffers):
        path = workdir / f"buf{k}.bin"
        np.ascontiguousarray(array).tofile(path)
        args += [str(path), str(array.nbytes)]
    subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, timeout=300)
    return [
        np.fromfile(workdir / f"buf{k}.bin", dtype=a.dtype).reshape(a.shape)
        for k, a in enumerate(buffers)
    ]
