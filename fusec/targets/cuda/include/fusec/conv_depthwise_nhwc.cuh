// fusec kernel layer: the depthwise convolution channels-last (issue 28): NHWC input and
// output, weights [CH][1][R][S], one input and one output channel a group, any strides,
// padding and dilation. The conv template's direct kernel for a depthwise group that the
// channels-last pass relaid (fusec/targets/cuda/conv/cpp.py, DirectConvSpec layout "nhwc":
// ConvNeXt's 7x7 between its LayerNorm/MLP blocks, which read channels-last).
//
// A block computes tiles of TP x TQ output pixels x CB channels of one image (a block-
// stride loop over the tiles, channel tiles fastest). Per tile it stages in shared memory
// the tile's input window, IH x IW pixels x CB channels as 16-bit values (zero where the
// window leaves the image: a tap in the padding multiplies a zero, so 0 * Inf is NaN as in
// the reference), and the CB channels' R x S weights as f32, [R*S][CB]. Each thread then
// computes CV adjacent channels (one 32-bit word of a pair when CV = 2) x a strip of QT
// output pixels along a row: per filter row it loads the strip's window row from shared
// memory once (consecutive lanes read consecutive words: no bank conflict), then R x S x QT
// x CV f32 FMAs from registers; one rounding at the store, CV channels in one store.
//
// An instantiation supplies
//   C: NB, CH, H, W -> P, Q; R x S taps; strides SH, SW; dilations DH, DW; padding PT, PL;
//      the tile TP, TQ, QT (QT divides TQ), CB, CV (1 or 2; CV = 2 needs CH and CB even);
//      the element types In (16-bit: x and the weights) and Out;
//   E: the epilogue functor, `operator()(acc, n, k, p, q, idx)`: the value stored for
//      output element (n, k, p, q), idx its flat NCHW index (what the epilogue's inputs of
//      the NCHW output's shape are read at).
// The kernel takes T::THREADS threads a block and T::SMEM_BYTES of dynamic shared memory (the
// Config's SMEM, which the template computes alike: a static_assert checks it). A window
// row is padded so that the strips of one warp (LANES < 32 words each) read disjoint banks.
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <class C>
struct DepthwiseNhwcTile {
  enum : int {
    IH = (C::TP - 1) * C::SH + (C::R - 1) * C::DH + 1,  // the tile's input window
    IW = (C::TQ - 1) * C::SW + (C::S - 1) * C::DW + 1,
    XW = (C::QT - 1) * C::SW + (C::S - 1) * C::DW + 1,  // a strip's window row
    LANES = C::CB / C::CV,
    STRIPS = C::TP * (C::TQ / C::QT),
    THREADS = LANES * STRIPS,
    TILES_P = (C::P + C::TP - 1) / C::TP,
    TILES_Q = (C::Q + C::TQ - 1) / C::TQ,
    TILES_C = (C::CH + C::CB - 1) / C::CB,
    W_FLOATS = C::R * C::S * C::CB,
    // 16-bit elements a window row, padded to LANES words modulo the 32 banks (CV = 2)
    XPITCH = IW * C::CB + (C::CV == 2 ? 2 * ((LANES % 32 - (IW * LANES) % 32 + 32) % 32) : 0),
    SMEM_BYTES = W_FLOATS * 4 + IH * XPITCH * 2,
  };
  static_assert(C::CV == 1 || C::CV == 2, "CV is 1 or 2 channels a thread");
  static_assert(C::CV == 1 || (C::CH % 2 == 0 && C::CB % 2 == 0), "CV = 2 needs even CH, CB");
  static_assert(C::TQ % C::QT == 0, "QT divides TQ");
  static_assert(C::CB % C::CV == 0, "CV divides CB");
  static_assert(SMEM_BYTES == C::SMEM, "the template's shared memory size");
};

// The CV 16-bit values at element i of a global array (CV = 2: one aligned 32-bit load, i
// even), as the low (and high) half of a word.
template <int CV>
static __device__ __forceinline__ u32 fs_dw_ld(const u16* p, long long i) {
  if (CV == 2) return __ldg((const u32*)(p + i));
  return (u32)__ldg(p + i);
}

