// fusec kernel layer: the main loop of an fp8 GEMM on Hopper's wgmma (issue 31).
//
//   C[m][n] = epilogue(sum_k A[m][k] * B[n][k], m, n)
//
// A (M x K) and B (N x K, a weight as nn.Linear stores it) are float8 codes, e4m3 or e5m2
// each, both K-major (wgmma reads fp8 operands K-major only); the products accumulate in
// f32, 32 codes of K per instruction (wgmma.mma_async m64n64k32). The quantization scales
// are applied to the accumulators in the epilogue (ScaleEpilogue: per tensor of A, per
// tensor or per column of B), which rounds to the output type: f32, f16, bf16, or e4m3 /
// e5m2 with saturation (cvt.rn.satfinite).
//
// One warpgroup (128 threads) computes a 64 x 64 tile of C. K advances 128 codes a stage:
// each operand's stage is 64 rows of 128 bytes with the 128-byte swizzle (16-byte chunk c
// of row r at chunk c ^ (r % 8)), loaded by cp.async (codes past M, N or K zero-filled),
// two stages in flight; a stage is four k32 steps 32 bytes apart in each row, the same byte
// layout as the f16 GEMM's k16 steps (gemm.cuh). K must be a multiple of 16 (16-byte rows
// of codes), A and B 16-byte aligned.
//
// Not run on a GPU yet: tests/targets/cuda/test_fp8_gemm_header.py compiles it with NVRTC and links
// it for sm_90a (ptxas through nvJitLink); the tile is the building block of a persistent
// TMA kernel like gemm.cuh's, not that kernel.
#pragma once

#include "fusec/common.cuh"
#include "fusec/shared.cuh"
#include "fusec/wgmma.cuh"

namespace fusec {

// The float8 element types (e4m3, or e5m2 with E5M2_): the wgmma operand type, and as
// outputs a saturating store.
template <bool E5M2_>
struct Float8 {
  enum : int { BYTES = 1 };
  static constexpr bool IS_E5M2 = E5M2_;
  static __device__ __forceinline__ u16 pack(float lo, float hi) {
    u16 r;
    if constexpr (E5M2_)
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %2, %1;" : "=h"(r) : "f"(lo), "f"(hi));
    else
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(r) : "f"(lo), "f"(hi));
    return r;
  }
  static __device__ __forceinline__ void st(void* p, long long i, float v) {
    ((unsigned char*)p)[i] = (unsigned char)(pack(v, 0.0f) & 0xFF);
  }
  static __device__ __forceinline__ void st2(void* p, long long i, float a, float b) {
    *(u16*)((unsigned char*)p + i) = pack(a, b);
  }
};
using E4M3 = Float8<false>;
using E5M2 = Float8<true>;

// The 32 accumulators of an m64n64 f32 tile as asm operands, and their register names.
#define FS_FP8_D8(i)                                                                          \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define FS_FP8_REGS                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FS_FP8_WGMMA(TYPES)                                               \
  asm volatile(                                                           \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                        \
      "wgmma.mma_async.sync.aligned.m64n64k32.f32." TYPES " " FS_FP8_REGS \
      ", %32, %33, p, 1, 1;\n}\n"                                         \
      : FS_FP8_D8(0), FS_FP8_D8(8), FS_FP8_D8(16), FS_FP8_D8(24)          \
      : "l"(da), "l"(db), "r"(accumulate))

// d (+)= A B^T for one k32 step: A's 64 rows and B's 64 rows of 32 codes in shared memory
// (descriptors); d is overwritten when `accumulate` is 0.
template <class TA, class TB>
static __device__ __forceinline__ void fs_wgmma_fp8(float (&d)[32], u64 da, u64 db,
                                                    int accumulate) {
  if constexpr (!TA::IS_E5M2 && !TB::IS_E5M2)
    FS_FP8_WGMMA("e4m3.e4m3");
  else if constexpr (!TA::IS_E5M2 && TB::IS_E5M2)
    FS_FP8_WGMMA("e4m3.e5m2");
  else if constexpr (TA::IS_E5M2 && !TB::IS_E5M2)
    FS_FP8_WGMMA("e5m2.e4m3");
  else
    FS_FP8_WGMMA("e5m2.e5m2");
}

#undef FS_FP8_WGMMA
#undef FS_FP8_REGS
#undef FS_FP8_D8

