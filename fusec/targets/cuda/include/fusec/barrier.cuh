// fusec kernel layer: mbarriers (the TMA pipeline's full/empty stages) and named barriers
// (a subset of the block's warps).
#pragma once

#include "fusec/common.cuh"

static __device__ __forceinline__ void fs_bar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the mbarrier initialisations visible to the async proxy (TMA) and the cluster.
static __device__ __forceinline__ void fs_bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also announces `bytes` of transactions (a TMA load's) on the barrier.
static __device__ __forceinline__ void fs_bar_expect(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

static __device__ __forceinline__ void fs_bar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Waits for the phase of the given parity to complete. A C loop around try_wait (no PTX
// labels: they clash when the function is inlined twice).
static __device__ __forceinline__ void fs_bar_wait(u32 bar, u32 parity) {
  u32 done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// Named barrier `id` (1..15; 0 is __syncthreads) of `count` threads (a multiple of 32):
// sync waits for all of them, arrive only counts this warp in.
static __device__ __forceinline__ void fs_named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
static __device__ __forceinline__ void fs_named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Named barrier `id` of `count` threads that also ORs a predicate over them (bar.red):
// every thread returns whether any of them passed true.
static __device__ __forceinline__ bool fs_named_any(int id, int count, bool v) {
  u32 r;
  asm volatile(
      "{\n"
      "  .reg .pred p, q;\n"
      "  setp.ne.u32 p, %1, 0;\n"
      "  bar.red.or.pred q, %2, %3, p;\n"
      "  selp.u32 %0, 1, 0, q;\n"
      "}"
      : "=r"(r)
      : "r"((u32)v), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}