template <class C, class E>
static __device__ __forceinline__ int conv_depthwise_nhwc(const E& epi, u64 x, u64 w, u64 out,
                                                          u64 smem) {
  using In = typename C::In;
  using Out = typename C::Out;
  using T = DepthwiseNhwcTile<C>;
  constexpr int CV = C::CV;
  float* wsm = (float*)smem;             // [R*S][CB] f32
  u16* xsm = (u16*)(wsm + T::W_FLOATS);  // [IH][IW][CB] 16-bit
  const u16* xg = (const u16*)x;
  const u16* wg = (const u16*)w;
  const int tid = threadIdx.x;
  const int lane = tid % T::LANES;   // this thread's channels in the tile
  const int strip = tid / T::LANES;  // ... and its strip of pixels
  const int row = strip / (C::TQ / C::QT);
  const int col = (strip % (C::TQ / C::QT)) * C::QT;
  const long long tiles = (long long)C::NB * T::TILES_P * T::TILES_Q * T::TILES_C;
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int ct = (int)(tile % T::TILES_C);
    long long t = tile / T::TILES_C;
    const int qt = (int)(t % T::TILES_Q);
    t /= T::TILES_Q;
    const int pt = (int)(t % T::TILES_P);
    const int n = (int)(t / T::TILES_P);
    const int c0 = ct * C::CB, p0 = pt * C::TP, q0 = qt * C::TQ;
    const int ih0 = p0 * C::SH - C::PT, iw0 = q0 * C::SW - C::PL;
    // stage the weights (f32, channel-fastest) and the input window (zero outside)
    for (int i = tid; i < T::W_FLOATS; i += T::THREADS) {
      const int cl = i / (C::R * C::S), rs = i % (C::R * C::S);
      const int c = c0 + cl;
      wsm[rs * C::CB + cl] =
          c < C::CH ? In::ld((const void*)wg, (long long)c * C::R * C::S + rs) : 0.0f;
    }
    for (int i = tid; i < T::IH * T::IW * T::LANES; i += T::THREADS) {
      const int l = i % T::LANES, pixel = i / T::LANES;
      const int ih = ih0 + pixel / T::IW, iw = iw0 + pixel % T::IW;
      const int c = c0 + l * CV;
      u32 v = 0u;
      if (ih >= 0 && ih < C::H && iw >= 0 && iw < C::W && c < C::CH) {
        v = fs_dw_ld<CV>(xg, (((long long)n * C::H + ih) * C::W + iw) * C::CH + c);
      }
      if (CV == 2) {
        *(u32*)(xsm + (pixel / T::IW) * T::XPITCH + (pixel % T::IW) * C::CB + l * 2) = v;
      } else {
        xsm[(pixel / T::IW) * T::XPITCH + (pixel % T::IW) * C::CB + l] = (u16)v;
      }
    }
    __syncthreads();
    const int p = p0 + row, c = c0 + lane * CV;
    if (p < C::P && c < C::CH) {
      float acc[C::QT][CV];
#pragma unroll
      for (int j = 0; j < C::QT; ++j) {
#pragma unroll
        for (int v = 0; v < CV; ++v) acc[j][v] = 0.0f;
      }
#pragma unroll
      for (int r = 0; r < C::R; ++r) {
        const u16* src =
            xsm + (row * C::SH + r * C::DH) * T::XPITCH + col * C::SW * C::CB + lane * CV;
        float xr[T::XW][CV];
#pragma unroll
        for (int k = 0; k < T::XW; ++k) {
          if (CV == 2) {
            In::unpack(*(const u32*)(src + k * C::CB), xr[k][0], xr[k][CV - 1]);
          } else {
            xr[k][0] = In::cvt(src[k * C::CB]);
          }
        }
#pragma unroll
        for (int s = 0; s < C::S; ++s) {
          float wv[CV];
#pragma unroll
          for (int v = 0; v < CV; ++v) wv[v] = wsm[(r * C::S + s) * C::CB + lane * CV + v];
#pragma unroll
          for (int j = 0; j < C::QT; ++j) {
#pragma unroll
            for (int v = 0; v < CV; ++v) acc[j][v] += xr[j * C::SW + s * C::DW][v] * wv[v];
          }
        }
      }
#pragma unroll
      for (int j = 0; j < C::QT; ++j) {
        const int q = q0 + col + j;
        if (q < C::Q) {
          const long long o = (((long long)n * C::P + p) * C::Q + q) * C::CH + c;
          const long long nchw = (((long long)n * C::CH + c) * C::P + p) * C::Q + q;
          const float y0 = epi(acc[j][0], n, c, p, q, nchw);
          if (CV == 2) {
            const float y1 = epi(acc[j][CV - 1], n, c + 1, p, q, nchw + (long long)C::P * C::Q);
            Out::st2((void*)out, o, y0, y1);
          } else {
            Out::st((void*)out, o, y0);
          }
        }
      }
    }
    __syncthreads();  // the next tile's staging overwrites the window
  }
  return 0;
}

}  // namespace fusec
