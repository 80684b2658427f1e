// conv-layout's channels-last step (issue 28): a ConvNeXt stage in f16 (a 2x2/2 downsample
// conv, two blocks of depthwise 7x7 + bias, permute to NHWC, LayerNorm, Linear, GELU,
// Linear, permute back, a constant layer scale and the residual add, then the global
// mean) runs channels-last: each depthwise conv group reads and writes NHWC (the NHWC
// direct kernel), each residual add computes on NHWC values with the layer scale relaid
// 1x1x1x16 at compile time and, reading the second Linear's result directly, becomes
// that GEMM's epilogue; the downsample conv stores NHWC, the mean reads NHWC. The only
// copies left convert the graph's input and the downsample weights (an argument); with
// handoff=off (every conv result NCHW, nothing relaid) the four permutes stay.
// RUN: fusec compile %s --target cuda | filecheck %s
// RUN: fusec compile %s --target cuda | filecheck %s --check-prefix=COUNT
// RUN: fusec compile %s --target cuda --pipeline fusec-default,conv-layout{handoff=off} | filecheck %s --check-prefix=OFF

// CHECK:      %[[X:.*]] = ai.fused "copy" (%x) : (tensor<1x16x8x8xf16>) -> tensor<1x8x8x16xf16>
// CHECK:      %[[W:.*]] = ai.fused "copy" (%wd)
// CHECK:      %d = ai.fused "conv" (%[[X]], %[[W]]) {fusec.layout = {input = "nhwc", weight = "krsc", output = "nhwc"}
// CHECK:      %cb0 = ai.fused "conv" (%d, %w0, %b0) {fusec.layout = {input = "nhwc", output = "nhwc"}} : {{.*}} -> tensor<1x4x4x16xf16>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT: ai.conv2d
// CHECK-NEXT: ai.bias_add
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 2, 3, 1>}
// CHECK:      %g0 = ai.fused "matmul" (%cb0,
// CHECK:      %[[S:.*]] = arith.constant {{.*}} : tensor<1x1x1x16xf16>
// CHECK:      %r0 = ai.fused "matmul" (%g0, %wb0, %[[S]], %d)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.matmul
// CHECK-NEXT: ai.mul
// CHECK-NEXT: ai.add
// CHECK:      %cb1 = ai.fused "conv" (%r0, %w1, %b1) {fusec.layout = {input = "nhwc", output = "nhwc"}}
// CHECK:      %r1 = ai.fused "matmul" (%g1, %wb1, %[[S]], %r0)
// CHECK:      %h = ai.fused "reduce" (%r1) {fusec.layout = {input = "nhwc", output = "nchw"}}

// COUNT-COUNT-2: ai.fused "copy"
// COUNT-NOT:     ai.fused "copy"

// COUNT-NOT:     ai.fused "pointwise"

// OFF-COUNT-6: ai.fused "copy"
// OFF-NOT:     ai.fused "copy"
// OFF-NOT:     input = "nhwc", output = "nhwc"

func.func @stage(%x: tensor<1x16x8x8xf16>, %wd: tensor<16x16x2x2xf16>, %lw: tensor<16xf16>, %lb: tensor<16xf16>, %w0: tensor<16x1x7x7xf16>, %b0: tensor<16xf16>, %wa0: tensor<16x32xf16>, %wb0: tensor<32x16xf16>, %w1: tensor<16x1x7x7xf16>, %b1: tensor<16xf16>, %wa1: tensor<16x32xf16>, %wb1: tensor<32x16xf16>) -> tensor<1x16x1x1xf16> {
  %s = arith.constant dense<[[[0.25]], [[0.28125]], [[0.3125]], [[0.34375]], [[0.375]], [[0.40625]], [[0.4375]], [[0.46875]], [[0.5]], [[0.53125]], [[0.5625]], [[0.59375]], [[0.625]], [[0.65625]], [[0.6875]], [[0.71875]]]> : tensor<16x1x1xf16>
  %d = ai.conv2d %x, %wd {strides = array<i64: 2, 2>} : tensor<1x16x8x8xf16> * tensor<16x16x2x2xf16>
  %c0 = ai.conv2d %d, %w0 {padding = array<i64: 3, 3>, groups = 16 : i64} : tensor<1x16x4x4xf16> * tensor<16x1x7x7xf16>
  %cb0 = ai.bias_add %c0, %b0 : tensor<1x16x4x4xf16> * tensor<16xf16>
  %p0 = ai.transpose %cb0 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x16x4x4xf16>
  %l0 = ai.layernorm %p0, %lw, %lb {epsilon = 1.0e-06 : f32} : tensor<1x4x4x16xf16> * tensor<16xf16> * tensor<16xf16>
  %m0 = ai.matmul %l0, %wa0 : tensor<1x4x4x16xf16> * tensor<16x32xf16>
  %g0 = ai.gelu %m0 : tensor<1x4x4x32xf16>
  %o0 = ai.matmul %g0, %wb0 : tensor<1x4x4x32xf16> * tensor<32x16xf16>
  %q0 = ai.transpose %o0 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x4x16xf16>
  %sq0 = ai.mul %s, %q0 : tensor<16x1x1xf16> * tensor<1x16x4x4xf16>
  %r0 = ai.add %sq0, %d : tensor<1x16x4x4xf16> * tensor<1x16x4x4xf16>
  %c1 = ai.conv2d %r0, %w1 {padding = array<i64: 3, 3>, groups = 16 : i64} : tensor<1x16x4x4xf16> * tensor<16x1x7x7xf16>
  %cb1 = ai.bias_add %c1, %b1 : tensor<1x16x4x4xf16> * tensor<16xf16>
  %p1 = ai.transpose %cb1 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x16x4x4xf16>
  %l1 = ai.layernorm %p1, %lw, %lb {epsilon = 1.0e-06 : f32} : tensor<1x4x4x16xf16> * tensor<16xf16> * tensor<16xf16>
  %m1 = ai.matmul %l1, %wa1 : tensor<1x4x4x16xf16> * tensor<16x32xf16>
  %g1 = ai.gelu %m1 : tensor<1x4x4x32xf16>
  %o1 = ai.matmul %g1, %wb1 : tensor<1x4x4x32xf16> * tensor<32x16xf16>
  %q1 = ai.transpose %o1 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x4x4x16xf16>
  %sq1 = ai.mul %s, %q1 : tensor<16x1x1xf16> * tensor<1x16x4x4xf16>
  %r1 = ai.add %sq1, %r0 : tensor<1x16x4x4xf16> * tensor<1x16x4x4xf16>
  %h = ai.reduce_mean %r1 {axes = array<i64: 2, 3>, keepdims = true} : tensor<1x16x4x4xf16>
  return %h : tensor<1x16x1x1xf16>
}

