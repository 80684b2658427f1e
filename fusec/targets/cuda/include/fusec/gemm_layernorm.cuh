// fusec kernel layer: the Hopper GEMM's LayerNorm prologue (gemm.cuh includes it; the
// design is described in fusec/targets/cuda/gemm/aux.py): the exact path of the folded
// rewrite (ln=fold: FlashNorm) for the rows it cannot be trusted with, and the macros of the
// ln=tile normalisation of the resident A tiles (used inside gemm_consumer_tile; gemm.cuh
// undefines them at its end).
#pragma once

#include "fusec/common.cuh"
#include "fusec/shared.cuh"

#define FS_FLT_MAX 3.40282347e+38f  // NVRTC has no INFINITY: finite <=> |v| <= it

namespace fusec {

// The LayerNorm rewrite (FlashNorm, ln=fold) y = rstd * (acc - mu * c) + d is exact in real
// numbers only: acc = x . W' is taken of the raw row, so where the row's mean is large
// against its spread (|mu| * rstd > FS_LN_EXACT_RATIO: a constant or nearly constant row)
// the two products cancel its digits and rstd multiplies what is left; and a bf16 row of
// huge finite values (3e38) overflows acc, or mu * c, by itself. Such an element (its
// statistics finite: a row holding Inf or NaN stays NaN) is taken again as
// sum_k xhat_k W'_kc + d, xhat_k = (x_k - mu) * rstd, from global memory (in halves: x_k - mu
// of finite values cannot overflow): slow, and only for those rows (issue #26). Ordinary
// rows pay two compares. At the ratio 128 the rewrite's error is under a tenth of W's
// rounding in W' (numpy model, K <= 1023); an overflow anywhere in the rewrite leaves y
// Inf or NaN (rstd > 0, d finite), which the second compare sees.
#define FS_LN_EXACT_RATIO 128.0f

static __device__ __forceinline__ bool gemm_ln_inexact(float y, float mu, float rstd) {
  if (!(fabsf(mu) <= FS_FLT_MAX && rstd <= FS_FLT_MAX)) return false;  // NaN statistics
  return !(fabsf(y) <= FS_FLT_MAX) || fabsf(mu) * rstd > FS_LN_EXACT_RATIO;
}

// sum_k (x_k - mu) rstd W'_kc of row `row` of x (K values) and column `col` of the folded
// weight W' (stored K x N if WKByN, else N x K), both of the operand type In. The epilogue
// inlines it into each of a thread's accumulators (64 in a 64x128 tile), so its K loop stays
// rolled: unrolled by the compiler the 64 copies grew the GEMM's code 37 -> 177 KB (101 KB
// rolled; no change in time on the H200, benchmarks/results/gemm-ln-ab.md). Called
// (__noinline__) it is 72 KB, but the row-softmax GEMM spills around the call.
template <class In, int WKByN>
static __device__ __forceinline__ float gemm_ln_exact(const void* x, const void* w, long long row,
                                                      int col, int K, int N, float mu, float rstd) {
  const float half_mu = 0.5f * mu, twice_rstd = 2.0f * rstd;
  const long long x0 = row * K;
  float sum = 0.0f;
#pragma unroll 1
  for (int k = 0; k < K; ++k) {
    const float xhat = (0.5f * In::ld(x, x0 + k) - half_mu) * twice_rstd;
    const long long wi = WKByN ? (long long)k * N + col : (long long)col * K + k;
    sum = fmaf(xhat, In::ld(w, wi), sum);
  }
  return sum;
}

}  // namespace fusec

// ln=tile: the 16-bit pair w[e] of the resident A row as floats lo, hi.
#define FS_LN_UNPACK              \
  float lo, hi;                   \
  if constexpr (In::IS_BF16) {    \
    fs_unpack_bf16(w[e], lo, hi); \
  } else {                        \
    fs_unpack_f16(w[e], lo, hi);  \
  }

// ln=tile: for each K step of the tile and each of this thread's 16-byte chunks of its row
// (through the 128-byte swizzle), `const u32 w[4]`, the chunk's words, then BODY.
#define FS_LN_EACH_CHUNK(BODY)                                           \
  _Pragma("unroll") for (int kb = 0; kb < STAGES; ++kb) {                \
    if (kb >= kblocks) break;                                            \
    const u32 a_row = sa + (u32)((it + kb) % STAGES) * A_BYTES + row_at; \
    _Pragma("unroll") for (int c = 0; c < CHUNKS; ++c) {                 \
      const int chunk = part * CHUNKS + c;                               \
      const u32 at = a_row + ((((u32)chunk) ^ swz) << 4);                \
      const uint4 v = fs_ld_shared4(at);                                 \
      const u32 w[4] = {v.x, v.y, v.z, v.w};                             \
      BODY                                                               \
    }                                                                    \
  }

// ln=tile: the sum of VAR over the TPR threads that share a row (a quad-lane group).
#define FS_LN_ROW_SUM(VAR)                                             \
  if constexpr (TPR >= 2) VAR += __shfl_xor_sync(0xffffffffu, VAR, 1); \
  if constexpr (TPR >= 4) VAR += __shfl_xor_sync(0xffffffffu, VAR, 2); \
  if constexpr (TPR >= 8) VAR += __shfl_xor_sync(0xffffffffu, VAR, 4);

// ln=tile, the two passes over a thread's part of its resident row: the mean, then the
// sum of squared deviations (columns past K, zero-filled by TMA, left out: only a K step
// that crosses K checks its columns), of x (SCALE empty) or x * xs. Eight partial sums
// (one per value of a 16-byte chunk): one warp per scheduler runs this, so its speed is
// its instruction-level parallelism.
#define FS_LN_STATS(SCALE)                                                                      \
  _Pragma("unroll") for (int i = 0; i < 8; ++i) p[i] = 0.0f;                                    \
  FS_LN_EACH_CHUNK(_Pragma("unroll") for (int e = 0; e < 4; ++e) {                              \
    FS_LN_UNPACK                                                                                \
    SCALE                                                                                       \
    p[2 * e] += lo; /* zero past K */                                                           \
    p[2 * e + 1] += hi;                                                                         \
  })                                                                                            \
  sum = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));                      \
  FS_LN_ROW_SUM(sum)                                                                            \
  mean = sum / (float)K;                                                                        \
  _Pragma("unroll") for (int i = 0; i < 8; ++i) p[i] = 0.0f;                                    \
  FS_LN_EACH_CHUNK(const bool inside = kb * BK + BK <= K; /* uniform: the last K step checks */ \
                   _Pragma("unroll") for (int e = 0; e < 4; ++e) {                              \
                     FS_LN_UNPACK                                                               \
                     SCALE                                                                      \
                     const int col = kb * BK + chunk * 8 + 2 * e;                               \
                     const float dl = inside || col < K ? lo - mean : 0.0f;                     \
                     const float dh = inside || col + 1 < K ? hi - mean : 0.0f;                 \
                     p[2 * e] = fmaf(dl, dl, p[2 * e]);                                         \
                     p[2 * e + 1] = fmaf(dh, dh, p[2 * e + 1]);                                 \
                   })                                                                           \
  ssd = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));                      \
  FS_LN_ROW_SUM(ssd)
