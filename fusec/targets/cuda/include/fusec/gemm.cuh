// fusec kernel layer: the Hopper GEMM, a warp-specialised persistent block program (the
// design is described in fusec/targets/cuda/gemm/cpp.py, which instantiates it).
//
// fusec::gemm<C, E> is the whole block: warpgroup 0 produces (TMA loads of the A and B
// tiles into a ring of C::STAGES stages), warpgroups 1..C::CONSUMERS consume (wgmma on the
// ring, then the epilogue on their accumulators). An instantiation supplies
//   C: the configuration: tile sizes, stages, variants (flags), the operand and output
//      element types (fusec::F16, BF16, F32) and `mma`, its wgmma instruction (f32
//      operands: tf32 maths, wgmma k8, BK = 32 values per 128-byte row, K-major only);
//   E: the epilogue functor: `operator()(acc, row, col, batch, ln_cols, ln_rows)` maps an
//      f32 accumulator to the value stored, `post(s, row, col, batch)` the ops after a row
//      softmax, and the accessors of its inputs that the variants read (partials, cd,
//      stats, gamma, beta, prefetch).
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"
#include "fusec/gemm_layernorm.cuh"
#include "fusec/gemm_w4.cuh"
#include "fusec/gemm_w4_rs.cuh"
#include "fusec/gemm_walk.cuh"
#include "fusec/shared.cuh"
#include "fusec/split_k.cuh"
#include "fusec/tma.cuh"
#include "fusec/wgmma.cuh"

#define FS_NEG_INF __int_as_float(0xff800000)  // (FS_FLT_MAX: gemm_layernorm.cuh)

namespace fusec {

// The softmax modes of the epilogue (C::SOFTMAX).
enum GemmSoftmax { SOFTMAX_NONE = 0, SOFTMAX_ROW = 1, SOFTMAX_PARTIALS = 2 };

// Named barriers (enumerators, not constexpr variables: those would be emitted as globals): 1 and 2
// pingpong's turns, 3 + cw the staged vectors of consumer cw, 6 + cw its normalised A rows
// (ln=tile), 9 the consumers' staged gamma and beta, 10 split-K's arrival of all consumers;
// disjoint for up to 3 consumer warpgroups (cw = 0..2).
enum GemmBarrier { VECTOR_BARRIER = 3, LN_BARRIER = 6, LN_AFFINE_BARRIER = 9, SPLIT_BARRIER = 10 };

// The first row of the consumer's accumulators: its share of the block tile (cooperative)
// or the tile's first row (pingpong: the warpgroup owns the tile). Evaluated where it is
// used, as part of each row expression.
template <class C>
static __device__ __forceinline__ int gemm_rows(int pm, int cw) {
  if constexpr (C::PINGPONG) {
    return pm * C::BM;
  } else {
    return pm * C::BM + cw * C::WM;
  }
}

// ln=tile: the consumers' threads copy gamma and beta (f32, zero past K) into shared memory
// (sg: gamma, then beta STAGES x BK floats further) and meet at a named barrier; every tile
// of the block reads them.
template <class C, class E>
static __device__ __forceinline__ void gemm_ln_affine(const E& epi, u32 sg, int tid, int K) {
  constexpr int STAGES = C::STAGES, BK = C::BK;
  for (int i = tid - 128; i < STAGES * BK; i += 128 * C::CONSUMERS) {
    const bool in_row = i < K;
    fs_st_shared1f(sg + 4u * (u32)i, in_row ? epi.gamma(i) : 0.0f);
    fs_st_shared1f(sg + 4u * (u32)(STAGES * BK + i), in_row ? epi.beta(i) : 0.0f);
  }
  fs_named_sync(LN_AFFINE_BARRIER, 128 * C::CONSUMERS);  // gamma and beta staged
}

// ln=tile (inline in gemm_consumer_tile, as the kernel had it), at the head of a consumer's tile:
// wait until every K step's A tile has landed (the ring holds them all; B may still be in flight),
// then normalise the warpgroup's WM rows of the A tiles in place: x <- (x - mean) * rstd * gamma +
// beta, rounded to the operand type (gamma and beta are 0 past K: those columns stay 0). 128 / WM
// threads share a row, each reading its chunks of 8 values per stage through the 128-byte swizzle
// (16-byte chunk c of row r is at r * 128 + ((c ^ r % 8) << 4)). A proxy fence and the
// warpgroup's named barrier make the writes visible to its wgmma (async proxy).

// vectors=smem, at the head of a consumer's tile: after its warpgroup has finished reading
// the previous tile's vectors (named barrier), each thread issues 16-byte cp.async copies
// of the tile's c and d (BN columns) and (mean, rstd) pairs (its WM rows) into the
// warpgroup's region; chunks past N or M are zero-filled and never read. The epilogue
// reads column col's c at ln_cols + 4 col, its d 4 BN further, row row's pair at
// ln_rows + 8 row.
template <class C, class E>
static __device__ __forceinline__ void gemm_stage_vectors(const E& epi, u32 sv_mine, int cw, int lt,
                                                          int pm, int pn, int M, int N,
                                                          u32& ln_cols, u32& ln_rows) {
  constexpr int BN = C::BN, WM = C::WM;
  fs_named_sync(VECTOR_BARRIER + cw, 128);  // the previous tile's are read
  const int vcol0 = pn * BN;
  const int vrow0 = gemm_rows<C>(pm, cw);
  for (int i = lt; i < BN / 2 + WM / 2; i += 128) {
    int first, left, per;  // chunk i: 4 columns of c or of d, or 2 rows' statistics
    u64 src;
    if (i < BN / 2) {
      const int half = i / (BN / 4);
      first = vcol0 + 4 * (i % (BN / 4));
      left = N - first;
      per = 4;
      src = epi.cd() + 4ull * (unsigned long long)((long long)half * E::LN_STRIDE + first);
    } else {
      first = vrow0 + 2 * (i - BN / 2);
      left = M - first;
      per = 8;
      src = epi.stats() + 8ull * (unsigned long long)first;
    }
    const u32 bytes = (u32)(left <= 0 ? 0 : (left >= 16 / per ? 16 : left * per));
    fs_cp16(sv_mine + 16u * (u32)i, bytes ? src : epi.cd(), bytes);
  }
  fs_cp_commit();
  ln_cols = sv_mine - 4u * (u32)vcol0;
  ln_rows = sv_mine + 8u * BN - 8u * (u32)vrow0;
}

// The accumulator register of element e of column pair q in row half h of block m.
#define FS_FRAG(m, q, e) acc[m][4 * (q) + 2 * h + (e)]

// The first of the two adjacent columns of column pair q of a consumer thread's
// accumulators in column tile pn of WIDTH columns (accumulator j of an m64 block is row
// 16 warp + lane/4 + 8 ((j/2)%2), column 8 (j/4) + 2 (lane%4) + j%2 of it; the row stays
// written out where it is used: as a function call it changed the kernels' SASS).
template <int WIDTH>
static __device__ __forceinline__ int gemm_frag_col(int pn, int q, int lane) {
  return pn * WIDTH + q * 8 + 2 * (lane % 4);
}

// Calls f(m, h, row) for each row of a consumer thread's accumulators: row half h of m64
// block m, at output row `row`. The one loop of the direct epilogues and of the "smem"
// one's softmax pass. The row expression stays written out in the loop (a row function
// changed the SASS: gemm_frag_col); the callers' f are lambdas marked always_inline (what
// __forceinline__ means: the keyword cannot stand after a lambda's parameters), so the
// loop compiles as it did with each body written in it.
template <class C, int MI, class F>
static __device__ __forceinline__ void gemm_for_rows(int pm, int cw, int warp, int lane,
                                                     const F& f) {
#pragma unroll
  for (int m = 0; m < MI; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      f(m, h, gemm_rows<C>(pm, cw) + m * 64 + warp * 16 + (lane / 4) + 8 * h);
    }
  }
}

