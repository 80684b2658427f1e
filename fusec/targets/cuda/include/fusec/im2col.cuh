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
// 2-byte loads of neighbouring columns hit the same input rows, in L1. An instantiation
// supplies I: C, H, W, R, S, SH, SW, PT, PL, DH, DW, P, Q, CK, CKP and GROUPS (N*P*Q*CKP/8).
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <class I>
static __device__ __forceinline__ u16 im2col_value(const u16* __restrict__ x, long long n, int p,
                                                   int q, int j) {
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
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < I::GROUPS; i += step) {
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

}  // namespace fusec