// The quantization scales of an fp8 GEMM, applied to an accumulator: sa (A per tensor) times
// sb[col] (B per column; per tensor when sb_col is null).
struct ScaleEpilogue {
  float sa, sb;
  const float* sb_col;
  __device__ __forceinline__ float operator()(float acc, int row, int col) const {
    return acc * sa * (sb_col ? sb_col[col] : sb);
  }
};

enum : int { FP8_TILE = 64, FP8_BK = 128, FP8_STAGE_BYTES = 2 * FP8_TILE * FP8_BK };

template <int N>
static __device__ __forceinline__ void fs_cp_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Stage s's tile rows [row0, row0 + 64) of an M x K (or N x K) code matrix, K block kb,
// into shared memory at `dst` (64 rows of 128 bytes, 128-byte swizzle): 4 chunks a thread.
static __device__ __forceinline__ void fs_fp8_load(u32 dst, const unsigned char* src, int rows,
                                                   int K, int row0, int kb, int t) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int idx = t + 128 * i, r = idx / 8, c = idx % 8;
    const int row = row0 + r, k = kb * FP8_BK + c * 16;
    const bool inside = row < rows && k < K;
    const long long at = inside ? (long long)row * K + k : 0;  // a valid address either way
    fs_cp16(dst + (u32)(r * 128 + ((c ^ (r & 7)) << 4)), (u64)(src + at), inside ? 16u : 0u);
  }
}

// The 64 x 64 tile of C at (m0, n0), computed by the 128 threads of one warpgroup (thread t
// of it: threadIdx.x % 128). `smem`: 2 * FP8_STAGE_BYTES bytes, 1024-byte aligned.
template <class TA, class TB, class OUT, class E>
static __device__ __forceinline__ void fp8_gemm_tile(const unsigned char* A, const unsigned char* B,
                                                     void* C, int M, int N, int K, int m0, int n0,
                                                     const E& epi, unsigned char* smem) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const u32 base = fs_smem(smem);
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  const int kblocks = (K + FP8_BK - 1) / FP8_BK;
  fs_fp8_load(base, A, M, K, m0, 0, t);
  fs_fp8_load(base + FP8_TILE * FP8_BK, B, N, K, n0, 0, t);
  fs_cp_commit();
  for (int kb = 0; kb < kblocks; ++kb) {
    const u32 stage = base + (u32)((kb % 2) * FP8_STAGE_BYTES);
    if (kb + 1 < kblocks) {  // the next stage's copies fly while this one computes
      const u32 next = base + (u32)(((kb + 1) % 2) * FP8_STAGE_BYTES);
      fs_fp8_load(next, A, M, K, m0, kb + 1, t);
      fs_fp8_load(next + FP8_TILE * FP8_BK, B, N, K, n0, kb + 1, t);
      fs_cp_commit();
      fs_cp_wait_group<1>();
    } else {
      fs_cp_wait_group<0>();
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async -> wgmma reads
    __syncthreads();
    fs_wg_fence();
#pragma unroll
    for (int kk = 0; kk < FP8_BK / 32; ++kk) {
      // K-major rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); a k32 step: +32 bytes
      fs_wgmma_fp8<TA, TB>(acc, fs_desc(stage + (u32)(kk * 32), 16u, 1024u),
                           fs_desc(stage + (u32)(FP8_TILE * FP8_BK + kk * 32), 16u, 1024u),
                           (kb | kk) != 0);
    }
    fs_wg_commit();
    fs_wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 32; ++i) fs_fence_reg(acc[i]);
    __syncthreads();  // the stage is read: the copies two blocks on may overwrite it
  }
  // accumulator 4 q + 2 h + e of a thread: row 16 warp + lane / 4 + 8 h, column
  // 8 q + 2 (lane % 4) + e of the tile
#pragma unroll
  for (int q = 0; q < 8; ++q) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + 16 * warp + lane / 4 + 8 * h;
      const int col = n0 + 8 * q + 2 * (lane % 4);
      if (row >= M || col >= N) continue;
      const float v0 = epi(acc[4 * q + 2 * h], row, col);
      const long long at = (long long)row * N + col;
      if (col + 1 < N) {
        const float v1 = epi(acc[4 * q + 2 * h + 1], row, col + 1);
        if ((at * OUT::BYTES) % (2 * OUT::BYTES) == 0) {
          OUT::st2(C, at, v0, v1);
        } else {
          OUT::st(C, at, v0);
          OUT::st(C, at + 1, v1);
        }
      } else {
        OUT::st(C, at, v0);
      }
    }
  }
}

}  // namespace fusec