// A softmax epilogue's row statistics over a consumer thread's row of the tile (its quad's
// 4 lanes hold the row's BN columns: two shfl.xor steps): pass 1 puts the row's values
// (-inf outside the matrix) into the accumulators and takes their maximum mx; pass 2 the
// sum of exp(v - shift), leaving exp(v - shift) in the accumulators but in the partials
// mode (which keeps the rounded logits). dense (a live row of a tile inside the matrix's
// columns) takes pass 1 without a bounds check per element. C::FAST_MATH: the exponential
// is one FMA and ex2.approx (2^(v log2 e - shift log2 e), as flash attention computes it).
template <class C, class E, int MI, int HALF>
static __device__ __forceinline__ void gemm_softmax_stats(const E& epi, float (&acc)[MI][HALF],
                                                          int m, int h, int row, int pn, int pz,
                                                          int lane, int M, int N, u32 ln_cols,
                                                          u32 ln_rows, bool& live, float& mx,
                                                          float& sum) {
  constexpr int BN = C::BN;
  constexpr bool PARTIALS = C::SOFTMAX == SOFTMAX_PARTIALS;
  using Out = typename C::Out;
  live = row < M;
  const bool dense = live && pn * BN + BN <= N;
  mx = FS_NEG_INF;
  // the epilogue's value of element e of column pair q (rounded to Out in the partials mode)
  const auto value = [&](int q, int e, int col) -> float {
    if constexpr (PARTIALS) {
      return Out::to(epi(FS_FRAG(m, q, e), row, col, pz, ln_cols, ln_rows));
    } else {
      return epi(FS_FRAG(m, q, e), row, col, pz, ln_cols, ln_rows);
    }
  };
  if (dense) {
#pragma unroll
    for (int q = 0; q < BN / 8; ++q) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = value(q, e, gemm_frag_col<BN>(pn, q, lane) + e);
        FS_FRAG(m, q, e) = v;
        mx = fmaxf(mx, v);
      }
    }
  } else {
#pragma unroll
    for (int q = 0; q < BN / 8; ++q) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = gemm_frag_col<BN>(pn, q, lane) + e;
        const float v = live && col < N ? value(q, e, col) : FS_NEG_INF;
        FS_FRAG(m, q, e) = v;
        mx = fmaxf(mx, v);
      }
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  float shift;
  if constexpr (C::FAST_MATH) {
    shift = mx == FS_NEG_INF ? 0.0f : mx * L2E;  // in log2 units
  } else {
    shift = mx == FS_NEG_INF ? 0.0f : mx;
  }
  sum = 0.0f;
#pragma unroll
  for (int q = 0; q < BN / 8; ++q) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float p;
      if constexpr (C::FAST_MATH) {
        p = fs_ex2(fmaf(FS_FRAG(m, q, e), L2E, -shift));
      } else {
        p = expf(FS_FRAG(m, q, e) - shift);
      }
      if constexpr (!PARTIALS) FS_FRAG(m, q, e) = p;
      sum += p;
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
}

// Stores y0, y1 at columns col, col + 1 of a row at i (col < N): one 32/64-bit store when
// the row length is even (pairs), else one each, the second only inside the row.
template <class Out>
static __device__ __forceinline__ void gemm_store_pair(u64 out, long long i, int col, int N,
                                                       bool pairs, float y0, float y1) {
  if (pairs) {
    Out::st2((void*)out, i, y0, y1);
  } else {
    Out::st((void*)out, i, y0);
    if (col + 1 < N) Out::st((void*)out, i + 1, y1);
  }
}

// The gated direct epilogue (C::SWIGLU, a mixture of experts' gate/up projection): the
// block tile's BN columns are BN / 2 gate columns, then the same BN / 2 columns' up values
// (the producer loads the two halves of B, gemm_load_gated), so the thread holding gate
// column c in FS_FRAG(m, q, e) holds its up value in FS_FRAG(m, q + BN / 16, e); it stores
// E(silu(gate) up) at column c of the BN / 2 output columns of tile pn (N: the output's
// width, F), as pairs of adjacent columns.
template <class C, class E, int MI, int HALF>
static __device__ __forceinline__ void gemm_store_gated(const E& epi, float (&acc)[MI][HALF],
                                                        u64 out, int pm, int cw, int pn, int pz,
                                                        int warp, int lane, int M, int N) {
  constexpr int COLS = C::BN / 2;
  using Out = typename C::Out;
  const bool pairs = (N % 2) == 0;
  const auto store_row = [&](int m, int h, int row) __attribute__((always_inline)) {
    if (row >= M) return;
    const long long row_base = (long long)pz * M * N + (long long)row * N;
#pragma unroll
    for (int q = 0; q < COLS / 8; ++q) {
      const int col = gemm_frag_col<COLS>(pn, q, lane);
      if (col >= N) continue;
      const float h0 = fs_silu_mul(FS_FRAG(m, q, 0), FS_FRAG(m, q + COLS / 8, 0));
      const float h1 = fs_silu_mul(FS_FRAG(m, q, 1), FS_FRAG(m, q + COLS / 8, 1));
      const float y0 = epi(h0, row, col, pz, 0u, 0u);
      const float y1 = epi(h1, row, min(col + 1, N - 1), pz, 0u, 0u);  // (inside the row)
      gemm_store_pair<Out>(out, row_base + col, col, N, pairs, y0, y1);
    }
  };
  gemm_for_rows<C, MI>(pm, cw, warp, lane, store_row);
}

