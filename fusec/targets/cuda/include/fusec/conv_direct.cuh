// fusec kernel layer: the direct convolution (any groups, strides, padding, dilation), one
// output element per thread and grid-stride step, f32 accumulation: the conv template for
// depthwise and few-channel groups (fusec/targets/cuda/conv/cpp.py, DirectConvSpec).
//
// An instantiation supplies
//   C: the geometry (NB, CIN, H, W -> KOUT, P, Q; G groups of CG input and KG output channels;
//      R x S taps; strides SH, SW; dilations DH, DW; padding PT, PL) and the element types
//      In (x and the weights) and Out;
//   E: the epilogue functor, `operator()(acc, n, k, p, q, idx)`: the value stored at the
//      NCHW output element (n, k, p, q), flat index idx.
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <class C, class E>
static __device__ __forceinline__ int conv_direct(const E& epi, u64 x, u64 w, u64 out) {
  using In = typename C::In;
  const long long total = (long long)C::NB * C::KOUT * C::P * C::Q;
  const long long step = (long long)gridDim.x * blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (long long idx = first; idx < total; idx += step) {
    const int q = (int)(idx % C::Q);
    long long t = idx / C::Q;
    const int p = (int)(t % C::P);
    t /= C::P;
    const int ko = (int)(t % C::KOUT);
    const int n = (int)(t / C::KOUT);
    const int g = ko / C::KG;
    float acc = 0.0f;
    for (int c = 0; c < C::CG; ++c) {
      const long long x_base = ((long long)n * C::CIN + g * C::CG + c) * C::H * C::W;
      const long long w_base = ((long long)ko * C::CG + c) * C::R * C::S;
      // a tap in the padding multiplies a zero, not nothing: 0 * Inf is NaN there, as
      // in the reference (and in the implicit GEMM, whose padding TMA zero-fills)
#pragma unroll
      for (int r = 0; r < C::R; ++r) {
        const int ih = p * C::SH + r * C::DH - C::PT;
        const bool row_inside = ih >= 0 && ih < C::H;
#pragma unroll
        for (int s = 0; s < C::S; ++s) {
          const int iw = q * C::SW + s * C::DW - C::PL;
          const float xv = (row_inside && iw >= 0 && iw < C::W)
                               ? In::ld((const void*)x, x_base + ih * C::W + iw)
                               : 0.0f;
          acc += xv * In::ld((const void*)w, w_base + r * C::S + s);
        }
      }
    }
    C::Out::st((void*)out, idx, epi(acc, n, ko, p, q, idx));
  }
  return 0;
}

}  // namespace fusec
