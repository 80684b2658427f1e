// fusec kernel layer: the second pass of a long-row softmax (the design is described in
// fusec/targets/cuda/gemm/aux.py, whose SoftmaxFinalise instantiates it).
//
// A GEMM whose epilogue stored the logits (rounded to the output type) and, per row and N
// tile, the pair (max, sum of exp(v - max)) leaves the row's softmax to this block: it
// combines the row's pairs into (M, S), then rewrites the row in place as
// post(exp(v - M) / S). An instantiation supplies
//   Out:  the output element type (fusec::F16, BF16, F32);
//   Post: the functor of the ops after the softmax, `operator()(s, row, col, batch)`.
#pragma once

#include "fusec/common.cuh"

namespace fusec {

// Element i of the logits, as stored (a plain load: the block rewrites them in place).
template <class Out>
static __device__ __forceinline__ float softmax_logit(u64 out, long long i) {
  if constexpr (Out::BYTES == 4) {
    return ((const float*)out)[i];
  } else {
    return Out::cvt(((const u16*)out)[i]);
  }
}

template <class Out>
static __device__ __forceinline__ void softmax_store(u64 out, long long i, float y) {
  if constexpr (Out::BYTES == 4) {
    ((float*)out)[i] = y;
  } else {
    ((u16*)out)[i] = Out::bits(y);
  }
}

// One block per (batch, row): blockIdx.x = batch * M + row.
template <class Out, class Post>
static __device__ __forceinline__ int softmax_finalise(const Post& post, u64 out, u64 partials,
                                                       int M, int N, int tiles_n, int batches) {
  const long long r = blockIdx.x;
  if (r >= (long long)batches * M) return 0;
  const int row = (int)(r % M);
  const int bat = (int)(r / M);
  const float2* part = (const float2*)partials + r * tiles_n;
  float mx = __int_as_float(0xff800000);
  for (int t = 0; t < tiles_n; ++t) mx = fmaxf(mx, part[t].x);
  const float shift = mx == __int_as_float(0xff800000) ? 0.0f : mx;
  float sum = 0.0f;
  for (int t = 0; t < tiles_n; ++t) {
    const float2 p = part[t];
    sum += p.y * expf(p.x - shift);
  }
  const float inv = __fdividef(1.0f, sum);  // sum >= 1: the max term is exp(0)
  const long long base = r * N;
  for (int col = threadIdx.x; col < N; col += blockDim.x) {
    const float s = expf(softmax_logit<Out>(out, base + col) - shift) * inv;
    const float y = post(s, row, col, bat);
    softmax_store<Out>(out, base + col, y);
  }
  return 0;
}

}  // namespace fusec