// Stores the values left in a thread's accumulators of m64 block m, row half h (a row of
// the output at row_base): bounds-checked pairs of adjacent columns (gemm_store_pair).
template <class C, int MI, int HALF>
static __device__ __forceinline__ void gemm_store_frag_row(float (&acc)[MI][HALF], int m, int h,
                                                           u64 out, long long row_base, int pn,
                                                           int lane, int N, bool pairs) {
#pragma unroll
  for (int q = 0; q < C::BN / 8; ++q) {
    const int col = gemm_frag_col<C::BN>(pn, q, lane);
    if (col < N) {
      gemm_store_pair<typename C::Out>(out, row_base + col, col, N, pairs, FS_FRAG(m, q, 0),
                                       FS_FRAG(m, q, 1));
    }
  }
}

// The direct epilogue's stores of the values E left in the accumulators (EPILOGUE_FIRST):
// bounds-checked pairs of adjacent columns, one 32/64-bit store when the row length is even.
template <class C, int MI, int HALF>
static __device__ __forceinline__ void gemm_store_computed(float (&acc)[MI][HALF], u64 out, int pm,
                                                           int cw, int pn, int pz, int warp,
                                                           int lane, int M, int N) {
  const long long out_base = (long long)pz * M * N;
  const bool pairs = (N % 2) == 0;
  const auto store_row = [&](int m, int h, int row) __attribute__((always_inline)) {
    if (row < M) {
      gemm_store_frag_row<C>(acc, m, h, out, out_base + (long long)row * N, pn, lane, N, pairs);
    }
  };
  gemm_for_rows<C, MI>(pm, cw, warp, lane, store_row);
}

// The direct epilogue: accumulators -> E -> bounds-checked stores of pairs of adjacent
// columns (one 32/64-bit store when the row length is even). Accumulator j of m64 block m
// holds row 16 warp + lane/4 + 8 ((j/2)%2) and column 8 (j/4) + 2 (lane%4) + j%2 of it.
template <class C, class E, int MI, int HALF>
static __device__ __forceinline__ void gemm_store(const E& epi, float (&acc)[MI][HALF], u64 out,
                                                  int pm, int cw, int pn, int pz, int warp,
                                                  int lane, int M, int N, u32 ln_cols,
                                                  u32 ln_rows) {
  constexpr int BN = C::BN;
  using Out = typename C::Out;
  const long long out_base = (long long)pz * M * N;
  const bool pairs = (N % 2) == 0;
  const auto row_epilogue = [&](int m, int h, int row) __attribute__((always_inline)) {
    if constexpr (C::SOFTMAX == SOFTMAX_NONE && C::EPILOGUE_FIRST) {
      // E over the 64-row block's fragments first (gemm_store_computed stores them), with
      // no branch: outside the matrix E reads the last row's or column's inputs (values
      // never stored), so that its loads are issued together instead of each behind the
      // previous store or bounds check
      const int r_in = min(row, M - 1);
#pragma unroll
      for (int q = 0; q < BN / 8; ++q) {
        const int col = gemm_frag_col<BN>(pn, q, lane);
        FS_FRAG(m, q, 0) = epi(FS_FRAG(m, q, 0), r_in, min(col, N - 1), pz, ln_cols, ln_rows);
        FS_FRAG(m, q, 1) = epi(FS_FRAG(m, q, 1), r_in, min(col + 1, N - 1), pz, ln_cols, ln_rows);
      }
    } else if constexpr (C::SOFTMAX == SOFTMAX_NONE) {
      if (row < M) {
        const long long row_base = out_base + (long long)row * N;
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
          const int col = gemm_frag_col<BN>(pn, q, lane);
          if (col < N) {
            const float y0 = epi(FS_FRAG(m, q, 0), row, col, pz, ln_cols, ln_rows);
            if (pairs) {
              const float y1 = epi(FS_FRAG(m, q, 1), row, col + 1, pz, ln_cols, ln_rows);
              Out::st2((void*)out, row_base + col, y0, y1);
            } else {
              Out::st((void*)out, row_base + col, y0);
              if (col + 1 < N) {
                const float y1 = epi(FS_FRAG(m, q, 1), row, col + 1, pz, ln_cols, ln_rows);
                Out::st((void*)out, row_base + col + 1, y1);
              }
            }
          }
        }
      }
    } else if constexpr (C::SOFTMAX == SOFTMAX_PARTIALS) {
      bool live;
      float mx, sum;
      gemm_softmax_stats<C>(epi, acc, m, h, row, pn, pz, lane, M, N, ln_cols, ln_rows, live, mx,
                            sum);
      if (live) {
        const long long row_base = out_base + (long long)row * N;
        if (lane % 4 == 0) {
          const int tiles_n = (N + BN - 1) / BN;
          epi.partials()[((long long)pz * M + row) * tiles_n + pn] = make_float2(mx, sum);
        }
        gemm_store_frag_row<C>(acc, m, h, out, row_base, pn, lane, N, pairs);
      }
    } else {
      bool live;
      float mx, sum;
      gemm_softmax_stats<C>(epi, acc, m, h, row, pn, pz, lane, M, N, ln_cols, ln_rows, live, mx,
                            sum);
      const float inv = __fdividef(1.0f, sum);  // sum >= 1: exp(0) is a term
      if (live) {
        const long long row_base = out_base + (long long)row * N;
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
          const int col = gemm_frag_col<BN>(pn, q, lane);
          if (col < N) {
            const float s0 = FS_FRAG(m, q, 0) * inv;
            const float y0 = epi.post(s0, row, col, pz);
            if (pairs) {
              const float s1 = FS_FRAG(m, q, 1) * inv;
              const float y1 = epi.post(s1, row, col + 1, pz);
              Out::st2((void*)out, row_base + col, y0, y1);
            } else {
              Out::st((void*)out, row_base + col, y0);
              if (col + 1 < N) {
                const float s1 = FS_FRAG(m, q, 1) * inv;
                Out::st((void*)out, row_base + col + 1, epi.post(s1, row, col + 1, pz));
              }
            }
          }
        }
      }
    }
  };
  gemm_for_rows<C, MI>(pm, cw, warp, lane, row_epilogue);
  if constexpr (C::SOFTMAX == SOFTMAX_NONE && C::EPILOGUE_FIRST) {
    gemm_store_computed<C>(acc, out, pm, cw, pn, pz, warp, lane, M, N);
  }
}

