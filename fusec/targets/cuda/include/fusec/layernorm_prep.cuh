// fusec kernel layer: the LayerNorm prologue pre-pass of `layernorm(x) @ W` (the design and
// the exact rewrite it serves are described in fusec/targets/cuda/gemm/aux.py, whose
// LayerNormPrep instantiates it).
//
// fusec::layernorm_prep<C> is one launch: the first `fold_blocks` blocks fold gamma and beta
// into W (W' = diag(gamma) W rounded to W's type, c = column sums of W', d = beta @ W), the
// others compute the row statistics of x (mean, rstd as a float2 per row). An instantiation
// supplies C:
//   THREADS, FOLD_ROWS (rows of W a fold lane owns, W stored K x N), VECTORS (16-byte loads
//   per row in flight), STAT_ROWS (rows of x a statistics warp owns), W_K_BY_N (W stored
//   K x N, else N x K), eps() (the LayerNorm's epsilon), and the element types X (x and W),
//   Gamma, Beta (fusec::F16, BF16, F32).
#pragma once

#include "fusec/common.cuh"
#include "fusec/reduce.cuh"

namespace fusec {

// Adds the 8 values of v, shifted, to the sums (the same order as one value at a time).
template <class T>
static __device__ __forceinline__ void lnprep_add8(uint4 v, float shift, float& s1, float& s2) {
  const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float lo = T::cvt(words[j] & 0xFFFFu) - shift;
    const float hi = T::cvt(words[j] >> 16) - shift;
    s1 += lo + hi;
    s2 += lo * lo + hi * hi;
  }
}

// A row of huge finite values overflows the shifted sums (bf16 +-1e20: the squares),
// where the float64 reference is finite: the warp (uniform: the sums are butterflies)
// takes them again, of x times a power of 2 near 1 / max|x| (exact and normal), from
// global memory; the mean and rstd come back to x's scale (eps scaled alike, floored:
// var is 0 only for a constant row). Other rows: xs = 1, the same values bit for bit.
// NaN or Inf in a row: NaN statistics either way (fmaxf drops a NaN; the sums keep it).
template <class C>
static __device__ __forceinline__ void lnprep_finish_stats(u64 stats, int row, int K, float shift,
                                                           float s1, float s2, int lane,
                                                           const u16* xr) {
  using T = typename C::X;
  s1 = fs_warp_sum(s1);
  s2 = fs_warp_sum(s2);
  float xs = 1.0f;
  float ixs = 1.0f;  // 1 / xs, exact (a power of 2): no division's slow-path call
  float eps = C::eps();
  if (!(fabsf(s1) <= 3.40282347e+38f && s2 <= 3.40282347e+38f)) {
    float top = 0.0f;
    for (int k = lane; k < K; k += 32) top = fmaxf(top, fabsf(T::cvt(__ldg(xr + k))));
    top = fs_warp_max(top);
    if (top <= 3.40282347e+38f) {
      // ldexpf(1, 1 - ilogbf(top)) for a normal top, from its exponent bits: the library
      // calls were an outlined CALL in the pre-pass (test_fused_variant_cubin)
      const int e = (__float_as_int(top) >> 23) & 0xff;  // top overflowed sums: e >= 64
      xs = __int_as_float((255 - e) << 23);
      ixs = __int_as_float((e - 1) << 23);
      if constexpr (C::eps() > 0.0f) {
        eps = fmaxf(C::eps() * xs * xs, 1.17549435e-38f);
      } else {
        eps = C::eps() * xs * xs;
      }
      const float scaled_shift = shift * xs;
      s1 = 0.0f;
      s2 = 0.0f;
      for (int k = lane; k < K; k += 32) {
        const float f = T::cvt(__ldg(xr + k)) * xs - scaled_shift;
        s1 += f;
        s2 += f * f;
      }
      s1 = fs_warp_sum(s1);
      s2 = fs_warp_sum(s2);
    }
  }
  if (lane == 0) {
    const float dm = __fdividef(s1, (float)K);
    const float var = fmaxf(__fdividef(s2, (float)K) - dm * dm, 0.0f);
    const float rstd = rsqrtf(var + eps) * xs;
    ((float2*)stats)[row] = make_float2((shift * xs + dm) * ixs, rstd);
  }
}

