// fusec kernel layer: the channels-last copy of 16-bit data, NCHW -> [N][H][W][G][CGP] (the
// design is described in fusec/targets/cuda/conv/transpose.py, whose TransposeTiling and
// RelayoutSpec instantiate it; the conv template runs it before its implicit GEMM).
//
// relayout_blocks<X, VECTOR> is one thread's 8 x 8 block: 8 consecutive padded channels x 8
// consecutive pixels of one image (blockIdx.z), read as 8 channel rows (16-byte loads when
// VECTOR, else 2-byte ones, pixels past the end zero), transposed in registers and written
// as 8 16-byte pixel rows. An instantiation supplies X:
//   CHANNELS, CG, CGP (the input's channels, a group's channels, and padded: channels
//   CG..CGP-1 of a group are written as zeros), HW (pixels), CT (padded channels of the
//   copy, G * CGP), LC (channel lanes of a warp), BC, BP (channels and pixels of a block).
// relayout_few_pixels<F> is the copy [A][B][P] -> [A][P][B] for few pixels: a thread gathers
// one 16-byte group of 8 channels of one pixel (F: GROUPS threads' worth, B, P).
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <class X, bool VECTOR>
static __device__ __forceinline__ void relayout_blocks(const u16* __restrict__ x,
                                                       u16* __restrict__ xt) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int c0 = blockIdx.y * X::BC + (lane % X::LC) * 8;
  const int p0 = blockIdx.x * X::BP + (warp * (32 / X::LC) + lane / X::LC) * 8;
  const long long n = blockIdx.z;
  if (c0 >= X::CT || p0 >= X::HW) return;
  u32 v[8][4];  // v[i]: padded channel c0 + i at pixels p0 .. p0 + 7, two per word
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int g = (c0 + i) / X::CGP, cg = (c0 + i) - g * X::CGP;
    if (cg < X::CG) {
      const u16* row = x + (n * X::CHANNELS + g * X::CG + cg) * X::HW + p0;
      if constexpr (VECTOR) {
        const uint4 q = __ldg((const uint4*)row);
        v[i][0] = q.x;
        v[i][1] = q.y;
        v[i][2] = q.z;
        v[i][3] = q.w;
      } else {
#pragma unroll
        for (int j = 0; j < 8; j += 2) {
          const u32 lo = p0 + j < X::HW ? __ldg(row + j) : 0u;
          const u32 hi = p0 + j + 1 < X::HW ? __ldg(row + j + 1) : 0u;
          v[i][j / 2] = lo | (hi << 16);
        }
      }
    } else {
      v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0u;
    }
  }
  u16* out = xt + (n * X::HW + p0) * X::CT + c0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    // pixel j is the low (even j) or high half of word j / 2 of every channel
    const u32 sel = j % 2 ? 0x7632u : 0x5410u;
    const u32 o0 = __byte_perm(v[0][j / 2], v[1][j / 2], sel);
    const u32 o1 = __byte_perm(v[2][j / 2], v[3][j / 2], sel);
    const u32 o2 = __byte_perm(v[4][j / 2], v[5][j / 2], sel);
    const u32 o3 = __byte_perm(v[6][j / 2], v[7][j / 2], sel);
    // inline PTX: NVVM otherwise splits some of these 16-byte stores into four
    if (VECTOR || p0 + j < X::HW)
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(out + (long long)j * X::CT),
                   "r"(o0), "r"(o1), "r"(o2), "r"(o3)
                   : "memory");
  }
}

template <class F>
static __device__ __forceinline__ int relayout_few_pixels(u64 x, u64 xt) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= F::GROUPS) return 0;
  const int b0 = (int)(i % (F::B / 8)) * 8;
  const long long ap = i / (F::B / 8);
  const long long a = ap / F::P;
  const int p = (int)(ap % F::P);
  const u16* src = (const u16*)x + (a * F::B + b0) * F::P + p;
  u32 o[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    o[j] = (u32)__ldg(src + (2 * j) * F::P) | ((u32)__ldg(src + (2 * j + 1) * F::P) << 16);
  }
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"((u16*)xt + i * 8), "r"(o[0]),
               "r"(o[1]), "r"(o[2]), "r"(o[3])
               : "memory");
  return 0;
}

}  // namespace fusec