// The "smem" epilogue's first half in the softmax modes: the row statistics, with the
// accumulators replaced in place by what the store half stages (partials: the rounded
// logits, and the quad's first lane writes the row's (max, sum) pair of the tile; row:
// post of the softmax). Accumulators outside the matrix keep what they hold: nothing
// stores them.
template <class C, class E, int MI, int HALF>
static __device__ __forceinline__ void gemm_smem_compute(const E& epi, float (&acc)[MI][HALF],
                                                         int pm, int cw, int pn, int pz, int warp,
                                                         int lane, int M, int N, u32 ln_cols,
                                                         u32 ln_rows) {
  constexpr int BN = C::BN;
  const auto row_softmax = [&](int m, int h, int row) __attribute__((always_inline)) {
    bool live;
    float mx, sum;
    gemm_softmax_stats<C>(epi, acc, m, h, row, pn, pz, lane, M, N, ln_cols, ln_rows, live, mx, sum);
    if constexpr (C::SOFTMAX == SOFTMAX_PARTIALS) {
      if (live && lane % 4 == 0) {
        const int tiles_n = (N + BN - 1) / BN;
        epi.partials()[((long long)pz * M + row) * tiles_n + pn] = make_float2(mx, sum);
      }
    } else {
      const bool dense = live && pn * BN + BN <= N;
      const float inv = __fdividef(1.0f, sum);  // sum >= 1: exp(0) is a term
      if (dense) {
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
          const int col = gemm_frag_col<BN>(pn, q, lane);
          FS_FRAG(m, q, 0) = epi.post(FS_FRAG(m, q, 0) * inv, row, col, pz);
          FS_FRAG(m, q, 1) = epi.post(FS_FRAG(m, q, 1) * inv, row, col + 1, pz);
        }
      } else if (live) {
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
          const int col = gemm_frag_col<BN>(pn, q, lane);
          if (col < N) {
            FS_FRAG(m, q, 0) = epi.post(FS_FRAG(m, q, 0) * inv, row, col, pz);
          }
          if (col + 1 < N) {
            FS_FRAG(m, q, 1) = epi.post(FS_FRAG(m, q, 1) * inv, row, col + 1, pz);
          }
        }
      }
    }
  };
  gemm_for_rows<C, MI>(pm, cw, warp, lane, row_softmax);
}

// The rolled epilogue (loop=rolled, SOFTMAX_NONE, no LayerNorm rewrite): E applied to a
// staged chunk's values in place (the accumulators rounded to Out first, as the graph's
// matmul output is), 16 bytes of one row per lane and step (8 16-bit or 4 f32 values), in a
// loop the compiler keeps rolled. Unrolled over the accumulators, E's code grows with the
// tile: bias + exact GELU made 87 KB of a 192x192 tile's 126 KB of SASS (rolled: 39 KB), all
// fetched again when a model's other kernels have evicted it from the SMs' instruction
// caches (suspected, not yet measured: benchmarks/gemm_code_cache.py asks).
template <class C, class E>
static __device__ __forceinline__ void gemm_rolled_apply(const E& epi, u32 buf, int row0, int col0,
                                                         int pz, int lane, int M, int N) {
  using Out = typename C::Out;
  constexpr int PER = 16 / Out::BYTES;  // values per 16-byte step
#pragma unroll 1
  for (int i = 0; i < 4; ++i) {
    const int r = i * 4 + lane / 8;
    const int k = lane % 8;
    const int row = row0 + r;
    const int col = col0 + k * PER;
    const u32 at = buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4));
    const uint4 w = fs_ld_shared4(at);
    u32 words[4] = {w.x, w.y, w.z, w.w};
    float v[PER];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (Out::BYTES == 2) {
        Out::unpack(words[j], v[2 * j], v[2 * j + 1]);
      } else {
        v[j] = __uint_as_float(words[j]);
      }
    }
    // outside the matrix E reads the last row's or column's inputs (no branch per element:
    // the 8 chains overlap); the store clips those values
    const int r_in = min(row, M - 1);
#pragma unroll
    for (int j = 0; j < PER; ++j) v[j] = epi(v[j], r_in, min(col + j, N - 1), pz, 0u, 0u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (Out::BYTES == 2) {
        words[j] = Out::pack(v[2 * j], v[2 * j + 1]);
      } else {
        words[j] = __float_as_uint(v[j]);
      }
    }
    fs_st_shared4(at, words[0], words[1], words[2], words[3]);
  }
}