// W stored K x N: a warp folds 32 columns (4 lanes of 8) of 8 * FOLD_ROWS rows. Lane
// (tx, ty) = (lane % 4, lane / 4) loads 16 bytes of each of the rows ty, ty + 8, ..., all
// before its first store. The column sums of the warp's rows are added across ty by
// shuffles and go to `cd` as 16-byte vector atomics: the atomics to one cache line
// serialise in L2, so their count, not the bytes, bounds the pre-pass.
template <class C>
static __device__ __forceinline__ int lnprep_fold_k_by_n(int fb, int warp, int lane, u64 gamma,
                                                         u64 beta, u64 w, u64 wout, u64 cd, int K,
                                                         int N) {
  using T = typename C::X;
  const int strips = (N + 255) / 256;
  const int nw = (fb % strips) * 256 + warp * 32;
  if (nw >= N) return 0;
  const int tx = lane % 4, ty = lane / 4;
  const int n0 = nw + tx * 8;
  const int kb = (fb / strips) * (8 * C::FOLD_ROWS) + ty;  // this lane's rows: kb + 8 j
  float gm[C::FOLD_ROWS], bt[C::FOLD_ROWS], cs[8], ds[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) cs[c] = ds[c] = 0.0f;
#pragma unroll
  for (int j = 0; j < C::FOLD_ROWS; ++j) {
    const int k = kb + 8 * j;
    gm[j] = k < K ? C::Gamma::ld((const void*)gamma, k) : 0.0f;
    bt[j] = k < K ? C::Beta::ld((const void*)beta, k) : 0.0f;
  }
  if ((N % 8) == 0 && ((w | wout) % 16) == 0) {
    uint4 v[C::FOLD_ROWS];
#pragma unroll
    for (int j = 0; j < C::FOLD_ROWS; ++j) {
      const int k = kb + 8 * j;
      v[j] = k < K && n0 < N ? __ldg((const uint4*)((const u16*)w + (long long)k * N + n0))
                             : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < C::FOLD_ROWS; ++j) {
      const int k = kb + 8 * j;
      if (k >= K || n0 >= N) break;
      const u32 in[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
      u32 out[4];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float w0 = T::cvt(in[h] & 0xFFFFu), w1 = T::cvt(in[h] >> 16);
        const u32 q0 = T::bits(gm[j] * w0), q1 = T::bits(gm[j] * w1);
        out[h] = q0 | (q1 << 16);
        cs[2 * h] += T::cvt(q0);
        cs[2 * h + 1] += T::cvt(q1);
        ds[2 * h] += bt[j] * w0;
        ds[2 * h + 1] += bt[j] * w1;
      }
      *(uint4*)((u16*)wout + (long long)k * N + n0) = make_uint4(out[0], out[1], out[2], out[3]);
    }
  } else {
    // Ragged or unaligned: one column at a time, still every row's load ahead of its use.
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      if (n0 + c >= N) break;
      float wv[C::FOLD_ROWS];
#pragma unroll
      for (int j = 0; j < C::FOLD_ROWS; ++j) {
        const int k = kb + 8 * j;
        wv[j] = k < K ? T::ld((const void*)w, (long long)k * N + n0 + c) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < C::FOLD_ROWS; ++j) {
        const int k = kb + 8 * j;
        if (k >= K) break;
        const u16 q = T::bits(gm[j] * wv[j]);
        ((u16*)wout)[(long long)k * N + n0 + c] = q;
        cs[c] += T::cvt(q);
        ds[c] += bt[j] * wv[j];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < 8; ++c) {
#pragma unroll
    for (int o = 4; o < 32; o *= 2) {
      cs[c] += __shfl_xor_sync(0xffffffffu, cs[c], o);
      ds[c] += __shfl_xor_sync(0xffffffffu, ds[c], o);
    }
  }
  if (ty != 0 || n0 >= N) return 0;
  float* csum = (float*)cd + n0;
  float* dsum = (float*)cd + ((N + 3) & ~3) + n0;
  if (n0 + 8 <= N && (N % 4) == 0) {
    fs_red4(csum, cs[0], cs[1], cs[2], cs[3]);
    fs_red4(csum + 4, cs[4], cs[5], cs[6], cs[7]);
    fs_red4(dsum, ds[0], ds[1], ds[2], ds[3]);
    fs_red4(dsum + 4, ds[4], ds[5], ds[6], ds[7]);
  } else {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      if (n0 + c < N) {
        atomicAdd(csum + c, cs[c]);
        atomicAdd(dsum + c, ds[c]);
      }
    }
  }
  return 0;
}

