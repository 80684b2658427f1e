// fusec kernel layer: the implicit-GEMM conv2d on the Hopper core, a warp-specialised
// persistent block program in the shape of the GEMM's (the design is described in
// fusec/targets/cuda/conv/cpp.py, whose ConvSpec instantiates it).
//
// fusec::conv<C, E> is the whole block: warpgroup 0 produces (per reduction step, tap (r, s)
// and channel chunk cc: the weights' TMA box and one box per 64-pixel strip of the input, or,
// INPUT == CONV_INPUT_LD, the input rows loaded by the warpgroup's threads), warpgroups
// 1..C::CONSUMERS consume (wgmma on the ring, then the epilogue on their accumulators,
// stored NCHW or, OUT_NHWC, channels-last). An instantiation supplies
//   C: the geometry (NB, CIN, H, W -> KOUT, P, Q; G groups of CG (padded CGP) input and KG
//      output channels; R x S taps, strides SH, SW, dilations DH, DW, padding PT, PL), the
//      tile (BM, BN, WM, WN, STAGES, CONSUMERS, SPT strips a tile; a strip TH rows of TW
//      pixels, QS strips across a row, PS bands of TH rows down an image, STRIPS in all,
//      CC channel chunks, KBLOCKS, TILES_M, TILES_N, TILES, A_BYTES, B_BYTES), the variants
//      (INPUT, SPLIT_N, OUT_NHWC), SPLIT_K (split-K: each tile's KBLOCKS shared among
//      SPLIT_K blocks, split_k.cuh), the register split and FULL_ARRIVALS, the output type
//      Out and `mma`, its wgmma instruction (m64nWNk16);
//   E: the epilogue functor: `wide()` (a flag its early loads take), `load_tile` (inputs
//      loaded at the head of a tile into its TileChannels and TilePixels words), `load_row`
//      (at the head of an output row: RowChannels, RowPixels), and `at<SECOND>(acc, n, k,
//      p, q, o, m, h, sj, qe, words...)`, the value stored at output element (n, k, p, q)
//      (flat NCHW index o; SECOND: the pair's second pixel, q is then already q + 1).
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"
#include "fusec/split_k.cuh"
#include "fusec/tma.cuh"
#include "fusec/wgmma.cuh"