// The "smem" epilogue's store half: each warp's accumulators (16 rows of each 64-row block)
// go through a 2 KB staging buffer of 16 rows x 128 bytes, one TMA store box, in the
// 128-byte swizzle (16-byte chunk k of row r at chunk k ^ (r % 8)). Two buffers per warp
// alternate: before refilling one, lane 0 waits until the store issued from it two chunks
// ago has read it. 16-bit outputs are packed in pairs and written by stmatrix, f32 by
// 8-byte stores; lane 0 issues the TMA store (the tensor map clips the ragged edges).
// Without a map (rows not 16-byte aligned) the warp copies the buffer out itself: 16 bytes
// per lane, coalesced, masked at the edges.
template <class C, class E, int MI, int HALF>
static __device__ __forceinline__ void gemm_smem_store(const E& epi, float (&acc)[MI][HALF],
                                                       u64 out, u64 map_out, u32 se, int& epi_it,
                                                       int pm, int cw, int pn, int pz, int warp,
                                                       int lane, int M, int N, u32 ln_cols,
                                                       u32 ln_rows) {
  constexpr int BN = C::BN, WM = C::WM;
  using Out = typename C::Out;
  constexpr int ES = Out::BYTES;
  constexpr int CW_COLS = 128 / ES;  // columns of one staged chunk
  const bool interior = gemm_rows<C>(pm, cw) + WM <= M && pn * BN + BN <= N;  // no softmax
#pragma unroll
  for (int m = 0; m < MI; ++m) {
#pragma unroll
    for (int ch = 0; ch < BN / CW_COLS; ++ch, ++epi_it) {
      if constexpr (C::SOFTMAX == SOFTMAX_NONE && !C::ROLLED) {  // E chunk by chunk
        constexpr int OCTETS = CW_COLS / 8;
        if (interior) {
#pragma unroll
          for (int o = 0; o < OCTETS; ++o) {
            if (o == OCTETS / 2) __syncwarp();  // keeps half a chunk's loads in flight at most
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int q = ch * OCTETS + o;
              const int row = gemm_rows<C>(pm, cw) + m * 64 + warp * 16 + (lane / 4) + 8 * h;
              const int col = gemm_frag_col<BN>(pn, q, lane);
              FS_FRAG(m, q, 0) = epi(FS_FRAG(m, q, 0), row, col, pz, ln_cols, ln_rows);
              FS_FRAG(m, q, 1) = epi(FS_FRAG(m, q, 1), row, col + 1, pz, ln_cols, ln_rows);
            }
          }
        } else {
#pragma unroll
          for (int o = 0; o < OCTETS; ++o) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int q = ch * OCTETS + o;
              const int row = gemm_rows<C>(pm, cw) + m * 64 + warp * 16 + (lane / 4) + 8 * h;
              const int col = gemm_frag_col<BN>(pn, q, lane);
              if (row < M && col < N) {
                FS_FRAG(m, q, 0) = epi(FS_FRAG(m, q, 0), row, col, pz, ln_cols, ln_rows);
              }
              if (row < M && col + 1 < N) {
                FS_FRAG(m, q, 1) = epi(FS_FRAG(m, q, 1), row, col + 1, pz, ln_cols, ln_rows);
              }
            }
          }
        }
      }
      const u32 buf = se + (u32)(((cw * 4 + warp) * 2 + (epi_it & 1)) * 2048);
      if (lane == 0) fs_bulk_wait_read<1>();
      __syncwarp();
      if constexpr (ES == 2) {
#pragma unroll
        for (int p = 0; p < 4; ++p) {  // column octets 2p, 2p + 1 of the chunk
          const int mat = lane / 8;
          const int r = (lane % 8) + 8 * (mat % 2);
          const int k = 2 * p + mat / 2;
          const int q = ch * 8 + 2 * p;
          fs_stmatrix4(buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4)),
                       Out::pack(acc[m][4 * q + 0], acc[m][4 * q + 1]),
                       Out::pack(acc[m][4 * q + 2], acc[m][4 * q + 3]),
                       Out::pack(acc[m][4 * q + 4], acc[m][4 * q + 5]),
                       Out::pack(acc[m][4 * q + 6], acc[m][4 * q + 7]));
        }
      } else {
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = lane / 4 + 8 * h;
            const int k = 2 * qq + (lane % 4) / 2;
            const int q = ch * 4 + qq;
            fs_st_shared2(buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4) + (lane % 2) * 8),
                          acc[m][4 * q + 2 * h], acc[m][4 * q + 2 * h + 1]);
          }
        }
      }
      if constexpr (C::ROLLED) {
        __syncwarp();  // the chunk's raw values, staged by every lane
        gemm_rolled_apply<C>(epi, buf, gemm_rows<C>(pm, cw) + m * 64 + warp * 16,
                             pn * BN + ch * CW_COLS, pz, lane, M, N);
      }
      fs_fence_async_smem();
      __syncwarp();
      const int row0 = gemm_rows<C>(pm, cw) + m * 64 + warp * 16;
      const int col0 = pn * BN + ch * CW_COLS;
      if (map_out != 0) {
        if (lane == 0) {
          fs_tma_store(map_out, buf, col0, row0, pz);
          fs_bulk_commit();
        }
      } else {
        const long long out_base = (long long)pz * M * N;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = i * 4 + lane / 8;
          const int k = lane % 8;
          const int row = row0 + r;
          const int col = col0 + k * (16 / ES);
          if (row < M && col < N) {
            const uint4 v = fs_ld_shared4(buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4)));
            fs_st16<ES>((void*)out, out_base + (long long)row * N + col, v, N - col);
          }
        }
      }
    }
  }
}

#undef FS_FRAG

