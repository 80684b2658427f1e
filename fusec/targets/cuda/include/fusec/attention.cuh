// fusec kernel layer: fused attention, softmax(Q K^T * scale [+ causal]) V, on the Hopper
// core (the design is described in fusec/targets/cuda/attention/cpp.py, which instantiates
// it): FlashAttention's online softmax, FA3's structure without its intra-warpgroup
// pipelining.
//
// fusec::attention<C> is the whole block: BM query rows of one (batch, head). Warpgroup 0,
// thread 0 loads the block's Q tile once and then, per BN keys, the K and V tiles into a ring
// of KV_STAGES stages (TMA); the consumer warpgroups own 64 query rows each: S = Q K^T by
// wgmma from shared memory, the mask and the online softmax in registers, then O += P V by
// wgmma with P as the A operand in registers. An instantiation supplies C:
//   BM, BN, SQ, SK, D, DV (sizes), QB (query blocks), NKV (key blocks), KV_STAGES, CAUSAL,
//   NAN_TO_ZERO, MASK, SOFTCAP, PRODUCER_REGISTERS, CONSUMER_REGISTERS; sl2() (scale * log2 e),
//   scale(), and with SOFTCAP cap() and scale_over_cap() (scores cap * tanh(S * scale / cap));
//   the element types In (Q, K, V), Out and Mask; its wgmma instructions `qk`
//   (m64nBNk16, both operands in shared memory) and `pv` (m64nDVk16, A from registers); and
//   how the operands are addressed: load_q/load_k/load_v(dst, map, bar, c0, row, bh), a TMA
//   load of the box
//   at head-size column c0 and row `row` of batch-head bh (the map's batch coordinates
//   computed from bh), and out_offset(bh, row), the element offset of output row `row`;
//   with MASK, mask_offset(bh, row, col), the element offset of the mask added to score
//   (row, col) of batch-head bh (a broadcast dimension has stride 0); with ROPE_Q / ROPE_K
//   (rotary position embeddings of Q / K, applied in shared memory after the TMA load:
//   AttentionRope), ROT (the rotated head dims), the element type Rope, q_cos_offset,
//   q_sin_offset (k_...) (bh, row, col), the offsets of the cos and sin factors of element
//   (row, col), and ROPE_VEC: 1 where every factor row is contiguous and each run of 8
//   factors 16-byte aligned past the table's address (read as 16-byte vectors).
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"
#include "fusec/shared.cuh"
#include "fusec/tma.cuh"
#include "fusec/wgmma.cuh"

namespace fusec {

// 1/x to 1 ulp without the IEEE slow path (a called subroutine)
static __device__ __forceinline__ float attention_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
static __device__ __forceinline__ float attention_shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}

// Named barriers of the RoPE prologue: a consumer warpgroup's Q rows (1 + cw), both
// consumers' K rows (3).
enum : int { ROPE_Q_BARRIER = 1, ROPE_K_BARRIER = 3 };

// The RoPE of one consumer warpgroup's 64 rows [r0, r0 + 64) of a tile (rows row0 + r of
// batch-head bh) in two steps: attention_rope_load reads the cos and sin factors into
// registers ahead of the tile (their global loads in flight while its TMA lands), then
// attention_rope_apply rotates the tile in shared memory. Element d of a row becomes
// x[d] cos - x[d + R/2] sin below R/2 and x[d] cos + x[d - R/2] sin from R/2 to R
// (rotate_half of the first R = C::ROT elements: all D, or GPT-NeoX's partial rotary; the
// elements past R stay as loaded), in f32 with one rounding, cos and sin read at the
// Config's offsets (Q: q_cos_offset, K: k_cos_offset). A work item is a 16-byte chunk k <
// R / 16 of a row and its partner k + R / 16 (the other half of the rotated part); thread lt
// takes items lt, lt + 128, ... Rows at or past `rows` (TMA's zero fill) are left as they
// are.
template <class C>
static __host__ __device__ constexpr int attention_rope_items() {
  return (64 * (C::ROT / 16) + 127) / 128;
}

