// RUN: fusec compile %s --target reference --pipeline infer-shapes,conv-patchify | filecheck %s
// RUN: fusec compile %s --target cuda | filecheck %s --check-prefix=CUDA

// conv-patchify on ViT's patch embedding (16x16/16 on 3 channels, bias, flatten,
// transpose to tokens): the patches are a reshape/transpose/reshape of the image, the
// conv one matmul with its bias, and the tokens a reshape of the matmul's rows (the view
// chain back to [N, K, P, Q] and on to [N, P*Q, K] collapsed).

// CHECK-LABEL: func.func @embed
// CHECK:       %[[SIX:.*]] = ai.reshape %x {shape = array<i64: 2, 3, 2, 16, 3, 16>}
// CHECK-NEXT:  %[[PATCHES:.*]] = ai.transpose %[[SIX]] {perm = array<i64: 0, 2, 4, 1, 3, 5>}
// CHECK-NEXT:  %[[ROWS:.*]] = ai.reshape %[[PATCHES]] {shape = array<i64: 12, 768>}
// CHECK-NEXT:  %[[W:.*]] = ai.reshape %w {shape = array<i64: 64, 768>}
// CHECK-NEXT:  %[[Y:.*]] = ai.matmul %[[ROWS]], %[[W]] {transpose_b = true} : tensor<12x768xf16> * tensor<64x768xf16>
// CHECK-NEXT:  %[[B:.*]] = ai.bias_add %[[Y]], %b : tensor<12x64xf16> * tensor<64xf16>
// CHECK-NEXT:  %[[T:.*]] = ai.reshape %[[B]] {shape = array<i64: 2, 6, 64>}
// CHECK-NEXT:  func.return %[[T]]
// CHECK-NOT:   ai.conv2d

// on the cuda target: one copy kernel (the patches) and one Tensor Core GEMM with the bias
// CUDA-LABEL: func.func @embed
// CUDA:       ai.fused "copy"
// CUDA:       ai.fused "matmul"
// CUDA:         ai.matmul
// CUDA-NEXT:    ai.bias_add
// CUDA-NOT:   ai.fused "copy"
// CUDA-NOT:   ai.conv2d
func.func @embed(%x: tensor<2x3x32x48xf16>, %w: tensor<64x3x16x16xf16>, %b: tensor<64xf16>) -> tensor<2x6x64xf16> {
  %c = ai.conv2d %x, %w {strides = array<i64: 16, 16>} : tensor<2x3x32x48xf16> * tensor<64x3x16x16xf16>
  %y = ai.bias_add %c, %b : tensor<2x64x2x3xf16> * tensor<64xf16>
  %f = ai.reshape %y {shape = array<i64: 2, 64, 6>} : tensor<2x64x2x3xf16>
  %t = ai.transpose %f {perm = array<i64: 0, 2, 1>} : tensor<2x64x6xf16>
  return %t : tensor<2x6x64xf16>
}
