// fusec kernel layer: the Hopper GEMM's int4 weight-only B dequantized by the consumers
// (C::W4_RS, issue 31's W4A16 at many rows), the weight as wgmma's A from registers.
//
// Why: the producer's way (gemm_w4.cuh) writes each stage's 16-bit B tile to shared memory
// and both consumer warpgroups' wgmma read it back: per 128 x 256 x 64 step 16 KB of A and
// 32 KB of B land, 8 KB of codes are copied in and read back, 32 KB of B are written and
// 80 KB read by wgmma, ~144 KB against the ~128 B a cycle shared memory moves: more cycles
// than the step's 1024 of Tensor Core time, on top of one warpgroup's dequantize. Here
// (CUTLASS's mixed-input GEMM and Machete's way) the product is computed transposed,
// Y^T = W^T X^T: a consumer warpgroup's 64 rows of wgmma's A are 64 weight columns,
// dequantized from 4-bit codes straight into its A fragment registers; wgmma's B is the
// activations' tile (BM rows of X, K-major: the TMA tile the A operand has otherwise); a
// step's shared memory traffic is X's tile (written once, read by both warpgroups) and 4 KB
// of codes.
//
// The block tile: BM rows of X (wgmma's N: m64nBMk16) x BN = 64 CONSUMERS weight columns,
// consumer cw taking columns 64 cw .. 64 cw + 63 of the tile. The codes (constant_layouts
// "w4rs", packed at load): per (tile column pn, K step kb) one 4 KB chunk, contiguous,
// words [cw][warp][lane][kk]: lane 4 g + t of warp w holds in word kk its whole m16k16 A
// fragment of K = 64 kb + 16 kk: weight columns 16 w + g (+ 8) of the warpgroup's 64, the
// nibble pairs (i, i + 4) being fragment register i (w4_pair: rows g, g + 8, g, g + 8; K
// 2t, 2t + 1 | 2t + 8, 2t + 9). The producer's thread 0 copies a step's chunk with one bulk
// copy onto the stage's full barrier, beside X's TMA load; the B stage holds it.
//
// The scale and zero point of weight column n and K block blk are at C::w4_index(n, blk, N)
// (as gemm_w4.cuh); a thread's two columns' values come from global memory (L2), those of
// the next K block loaded a block ahead. The dequantize is w4_pair's: bit for bit the
// reference's rounding of (q - z) s.
//
// The accumulators: element j of a thread's BM / 2 is weight column 16 w + g + 8 ((j / 2) %
// 2) of the warpgroup's and row 8 (j / 4) + 2 t + j % 2 of the tile's X rows; the epilogue
// calls E with (row, column) of Y, and each pair of adjacent columns meets in one thread
// (a shuffle with lane ^ 4) so that Y is written 4 bytes at a time. Where few tiles are
// deep the walk's units are splits of a tile's K (split_k.cuh): the last split to finish
// adds the others' sums, as they lie in its threads' registers, and stores.
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"
#include "fusec/gemm_w4.cuh"
#include "fusec/gemm_walk.cuh"
#include "fusec/shared.cuh"
#include "fusec/split_k.cuh"
#include "fusec/tma.cuh"
#include "fusec/wgmma.cuh"

namespace fusec {

// The producer (its thread 0): per K step, a free stage, X's tile by TMA and the step's
// chunk of codes by one bulk copy, both on the stage's full barrier.
template <class C>
static __device__ __forceinline__ void gemm_w4_rs_producer(u32 sa, u32 sb, u32 bars, u64 map_a,
                                                           u64 codes, int units, int kblocks,
                                                           int tiles_m, int tiles_n) {
  // a (tile column, K step) chunk of codes: BN weight columns x 64 K, 4 bits each
  constexpr int STAGES = C::STAGES, CHUNK = C::BN * C::BK / 2;
  fs_prefetch_map(map_a);
  int it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const auto [t, kb0, kb1, pm, pn, pz] = gemm_unit<C>(u, kblocks, tiles_m, tiles_n);
    for (int kb = kb0; kb < kb1; ++kb, ++it) {
      const int s = it % STAGES;
      const u32 full = bars + 8 * s;
      fs_bar_wait(bars + 8 * (STAGES + s), ((u32)(it / STAGES) & 1u) ^ 1u);
      fs_bar_expect(full, C::A_BYTES + CHUNK);
      gemm_load<C, true, C::BM>(sa + s * C::A_BYTES, map_a, full, kb, pm, 0);
      const u64 chunk = codes + (u64)CHUNK * ((u64)pn * (u64)kblocks + (u64)kb);
      fs_bulk_load(sb + s * C::B_BYTES, chunk, (u32)CHUNK, full);
    }
  }
}

