// fusec kernel layer: the K-major copy of an f32 GEMM operand for the tf32 GEMM
// (precision=tf32) or of float8 codes for the float8 GEMM: wgmma reads both K-major only.
// fusec/targets/cuda/gemm/aux.py's TransposeF32 and TransposeCodes instantiate it.
//
// fusec::transpose_elements<T, TILE, THREADS> copies [batches][R][C] to [batches][C][R]
// (T: float for tf32 operands, unsigned char for float8 codes), one
// TILE x TILE tile a block: the tile's rows are read by THREADS / TILE warps (coalesced along
// C) into a (TILE + 1)-column shared tile (no bank conflicts) and written transposed
// (coalesced along R). The grid is ceil(R / TILE) * ceil(C / TILE) * batches blocks.
#pragma once

#include "fusec/common.cuh"

namespace fusec {

template <class T, int TILE, int THREADS>
static __device__ __forceinline__ void transpose_elements(u64 src, u64 dst, int R, int C) {
  constexpr int ROWS_PER = THREADS / TILE;
  __shared__ T tile[TILE][TILE + 1];
  const int tiles_c = (C + TILE - 1) / TILE, tiles_r = (R + TILE - 1) / TILE;
  const int tc = blockIdx.x % tiles_c;
  const int tr = (blockIdx.x / tiles_c) % tiles_r;
  const long long z = blockIdx.x / (tiles_c * tiles_r);
  const T* s = (const T*)src + z * R * C;
  T* d = (T*)dst + z * R * C;
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
