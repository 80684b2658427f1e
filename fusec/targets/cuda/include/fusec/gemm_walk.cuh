// fusec kernel layer: the Hopper GEMM's walk (gemm.cuh and its int4 B's producer,
// gemm_w4.cuh): a block's tiles and work units in the persistent grid, the TMA loads of a
// K step's A and B tiles, and the producer's position in its walk.
#pragma once

#include "fusec/common.cuh"
#include "fusec/split_k.cuh"
#include "fusec/tma.cuh"

namespace fusec {

// Tile t of the persistent walk -> (pm, pn, pz), grouped GroupM tile rows at a time.
template <int GroupM>
static __device__ __forceinline__ void gemm_tile(int t, int tiles_m, int tiles_n, int& pm, int& pn,
                                                 int& pz) {
  const int per_batch = tiles_m * tiles_n;
  pz = t / per_batch;
  const int r = t - pz * per_batch;
  const int group = GroupM * tiles_n;
  const int first = (r / group) * GroupM;
  const int rows = min(tiles_m - first, GroupM);
  const int w = r % group;
  pm = first + w % rows;
  pn = w / rows;
}

// Work unit u of the persistent walk (a tile, or with split-K a tile's share of its K
// steps): its tile, K steps and the tile's (pm, pn, pz).
template <class C>
static __device__ __forceinline__ TileUnit gemm_unit(int u, int kblocks, int tiles_m, int tiles_n) {
  TileUnit w;
  fs_split_unit<C::SPLIT_K>(u, kblocks, w.t, w.kb0, w.kb1);
  gemm_tile<C::GROUP_M>(w.t, tiles_m, tiles_n, w.pm, w.pn, w.pz);
  return w;
}

// The TMA load of K step kb's A tile (ROWS = BM, tile row p = pm) or B tile (ROWS = BN,
// p = pn): K-major, one box; else (M- or N-major) ROWS / 64 boxes of 64 rows.
template <class C, bool K_MAJOR, int ROWS>
static __device__ __forceinline__ void gemm_load(u32 dst, u64 map, u32 full, int kb, int p, int z) {
  if constexpr (K_MAJOR) {
    fs_tma_load(dst, map, full, kb * C::BK, p * ROWS, z);
  } else {
    for (int c = 0; c < ROWS / 64; ++c)
      fs_tma_load(dst + c * 8192, map, full, p * ROWS + c * 64, kb * C::BK, z);
  }
}

// C::SWIGLU: K step kb's B tile as its two halves, BN / 2 gate rows of B (rows pn BN / 2 on)
// and the same rows' up values N rows further (B stacks the gates, then the ups: 2 N rows),
// one box each (the map's box is BN / 2 rows).
template <class C>
static __device__ __forceinline__ void gemm_load_gated(u32 dst, u64 map, u32 full, int kb, int pn,
                                                       int z, int N) {
  constexpr int ROWS = C::BN / 2;
  fs_tma_load(dst, map, full, kb * C::BK, pn * ROWS, z);
  fs_tma_load(dst + ROWS * 128, map, full, kb * C::BK, N + pn * ROWS, z);
}

// K step kb's B tile (the gated epilogue's two halves, or one tile).
template <class C>
static __device__ __forceinline__ void gemm_load_b(u32 dst, u64 map, u32 full, int kb, int pn,
                                                   int z, int N) {
  if constexpr (C::SWIGLU) {
    gemm_load_gated<C>(dst, map, full, kb, pn, z, N);
  } else {
    gemm_load<C, C::B_K_MAJOR, C::BN>(dst, map, full, kb, pn, z);
  }
}

// The producer's position in the block's walk: work unit u, its K step kb.
template <class C>
struct GemmWalk {
  int u, kb;
  TileUnit w;
};

// The walk's next step (false: past the block's last).
template <class C>
static __device__ __forceinline__ bool gemm_walk_next(GemmWalk<C>& p, int units, int kblocks,
                                                      int tiles_m, int tiles_n) {
  while (++p.kb >= p.w.kb1) {
    p.u += gridDim.x;
    if (p.u >= units) return false;
    p.w = gemm_unit<C>(p.u, kblocks, tiles_m, tiles_n);
    p.kb = p.w.kb0 - 1;
  }
  return true;
}

// The walk's first step (false: the block has no work).
template <class C>
static __device__ __forceinline__ bool gemm_walk_start(GemmWalk<C>& p, int units, int kblocks,
                                                       int tiles_m, int tiles_n) {
  p.u = blockIdx.x - (int)gridDim.x;
  p.kb = p.w.kb1 = 0;
  return gemm_walk_next<C>(p, units, kblocks, tiles_m, tiles_n);
}

}  // namespace fusec
