// fusec kernel layer: TMA (the tensor memory accelerator) bulk tensor loads and stores of
// a box described by a tensor map in global memory, and their bulk async-groups.
#pragma once

#include "fusec/common.cuh"

// Loads the box at coordinates (c0, c1, ...: innermost first, in elements) of the tensor
// map into shared memory at dst; completion is counted in bytes on the mbarrier bar.
static __device__ __forceinline__ void fs_tma_load(u32 dst, u64 map, u32 bar, int c0, int c1,
                                                   int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
static __device__ __forceinline__ void fs_tma_load(u32 dst, u64 map, u32 bar, int c0, int c1,
                                                   int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
static __device__ __forceinline__ void fs_tma_load(u32 dst, u64 map, u32 bar, int c0, int c1,
                                                   int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// A bulk copy (no tensor map): `bytes` (a multiple of 16) from global src to shared dst,
// counted on mbarrier bar.
static __device__ __forceinline__ void fs_bulk_load(u32 dst, u64 src, u32 bytes, u32 bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Brings the tensor map's descriptor into the cache ahead of the first load through it.
static __device__ __forceinline__ void fs_prefetch_map(u64 map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads
// (TMA stores, wgmma operands).
static __device__ __forceinline__ void fs_fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Stores the shared-memory box at src to coordinates (c0, c1, c2) of the tensor map (the
// map clips what falls outside the tensor), in this thread's current bulk group.
static __device__ __forceinline__ void fs_tma_store(u64 map, u32 src, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
static __device__ __forceinline__ void fs_bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// At most N of this thread's bulk groups still reading shared memory.
template <int N>
static __device__ __forceinline__ void fs_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// At most N of this thread's bulk groups not complete (writes done).
template <int N>
static __device__ __forceinline__ void fs_bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