// One tile of a consumer warpgroup: [ln=tile: normalise its A rows], the main loop (one
// wgmma group in flight, each stage released on its empty barrier once read), then the
// epilogue. Pingpong hands the tensor cores to the other consumer after its main loop.
template <class C, class E, int MI, int HALF>
static __device__ __forceinline__ void gemm_consumer_tile(
    const E& epi, float (&acc)[MI][HALF], int& it, int& epi_it, int t, int tiles, u32 sa, u32 sb,
    u32 se, u32 sg, u32 sv_mine, u32 bars, u64 out, u64 map_out, int pm, int pn, int pz, int cw,
    int lt, int warp, int lane, int kblocks, int M, int N, int K, u64 ws, u64 counters, int split) {
  constexpr int BM = C::BM, WM = C::WM, STAGES = C::STAGES;
  constexpr int A_BYTES = C::A_BYTES, B_BYTES = C::B_BYTES;
  u32 ln_cols = 0, ln_rows = 0;
  if constexpr (C::STAGED) {
    gemm_stage_vectors<C>(epi, sv_mine, cw, lt, pm, pn, M, N, ln_cols, ln_rows);
  }
  if constexpr (C::LN_TILE) {  // normalise the warpgroup's rows of the resident A tiles
    constexpr int BK = C::BK;
    constexpr int TPR = 128 / WM, CHUNKS = 8 / TPR;
    constexpr float LN_EPS = C::ln_eps();  // a literal where used (a constexpr local)
    using In = typename C::In;
    for (int kb = 0; kb < kblocks; ++kb)  // ln=tile: the whole K of the tile
      fs_bar_wait(bars + 8 * (2 * STAGES + (it + kb) % STAGES), (u32)((it + kb) / STAGES) & 1u);
    {
      const int lr = cw * WM + lt / TPR;  // the row of the block tile this thread reads
      const int part = lt % TPR;
      const u32 row_at = (u32)lr * 128u;
      const u32 swz = (u32)(lr % 8);
      float p[8];
      float sum, mean, ssd;
      FS_LN_STATS()
      // A row of huge finite values (bf16 3e38) overflows the float32 sums, where the
      // float64 reference is finite: such a row takes them again, of x / 2^ilogb(max|x|)
      // ((x - mean) * rstd does not change with the scale but for eps, scaled alike and
      // floored: var is 0 only for a constant row, whose deviations are exactly 0). The
      // whole warp takes the branch (its shuffles need every lane): a row that did not
      // overflow keeps xs = 1 and gets the same sums again. NaN or Inf: NaN either way.
      float xs = 1.0f;
      float eps = LN_EPS;
      const bool huge = !(fabsf(mean) <= FS_FLT_MAX && ssd <= FS_FLT_MAX);
      if (__any_sync(0xffffffffu, huge)) {
        float top = 0.0f;  // fmaxf drops a NaN: the sums keep it
        FS_LN_EACH_CHUNK(_Pragma("unroll") for (int e = 0; e < 4; ++e) {
          FS_LN_UNPACK
          top = fmaxf(top, fmaxf(fabsf(lo), fabsf(hi)));
        })
        if constexpr (TPR >= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        if constexpr (TPR >= 4) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        if constexpr (TPR >= 8) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 4));
        if (huge && top <= FS_FLT_MAX) {
          xs = ldexpf(1.0f, 1 - ilogbf(top));  // a power of 2 (exact scaling), normal
          eps = LN_EPS * xs * xs;
          if constexpr (LN_EPS > 0.0f) eps = fmaxf(eps, 1.17549435e-38f);
        }
        FS_LN_STATS(lo *= xs; hi *= xs;)
      }
      const float rstd = rsqrtf(ssd / (float)K + eps);
#pragma unroll
      for (int kb = 0; kb < STAGES; ++kb) {
        if (kb >= kblocks) break;
        const u32 a_row = sa + (u32)((it + kb) % STAGES) * A_BYTES + row_at;
        uint4 v[CHUNKS];  // the K step's loads first: the stores below would order them
        float4 gb[CHUNKS][4];
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int chunk = part * CHUNKS + c;
          v[c] = fs_ld_shared4(a_row + ((((u32)chunk) ^ swz) << 4));
          const u32 g_at = sg + 4u * (u32)(kb * BK + chunk * 8);
          gb[c][0] = fs_ld_shared4f(g_at);
          gb[c][1] = fs_ld_shared4f(g_at + 16u);
          gb[c][2] = fs_ld_shared4f(g_at + 4u * STAGES * BK);
          gb[c][3] = fs_ld_shared4f(g_at + 4u * STAGES * BK + 16u);
        }
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int chunk = part * CHUNKS + c;
          const u32 w[4] = {v[c].x, v[c].y, v[c].z, v[c].w};
          const float4 g0 = gb[c][0], g1 = gb[c][1], b0 = gb[c][2], b1 = gb[c][3];
          const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
          const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
          u32 y[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            FS_LN_UNPACK
            y[e] = In::pack(fmaf(fmaf(lo, xs, -mean) * rstd, g[2 * e], b[2 * e]),
                            fmaf(fmaf(hi, xs, -mean) * rstd, g[2 * e + 1], b[2 * e + 1]));
          }
          fs_st_shared4(a_row + ((((u32)chunk) ^ swz) << 4), y[0], y[1], y[2], y[3]);
        }
      }
      fs_fence_async_smem();  // the generic-proxy writes before the wgmma's async-proxy reads
    }
    fs_named_sync(LN_BARRIER + cw, 128);  // every row of the warpgroup normalised
  }
  // f32 operands run as tf32 (wgmma k8: 32 bytes of a row, like f16's k16), K-major only
  static_assert(C::In::BYTES == 2 || (C::A_K_MAJOR && C::B_K_MAJOR && !C::LN_TILE),
                "tf32 operands are K-major (wgmma has no transpose for them), no ln=tile");
  for (int kb = 0; kb < kblocks; ++kb, ++it) {
    const int s = it % STAGES;
    fs_bar_wait(bars + 8 * s, (u32)(it / STAGES) & 1u);
    const u32 a_base = sa + s * A_BYTES;
    const u32 b_base = sb + s * B_BYTES;
    fs_wg_fence();
#pragma unroll
    for (int kk = 0; kk < C::BK * C::In::BYTES / 32; ++kk) {
#pragma unroll
      for (int m = 0; m < MI; ++m) {
        const int row_blk = C::PINGPONG ? m * 64 : cw * WM + m * 64;
        // K-major: rows of 128 bytes (BK elements: 64 16-bit or 32 f32 values), 8-row
        // groups 1024 bytes apart (SBO), a K step (k16 of 16-bit, k8 of tf32) is +32
        // bytes. MN-major (16-bit only): 64-element chunks of BK rows (8192 bytes apart:
        // LBO), 8-row K groups 1024 bytes apart (SBO), a K step of 16 rows is +2048 bytes.
        C::mma(acc[m],
               C::A_K_MAJOR
                   ? fs_desc(a_base + (u32)(row_blk * 128 + kk * 32), 16u, 1024u)
                   : fs_desc(a_base + (u32)((row_blk / 64) * 8192 + kk * 2048), 8192u, 1024u),
               C::B_K_MAJOR ? fs_desc(b_base + (u32)(kk * 32), 16u, 1024u)
                            : fs_desc(b_base + (u32)(kk * 2048), 8192u, 1024u),
               (kb | kk) != 0);
      }
    }
    fs_wg_commit();
    if constexpr (C::PREFETCH) {
      if (kb == (kblocks > C::PREFETCH_AHEAD ? kblocks - C::PREFETCH_AHEAD : 0)) {
        epi.prefetch(lt, pm, cw, pn, M, N);
      }
    }
    if (kb > 0) {
      fs_wg_wait<1>();
      if (lt == 0) fs_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
    }
  }
  if constexpr (C::PINGPONG) {
    if (t + gridDim.x < tiles) fs_named_arrive(2 - cw, 256);  // the other's turn
  }
  fs_wg_wait<0>();
  // an empty split (split-K, fewer K steps than splits) used no stage: fs_split_reduce
  // takes its partial as zeros (writing zeros to acc here serialises the wgmma pipeline)
  if (lt == 0 && kblocks > 0) fs_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
#pragma unroll
  for (int m = 0; m < MI; ++m)
