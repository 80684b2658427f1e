// fusec kernel layer: the im2col matrix of a few-channel conv's NCHW input (the design is
// described in fusec/targets/cuda/conv/im2col.py, whose Im2col instantiates it; the conv
// template runs it before the implicit GEMM of a stem conv).
//
// The matrix is [N][P][Q][CKP]: column j = (c * R + r) * S + s of output pixel (p, q) of
// image n holds x[n][c][p * SH - PT + r * DH][q * SW - PL + s * DW], zero outside the image
// and for j >= CK = C * R * S (CKP is CK rounded up to 8). That is the channels-last input
// of a 1x1 conv of CK channels whose weights are the KCRS weights read as [K][C * R * S].
//
// im2col<I> is a grid-stride loop in which a thread writes one 16-byte group of 8 columns of
// one pixel (consecutive threads: consecutive groups, so the stores are contiguous); its
// 2-byte loads of neighbouring columns hit the same input rows, in L1 (a warp's load touches
// about one cache line per column it covers).
//
// im2col_tiled<I> (the opt-in "tiled" form) is one block of PIX consecutive pixels (of the
// flattened n, p, q index), all CKP columns: gathered with the 32 lanes of a warp along 32
// pixels and a warp per column (neighbouring pixels of a row read input elements SW apart:
// one or two cache lines a load), staged in shared memory rows of SP halves (an odd number
// of words: no bank conflict), then stored as 16-byte vectors of the block's contiguous
// PIX * CKP halves.
//
// An instantiation supplies I: C, H, W, R, S, SH, SW, PT, PL, DH, DW, P, Q, CK, CKP and
// GROUPS (N*P*Q*CKP/8); the tiled form also PIX, SP and PIXELS (N*P*Q).
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <class I>
static __device__ __forceinline__ u16 im2col_value(const u16* __restrict__ x, long long n,
                                                   int p, int q, int j) {
  if (j >= I::CK) return 0;
  const int c = j / (I::R * I::S), rs = j - c * (I::R * I::S);
  const int r = rs / I::S, s = rs - r * I::S;
  const int h = p * I::SH - I::PT + r * I::DH, w = q * I::SW - I::PL + s * I::DW;
  if (h < 0 || h >= I::H || w < 0 || w >= I::W) return 0;
  return __ldg(x + ((n * I::C + c) * I::H + h) * I::W + w);
}

template <class I>
static __device__ __forceinline__ void im2col(const u16* __restrict__ x, u16* __restrict__ xt) {
  constexpr int per_pixel = I::CKP / 8;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < I::GROUPS;
       i += step) {
    const long long pixel = i / per_pixel;
    const int j0 = (int)(i - pixel * per_pixel) * 8;
    const int q = (int)(pixel % I::Q);
    const long long np = pixel / I::Q;
    const int p = (int)(np % I::P);
    const long long n = np / I::P;
    u32 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const u32 lo = im2col_value<I>(x, n, p, q, j0 + 2 * k);
      const u32 hi = im2col_value<I>(x, n, p, q, j0 + 2 * k + 1);
      v[k] = lo | (hi << 16);
    }
    *(uint4*)(xt + i * 8) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

template <class I>
static __device__ __forceinline__ void im2col_tiled(const u16* __restrict__ x,
                                                    u16* __restrict__ xt) {
  __shared__ u16 tile[I::PIX * I::SP];
  const long long first = (long long)blockIdx.x * I::PIX;
  const int pixels = (int)min((long long)I::PIX, I::PIXELS - first);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int t = lane; t < I::PIX; t += 32) {
    const long long pixel = first + t;
    const int q = (int)(pixel % I::Q);
    const long long np = pixel / I::Q;
    const int p = (int)(np % I::P);
    const long long n = np / I::P;
    for (int j = warp; j < I::CKP; j += warps) {
      tile[t * I::SP + j] = t < pixels ? im2col_value<I>(x, n, p, q, j) : (u16)0;
    }
  }
  __syncthreads();
  constexpr int per_pixel = I::CKP / 8;
  u16* out = xt + first * I::CKP;
  for (int i = threadIdx.x; i < pixels * per_pixel; i += blockDim.x) {
    const int t = i / per_pixel, j0 = (i - t * per_pixel) * 8;
    const u16* row = tile + t * I::SP + j0;
    u32 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = (u32)row[2 * k] | ((u32)row[2 * k + 1] << 16);
    *(uint4*)(out + (long long)i * 8) = make_uint4(v[0], v[1], v[2], v[3]);
  }
}

}  // namespace fusec