// A thread's two weight columns' (n0, n0 + 8) scale and MAGIC + zero point pairs of K block
// blk (16-bit pairs: both halves the same).
struct W4RsRows {
  u32 s[2];
  u32 z[2];
};

template <class C>
static __device__ __forceinline__ W4RsRows w4_rs_rows(u64 scale, u64 zero, int n0, int blk, int N) {
  W4RsRows r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int at = C::w4_index(min(n0 + 8 * h, N - 1), blk, N);
    r.s[h] = w4_scale_pair((u32)__ldg((const unsigned short*)scale + at));
    r.z[h] = w4_zero_pair<C>((u32)__ldg((const unsigned char*)zero + at));
  }
  return r;
}

// One K step of a consumer: its word of codes a wgmma (4 a step) dequantized into the A
// fragments `a`, then the step's 4 wgmma (k16 each) on the stage's X tile.
template <class C, int BM>
static __device__ __forceinline__ void w4_rs_step(float (&acc)[BM / 2], u32 (&a)[4][4], u32 x_base,
                                                  u32 codes, const W4RsRows& rows, bool first) {
  uint4 q;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
               : "r"(codes));
  const u32 words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[kk][i] = w4_pair<C>(words[kk], i, rows.z[i & 1], rows.s[i & 1]);
  fs_wg_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    C::mma_rs(acc, a[kk], fs_desc(x_base + (u32)(kk * 32), 16u, 1024u), (first && kk == 0) ? 0 : 1);
  fs_wg_commit();
}

// The epilogue: E on each accumulator at its (row, column) of Y; the pair of adjacent
// columns (n, n + 1) of a row meets in one thread (lane ^ 4 holds the other column), which
// stores both (one 4-byte store where N is even, else each within the row).
template <class C, class E, int BM>
static __device__ __forceinline__ void w4_rs_store(const E& epi, float (&acc)[BM / 2], u64 out,
                                                   int pm, int pn, int cw, int warp, int lane,
                                                   int M, int N) {
  using Out = typename C::Out;
  const bool odd = (lane / 4) % 2;  // holds column n + 1 of the pair (n even)
  const bool pairs = (N % 2) == 0;
#pragma unroll
  for (int j = 0; j < BM / 2; j += 2) {
    const int n = pn * C::BN + cw * 64 + warp * 16 + lane / 4 + 8 * ((j / 2) % 2);
    const int row = pm * BM + 8 * (j / 4) + 2 * (lane % 4);  // acc[j]: row, acc[j + 1]: row + 1
    const bool in = n < N;
    const float y0 = in && row < M ? epi(acc[j], row, n, 0, 0u, 0u) : 0.0f;
    const float y1 = in && row + 1 < M ? epi(acc[j + 1], row + 1, n, 0, 0u, 0u) : 0.0f;
    // the even column's thread keeps row and takes its partner's; the odd one row + 1
    const float sent = odd ? y0 : y1;
    const float got = __shfl_xor_sync(0xffffffffu, sent, 4);
    const int r = odd ? row + 1 : row;
    const int c = odd ? n - 1 : n;  // the pair's even column
    const float lo = odd ? got : y0;
    const float hi = odd ? y1 : got;
    if (r < M && c < N) {
      const long long at = (long long)r * N + c;
      if (pairs) {
        Out::st2((void*)out, at, lo, hi);
      } else {
        Out::st((void*)out, at, lo);
        if (c + 1 < N) Out::st((void*)out, at + 1, hi);
      }
    }
  }
}

