// fusec kernel layer: warpgroup MMA (wgmma) fences, groups and shared-memory matrix
// descriptors. The instruction itself (`wgmma.mma_async` with its BN/2 accumulator
// operands) is emitted per instantiation: an asm statement's operand count cannot be a
// template parameter.
#pragma once

#include "fusec/common.cuh"

// Orders register accesses (accumulators, register A fragments) before the next wgmma.
static __device__ __forceinline__ void fs_wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void fs_wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// At most N committed wgmma groups of this warpgroup still in flight.
template <int N>
static __device__ __forceinline__ void fs_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across wgmma waits.
static __device__ __forceinline__ void fs_fence_reg(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// Shared-memory matrix descriptor, 128-byte swizzle: the start address, the leading and
// the stride byte offsets (LBO, SBO), each in units of 16 bytes.
static __device__ __forceinline__ u64 fs_desc(u32 addr, u32 lbo, u32 sbo) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((lbo & 0x3FFFF) >> 4) << 16) |
         ((u64)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// Warpgroup register reallocation (the kernel must have a register cap at entry: launch
// bounds): the producer gives registers up, the consumers take them.
template <int N>
static __device__ __forceinline__ void fs_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N) : "memory");
}
template <int N>
static __device__ __forceinline__ void fs_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N) : "memory");
}

// A consumer warpgroup's thread once it took its registers: the consumer's index (of
// warpgroup wg, after the producer's), the thread's index in the warpgroup, its warp, lane.
struct ConsumerThread {
  int cw, lt, warp, lane;
};
template <int REGISTERS>
static __device__ __forceinline__ ConsumerThread fs_consumer_thread(int wg, int tid) {
  fs_setmaxnreg_inc<REGISTERS>();
  const int lt = tid % 128;
  return {wg - 1, lt, lt / 32, lt % 32};
}