// CONV_INPUT_LD: the 128 producer threads fill the B stage themselves. Row (strip j, channel
// c) of the [channel][pixel] tile is 64 pixels from ws = q0 + s*DW - PL of one input row:
// nine 16-byte loads of the aligned 8-pixel vectors from ws & ~7 (zero outside the row, the
// image or the group's channels: W % 8 == 0, so a vector is all in or all out), shifted down
// by ws & 7 pixels in registers (whole words by the template argument, a half word by a
// funnel shift) and stored as 8 16-byte chunks, chunk u of row c at (u ^ (c % 8)) * 16: the
// 128-byte swizzle TMA would have written.
static __device__ __forceinline__ uint4 fs_ld_vec(const u16* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
template <int WO>
static __device__ __forceinline__ void fs_st_row(u32 dst, int c, const u32 (&wd)[36], u32 half) {
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    u32 o[4];
#pragma unroll
    for (int m = 0; m < 4; ++m)
      o[m] = __funnelshift_r(wd[4 * u + m + WO], wd[4 * u + m + WO + 1], half);
    const u32 chunk = dst + (u32)((u ^ (c & 7)) * 16);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(chunk), "r"(o[0]), "r"(o[1]),
                 "r"(o[2]), "r"(o[3])
                 : "memory");
  }
}
// The epilogue's early loads: branch-free predicated loads (zero when not live) into 32-bit
// words, kept as raw bits until use (no conversion waits on the load), and the conversions
// of a word's low and high 16-bit halves.
static __device__ __forceinline__ u32 fs_ldg_u16(const void* a) {
  u32 r;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=r"(r) : "l"(a));
  return r;
}
static __device__ __forceinline__ u32 fs_ldg_b32(const void* a) {
  u32 r;
  asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(r) : "l"(a));
  return r;
}
static __device__ __forceinline__ float fs_f16_lo(u32 w) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(w & 0xFFFFu)));
  return f;
}
static __device__ __forceinline__ float fs_f16_hi(u32 w) { return fs_f16_lo(w >> 16); }
static __device__ __forceinline__ float fs_bf16_lo(u32 w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float fs_bf16_hi(u32 w) {
  return __uint_as_float(w & 0xFFFF0000u);
}
static __device__ __forceinline__ float fs_f32_lo(u32 w) { return __uint_as_float(w); }

namespace fusec {

// How the producer reads the input: TMA boxes of a channels-last copy ([pixel][channel]
// rows, K-major B), TMA boxes of the NCHW input in place ([channel][pixel] rows, MN-major B),
// or 16-byte loads of the NCHW input by the producer warpgroup's threads (MN-major B).
enum ConvInput { CONV_INPUT_NHWC = 0, CONV_INPUT_NCHW = 1, CONV_INPUT_LD = 2 };

// Tile t of the persistent walk -> (pm: channel block, pn: strip block, g: group).
template <class C>
static __device__ __forceinline__ void conv_tile(int t, int& pm, int& pn, int& g) {
  g = t / (C::TILES_M * C::TILES_N);
  const int r = t - g * (C::TILES_M * C::TILES_N);
  pm = r % C::TILES_M;
  pn = r / C::TILES_M;
}

// Work unit u of the persistent walk (a tile, or with split-K a tile's share of its K
// blocks): its tile, K blocks and the tile's (pm, pn, g) as pz.
template <class C>
static __device__ __forceinline__ TileUnit conv_unit(int u) {
  TileUnit w;
  fs_split_unit<C::SPLIT_K>(u, C::KBLOCKS, w.t, w.kb0, w.kb1);
  conv_tile<C>(w.t, w.pm, w.pn, w.pz);
  return w;
}

// Strip -> (image, first output row, first output column). A strip is TH rows of TW
// output pixels (TH * TW = 64, config.strip_width): one row of 64, or several short ones;
// pixel j of it is output (p0 + j / TW, q0 + j % TW), and TW is a multiple of 8, so each
// group of 8 columns lies in one row.
template <class C>
static __device__ __forceinline__ void conv_strip(int strip, int& n, int& p0, int& q0) {
  static_assert(C::TW * C::TH == 64 && C::TW % 8 == 0, "a strip is 64 pixels, rows of 8k");
  const int qs = strip % C::QS;
  const int rest = strip / C::QS;
  p0 = (rest % C::PS) * C::TH;
  n = rest / C::PS;
  q0 = qs * C::TW;
}

// The weights' re-layout KCRS -> [KOUT][R*S][CGP] (channels CG..CGP-1 zero: the TMA map
// reads CGP of them), a grid-stride loop of its own __global__ kernel.
template <class C>
static __device__ __forceinline__ void conv_relayout_weights(const u16* __restrict__ w,
                                                             u16* __restrict__ wp) {
  const int total = C::KOUT * C::R * C::S * C::CGP;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int c = i % C::CGP;
    const int rest = i / C::CGP;
    const int tap = rest % (C::R * C::S);
    const int k = rest / (C::R * C::S);
    wp[i] = c < C::CG ? w[(k * C::CG + c) * (C::R * C::S) + tap] : (u16)0;
  }
}

// Row c of a strip's [channel][pixel] tile at dst (the tile's base): channel ch of group g,
// input row h of image n, pixels ws .. ws + 63.
template <class C>
static __device__ __forceinline__ void conv_ld_row(u32 dst, int c, const u16* x, int n, int g,
                                                   int ch, int h, int ws) {
  const bool live = ch < C::CG && h >= 0 && h < C::H;
  const int a = ws & ~7;  // floor to a multiple of 8 (two's complement)
  const int sh = ws - a;
  const u16* row = x + (((long long)n * C::CIN + g * C::CG + ch) * C::H + h) * C::W;
  u32 wd[36];
#pragma unroll
  for (int k = 0; k < 9; ++k) {
    const int w0 = a + 8 * k;
    const uint4 v = live && w0 >= 0 && w0 < C::W ? fs_ld_vec(row + w0) : make_uint4(0u, 0u, 0u, 0u);
    wd[4 * k] = v.x;
    wd[4 * k + 1] = v.y;
    wd[4 * k + 2] = v.z;
    wd[4 * k + 3] = v.w;
  }
  const u32 half = (u32)(sh & 1) * 16u;
  const u32 at = dst + (u32)(c * 128);
  switch (sh >> 1) {
    case 0:
      fs_st_row<0>(at, c, wd, half);
      break;
    case 1:
      fs_st_row<1>(at, c, wd, half);
      break;
    case 2:
      fs_st_row<2>(at, c, wd, half);
      break;
    default:
      fs_st_row<3>(at, c, wd, half);
      break;
  }
}

// The producer's walk: per K block kb of each of the block's work units (a tile, or with
// split-K a tile's share of its K blocks), its tap (r, s), channel block cc, stage st and
// the stage's "full" barrier, once the stage is free: stage(it, ...), it the ring position.
template <class C, class Stage>
static __device__ __forceinline__ void conv_stages(u32 bars, const Stage& stage) {
  int it = 0;
  for (int u = blockIdx.x; u < C::TILES * C::SPLIT_K; u += gridDim.x) {
    const auto [t, kb0, kb1, pm, pn, g] = conv_unit<C>(u);
    for (int kb = kb0; kb < kb1; ++kb, ++it) {
      const int tap = kb / C::CC;
      const int cc = kb - tap * C::CC;
      const int r = tap / C::S;
      const int s = tap - r * C::S;
      const int st = it % C::STAGES;
      const u32 full = bars + 8 * st;
      fs_bar_wait(bars + 8 * (C::STAGES + st), ((u32)(it / C::STAGES) & 1u) ^ 1u);
      stage(it, pm, pn, g, tap, cc, r, s, st, full);
    }
  }
}

// Early weights (C::EARLY_W: the weights a constant of the program, which no kernel
// writes): thread 0 announces the first unit's first STAGES stages on their full barriers
// and issues their weight boxes, then waits for the kernels before it (the kernel's wrapper
// does not); returns the stages so begun.
template <class C>
static __device__ __forceinline__ int conv_early_weights(u32 sa, u32 bars, u64 map_w) {
  int early = 0;
  if (blockIdx.x < C::TILES * C::SPLIT_K) {
    const auto [t, kb0, kb1, pm, pn, g] = conv_unit<C>(blockIdx.x);
    early = min(kb1 - kb0, (int)C::STAGES);
    for (int i = 0; i < early; ++i) {
      const int tap = (kb0 + i) / C::CC;
      const int cc = kb0 + i - tap * C::CC;
      fs_bar_expect(bars + 8 * i, C::A_BYTES + C::B_BYTES);
      fs_tma_load(sa + i * C::A_BYTES, map_w, bars + 8 * i, cc * 64, tap, pm * C::BM, g);
    }
  }
  fs_grid_dependency_wait();
  return early;
}

// The producer warpgroup: thread 0 issues the TMA boxes of every stage (weights and input),
// or, CONV_INPUT_LD, the whole warpgroup loads the input.
template <class C>
static __device__ __forceinline__ void conv_producer(u32 sa, u32 sb, u32 bars, int tid, u64 map_w,
                                                     u64 x) {
  static_assert(!C::EARLY_W || C::INPUT != CONV_INPUT_LD, "early weights: the TMA producer");
  fs_setmaxnreg_dec<C::PRODUCER_REGISTERS>();
  if constexpr (C::EARLY_W) {
    if (tid != 0) fs_grid_dependency_wait();  // (thread 0: after its early weight loads)
  }
  if constexpr (C::INPUT == CONV_INPUT_LD) {
    static_assert(C::TW == 64, "the producer's loads read a strip as one row of 64 pixels");
    if (tid == 0) fs_prefetch_map(map_w);
    const u16* xin = (const u16*)x;
    conv_stages<C>(
        bars, [&](int, int pm, int pn, int g, int tap, int cc, int r, int s, int st, u32 full) {
          if (tid == 0) {
            fs_bar_expect(full, C::A_BYTES);
            fs_tma_load(sa + st * C::A_BYTES, map_w, full, cc * 64, tap, pm * C::BM, g);
          }
          for (int i = tid; i < C::SPT * 64; i += 128) {
            const int j = i / 64;
            const int c = i - j * 64;
            // a strip past the end re-reads the last one: its columns are never stored
            const int strip = min(pn * C::SPT + j, C::STRIPS - 1);
            int n, p, q0;
            conv_strip<C>(strip, n, p, q0);
            conv_ld_row<C>(sb + st * C::B_BYTES + j * 8192, c, xin, n, g, cc * 64 + c,
                           p * C::SH + r * C::DH - C::PT, q0 + s * C::DW - C::PL);
          }
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          fs_bar_arrive(full);
        });
  } else if (tid == 0) {
    fs_prefetch_map(map_w);
    fs_prefetch_map(x);
    int early = 0;  // stages whose weights are loading (announced for both boxes)
    if constexpr (C::EARLY_W) early = conv_early_weights<C>(sa, bars, map_w);
    conv_stages<C>(
        bars, [&](int it, int pm, int pn, int g, int tap, int cc, int r, int s, int st, u32 full) {
          if (!C::EARLY_W || it >= early) {
            fs_bar_expect(full, C::A_BYTES + C::B_BYTES);
            fs_tma_load(sa + st * C::A_BYTES, map_w, full, cc * 64, tap, pm * C::BM, g);
          }
#pragma unroll
          for (int j = 0; j < C::SPT; ++j) {
            // a strip past the end re-reads the last one: its columns are never stored
            const int strip = min(pn * C::SPT + j, C::STRIPS - 1);
            int n, p, q0;
            conv_strip<C>(strip, n, p, q0);
            const u32 dst = sb + st * C::B_BYTES + j * 8192;
            if constexpr (C::INPUT == CONV_INPUT_NCHW) {
              // NCHW map (W, H, CG, G, N): [channel][pixel] rows; q0 + s*DW - PL is a
              // multiple of 8 (nchw_input_problem), so the read starts 16-byte aligned
              fs_tma_load(dst, x, full, q0 + s * C::DW - C::PL, p * C::SH + r * C::DH - C::PT,
                          cc * 64, g, n);
            } else if constexpr (C::SW == 1) {
              // channels-last map (CG, G, W, H, N): [pixel][channel] rows
              fs_tma_load(dst, x, full, cc * 64, g, q0 + s * C::DW - C::PL,
                          p * C::SH + r * C::DH - C::PT, n);
            } else {
              // the same map traversing every SW-th pixel (config.nhwc_element_strides)
              fs_tma_load(dst, x, full, cc * 64, g, q0 * C::SW + s * C::DW - C::PL,
                          p * C::SH + r * C::DH - C::PT, n);
            }
          }
        });
  }
}

// One consumer's epilogue of a tile: the accumulators through the functor into the output
// (NCHW: adjacent pixels as one store when Q is even; channels-last: KOUT apart).
template <class C, class E, class Acc>
static __device__ __forceinline__ void conv_epilogue(const E& epi, const Acc& acc,
                                                     const typename E::TileChannels& tc,
                                                     const typename E::TilePixels& tp, u64 out,
                                                     bool wide, int pm, int pn, int g, int cw,
                                                     int warp, int lane) {
  using Out = typename C::Out;
  // accumulator j of m64 block m: row 16 warp + lane/4 + 8 ((j/2)%2),
  // column 8 (j/4) + 2 (lane%4) + j%2
#pragma unroll
  for (int m = 0; m < C::WM / 64; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kg =
          pm * C::BM + (C::SPLIT_N ? 0 : cw * C::WM) + m * 64 + warp * 16 + (lane / 4) + 8 * h;
      if (kg < C::KG) {
        const int ko = g * C::KG + kg;
        typename E::RowChannels rc;
        typename E::RowPixels rp;
        epi.load_row(rc, rp, wide, pn, cw, lane, ko);
#pragma unroll
        for (int sj = 0; sj < C::WN / 64; ++sj) {
          // one strip of 64 output pixels: decoded once, 8 column groups of 8
          const int strip = pn * C::SPT + (C::SPLIT_N ? cw * C::WN : 0) / 64 + sj;
          int n, p0, q0;
          conv_strip<C>(strip, n, p0, q0);
          const long long row = (((long long)n * C::KOUT + ko) * C::P + p0) * C::Q + q0;
#pragma unroll
          for (int qe = 0; qe < 8; ++qe) {
            const int qd = sj * 8 + qe;
            // column group qe: row qe * 8 / TW of the strip, columns from qe * 8 % TW
            const int dq = qe * 8 % C::TW + 2 * (lane % 4);
            const int p = p0 + qe * 8 / C::TW;
            const int q = q0 + dq;
            if (strip < C::STRIPS && (C::TH == 1 || p < C::P) && q < C::Q) {
              const long long o = row + (qe * 8 / C::TW) * C::Q + dq;
              const float y0 = epi.template at<0>(acc[m][4 * qd + 2 * h], n, ko, p, q, o, m, h, sj,
                                                  qe, tc, tp, rc, rp);
              if constexpr (C::OUT_NHWC) {  // [N][P][Q][KOUT]: the pair's pixels KOUT apart
                const long long os = (((long long)n * C::P + p) * C::Q + q) * C::KOUT + ko;
                Out::st((void*)out, os, y0);
                if (q + 1 < C::Q) {
                  const float y1 = epi.template at<1>(acc[m][4 * qd + 2 * h + 1], n, ko, p, q + 1,
                                                      o, m, h, sj, qe, tc, tp, rc, rp);
                  Out::st((void*)out, os + C::KOUT, y1);
                }
              } else if (C::Q % 2 == 0) {
                const float y1 = epi.template at<1>(acc[m][4 * qd + 2 * h + 1], n, ko, p, q + 1, o,
                                                    m, h, sj, qe, tc, tp, rc, rp);
                Out::st2((void*)out, o, y0, y1);
              } else {
                Out::st((void*)out, o, y0);
                if (q + 1 < C::Q) {
                  const float y1 = epi.template at<1>(acc[m][4 * qd + 2 * h + 1], n, ko, p, q + 1,
                                                      o, m, h, sj, qe, tc, tp, rc, rp);
                  Out::st((void*)out, o + 1, y1);
                }
              }
            }
          }
        }
      }
    }
  }
}