// W stored N x K: a warp folds a row of W, VECTORS 16-byte loads per lane in flight.
template <class C>
static __device__ __forceinline__ int lnprep_fold_n_by_k(int fb, int warp, int lane, u64 gamma,
                                                         u64 beta, u64 w, u64 wout, u64 cd, int K,
                                                         int N) {
  using T = typename C::X;
  using G = typename C::Gamma;
  using B = typename C::Beta;
  const int n = fb * (C::THREADS / 32) + warp;
  if (n >= N) return 0;
  const u16* wr = (const u16*)w + (long long)n * K;
  u16* qr = (u16*)wout + (long long)n * K;
  float cs = 0.0f, ds = 0.0f;
  if ((K % 8) == 0 && ((w | wout) % 16) == 0) {
    for (int base = 0; base < K; base += 256 * C::VECTORS) {
      uint4 v[C::VECTORS];
#pragma unroll
      for (int j = 0; j < C::VECTORS; ++j) {
        const int k = base + (lane + 32 * j) * 8;
        v[j] = k < K ? __ldg((const uint4*)(wr + k)) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int j = 0; j < C::VECTORS; ++j) {
        const int k = base + (lane + 32 * j) * 8;
        if (k >= K) break;
        const u32 in[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
        u32 out[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const float w0 = T::cvt(in[h] & 0xFFFFu), w1 = T::cvt(in[h] >> 16);
          const u32 q0 = T::bits(G::ld((const void*)gamma, k + 2 * h) * w0);
          const u32 q1 = T::bits(G::ld((const void*)gamma, k + 2 * h + 1) * w1);
          out[h] = q0 | (q1 << 16);
          cs += T::cvt(q0) + T::cvt(q1);
          ds += B::ld((const void*)beta, k + 2 * h) * w0 +
                B::ld((const void*)beta, k + 2 * h + 1) * w1;
        }
        *(uint4*)(qr + k) = make_uint4(out[0], out[1], out[2], out[3]);
      }
    }
  } else {
    for (int k = lane; k < K; k += 32) {
      const float wv = T::cvt(__ldg(wr + k));
      const u16 q = T::bits(G::ld((const void*)gamma, k) * wv);
      qr[k] = q;
      cs += T::cvt(q);
      ds += B::ld((const void*)beta, k) * wv;
    }
  }
  cs = fs_warp_sum(cs);
  ds = fs_warp_sum(ds);
  if (lane == 0) {
    ((float*)cd)[n] = cs;
    ((float*)cd)[((N + 3) & ~3) + n] = ds;
  }
  return 0;
}

template <class C>
static __device__ __forceinline__ int layernorm_prep(u64 x, u64 gamma, u64 beta, u64 w, u64 wout,
                                                     u64 stats, u64 cd, int M, int K, int N,
                                                     int fold_blocks) {
  using T = typename C::X;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  // The fold blocks come first: they are few and loop over K, so they start at once and
  // run beside the statistics blocks instead of after them.
  if ((int)blockIdx.x < fold_blocks) {
    const int fb = (int)blockIdx.x;
    if constexpr (C::W_K_BY_N) {
      return lnprep_fold_k_by_n<C>(fb, warp, lane, gamma, beta, w, wout, cd, K, N);
    } else {
      return lnprep_fold_n_by_k<C>(fb, warp, lane, gamma, beta, w, wout, cd, K, N);
    }
  }
  // A warp owns STAT_ROWS rows and issues every first load of all of them before it adds:
  // the fold's registers leave room for one block per SM, so the bytes in flight that
  // hide the memory latency come from each warp, not from many resident warps.
  const int row0 = (((int)blockIdx.x - fold_blocks) * (C::THREADS / 32) + warp) * C::STAT_ROWS;
  if (row0 >= M) return 0;
  if ((K % 8) == 0 && (x % 16) == 0) {
    // 16 bytes per lane per load; the shift (the row's first element) comes from lane 0's
    // first load by a shuffle, not from a load of its own that the others would wait behind.
    uint4 v[C::STAT_ROWS][C::VECTORS];
#pragma unroll
    for (int r = 0; r < C::STAT_ROWS; ++r) {
      const u16* xr = (const u16*)x + (long long)(row0 + r) * K;
#pragma unroll
      for (int j = 0; j < C::VECTORS; ++j) {
        const int k = (lane + 32 * j) * 8;
        v[r][j] =
            row0 + r < M && k < K ? __ldg((const uint4*)(xr + k)) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int r = 0; r < C::STAT_ROWS; ++r) {
      const int row = row0 + r;
      if (row >= M) break;
      const u16* xr = (const u16*)x + (long long)row * K;
      const float shift = T::cvt(__shfl_sync(0xffffffffu, v[r][0].x, 0) & 0xFFFFu);
      float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int j = 0; j < C::VECTORS; ++j) {
        if ((lane + 32 * j) * 8 < K) lnprep_add8<T>(v[r][j], shift, s1, s2);
      }
      for (int k = (lane + 32 * C::VECTORS) * 8; k < K; k += 256) {
        lnprep_add8<T>(__ldg((const uint4*)(xr + k)), shift, s1, s2);
      }
      lnprep_finish_stats<C>(stats, row, K, shift, s1, s2, lane, xr);
    }
  } else {
    for (int row = row0; row < min(row0 + C::STAT_ROWS, M); ++row) {
      const u16* xr = (const u16*)x + (long long)row * K;
      const float shift = T::cvt(__ldg(xr));
      float s1 = 0.0f, s2 = 0.0f;
      for (int k = lane; k < K; k += 32) {
        const float f = T::cvt(__ldg(xr + k)) - shift;
        s1 += f;
        s2 += f * f;
      }
      lnprep_finish_stats<C>(stats, row, K, shift, s1, s2, lane, xr);
    }
  }
  return 0;
}

}  // namespace fusec
