// RUN: fusec compile %s --target reference --pipeline infer-shapes,conv-patchify | filecheck %s

// conv-patchify on ConvNeXt's stem (4x4/4 on 3 channels, no bias): the relu stays behind
// the view back to NCHW.

// CHECK-LABEL: func.func @convnext_stem
// CHECK:       ai.matmul {{.*}} {transpose_b = true} : tensor<8x48xf16> * tensor<96x48xf16>
// CHECK-NOT:   ai.bias_add
// CHECK:       %[[IMG:.*]] = ai.reshape {{.*}} {shape = array<i64: 2, 2, 2, 96>}
// CHECK-NEXT:  %[[NCHW:.*]] = ai.transpose %[[IMG]] {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:  %[[R:.*]] = ai.relu %[[NCHW]]
func.func @convnext_stem(%x: tensor<2x3x8x8xf16>, %w: tensor<96x3x4x4xf16>) -> tensor<2x96x2x2xf16> {
  %c = ai.conv2d %x, %w {strides = array<i64: 4, 4>} : tensor<2x3x8x8xf16> * tensor<96x3x4x4xf16>
  %r = ai.relu %c : tensor<2x96x2x2xf16>
  return %r : tensor<2x96x2x2xf16>
}
