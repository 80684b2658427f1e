// RUN: fusec compile %s --target cuda | filecheck %s

// DenseNet's transition: a pool group with two results (the pooled value, which the next
// dense block's concats read, and its scale + relu, the next conv's input) reading an NHWC
// conv output. conv-layout reads the pool's input channels-last and keeps both results
// (it rewired only the first one and crashed erasing the group, 2026-12-06).

// CHECK:      %a = ai.fused "conv" ({{.*}}output = "nhwc"{{.*}} -> tensor<2x8x8x32xf16>
// CHECK:      %p, %r = ai.fused "pool" (%a, %s) {fusec.layout = {input = "nhwc", output = "nchw"}} : (tensor<2x8x8x32xf16>, tensor<32xf16>) -> (tensor<2x32x4x4xf16>, tensor<2x32x4x4xf16>)
// CHECK:      %[[C:.*]] = ai.fused "conv"
// CHECK:      func.return %p, %[[C]]

func.func @f(%x: tensor<2x32x8x8xf16>, %w1: tensor<32x32x3x3xf16>, %s: tensor<32xf16>, %b: tensor<32xf16>, %w2: tensor<32x32x3x3xf16>) -> (tensor<2x32x4x4xf16>, tensor<2x32x4x4xf16>) {
  %a = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<2x32x8x8xf16> * tensor<32x32x3x3xf16>
  %p = ai.avg_pool2d %a {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<2x32x8x8xf16>
  %m = ai.bias_add %p, %s {axis = 1} : tensor<2x32x4x4xf16> * tensor<32xf16>
  %r = ai.relu %m : tensor<2x32x4x4xf16>
  %c = ai.conv2d %r, %w2 {padding = array<i64: 1, 1>} : tensor<2x32x4x4xf16> * tensor<32x32x3x3xf16>
  func.return %p, %c : tensor<2x32x4x4xf16>, tensor<2x32x4x4xf16>
}
