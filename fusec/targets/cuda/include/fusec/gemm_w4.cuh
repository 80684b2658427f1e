// fusec kernel layer: the Hopper GEMM's int4 weight-only B (W4A16 at many rows, issue 31).
//
// C::B_W4: B is a weight held as 4-bit codes, which the producer warpgroup's 128 threads
// dequantize into each stage's B tile themselves (no TMA for B, no dequantized copy of the
// weight in global memory), the tile the consumers' wgmma reads being the K-major 16-bit
// tile TMA would have written (BN rows of 64 K, 128-byte swizzle).
//
// The codes (constant_layouts "w4gemm", packed once at load): int32 words [N][K / 8], code
// 2i of a word's eight K in nibble i and code 2i + 1 in nibble i + 4, each stored as q + 8
// (i4) or q (ui4): `(w >> 4i) & 0x000F000F` holds codes 2i and 2i + 1 in the low bits of
// each 16-bit half. ORed into MAGIC (128.0 in bf16, 1024.0 in f16, both with a unit last
// place) the half is the float MAGIC + q, exactly; minus MAGIC + z' (z' = the zero point
// stored as the codes are) it is q - z, exactly; times the scale it is the dequantized
// weight rounded once, as the reference rounds (q - z) * s computed in f32. Two codes a
// `lop3`, a `sub` and a `mul` of 16-bit pairs.
//
// The scale and zero point of row n (output column n) and K block blk are at
// `C::w4_index(n, blk, N)` of their arrays (per block of C::W4_BLOCK along K, per column or
// per tensor); C::W4_BLOCK is a multiple of 64, so a K step has one per row.
//
// Thread t of the warpgroup fills rows t / 2 + 64 r (r < BN / 64) of the stage, chunks
// 4 (t % 2) .. 4 (t % 2) + 3 of each (a chunk: 8 K values, one word of codes): one 16-byte
// load of codes a row, two adjacent threads reading a row's 32 bytes of the step.
#pragma once

#include "fusec/common.cuh"

namespace fusec {

// One thread's share of a K step, loaded a step ahead of its stores.
template <class C>
struct W4Step {
  uint4 q[C::BN / 64];  // the codes of its rows' 4 chunks
  u32 s[C::BN / 64];    // its rows' scales, bits (16-bit), in both halves
  u32 z[C::BN / 64];    // MAGIC + z' of its rows, in both halves
};

static __device__ __forceinline__ uint4 w4_ld_codes(const u32* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

static __device__ __forceinline__ u32 w4_ld_half(const void* p) {
  u32 r;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

template <bool SIGNED>
static __device__ __forceinline__ int w4_ld_zero(const void* p) {
  int r;
  if constexpr (SIGNED) {
    asm volatile("ld.global.nc.s8 %0, [%1];" : "=r"(r) : "l"(p));
  } else {
    asm volatile("ld.global.nc.u8 %0, [%1];" : "=r"(r) : "l"(p));
  }
  return r;
}

// The codes, scales and zero points of K step kb of row tile pn (rows past N: zeros).
template <class C>
static __device__ __forceinline__ void w4_load(W4Step<C>& st, const u32* codes, const void* scale,
                                               const void* zero, int kb, int pn, int N, int K,
                                               int tid) {
  const int blk = kb * C::BK / C::W4_BLOCK;
#pragma unroll
  for (int r = 0; r < C::BN / 64; ++r) {
    const int n = pn * C::BN + tid / 2 + 64 * r;
    if (n < N) {
      const long long word = (long long)n * (K / 8) + kb * (C::BK / 8) + 4 * (tid % 2);
      st.q[r] = w4_ld_codes(codes + word);
      const int at = C::w4_index(n, blk, N);
      const u32 s = w4_ld_half((const u16*)scale + at);
      const u32 z = (u32)(w4_ld_zero<C::W4_SIGNED>((const char*)zero + at) + C::W4_ZERO_BIAS);
      st.s[r] = s | (s << 16);
      st.z[r] = (C::W4_MAGIC | z) * 0x10001u;
    } else {
      st.q[r] = uint4{0u, 0u, 0u, 0u};
      st.s[r] = 0u;
      st.z[r] = C::W4_MAGIC * 0x10001u;
    }
  }
}

// Codes 2i and 2i + 1 of word w dequantized: a pair of 16-bit floats.
template <class C>
static __device__ __forceinline__ u32 w4_pair(u32 w, int i, u32 z, u32 s) {
  u32 t, d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;"
      : "=r"(t)
      : "r"(w >> (4 * i)), "n"(0x000F000F), "r"(C::W4_MAGIC * 0x10001u));
  if constexpr (C::W4_BF16) {
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(t), "r"(z));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(d), "r"(s));
  } else {
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(t), "r"(z));
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(d), "r"(s));
  }
  return d;
}

// The step's chunks dequantized into the stage at dst (128-byte swizzle: chunk u of row
// r at r * 128 + (u ^ (r % 8)) * 16).
template <class C>
static __device__ __forceinline__ void w4_store(const W4Step<C>& st, u32 dst, int tid) {
#pragma unroll
  for (int r = 0; r < C::BN / 64; ++r) {
    const int row = tid / 2 + 64 * r;
    const u32 words[4] = {st.q[r].x, st.q[r].y, st.q[r].z, st.q[r].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int u = 4 * (tid % 2) + j;
      u32 o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i] = w4_pair<C>(words[j], i, st.z[r], st.s[r]);
      const u32 chunk = dst + (u32)(row * 128 + ((u ^ (row & 7)) * 16));
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(chunk), "r"(o[0]), "r"(o[1]),
                   "r"(o[2]), "r"(o[3])
                   : "memory");
    }
  }
}

}  // namespace fusec
