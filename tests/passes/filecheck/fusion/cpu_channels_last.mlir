// cpu-channels-last (issue #30): two ConvNeXt blocks (depthwise 7x7 + bias in NCHW, permute
// to NHWC, LayerNorm, Linear, GELU, Linear, permute back, a constant layer scale, the
// residual add) run channels-last: each depthwise conv group reads and writes NHWC, each
// residual add computes on NHWC values with the layer scale relaid 1x1x1x32 at compile
// time, and of the four permute copies only the graph input's and result's conversions
// are left. The default pipeline (fusec-default) keeps all four.
// RUN: fusec-opt %s -p fusec-cpu | filecheck %s
// RUN: fusec-opt %s -p fusec-cpu | filecheck %s --check-prefix=COUNT
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=DEFAULT

// CHECK:      %[[X:.*]] = ai.fused "copy" (%x) : (tensor<1x32x8x8xf32>) -> tensor<1x8x8x32xf32>
// CHECK:      %cb0 = ai.fused "conv" (%[[X]], %w0, %b0) {fusec.layout = {input = "nhwc", output = "nhwc"}} : {{.*}} -> tensor<1x8x8x32xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT: ai.conv2d
// CHECK-NEXT: ai.bias_add
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 2, 3, 1>}
// CHECK:      %g0 = ai.fused "matmul" (%cb0,
// CHECK:      %[[S:.*]] = arith.constant {{.*}} : tensor<1x1x1x32xf32>
// CHECK:      %r0 = ai.fused "pointwise" (%[[S]], %n0, %[[X]]) {fusec.layout = {input = "nhwc", output = "nhwc"}}
// CHECK:      ai.mul %{{.*}}, %{{.*}} : tensor<1x1x1x32xf32> * tensor<1x8x8x32xf32>
// CHECK:      %cb1 = ai.fused "conv" (%r0, %w1, %b1) {fusec.layout = {input = "nhwc", output = "nhwc"}}
// CHECK:      %r1 = ai.fused "pointwise" (%[[S]], %n1, %r0) {fusec.layout
// CHECK:      %[[Y:.*]] = ai.fused "copy" (%r1) : (tensor<1x8x8x32xf32>) -> tensor<1x32x8x8xf32>
// CHECK:      func.return %[[Y]]

// COUNT-COUNT-2: ai.fused "copy"
// COUNT-NOT:     ai.fused "copy"

// DEFAULT-COUNT-4: ai.fused "copy"
// DEFAULT-NOT:     fusec.layout

func.func @stage(%x: tensor<1x32x8x8xf32>, %lw: tensor<32xf32>, %lb: tensor<32xf32>, %w0: tensor<32x1x7x7xf32>, %b0: tensor<32xf32>, %wa0: tensor<32x64xf32>, %wb0: tensor<64x32xf32>, %w1: tensor<32x1x7x7xf32>, %b1: tensor<32xf32>, %wa1: tensor<32x64xf32>, %wb1: tensor<64x32xf32>) -> tensor<1x32x8x8xf32> {
  %s = arith.constant dense<[[[0.25]], [[0.265625]], [[0.28125]], [[0.296875]], [[0.3125]], [[0.328125]], [[0.34375]], [[0.359375]], [[0.375]], [[0.390625]], [[0.40625]], [[0.421875]], [[0.4375]], [[0.453125]], [[0.46875]], [[0.484375]], [[0.5]], [[0.515625]], [[0.53125]], [[0.546875]], [[0.5625]], [[0.578125]], [[0.59375]], [[0.609375]], [[0.625]], [[0.640625]], [[0.65625]], [[0.671875]], [[0.6875]], [[0.703125]], [[0.71875]], [[0.734375]]]> : tensor<32x1x1xf32>
  %c0 = ai.conv2d %x, %w0 {padding = array<i64: 3, 3>, groups = 32 : i64} : tensor<1x32x8x8xf32> * tensor<32x1x7x7xf32>
  %cb0 = ai.bias_add %c0, %b0 : tensor<1x32x8x8xf32> * tensor<32xf32>
  %p0 = ai.transpose %cb0 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x32x8x8xf32>
  %l0 = ai.layernorm %p0, %lw, %lb {epsilon = 1.0e-06 : f32} : tensor<1x8x8x32xf32> * tensor<32xf32> * tensor<32xf32>
  %m0 = ai.matmul %l0, %wa0 : tensor<1x8x8x32xf32> * tensor<32x64xf32>
  %g0 = ai.gelu %m0 : tensor<1x8x8x64xf32>
  %n0 = ai.matmul %g0, %wb0 : tensor<1x8x8x64xf32> * tensor<64x32xf32>
  %q0 = ai.transpose %n0 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x8x8x32xf32>
  %sq0 = ai.mul %s, %q0 : tensor<32x1x1xf32> * tensor<1x32x8x8xf32>
  %r0 = ai.add %sq0, %x : tensor<1x32x8x8xf32> * tensor<1x32x8x8xf32>
  %c1 = ai.conv2d %r0, %w1 {padding = array<i64: 3, 3>, groups = 32 : i64} : tensor<1x32x8x8xf32> * tensor<32x1x7x7xf32>
  %cb1 = ai.bias_add %c1, %b1 : tensor<1x32x8x8xf32> * tensor<32xf32>
  %p1 = ai.transpose %cb1 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x32x8x8xf32>
  %l1 = ai.layernorm %p1, %lw, %lb {epsilon = 1.0e-06 : f32} : tensor<1x8x8x32xf32> * tensor<32xf32> * tensor<32xf32>
  %m1 = ai.matmul %l1, %wa1 : tensor<1x8x8x32xf32> * tensor<32x64xf32>
  %g1 = ai.gelu %m1 : tensor<1x8x8x64xf32>
  %n1 = ai.matmul %g1, %wb1 : tensor<1x8x8x64xf32> * tensor<64x32xf32>
  %q1 = ai.transpose %n1 {perm = array<i64: 0, 3, 1, 2>} : tensor<1x8x8x32xf32>
  %sq1 = ai.mul %s, %q1 : tensor<32x1x1xf32> * tensor<1x32x8x8xf32>
  %r1 = ai.add %sq1, %r0 : tensor<1x32x8x8xf32> * tensor<1x32x8x8xf32>
  return %r1 : tensor<1x32x8x8xf32>
}

