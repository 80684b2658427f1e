// fusec kernel layer: the K-major copy of an f32 GEMM operand for the tf32 GEMM
// (precision=tf32: wgmma reads tf32 operands K-major only). fusec/targets/cuda/gemm/aux.py's
// TransposeF32 instantiates it.
//
// fusec::transpose_f32<TILE, THREADS> copies [batches][R][C] to [batches][C][R], one
// TILE x TILE tile a block: the tile's rows are read by THREADS / TILE warps (coalesced along
// C) into a (TILE + 1)-column shared tile (no bank conflicts) and written transposed
// (coalesced along R). The grid is ceil(R / TILE) * ceil(C / TILE) * batches blocks.
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <int TILE, int THREADS>
static __device__ __forceinline__ void transpose_f32(u64 src, u64 dst, int R, int C) {
  constexpr int ROWS_PER = THREADS / TILE;
  __shared__ float tile[TILE][TILE + 1];
  const int tiles_c = (C + TILE - 1) / TILE, tiles_r = (R + TILE - 1) / TILE;
  const int tc = blockIdx.x % tiles_c;
  const int tr = (blockIdx.x / tiles_c) % tiles_r;
  const long long z = blockIdx.x / (tiles_c * tiles_r);
  const float* s = (const float*)src + z * R * C;
  float* d = (float*)dst + z * R * C;
  const int lane = threadIdx.x % TILE, row = threadIdx.x / TILE;
#pragma unroll
  for (int i = row; i < TILE; i += ROWS_PER) {
    const int r = tr * TILE + i, c = tc * TILE + lane;
    if (r < R && c < C) tile[i][lane] = s[(long long)r * C + c];
  }
  __syncthreads();
#pragma unroll
  for (int i = row; i < TILE; i += ROWS_PER) {
    const int c = tc * TILE + i, r = tr * TILE + lane;
    if (r < R && c < C) d[(long long)c * R + r] = tile[lane][i];
  }
}

}  // namespace fusec
