// fusec kernel layer: the light kernels around a mixture-of-experts layer's two grouped
// GEMMs (the design is described in fusec/targets/cuda/experts/__init__.py; its
// MoeKernelSpec instantiates them).
//
// The layer's P = T x K (token, slot) pairs are sorted by expert into groups of rows, each
// expert's group padded to the GEMMs' row tile BM, so that every BM-row tile of the sorted
// rows belongs to one expert (vLLM's moe_align_block_size):
//   moe_route    one block: counts per expert, each group's first row, the groups table
//                of the grouped GEMMs (groups[0] the row tiles in use, groups[1 + i] the
//                expert of tile i), each pair's row (pair_row, -1 for an expert index out
//                of range: no expert) and each row's token and routing weight (row_token
//                -1 and weight 0 on padding rows);
//   moe_gather   xs[row] = x[row_token[row]] (zeros on padding rows), rows in use only;
//   moe_swiglu   h[row, j] = silu(g[row, j]) * g[row, F + j] (gate, then up, as Mixtral's
//                gate_up stacks them), rows in use only;
//   moe_combine  out[t] = sum over the K slots of y[pair_row[t K + s]] (f32 rows that the
//                down projection's epilogue scaled by the routing weight), slot order.
// No kernel reads anything back to the host: the row counts stay on the device and the
// grouped GEMMs read the groups table, so the layer runs on the caller's stream and in a
// CUDA graph. An instantiation supplies C: THREADS, BM, E (experts), INDEX_BYTES (4 or 8),
// VEC (16-bit values of a 16-byte access), and the element types In (x, g, h, out) and
// Weight (the routing weights).
#pragma once

#include "fusec/common.cuh"

namespace fusec {

// The expert of pair p, a negative index counted from the end; -1 out of range.
template <class C>
static __device__ __forceinline__ int moe_expert(u64 experts, int p) {
  long long e = C::INDEX_BYTES == 8 ? ((const long long*)experts)[p] : ((const int*)experts)[p];
  if (e < 0) e += C::E;
  return (e >= 0 && e < C::E) ? (int)e : -1;
}

template <class C>
static __device__ __forceinline__ int moe_route(u64 experts, u64 weights, u64 groups, u64 pair_row,
                                                u64 row_token, u64 row_weight, int P, int K,
                                                int rows_max) {
  __shared__ int count[C::E], start[C::E], fill[C::E];
  __shared__ int used;
  const int tid = threadIdx.x;
  int* const table = (int*)groups;
  for (int e = tid; e < C::E; e += C::THREADS) {
    count[e] = 0;
    fill[e] = 0;
  }
  for (int r = tid; r < rows_max; r += C::THREADS) {
    ((int*)row_token)[r] = -1;
    ((float*)row_weight)[r] = 0.0f;
  }
  __syncthreads();
  for (int p = tid; p < P; p += C::THREADS) {
    const int e = moe_expert<C>(experts, p);
    if (e >= 0) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (tid == 0) {
    int rows = 0;
    for (int e = 0; e < C::E; ++e) {
      start[e] = rows;
      rows += (count[e] + C::BM - 1) / C::BM * C::BM;
    }
    used = rows / C::BM;
    table[0] = used;
  }
  __syncthreads();
  // tile i's expert: the last one whose group starts at or before it (past the tiles in
  // use 0, which no GEMM reads: the walk stops at groups[0])
  for (int i = tid; i < rows_max / C::BM; i += C::THREADS) {
    int expert = 0;
    if (i < used) {
      for (int e = 0; e < C::E; ++e) {
        if (count[e] > 0 && start[e] <= i * C::BM) expert = e;
      }
    }
    table[1 + i] = expert;
  }
  for (int p = tid; p < P; p += C::THREADS) {
    const int e = moe_expert<C>(experts, p);
    int row = -1;
    if (e >= 0) {
      row = start[e] + atomicAdd(&fill[e], 1);
      ((int*)row_token)[row] = p / K;
      ((float*)row_weight)[row] = C::Weight::ld((const void*)weights, p);
    }
    ((int*)pair_row)[p] = row;
  }
  return 0;
}

// The rows of the sorted order in use (the route's tile count times BM).
template <class C>
static __device__ __forceinline__ int moe_used_rows(u64 groups, int rows_max) {
  return min(((const int*)groups)[0] * C::BM, rows_max);
}

template <class C>
static __device__ __forceinline__ int moe_gather(u64 x, u64 row_token, u64 groups, u64 xs,
                                                 int rows_max, int D) {
  const int per_row = D / C::VEC;  // 16-byte vectors a row
  const long long total = (long long)moe_used_rows<C>(groups, rows_max) * per_row;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long row = i / per_row;
    const int token = ((const int*)row_token)[row];
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (token >= 0) v = ((const uint4*)x)[(long long)token * per_row + i % per_row];
    ((uint4*)xs)[i] = v;
  }
  return 0;
}

template <class C>
static __device__ __forceinline__ int moe_swiglu(u64 g, u64 groups, u64 h, int rows_max, int F) {
  using In = typename C::In;
  const int per_row = F / C::VEC;  // 16-byte vectors of h a row
  const long long total = (long long)moe_used_rows<C>(groups, rows_max) * per_row;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long row = i / per_row;
    const long long col = (i % per_row) * C::VEC;
    const uint4 gate = *(const uint4*)((const u16*)g + row * 2 * F + col);
    const uint4 up = *(const uint4*)((const u16*)g + row * 2 * F + F + col);
    const u32 gw[4] = {gate.x, gate.y, gate.z, gate.w};
    const u32 uw[4] = {up.x, up.y, up.z, up.w};
    u32 hw[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float g0, g1, u0, u1;
      In::unpack(gw[j], g0, g1);
      In::unpack(uw[j], u0, u1);
      hw[j] = In::pack(fs_silu_mul(g0, u0), fs_silu_mul(g1, u1));
    }
    *(uint4*)((u16*)h + row * F + col) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
  }
  return 0;
}

template <class C>
static __device__ __forceinline__ int moe_combine(u64 y, u64 pair_row, u64 out, int T, int K,
                                                  int D) {
  using In = typename C::In;
  const int per_row = D / 4;  // 4 f32 values of y a step
  const long long total = (long long)T * per_row;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long token = i / per_row;
    const int v = (int)(i % per_row);
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < K; ++s) {
      const int row = ((const int*)pair_row)[token * K + s];
      if (row < 0) continue;
      const float4 w = ((const float4*)y)[(long long)row * per_row + v];
      sum.x += w.x;
      sum.y += w.y;
      sum.z += w.z;
      sum.w += w.w;
    }
    ((uint2*)out)[i] = make_uint2(In::pack(sum.x, sum.y), In::pack(sum.z, sum.w));
  }
  return 0;
}

}  // namespace fusec