#pragma unroll
    for (int j = 0; j < HALF; ++j) fs_fence_reg(acc[m][j]);
  if constexpr (C::STAGED) {
    fs_cp_wait_all();
    fs_named_sync(VECTOR_BARRIER + cw, 128);  // every thread's copies have landed
  }
  if constexpr (C::SPLIT_K > 1) {
    const int ct = cw * 128 + lt;  // split-K (split_k.cuh)
    if (!fs_split_reduce<C::SPLIT_K, 128 * C::CONSUMERS>(acc, ws, counters, t, split, ct,
                                                         kblocks == 0, SPLIT_BARRIER))
      return;
  }
  if constexpr (C::SMEM_EPILOGUE) {
    if constexpr (C::SOFTMAX != SOFTMAX_NONE) {
      gemm_smem_compute<C>(epi, acc, pm, cw, pn, pz, warp, lane, M, N, ln_cols, ln_rows);
    }
    gemm_smem_store<C>(epi, acc, out, map_out, se, epi_it, pm, cw, pn, pz, warp, lane, M, N,
                       ln_cols, ln_rows);
  } else if constexpr (C::SWIGLU) {
    gemm_store_gated<C>(epi, acc, out, pm, cw, pn, pz, warp, lane, M, N);
  } else {
    gemm_store<C>(epi, acc, out, pm, cw, pn, pz, warp, lane, M, N, ln_cols, ln_rows);
  }
}