// Named barrier of the consumers' split-K arrival (the conv uses no other named barrier).
enum ConvBarrier { CONV_SPLIT_BARRIER = 10 };

// The block program; ws and counters: split-K's workspace (split_k.cuh; 0 without split-K).
template <class C, class E>
static __device__ __forceinline__ int conv(const E& epi, u64 smem_raw, u64 map_w, u64 x, u64 out,
                                           u64 ws, u64 counters) {
  const u32 base = (fs_smem((const void*)smem_raw) + 1023u) & ~1023u;
  const u32 sa = base;
  const u32 sb = base + C::STAGES * C::A_BYTES;
  const u32 bars = sb + C::STAGES * C::B_BYTES;  // full[s] = bars + 8 s, empty[s] = bars +
                                                 // 8 (STAGES + s)
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      fs_bar_init(bars + 8 * s, C::FULL_ARRIVALS);
      fs_bar_init(bars + 8 * (C::STAGES + s), C::CONSUMERS);
    }
    fs_bar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    conv_producer<C>(sa, sb, bars, tid, map_w, x);
  } else {
    const auto [cw, lt, warp, lane] = fs_consumer_thread<C::CONSUMER_REGISTERS>(wg, tid);
    if constexpr (C::EARLY_W) fs_grid_dependency_wait();
    float acc[C::WM / 64][C::WN / 2];
    const bool wide = epi.wide();
    int it = 0;
    for (int u = blockIdx.x; u < C::TILES * C::SPLIT_K; u += gridDim.x) {
      const auto [t, kb0, kb1, pm, pn, g] = conv_unit<C>(u);
      typename E::TileChannels tc;
      typename E::TilePixels tp;
      epi.load_tile(tc, tp, wide, pm, pn, g, cw, warp, lane);
      for (int kb = 0; kb < kb1 - kb0; ++kb, ++it) {  // kb counts the unit's K blocks
        const int st = it % C::STAGES;
        fs_bar_wait(bars + 8 * st, (u32)(it / C::STAGES) & 1u);
        const u32 a_base = sa + st * C::A_BYTES;
        // 64-pixel strips of 8192 bytes (K-major: 64 pixel rows of 128 bytes; MN-major: 64
        // channel rows of 128 bytes)
        const u32 b_base = sb + st * C::B_BYTES + (C::SPLIT_N ? cw * C::WN : 0) * 128;
        fs_wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int m = 0; m < C::WM / 64; ++m) {
            const int row_blk = (C::SPLIT_N ? 0 : cw * C::WM) + m * 64;
            // the B descriptor as in the GEMM: K-major rows of 128 bytes (+32 bytes a step);
            // MN-major 64-pixel chunks 8192 bytes apart (LBO), 8-row channel groups 1024
            // bytes apart (SBO), +2048 bytes a step
            if constexpr (C::INPUT == CONV_INPUT_NHWC) {
              C::mma(acc[m], fs_desc(a_base + (u32)(row_blk * 128 + kk * 32), 16u, 1024u),
                     fs_desc(b_base + (u32)(kk * 32), 16u, 1024u), (kb | kk) != 0);
            } else {
              C::mma(acc[m], fs_desc(a_base + (u32)(row_blk * 128 + kk * 32), 16u, 1024u),
                     fs_desc(b_base + (u32)(kk * 2048), 8192u, 1024u), (kb | kk) != 0);
            }
          }
        }
        fs_wg_commit();
        if (kb > 0) {
          fs_wg_wait<1>();
          if (lt == 0) fs_bar_arrive(bars + 8 * (C::STAGES + (it - 1) % C::STAGES));
        }
      }
      fs_wg_wait<0>();
      // an empty split (fewer K blocks than splits) used no stage
      if (lt == 0 && kb1 > kb0) fs_bar_arrive(bars + 8 * (C::STAGES + (it - 1) % C::STAGES));
#pragma unroll
      for (int m = 0; m < C::WM / 64; ++m)
#pragma unroll
        for (int j = 0; j < C::WN / 2; ++j) fs_fence_reg(acc[m][j]);
      if constexpr (C::SPLIT_K > 1) {
        const int ct = cw * 128 + lt;
        const int split = u - t * C::SPLIT_K;
        if (!fs_split_reduce<C::SPLIT_K, 128 * C::CONSUMERS>(acc, ws, counters, t, split, ct,
                                                             kb1 == kb0, CONV_SPLIT_BARRIER))
          continue;  // another split of the tile arrives later and stores it
      }
      conv_epilogue<C>(epi, acc, tc, tp, out, wide, pm, pn, g, cw, warp, lane);
    }
  }
  return 0;
}

}  // namespace fusec