// One work unit of a consumer warpgroup (a tile's K steps kb0 .. kb1 - 1: all of them, or
// a split's share): the main loop (one wgmma group in flight; the A fragments in two
// register sets, so that a step's dequantize never writes registers the previous step's
// wgmma may still read), [split-K: the partial sums meet in the workspace; the split that
// arrives last goes on], then the epilogue.
template <class C, class E, int BM>
static __device__ __forceinline__ void gemm_w4_rs_unit(const E& epi, float (&acc)[BM / 2], int& it,
                                                       u32 sa, u32 sb, u32 bars, u64 out, u64 scale,
                                                       u64 zero, const TileUnit& w, int split,
                                                       int cw, int lt, int warp, int lane, int M,
                                                       int N, u64 ws, u64 counters,
                                                       int split_barrier) {
  constexpr int STAGES = C::STAGES, STEPS = C::W4_BLOCK / C::BK;  // K steps a scale block
  const int n0 = w.pn * C::BN + cw * 64 + warp * 16 + lane / 4;
  const u32 mine = (u32)((((cw * 4 + warp) * 32) + lane) * 16);  // the thread's codes
  const int steps = w.kb1 - w.kb0;
  W4RsRows rows = w4_rs_rows<C>(scale, zero, n0, w.kb0 / STEPS, N);
  W4RsRows next = rows;
  u32 a0[4][4], a1[4][4];
  const auto step = [&](u32(&a)[4][4], int kb) __attribute__((always_inline)) {
    const int at = w.kb0 + kb;  // the K step in the whole K
    if (at % STEPS == 0 || kb == 0) {
      if (kb > 0) rows = next;
      if ((at / STEPS + 1) * STEPS < w.kb1)
        next = w4_rs_rows<C>(scale, zero, n0, at / STEPS + 1, N);  // the next block's
    }
    const int s = it % STAGES;
    fs_bar_wait(bars + 8 * s, (u32)(it / STAGES) & 1u);
    w4_rs_step<C, BM>(acc, a, sa + s * C::A_BYTES, sb + s * C::B_BYTES + mine, rows, kb == 0);
    if (kb > 0) {
      fs_wg_wait<1>();  // the previous step's wgmma done: its stage and its A registers free
      if (lt == 0) fs_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
    }
    ++it;
  };
  for (int kb = 0; kb < steps; kb += 2) {
    step(a0, kb);
    if (kb + 1 < steps) step(a1, kb + 1);
  }
  fs_wg_wait<0>();
  if (lt == 0 && steps > 0) fs_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
#pragma unroll
  for (int j = 0; j < BM / 2; ++j) fs_fence_reg(acc[j]);
  if constexpr (C::SPLIT_K > 1) {  // (split_k.cuh: the layout of a thread's sums is its own)
    float (&sums)[1][BM / 2] = *reinterpret_cast<float (*)[1][BM / 2]>(&acc);
    if (!fs_split_reduce<C::SPLIT_K, 128 * C::CONSUMERS>(sums, ws, counters, w.t, split,
                                                         cw * 128 + lt, steps == 0, split_barrier))
      return;
  }
  w4_rs_store<C, E, BM>(epi, acc, out, w.pm, w.pn, cw, warp, lane, M, N);
}

// The consumers' walk: each consumer warpgroup takes its 64 weight columns of every work
// unit of the block (the producer's order: gemm_unit).
template <class C, class E>
static __device__ __forceinline__ void gemm_w4_rs_consumer(const E& epi, u32 sa, u32 sb, u32 bars,
                                                           u64 out, u64 scale, u64 zero, int cw,
                                                           int lt, int warp, int lane, int units,
                                                           int kblocks, int tiles_m, int tiles_n,
                                                           int M, int N, u64 ws, u64 counters,
                                                           int split_barrier) {
  float acc[C::BM / 2];
  int it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const TileUnit w = gemm_unit<C>(u, kblocks, tiles_m, tiles_n);
    gemm_w4_rs_unit<C, E, C::BM>(epi, acc, it, sa, sb, bars, out, scale, zero, w,
                                 u - w.t * C::SPLIT_K, cw, lt, warp, lane, M, N, ws, counters,
                                 split_barrier);
  }
}

}  // namespace fusec
