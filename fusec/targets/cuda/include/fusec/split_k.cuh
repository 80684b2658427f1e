// fusec kernel layer: split-K's reduction, shared by the templates whose persistent walk
// splits a tile's K among several blocks (the GEMM, gemm.cuh; the implicit-GEMM conv,
// conv.cuh).
//
// After split `split` of tile t has its partial sums in the accumulators acc[MI][HALF] of
// the NT consumer threads (ct = 0..NT-1), fs_split_reduce<S, NT> stores them to the
// workspace (float4 v of thread ct at ((t S + split) V + v) NT + ct, V = MI HALF / 4: each
// store instruction of a warp is 512 contiguous bytes; zeros for an empty split, one with
// no K steps), then one thread counts the split in on the tile's counter. The split that
// arrives last (the counter at S - 1; it sets it back to 0 for the next call, so the
// counters are zeroed only when allocated) reduces, acc = ((p_0 + p_1) + p_2) + ... in split
// order whichever split arrives last (its own read back too), so the result is the same
// bits on every run, and returns true: it runs the epilogue. The others return false and go
// on to their next unit: nothing waits for another block, so no order of the blocks'
// scheduling can deadlock. The loads bypass L1 (ld.global.cg): other SMs wrote the lines.
// The classic fence / count / fence protocol orders the partials' stores before the count
// and the count before the last split's loads. `barrier` is a named barrier of the NT
// consumer threads that the template does not use otherwise.
#pragma once

#include "fusec/barrier.cuh"
#include "fusec/common.cuh"

template <int S, int NT, int MI, int HALF>
static __device__ __forceinline__ bool fs_split_reduce(float (&acc)[MI][HALF], u64 ws, u64 counters,
                                                       int t, int split, int ct, bool empty,
                                                       int barrier) {
  static_assert(HALF % 4 == 0, "float4 partials");
  constexpr int V = MI * HALF / 4;
  float4* part = (float4*)ws;
  const long long first = (long long)t * S;
#pragma unroll
  for (int m = 0; m < MI; ++m) {
#pragma unroll
    for (int j = 0; j < HALF / 4; ++j) {
      const long long at = ((first + split) * V + m * (HALF / 4) + j) * NT + ct;
      part[at] = empty ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                       : make_float4(acc[m][4 * j], acc[m][4 * j + 1], acc[m][4 * j + 2],
                                     acc[m][4 * j + 3]);
    }
  }
  __threadfence();
  fs_named_sync(barrier, NT);  // every consumer thread's partial stored and fenced
  bool last = false;
  if (ct == 0) {
    int* counter = (int*)counters + t;
    last = atomicAdd(counter, 1) == S - 1;
    if (last) *counter = 0;  // all S splits have arrived
  }
  if (!fs_named_any(barrier, NT, last)) return false;
  __threadfence();
  // one split at a time (a rolled loop: the accumulators and one split's loads are live,
  // not every split's)
#pragma unroll 1
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int m = 0; m < MI; ++m) {
#pragma unroll
      for (int j = 0; j < HALF / 4; ++j) {
        const float4 p = fs_ld_cg4f(part + ((first + s) * V + m * (HALF / 4) + j) * NT + ct);
        acc[m][4 * j] = s == 0 ? p.x : acc[m][4 * j] + p.x;
        acc[m][4 * j + 1] = s == 0 ? p.y : acc[m][4 * j + 1] + p.y;
        acc[m][4 * j + 2] = s == 0 ? p.z : acc[m][4 * j + 2] + p.z;
        acc[m][4 * j + 3] = s == 0 ? p.w : acc[m][4 * j + 3] + p.w;
      }
    }
  }
  return true;
}

// Work unit u of a persistent walk over `tiles` x S units -> its tile t and K steps
// [kb0, kb1): the S units of tile t are t S .. t S + S - 1, split s takes K steps
// [s kblocks / S, (s + 1) kblocks / S) (balanced; empty when kblocks < S).
template <int S>
static __device__ __forceinline__ void fs_split_unit(int u, int kblocks, int& t, int& kb0,
                                                     int& kb1) {
  if constexpr (S == 1) {
    t = u;
    kb0 = 0;
    kb1 = kblocks;
  } else {
    t = u / S;
    const int s = u - t * S;
    kb0 = s * kblocks / S;
    kb1 = (s + 1) * kblocks / S;
  }
}

// A work unit of a persistent walk as the templates use it: its tile t and K steps
// [kb0, kb1) (fs_split_unit), and the tile's place: M block pm, N block pn and pz (the
// GEMM's batch, the conv's group).
struct TileUnit {
  int t, kb0, kb1, pm, pn, pz;
};