// The factors of N of a thread's items (all by default) from item i0 on.
template <class C, int N = attention_rope_items<C>()>
struct AttentionRope {
  using Rope = typename C::Rope;
  enum : int {
    HALF = C::ROT / 16,                 // 16-byte chunks in half the rotated part of a row
    ITEMS = attention_rope_items<C>(),  // work items a thread
    WORDS = 2 * Rope::BYTES,            // 32-bit words of 8 factors (16-bit: 2 a word)
  };
  static_assert(C::ROT % 16 == 0 && C::ROT <= C::D, "RoPE of whole 16-byte chunk pairs");
  // item i0 + i's factors as their own bits: cos at d = 8k..8k+7, cos at d + R/2, sin at d,
  // sin at d + R/2
  u32 w[N][4][WORDS];

  // tile row, chunk and sequence row of this thread's item i; false past the tile or rows
  static __device__ __forceinline__ bool item(int i, int lt, int r0, int row0, int rows, int& r,
                                              int& k, int& row) {
    const int it = lt + 128 * i;
    r = r0 + it / HALF, k = it % HALF, row = row0 + r;
    return it < 64 * HALF && row < rows;
  }

  template <bool Q>
  static __device__ __forceinline__ long long offset(bool sin, int bh, int row, int d) {
    if constexpr (Q)
      return sin ? C::q_sin_offset(bh, row, d) : C::q_cos_offset(bh, row, d);
    else
      return sin ? C::k_sin_offset(bh, row, d) : C::k_cos_offset(bh, row, d);
  }

  // the 8 factors from element d on: one or two 16-byte loads where the Config says the
  // factors' rows are contiguous and 16-byte aligned (ROPE_VEC) and the table's address is
  // too (vec), else element by element at the offset function's address
  template <bool Q>
  static __device__ __forceinline__ void fetch(u32 (&dst)[WORDS], u64 p, bool sin, int bh, int row,
                                               int d, bool vec) {
    if (C::ROPE_VEC && vec) {
      const uint4* src =
          (const uint4*)((const unsigned char*)p + offset<Q>(sin, bh, row, d) * Rope::BYTES);
#pragma unroll
      for (int j = 0; j < WORDS / 4; ++j) {
        const uint4 v = __ldg(src + j);
        dst[4 * j] = v.x, dst[4 * j + 1] = v.y, dst[4 * j + 2] = v.z, dst[4 * j + 3] = v.w;
      }
      return;
    }
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const float a = Rope::ld((const void*)p, offset<Q>(sin, bh, row, d + e));
      const float b = Rope::ld((const void*)p, offset<Q>(sin, bh, row, d + e + 1));
      if constexpr (Rope::BYTES == 2) {
        dst[e / 2] = Rope::pack(a, b);  // exact: the values are of the type
      } else {
        dst[e] = __float_as_uint(a), dst[e + 1] = __float_as_uint(b);
      }
    }
  }

  // factors e and e + 1 of a fetched set
  static __device__ __forceinline__ void get(const u32 (&src)[WORDS], int e, float& a, float& b) {
    if constexpr (Rope::BYTES == 2) {
      Rope::unpack(src[e / 2], a, b);
    } else {
      a = __uint_as_float(src[e]), b = __uint_as_float(src[e + 1]);
    }
  }
};

template <class C, bool Q, int N>
static __device__ __forceinline__ void attention_rope_load(AttentionRope<C, N>& f, int r0, int row0,
                                                           int rows, int bh, int lt, u64 cos_p,
                                                           u64 sin_p, bool vec, int i0 = 0) {
  using R = AttentionRope<C, N>;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    int r, k, row;
    if (i0 + i >= R::ITEMS || !R::item(i0 + i, lt, r0, row0, rows, r, k, row)) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = 8 * k + h * (C::ROT / 2);
      R::template fetch<Q>(f.w[i][h], cos_p, false, bh, row, d, vec);
      R::template fetch<Q>(f.w[i][2 + h], sin_p, true, bh, row, d, vec);
    }
  }
}

