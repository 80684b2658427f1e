// fusec kernel layer: reductions across a warp and into global memory.
#pragma once

#include "fusec/common.cuh"

// The sum (max) of v over the warp's 32 lanes, in every lane (butterfly: the same order in
// each).
static __device__ __forceinline__ float fs_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float fs_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// p[0..3] += (a, b, c, d): one 16-byte atomic reduction (p 16-byte aligned).
static __device__ __forceinline__ void fs_red4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}
