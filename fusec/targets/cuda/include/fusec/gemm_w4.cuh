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
// Two producer warpgroups (W4_THREADS = 256 threads: warpgroup 0 and the one after the
// consumers) share a step. A step's codes (BN rows of 32 bytes, 16 bytes a copy) and the
// 32-bit words holding each row's scale and zero point arrive by `cp.async`, W4_AHEAD K
// steps ahead, into the tail of the very stage they are dequantized into (codes: its last
// quarter; words: 8 bytes a row just before). For the step it fills, each thread waits for
// its own copies, the producers meet (W4_BARRIER: every copy landed), each thread reads
// its share back into registers, they meet again (every share read before any row is
// written over the copies), and each thread writes its rows: thread p the rows p / 4 +
// 64 r (r < BN / 64), chunks 2 (p % 4) and 2 (p % 4) + 1 of each (a chunk: 8 K values,
// one word of codes).
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"
#include "fusec/shared.cuh"

namespace fusec {

// K steps ahead the codes of a step are copied: the stage of step it + W4_AHEAD must be
// free while step it is filled, so the producers run at most STAGES - W4_AHEAD steps
// ahead of the consumers.
enum W4Constants { W4_AHEAD = 2, W4_BARRIER = 11, W4_THREADS = 256 };

// Where a step's copies land in its stage (C::BN rows of 128 bytes).
template <class C>
struct W4Tail {
  enum : int { CODES = C::B_BYTES - C::BN * 32, WORDS = CODES - C::BN * 8 };
};

// One thread's share of a K step, in registers.
template <class C>
struct W4Step {
  uint2 q[C::BN / 64];  // the codes of its rows' 2 chunks
  u32 s[C::BN / 64];    // its rows' scales, bits (16-bit), in both halves
  u32 z[C::BN / 64];    // MAGIC + z' of its rows, in both halves
};

static __device__ __forceinline__ void w4_cp4(u32 dst, u64 src, u32 bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

template <int N>
static __device__ __forceinline__ void w4_cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Producer thread p's copies of K step kb of row tile pn into stage `stage` (rows past N:
// zeros; the caller commits them as one group).
template <class C>
static __device__ __forceinline__ void w4_copy(u32 stage, u64 codes, u64 scale, u64 zero, int kb,
                                               int pn, int N, int K, int p) {
  for (int i = p; i < C::BN * 2; i += W4_THREADS) {  // 16 bytes: half a row's codes
    const int row = i / 2;
    const int n = pn * C::BN + row;
    const long long word = (long long)min(n, N - 1) * (K / 8) + kb * (C::BK / 8) + 4 * (i % 2);
    fs_cp16(stage + W4Tail<C>::CODES + (u32)(16 * i), codes + 4ull * word, n < N ? 16u : 0u);
  }
  const int blk = kb * C::BK / C::W4_BLOCK;
  for (int row = p; row < C::BN; row += W4_THREADS) {  // the words of the scale, zero point
    const int n = pn * C::BN + row;
    const u32 at = (u32)C::w4_index(min(n, N - 1), blk, N);
    const u32 words = stage + W4Tail<C>::WORDS + (u32)(8 * row);
    w4_cp4(words, (scale + 2ull * at) & ~3ull, n < N ? 4u : 0u);
    w4_cp4(words + 4, (zero + at) & ~3ull, n < N ? 4u : 0u);
  }
}

// Producer thread p's share of K step kb of row tile pn, read back from stage `stage`
// (every copy landed) and turned into the pairs w4_pair multiplies by.
template <class C>
static __device__ __forceinline__ void w4_step(W4Step<C>& st, u32 stage, u64 scale, u64 zero,
                                               int kb, int pn, int N, int p) {
  const int blk = kb * C::BK / C::W4_BLOCK;
#pragma unroll
  for (int r = 0; r < C::BN / 64; ++r) {
    const int row = p / 4 + 64 * r;
    const u32 at = (u32)C::w4_index(min(pn * C::BN + row, N - 1), blk, N);
    const u32 codes = stage + W4Tail<C>::CODES + (u32)(row * 32 + 8 * (p % 4));
    u32 sw, zw;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];"
                 : "=r"(st.q[r].x), "=r"(st.q[r].y)
                 : "r"(codes));
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];"
                 : "=r"(sw), "=r"(zw)
                 : "r"(stage + W4Tail<C>::WORDS + (u32)(8 * row)));
    const u32 s = (sw >> (8 * (((u32)scale + 2u * at) & 2u))) & 0xFFFFu;
    u32 z = (zw >> (8 * (((u32)zero + at) & 3u))) & 0xFFu;
    if constexpr (C::W4_SIGNED) z = (u32)((int)(signed char)z + C::W4_ZERO_BIAS);
    st.s[r] = s | (s << 16);
    st.z[r] = (C::W4_MAGIC | (z & 15u)) * 0x10001u;
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

// Thread p's chunks of the step dequantized into the stage at dst (128-byte swizzle:
// chunk u of row r at r * 128 + (u ^ (r % 8)) * 16).
template <class C>
static __device__ __forceinline__ void w4_store(const W4Step<C>& st, u32 dst, int p) {
#pragma unroll
  for (int r = 0; r < C::BN / 64; ++r) {
    const int row = p / 4 + 64 * r;
    const u32 words[2] = {st.q[r].x, st.q[r].y};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int u = 2 * (p % 4) + j;
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