// The rotation of the tile of ROWS rows of D 16-bit elements in shared memory at `base`
// (D / 64 TMA boxes of ROWS x 128 bytes, the 128-byte swizzle: 16-byte chunk k of row r at
// chunk k ^ (r % 8)), in place, with the factors attention_rope_load read for these rows.
template <class C, int ROWS, int N>
static __device__ __forceinline__ void attention_rope_apply(const AttentionRope<C, N>& f, u32 base,
                                                            int r0, int row0, int rows, int lt,
                                                            int i0 = 0) {
  using R = AttentionRope<C, N>;
  using In = typename C::In;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    int r, k, row;
    if (i0 + i >= R::ITEMS || !R::item(i0 + i, lt, r0, row0, rows, r, k, row)) continue;
    u32 addr[2];
    uint4 x[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int chunk = k + h * R::HALF;
      addr[h] = base + (u32)((chunk / 8) * (ROWS * 128) + r * 128 + (((chunk % 8) ^ (r % 8)) * 16));
      x[h] = fs_ld_shared4(addr[h]);
    }
    float lo[8], hi[8];
    const u32 wl[4] = {x[0].x, x[0].y, x[0].z, x[0].w};
    const u32 wh[4] = {x[1].x, x[1].y, x[1].z, x[1].w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      In::unpack(wl[e], lo[2 * e], lo[2 * e + 1]);
      In::unpack(wh[e], hi[2 * e], hi[2 * e + 1]);
    }
    u32 out[2][4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      float c0[2], c1[2], s0[2], s1[2], y[2][2];
      R::get(f.w[i][0], e, c0[0], c0[1]);
      R::get(f.w[i][1], e, c1[0], c1[1]);
      R::get(f.w[i][2], e, s0[0], s0[1]);
      R::get(f.w[i][3], e, s1[0], s1[1]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float a = lo[e + j], b = hi[e + j];  // elements d and d + R / 2
        y[0][j] = a * c0[j] - b * s0[j];
        y[1][j] = b * c1[j] + a * s1[j];
      }
      out[0][e / 2] = In::pack(y[0][0], y[0][1]);
      out[1][e / 2] = In::pack(y[1][0], y[1][1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) fs_st_shared4(addr[h], out[h][0], out[h][1], out[h][2], out[h][3]);
  }
  fs_fence_async_smem();  // the writes before the wgmma's (async proxy) reads
}

// Both steps on a tile that has landed, two items at a time: the factors of the two in
// flight together, and no more registers held than two items' (a K tile in the key loop
// at D 128, where the output accumulators are live).
template <class C, bool Q, int ROWS>
static __device__ __forceinline__ void attention_rope_tile(u32 base, int r0, int row0, int rows,
                                                           int bh, int lt, u64 cos_p, u64 sin_p,
                                                           bool vec) {
#pragma unroll 1
  for (int i0 = 0; i0 < attention_rope_items<C>(); i0 += 2) {
    AttentionRope<C, 2> f;
    attention_rope_load<C, Q>(f, r0, row0, rows, bh, lt, cos_p, sin_p, vec, i0);
    attention_rope_apply<C, ROWS>(f, base, r0, row0, rows, lt, i0);
  }
}

// A ROWS x COLS tile of 16-bit elements (Q, K or V) from row `row` of batch-head bh to dst
// as COLS / 64 TMA boxes of 64 columns (ROWS rows of 128 bytes each, one after another),
// its bytes announced on the barrier `full` first. LOAD: the Config's load_q/_k/_v.
template <int ROWS, int COLS, void (*LOAD)(u32, u64, u32, int, int, int)>
static __device__ __forceinline__ void attention_load_tile(u32 dst, u64 map, u32 full, int row,
                                                           int bh) {
  fs_bar_expect(full, ROWS * COLS * 2);
#pragma unroll
  for (int c = 0; c < COLS / 64; ++c) LOAD(dst + c * (ROWS * 128), map, full, c * 64, row, bh);
}

// Warpgroup 0's thread 0: the Q tile, then per key block the K and V tiles, each stage
// once both consumers released it.
template <class C>
static __device__ __forceinline__ void attention_producer(u32 sq, u32 sk, u32 sv, u32 q_full,
                                                          u32 k_full, u32 v_full, u32 k_empty,
                                                          u32 v_empty, u64 map_q, u64 map_k,
                                                          u64 map_v, int qb, int bh, int nkv) {
  enum : int { K_BYTES = C::BN * C::D * 2, V_BYTES = C::BN * C::DV * 2 };
  fs_prefetch_map(map_q);
  fs_prefetch_map(map_k);
  fs_prefetch_map(map_v);
  attention_load_tile<C::BM, C::D, C::load_q>(sq, map_q, q_full, qb * C::BM, bh);
  for (int j = 0; j < nkv; ++j) {
    const int st = j % C::KV_STAGES;
    const u32 phase = ((u32)(j / C::KV_STAGES) & 1u) ^ 1u;
    fs_bar_wait(k_empty + 8 * st, phase);
    attention_load_tile<C::BN, C::D, C::load_k>(sk + st * K_BYTES, map_k, k_full + 8 * st,
                                                j * C::BN, bh);
    fs_bar_wait(v_empty + 8 * st, phase);
    attention_load_tile<C::BN, C::DV, C::load_v>(sv + st * V_BYTES, map_v, v_full + 8 * st,
                                                 j * C::BN, bh);
  }
}

template <class C>
static __device__ __forceinline__ int attention(u64 smem_raw, u64 map_q, u64 map_k, u64 map_v,
                                                u64 out, u64 mask = 0, u64 q_cos = 0, u64 q_sin = 0,
                                                u64 k_cos = 0, u64 k_sin = 0) {
  enum : int {
    Q_BYTES = C::BM * C::D * 2,
    K_BYTES = C::BN * C::D * 2,
    V_BYTES = C::BN * C::DV * 2
  };
  enum : int { S_REGS = C::BN / 2, O_REGS = C::DV / 2 };
  const u32 base = (fs_smem((const void*)smem_raw) + 1023u) & ~1023u;
  const u32 sq = base;
  const u32 sk = sq + Q_BYTES;
  const u32 sv = sk + C::KV_STAGES * K_BYTES;
  // barriers: q_full, k_full[s], v_full[s], k_empty[s], v_empty[s]
  const u32 q_full = sv + C::KV_STAGES * V_BYTES;
  const u32 k_full = q_full + 8;
  const u32 v_full = k_full + 8 * C::KV_STAGES;
  const u32 k_empty = v_full + 8 * C::KV_STAGES;
  const u32 v_empty = k_empty + 8 * C::KV_STAGES;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int qb = blockIdx.x % C::QB;
  const int bh = blockIdx.x / C::QB;
  // causal: keys up to the block's last query row
  const int nkv = C::CAUSAL ? min(C::NKV, ((qb + 1) * C::BM + C::BN - 1) / C::BN) : C::NKV;
  if (tid == 0) {
    fs_bar_init(q_full, 1);
    for (int s = 0; s < C::KV_STAGES; ++s) {
      fs_bar_init(k_full + 8 * s, 1);
      fs_bar_init(v_full + 8 * s, 1);
      fs_bar_init(k_empty + 8 * s, 2);
      fs_bar_init(v_empty + 8 * s, 2);
    }
    fs_bar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    fs_setmaxnreg_dec<C::PRODUCER_REGISTERS>();
    if (tid == 0) {
      attention_producer<C>(sq, sk, sv, q_full, k_full, v_full, k_empty, v_empty, map_q, map_k,
                            map_v, qb, bh, nkv);
    }
  } else {
    const auto [cw, lt, warp, lane] = fs_consumer_thread<C::CONSUMER_REGISTERS>(wg, tid);
    // the scores' factor and the softmax's base: by index (no mask or causal), scores in
    // base 2 (scale * log2 e); with a mask read from memory, scale * S + mask in natural
    // units and log2 e applied after the maximum is subtracted (a mask of the dtype's
    // minimum, -3.4e38 in f32, times log2 e would be -inf, and a row of them NaN)
    const float sl2 = C::MASK ? C::scale() : C::sl2();
    const float unit = C::MASK ? 1.4426950408889634f : 1.0f;
    // soft-capped scores: cap * tanh(S * scale / cap), in the same units as above
    const float cap_units = C::MASK ? C::cap() : C::cap() * 1.4426950408889634f;
    const float NEG_INF = __int_as_float(0xff800000);
    // this thread's two rows (h = 0, 1) of the 64-row slice: 16 warp + lane/4 + 8 h
    const int row0 = qb * C::BM + cw * 64 + warp * 16 + lane / 4;
    float o[O_REGS];
#pragma unroll
    for (int i = 0; i < O_REGS; ++i) o[i] = 0.0f;
    float m_run[2] = {NEG_INF, NEG_INF};
    float l_run[2] = {0.0f, 0.0f};
    // RoPE: the factors of this warpgroup's Q rows and of its K rows of the first key block
    // read before their tiles land; a later key block's at the top of its step
    AttentionRope<C> q_rope, k_rope;
    const bool q_vec = ((q_cos | q_sin) & 15u) == 0, k_vec = ((k_cos | k_sin) & 15u) == 0;
    // (the first key block's early only where both sets fit: 2 items a thread, D 64)
    constexpr bool K_EARLY = attention_rope_items<C>() <= 2;
    if constexpr (C::ROPE_K && K_EARLY)
      attention_rope_load<C, false>(k_rope, cw * 64, 0, C::SK, bh, lt, k_cos, k_sin, k_vec);
    if constexpr (C::ROPE_Q)
      attention_rope_load<C, true>(q_rope, cw * 64, qb * C::BM, C::SQ, bh, lt, q_cos, q_sin, q_vec);
    fs_bar_wait(q_full, 0u);
    if constexpr (C::ROPE_Q) {  // this warpgroup's 64 rows of Q
      attention_rope_apply<C, C::BM>(q_rope, sq, cw * 64, qb * C::BM, C::SQ, lt);
      fs_named_sync(ROPE_Q_BARRIER + cw, 128);
    }
    const u32 q_base = sq + (u32)(cw * 64 * 128);
    for (int j = 0; j < nkv; ++j) {
      const int st = j % C::KV_STAGES;
      const u32 phase = (u32)(j / C::KV_STAGES) & 1u;
      float s[S_REGS];
      if constexpr (C::ROPE_K && K_EARLY) {
        if (j > 0)
          attention_rope_load<C, false>(k_rope, cw * 64, j * C::BN, C::SK, bh, lt, k_cos, k_sin,
                                        k_vec);
      }
      fs_bar_wait(k_full + 8 * st, phase);
      const u32 k_base = sk + st * K_BYTES;
      if constexpr (C::ROPE_K) {  // half of the stage's BN rows each, once for both
        static_assert(C::BN == 128, "the two consumers rotate 64 rows of K each");
        if constexpr (K_EARLY)
          attention_rope_apply<C, C::BN>(k_rope, k_base, cw * 64, j * C::BN, C::SK, lt);
        else
          attention_rope_tile<C, false, C::BN>(k_base, cw * 64, j * C::BN, C::SK, bh, lt, k_cos,
                                               k_sin, k_vec);
        fs_named_sync(ROPE_K_BARRIER, 256);
      }
      fs_wg_fence();
#pragma unroll
      for (int kk = 0; kk < C::D / 16; ++kk) {
        const u32 off = (u32)((kk % 4) * 32);
        C::qk(s, fs_desc(q_base + (u32)((kk / 4) * (C::BM * 128)) + off, 16u, 1024u),
              fs_desc(k_base + (u32)((kk / 4) * (C::BN * 128)) + off, 16u, 1024u), kk != 0);
      }
      fs_wg_commit();
      fs_wg_wait<0>();
#pragma unroll
      for (int i = 0; i < S_REGS; ++i) fs_fence_reg(s[i]);
      if (lt == 0) fs_bar_arrive(k_empty + 8 * st);
      // scores in base 2; keys past the end (and, causal, after the query) are -inf
      const bool edge =
          (j + 1) * C::BN > C::SK || (C::CAUSAL && (j + 1) * C::BN > qb * C::BM + cw * 64);
      float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
      for (int i = 0; i < S_REGS; ++i) {
        float v = C::SOFTCAP ? cap_units * tanhf(s[i] * C::scale_over_cap()) : s[i] * sl2;
        if constexpr (C::MASK) {
          const int col = j * C::BN + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
          const int row = row0 + 8 * ((i / 2) % 2);
          if (col < C::SK && row < C::SQ)
            v += C::Mask::ld((const void*)mask, C::mask_offset(bh, row, col));
        }
        if (edge) {
          const int col = j * C::BN + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
          const int row = row0 + 8 * ((i / 2) % 2);
          if (col >= C::SK || (C::CAUSAL && col > row)) v = NEG_INF;
        }
        s[i] = v;
        mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], v);
      }
      float corr[2], shift[2], sum[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], attention_shfl_xor(mx[h], 1));
        mx[h] = fmaxf(mx[h], attention_shfl_xor(mx[h], 2));
        shift[h] = mx[h] == NEG_INF ? 0.0f : mx[h];  // a fully masked row stays 0
        corr[h] = fs_ex2((m_run[h] - shift[h]) * unit);
        m_run[h] = mx[h];
        sum[h] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < S_REGS; ++i) {
        const float p = fs_ex2((s[i] - shift[(i / 2) % 2]) * unit);
        s[i] = p;
        sum[(i / 2) % 2] += p;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + sum[h];
#pragma unroll
      for (int i = 0; i < O_REGS; ++i) o[i] *= corr[(i / 2) % 2];
      // O += P V: the S accumulator fragment, packed, is the A fragment of m64k16 slice kk
      u32 pa[C::BN / 16][4];
#pragma unroll
      for (int kk = 0; kk < C::BN / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          pa[kk][e] = C::In::pack(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
      fs_bar_wait(v_full + 8 * st, phase);
      const u32 v_base = sv + st * V_BYTES;
      fs_wg_fence();
#pragma unroll
      for (int kk = 0; kk < C::BN / 16; ++kk)
        C::pv(o, pa[kk], fs_desc(v_base + (u32)(kk * 2048), (u32)(C::BN * 128), 1024u), 1);
      fs_wg_commit();
      fs_wg_wait<0>();
#pragma unroll
      for (int i = 0; i < O_REGS; ++i) fs_fence_reg(o[i]);
      if (lt == 0) fs_bar_arrive(v_empty + 8 * st);
    }
    // O / l, l summed over the quad of lanes that share the row
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[h];
      l += attention_shfl_xor(l, 1);
      l += attention_shfl_xor(l, 2);
      // l = 0: every score of the row -inf (a row the mask hides entirely): the graph's
      // softmax is NaN there, 0 with nan_to_zero (a causal row always sees its own key)
      const float empty = C::MASK && !C::NAN_TO_ZERO ? __int_as_float(0x7fc00000) : 0.0f;
      const float inv = l > 0.0f ? attention_rcp(l) : empty;
      // nan_to_zero: a NaN sum means a NaN or infinite score in the row, which makes every
      // probability of the row NaN (the row maximum is NaN) and the graph sets them to 0.
      const bool zero_row = C::NAN_TO_ZERO && !(l == l);
      const int row = row0 + 8 * h;
      if (row < C::SQ) {
        const long long base_o = C::out_offset(bh, row);
#pragma unroll
        for (int q = 0; q < C::DV / 8; ++q) {
          const int col = 8 * q + 2 * (lane % 4);
          C::Out::st2((void*)out, base_o + col, zero_row ? 0.0f : o[4 * q + 2 * h] * inv,
                      zero_row ? 0.0f : o[4 * q + 2 * h + 1] * inv);
        }
      }
    }
  }
  return 0;
}

}  // namespace fusec
