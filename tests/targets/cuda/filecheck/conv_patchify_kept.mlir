// RUN: fusec compile %s --target reference --pipeline infer-shapes,conv-patchify | filecheck %s

// left alone: the implicit GEMM serves 64 channels at stride 2; padding; f32; dilation
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: ai.conv2d
// CHECK-NOT:   ai.matmul
func.func @kept(%x: tensor<2x64x8x8xf16>, %w: tensor<64x64x2x2xf16>, %xs: tensor<2x3x32x32xf16>, %ws: tensor<8x3x16x16xf16>, %xf: tensor<2x3x32x32xf32>, %wf: tensor<8x3x16x16xf32>) -> (tensor<2x64x4x4xf16>, tensor<2x8x3x3xf16>, tensor<2x8x2x2xf32>, tensor<2x8x1x1xf16>) {
  %a = ai.conv2d %x, %w {strides = array<i64: 2, 2>} : tensor<2x64x8x8xf16> * tensor<64x64x2x2xf16>
  %b = ai.conv2d %xs, %ws {strides = array<i64: 16, 16>, padding = array<i64: 8, 8>} : tensor<2x3x32x32xf16> * tensor<8x3x16x16xf16>
  %c = ai.conv2d %xf, %wf {strides = array<i64: 16, 16>} : tensor<2x3x32x32xf32> * tensor<8x3x16x16xf32>
  %d = ai.conv2d %xs, %ws {strides = array<i64: 16, 16>, dilations = array<i64: 2, 2>} : tensor<2x3x32x32xf16> * tensor<8x3x16x16xf16>
  return %a, %b, %c, %d : tensor<2x64x4x4xf16>, tensor<2x8x3x3xf16>, tensor<2x8x2x2xf32>, tensor<2x8x1x1xf16>
}
