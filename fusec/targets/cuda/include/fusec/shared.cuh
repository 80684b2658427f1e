// fusec kernel layer: shared-memory accesses by address (u32 state-space offsets): vector
// loads and stores, stmatrix, asynchronous 16-byte copies from global memory, and the
// masked 16-byte copy of a staged chunk to global memory.
#pragma once

#include "fusec/common.cuh"

static __device__ __forceinline__ uint4 fs_ld_shared4(u32 addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
// The same 16 bytes as four floats (the bits reinterpreted: no instruction).
static __device__ __forceinline__ float4 fs_ld_shared4f(u32 addr) {
  const uint4 v = fs_ld_shared4(addr);
  return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                     __uint_as_float(v.w));
}
static __device__ __forceinline__ float fs_lds_f32(u32 addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}
static __device__ __forceinline__ float2 fs_lds_f32x2(u32 addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

static __device__ __forceinline__ void fs_st_shared1f(u32 addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}
static __device__ __forceinline__ void fs_st_shared2(u32 addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
static __device__ __forceinline__ void fs_st_shared4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}
// Four 8x8 matrices of 16-bit values, one row of 16 bytes per lane address.
static __device__ __forceinline__ void fs_stmatrix4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}

// 16 bytes from global src to shared dst, the ones past `bytes` zero-filled.
static __device__ __forceinline__ void fs_cp16(u32 dst, u64 src, u32 bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}
static __device__ __forceinline__ void fs_cp_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
static __device__ __forceinline__ void fs_cp_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// 16 staged bytes (16 / ES elements of ES bytes) to p[i..]: one 16-byte store when all of
// them are in the row (`left` elements are) and the address is aligned, else element by
// element.
template <int ES>
static __device__ __forceinline__ void fs_st16(void* p, long long i, uint4 v, int left) {
  char* q = (char*)p + i * ES;
  if (left >= 16 / ES && (((unsigned long long)q) & 15ull) == 0) {
    *(uint4*)q = v;
    return;
  }
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 16 / ES; ++e) {
    if (e < left) {
      if (ES == 4)
        ((u32*)q)[e] = w[e];
      else
        ((u16*)q)[e] = (u16)(w[e / 2] >> (16 * (e % 2)));
    }
  }
}
