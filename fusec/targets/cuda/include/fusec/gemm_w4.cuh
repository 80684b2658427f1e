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
// 4 (t % 2) .. 4 (t % 2) + 3 of each (a chunk: 8 K values, one word of codes). Its codes
// (16 bytes a row: two adjacent threads copy a row's 32 bytes of the step) and the 32-bit
// words holding its rows' scales and zero points arrive by `cp.async`, W4_AHEAD K steps
// ahead, into the tail of the very stage they are dequantized into (codes: BN rows of 32
// bytes at its last quarter; words: 8 bytes a thread and row just before): a thread reads
// its own copies back into registers, the warpgroup meets at W4_BARRIER (every copy read
// before any row is written over it), then each thread writes its rows.
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"
#include "fusec/gemm_walk.cuh"
#include "fusec/shared.cuh"
#include "fusec/tma.cuh"

namespace fusec {

// K steps ahead the codes of a step are copied: the stage of step it + W4_AHEAD must be
// free while step it is filled, so the producer runs at most STAGES - W4_AHEAD steps
// ahead of the consumers.
enum W4Constants { W4_AHEAD = 2, W4_BARRIER = 11 };

// Where a step's copies land in its stage (C::BN rows of 128 bytes).
template <class C>
struct W4Tail {
  enum : int { CODES = C::B_BYTES - C::BN * 32, WORDS = CODES - 128 * (C::BN / 64) * 8 };
};

// One thread's share of a K step, in registers.
template <class C>
struct W4Step {
  uint4 q[C::BN / 64];  // the codes of its rows' 4 chunks
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

// The thread's copies of K step kb of row tile pn into stage `stage` (rows past N: zeros;
// the caller commits them as one group).
template <class C>
static __device__ __forceinline__ void w4_copy(u32 stage, u64 codes, u64 scale, u64 zero, int kb,
                                               int pn, int N, int K, int tid) {
  const int blk = kb * C::BK / C::W4_BLOCK;
#pragma unroll
  for (int r = 0; r < C::BN / 64; ++r) {
    const int row = tid / 2 + 64 * r;
    const int n = pn * C::BN + row;
    const bool in = n < N;
    const long long word = (long long)min(n, N - 1) * (K / 8) + kb * (C::BK / 8) + 4 * (tid % 2);
    const u32 at = (u32)C::w4_index(min(n, N - 1), blk, N);
    const u32 words = stage + W4Tail<C>::WORDS + (u32)((tid * (C::BN / 64) + r) * 8);
    fs_cp16(stage + W4Tail<C>::CODES + (u32)(row * 32 + 16 * (tid % 2)), codes + 4ull * word,
            in ? 16u : 0u);
    // the aligned 32-bit words holding the scale and the zero point (w4_step: the half or
    // byte of each); a word may reach up to 3 bytes past the array's last element, inside
    // its allocation (device allocations come in multiples of 256 bytes)
    w4_cp4(words, (scale + 2ull * at) & ~3ull, in ? 4u : 0u);
    w4_cp4(words + 4, (zero + at) & ~3ull, in ? 4u : 0u);
  }
}

// A scale's 16 bits as the pair w4_pair multiplies by (both halves), and a zero point's
// stored byte (i4: a signed byte, stored as the codes are, + 8) as MAGIC + z' in both.
static __device__ __forceinline__ u32 w4_scale_pair(u32 s) { return s | (s << 16); }
template <class C>
static __device__ __forceinline__ u32 w4_zero_pair(u32 z) {
  if constexpr (C::W4_SIGNED) z = (u32)((int)(signed char)z + C::W4_ZERO_BIAS);
  return (C::W4_MAGIC | (z & 15u)) * 0x10001u;
}

// The thread's copies of K step kb of row tile pn, read back from stage `stage` (their
// group complete) and turned into the pairs w4_pair multiplies by.
template <class C>
static __device__ __forceinline__ void w4_step(W4Step<C>& st, u32 stage, u64 scale, u64 zero,
                                               int kb, int pn, int N, int tid) {
  const int blk = kb * C::BK / C::W4_BLOCK;
#pragma unroll
  for (int r = 0; r < C::BN / 64; ++r) {
    const int row = tid / 2 + 64 * r;
    const int n = min(pn * C::BN + row, N - 1);
    const u32 at = (u32)C::w4_index(n, blk, N);
    const u32 words = stage + W4Tail<C>::WORDS + (u32)((tid * (C::BN / 64) + r) * 8);
    const u32 codes = stage + W4Tail<C>::CODES + (u32)(row * 32 + 16 * (tid % 2));
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(st.q[r].x), "=r"(st.q[r].y), "=r"(st.q[r].z), "=r"(st.q[r].w)
                 : "r"(codes));
    u32 sw, zw;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(sw), "=r"(zw) : "r"(words));
    st.s[r] = w4_scale_pair((sw >> (8 * (((u32)scale + 2u * at) & 2u))) & 0xFFFFu);
    st.z[r] = w4_zero_pair<C>((zw >> (8 * (((u32)zero + at) & 3u))) & 0xFFu);
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

// C::B_W4 (gemm_w4.cuh): the producer warpgroup's walk. W4_AHEAD steps ahead of the one it
// fills, its 128 threads wait for that step's stage to be free and copy their codes,
// scales and zero points into it (cp.async, one group a step), and thread 0 announces A's
// bytes on the stage's full barrier (one of its 1 + 128 arrivals) and issues A's TMA load.
// Then, for the step it fills, each thread waits for its own copies, reads them back, the
// warpgroup meets (W4_BARRIER), each thread writes its rows of the stage dequantized,
// fences the stores for the async proxy (wgmma reads the stage) and arrives.
template <class C>
static __device__ __forceinline__ void gemm_w4_producer(u32 sa, u32 sb, u32 bars, int tid,
                                                        u64 map_a, u64 codes, u64 scale, u64 zero,
                                                        int N, int K, int units, int kblocks,
                                                        int tiles_m, int tiles_n) {
  static_assert(C::STAGES > W4_AHEAD, "the copies land W4_AHEAD stages ahead");
  if (tid == 0) fs_prefetch_map(map_a);
  GemmWalk<C> now, ahead;
  if (!gemm_walk_start<C>(now, units, kblocks, tiles_m, tiles_n)) return;
  ahead = now;
  bool ahead_live = true;
  int issued = 0;       // steps whose copies are issued
  auto issue = [&]() {  // the copies and A's load of step `issued` (ahead's position)
    if (ahead_live) {
      const int s = issued % C::STAGES;
      const u32 full = bars + 8 * s;
      fs_bar_wait(bars + 8 * (C::STAGES + s), ((u32)(issued / C::STAGES) & 1u) ^ 1u);
      w4_copy<C>(sb + s * C::B_BYTES, codes, scale, zero, ahead.kb, ahead.w.pn, N, K, tid);
      if (tid == 0) {
        fs_bar_expect(full, C::A_BYTES);
        const int za = C::BATCH_A ? ahead.w.pz : 0;
        gemm_load<C, C::A_K_MAJOR, C::BM>(sa + s * C::A_BYTES, map_a, full, ahead.kb, ahead.w.pm,
                                          za);
      }
      ++issued;
      ahead_live = gemm_walk_next<C>(ahead, units, kblocks, tiles_m, tiles_n);
    }
    fs_cp_commit();  // (an empty group past the walk's end keeps the count: one a step)
  };
  for (int i = 0; i < W4_AHEAD; ++i) issue();
  for (int it = 0;; ++it) {
    issue();
    w4_cp_wait<W4_AHEAD>();  // this step's group done: W4_AHEAD groups committed after it
    const int s = it % C::STAGES;
    const u32 stage = sb + s * C::B_BYTES;
    W4Step<C> st;
    w4_step<C>(st, stage, scale, zero, now.kb, now.w.pn, N, tid);
    fs_named_sync(W4_BARRIER, 128);  // every thread's copies read before rows cover them
    w4_store<C>(st, stage, tid);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    fs_bar_arrive(bars + 8 * s);
    if (!gemm_walk_next<C>(now, units, kblocks, tiles_m, tiles_n)) return;
  }
}

}  // namespace fusec