// The block program. Shared memory (from smem_raw, 1024-aligned): the A and B rings, then
// [the "smem" epilogue's staging: 2 x 2 KB per warp] [staged vectors: 8 (BN + WM) B per
// consumer] [ln=tile: gamma, beta as f32, STAGES x BK each], then the mbarriers: full[s] =
// bars + 8 s, empty[s] = bars + 8 (STAGES + s) [ln=tile: a_full[s] = bars + 8 (2 STAGES +
// s); full[s] then counts B only]. Split-K (C::SPLIT_K > 1): the blocks walk work units,
// SPLIT_K per tile (fs_split_unit), ws and counters are its workspace (fs_split_reduce; 0
// without split-K). Grouped (C::GROUPED, a mixture of experts' grouped GEMM): groups is a
// device table of ints written on the stream before the launch, groups[0] the row tiles in
// use (M bounds the rows, a tile count only at most), groups[1 + pm] the B batch (expert) of
// row tile pm: the walk covers the row tiles in use and no more, each tile's B from its
// expert's slice of a batched B map (batches = 1). Early B (C::EARLY_B: B is a constant of
// the program, which no kernel writes): the kernel waits for the kernels before it itself
// (its wrapper does not, fs_grid_dependency_wait) and the producer issues the B loads of
// its first unit's first STAGES K steps before its wait, so that a dependent launch
// (programmatic edge) overlaps the weights' first reads with the previous kernel's tail;
// every other thread waits before it touches memory. Returns 0 (Numba's ABI: the status of
// the call).
template <class C, class E>
static __device__ __forceinline__ int gemm(const E& epi, u64 smem_raw, u64 map_a, u64 map_b,
                                           u64 out, u64 map_out, int M, int N, int K, int batches,
                                           u64 ws, u64 counters, u64 groups = 0, u64 w4_scale = 0,
                                           u64 w4_zero = 0) {
  static_assert(C::SPLIT_K == 1 || (!C::PINGPONG && !C::LN_TILE),
                "split-K runs the cooperative schedule without ln=tile");
  static_assert(!C::GROUPED || (C::SPLIT_K == 1 && !C::PINGPONG && !C::LN_TILE && C::BATCH_B &&
                                !C::BATCH_A && C::SOFTMAX == SOFTMAX_NONE),
                "a grouped GEMM runs the cooperative schedule over a batched B, nothing else");
  static_assert(
      !C::SWIGLU || (C::SPLIT_K == 1 && !C::PINGPONG && !C::LN_TILE && !C::SMEM_EPILOGUE &&
                     C::B_K_MAJOR && C::SOFTMAX == SOFTMAX_NONE && C::BN % 16 == 0),
      "the gated epilogue: the cooperative schedule, direct, B K-major");
  static_assert(C::CONSUMERS >= 1 && C::CONSUMERS <= 3, "the named barriers serve 1-3 consumers");
  static_assert(!C::EARLY_B || (!C::GROUPED && !C::LN_TILE),
                "early B: the groups table and ln=tile's A-first loads come after the wait");
  static_assert(!C::B_W4 || (C::B_K_MAJOR && !C::EARLY_B && !C::GROUPED && !C::LN_TILE &&
                             !C::SWIGLU && !C::BATCH_B && C::BK == 64 && C::BN % 64 == 0),
                "int4 B: K-major, 64 K a step, whole 64-row boxes, one batch, TMA's A alone");
  static_assert(!C::W4_RS || (C::A_K_MAJOR && !C::BATCH_A && !C::PINGPONG && !C::SMEM_EPILOGUE &&
                              C::SOFTMAX == SOFTMAX_NONE && !C::STAGED &&
                              C::BN == 64 * C::CONSUMERS && C::BM % 16 == 0 && C::BM <= 256),
                "int4 B in the consumers' registers: the cooperative schedule, 64 weight "
                "columns a consumer, X K-major as wgmma's B (at most 256 rows), direct stores");
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, STAGES = C::STAGES, WM = C::WM;
  constexpr int A_BYTES = C::A_BYTES, B_BYTES = C::B_BYTES, MI = WM / 64, HALF = BN / 2;
  const u32 base = (fs_smem((const void*)smem_raw) + 1023u) & ~1023u;
  const u32 sa = base;
  const u32 sb = base + STAGES * A_BYTES;
  const u32 se = sb + STAGES * B_BYTES;
  const u32 sv = se + C::EPI_BYTES;
  const u32 sg = sv + C::VEC_BYTES;
  const u32 bars = sg + C::LN_BYTES;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      fs_bar_init(bars + 8 * s, C::B_W4 && !C::W4_RS ? 1 + 128 : 1);  // + the producer's 128
      fs_bar_init(bars + 8 * (STAGES + s), C::PINGPONG ? 1 : C::CONSUMERS);
      if constexpr (C::LN_TILE) fs_bar_init(bars + 8 * (2 * STAGES + s), 1);
    }
    fs_bar_init_fence();
  }
  if constexpr (C::LN_TILE) {
    if ((K + BK - 1) / BK > STAGES) return 0;  // ln=tile: K must be resident
  }
  __syncthreads();
  const int tiles_m =
      C::GROUPED ? min(__ldg((const int*)groups), (M + BM - 1) / BM) : (M + BM - 1) / BM;
  constexpr int BN_OUT = C::SWIGLU ? BN / 2 : BN;  // output columns a tile
  const int tiles_n = (N + BN_OUT - 1) / BN_OUT;
  const int tiles = tiles_m * tiles_n * batches;
  const int units = tiles * C::SPLIT_K;
  const int kblocks = (K + BK - 1) / BK;
  if (wg == 0) {
    fs_setmaxnreg_dec<C::PRODUCER_REGISTERS>();
    if constexpr (C::W4_RS) {
      if (tid == 0)
        gemm_w4_rs_producer<C>(sa, sb, bars, map_a, map_b, units, kblocks, tiles_m, tiles_n);
    } else if constexpr (C::B_W4) {
      gemm_w4_producer<C>(sa, sb, bars, tid, map_a, map_b, w4_scale, w4_zero, N, K, units, kblocks,
                          tiles_m, tiles_n);
    } else {
      if constexpr (C::EARLY_B) {
        if (tid != 0) fs_grid_dependency_wait();  // (thread 0: after its early B loads)
      }
      // The producer: one thread walks the block's tiles and per K step waits for a free
      // stage, announces its bytes on the stage's full barrier and issues the TMA loads. With
      // ln=tile every K step's A tile comes first, each on its stage's own a_full barrier, so
      // that the consumers normalise A while B is still landing; full then counts B alone.
      if (tid == 0) {
        fs_prefetch_map(map_a);
        fs_prefetch_map(map_b);
        // early B: the stages whose B is loading before the wait (their full barriers
        // announced for A and B; the main loop then adds A alone)
        int early = 0;
        if constexpr (C::EARLY_B) {
          if (blockIdx.x < units) {
            const auto [t, kb0, kb1, pm, pn, pz] =
                gemm_unit<C>(blockIdx.x, kblocks, tiles_m, tiles_n);
            const int zb = C::BATCH_B ? pz : 0;
            early = min(kb1 - kb0, STAGES);
            for (int i = 0; i < early; ++i) {
              fs_bar_expect(bars + 8 * i, A_BYTES + B_BYTES);
              gemm_load_b<C>(sb + i * B_BYTES, map_b, bars + 8 * i, kb0 + i, pn, zb, N);
            }
          }
          fs_grid_dependency_wait();
        }
        int it = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
          const auto [t, kb0, kb1, pm, pn, pz] = gemm_unit<C>(u, kblocks, tiles_m, tiles_n);
          const int za = C::BATCH_A ? pz : 0;
          const int zb = C::GROUPED ? __ldg((const int*)groups + 1 + pm) : C::BATCH_B ? pz : 0;
          if constexpr (C::LN_TILE) {
            for (int kb = 0; kb < kblocks; ++kb) {  // ln=tile: the A tiles first
              const int s = (it + kb) % STAGES;
              fs_bar_wait(bars + 8 * (STAGES + s), ((u32)((it + kb) / STAGES) & 1u) ^ 1u);
              const u32 a_full = bars + 8 * (2 * STAGES + s);
              fs_bar_expect(a_full, A_BYTES);
              fs_tma_load(sa + s * A_BYTES, map_a, a_full, kb * BK, pm * BM, za);
            }
          }
          for (int kb = kb0; kb < kb1; ++kb, ++it) {
            const int s = it % STAGES;
            const u32 full = bars + 8 * s;
            if constexpr (C::LN_TILE) {
              fs_bar_expect(full, B_BYTES);
              gemm_load_b<C>(sb + s * B_BYTES, map_b, full, kb, pn, zb, N);
            } else {
              const u32 phase = (u32)(it / STAGES) & 1u;
              fs_bar_wait(bars + 8 * (STAGES + s), phase ^ 1u);
              // early B: this stage's B announced and issued already
              const bool b_loading = C::EARLY_B && it < early;
              if (!b_loading) fs_bar_expect(full, A_BYTES + B_BYTES);
              const u32 a_dst = sa + s * A_BYTES;
              const u32 b_dst = sb + s * B_BYTES;
              gemm_load<C, C::A_K_MAJOR, C::BM>(a_dst, map_a, full, kb, pm, za);
              if (!b_loading) gemm_load_b<C>(b_dst, map_b, full, kb, pn, zb, N);
            }
          }
        }
      }
    }
  } else {
    const auto [cw, lt, warp, lane] = fs_consumer_thread<C::CONSUMER_REGISTERS>(wg, tid);
    if constexpr (C::W4_RS) {  // (else: the operands' own consumers, not compiled here)
      gemm_w4_rs_consumer<C>(epi, sa, sb, bars, out, w4_scale, w4_zero, cw, lt, warp, lane, units,
                             kblocks, tiles_m, tiles_n, M, N, ws, counters, SPLIT_BARRIER);
    } else {
      if constexpr (C::EARLY_B) fs_grid_dependency_wait();
      const u32 sv_mine = sv + (u32)cw * (8u * (BN + WM));
      if constexpr (C::LN_TILE) gemm_ln_affine<C>(epi, sg, tid, K);
      float acc[MI][HALF];
      int epi_it = 0;  // staged chunks so far: the staging buffer's parity
      if constexpr (C::PINGPONG) {
        // consumer cw takes the block's tiles cw, cw + 2, ...; the producer fills the ring
        // tile after tile, so a tile's first K step is at ring position local * kblocks. A
        // consumer starts a main loop only after the other has issued its previous one.
        int local = cw;
        for (int t = blockIdx.x + cw * gridDim.x; t < tiles; t += 2 * gridDim.x, local += 2) {
          int pm, pn, pz;
          gemm_tile<C::GROUP_M>(t, tiles_m, tiles_n, pm, pn, pz);
          int it = local * kblocks;
          if (local > 0) fs_named_sync(1 + cw, 256);  // wait for the tensor cores' turn
          gemm_consumer_tile<C>(epi, acc, it, epi_it, t, tiles, sa, sb, se, sg, sv_mine, bars, out,
                                map_out, pm, pn, pz, cw, lt, warp, lane, kblocks, M, N, K, ws,
                                counters, 0);
        }
      } else {
        int it = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
          const auto [t, kb0, kb1, pm, pn, pz] = gemm_unit<C>(u, kblocks, tiles_m, tiles_n);
          gemm_consumer_tile<C>(epi, acc, it, epi_it, t, tiles, sa, sb, se, sg, sv_mine, bars, out,
                                map_out, pm, pn, pz, cw, lt, warp, lane, kb1 - kb0, M, N, K, ws,
                                counters, u - t * C::SPLIT_K);
        }
      }
      if constexpr (C::SMEM_EPILOGUE) {
        if (lane == 0) fs_bulk_wait<0>();  // every TMA store done
      }
    }
  }
  return 0;
}

}  // namespace fusec

#undef FS_LN_UNPACK
#undef FS_LN_EACH_CHUNK
#undef FS_LN_ROW_SUM
#undef FS_LN_STATS
#undef FS_NEG_INF
#undef FS_FLT_MAX
