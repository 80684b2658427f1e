// RUN: fusec compile %s --target cuda | filecheck %s
// f32 matmuls keep IEEE f32 maths (the PyTorch fallback, no TF32): no Tensor Core tile.
// CHECK: ai.fused "matmul"
// CHECK-NOT: fusec.tile
func.func @f32(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %c = ai.matmul %a, %b : tensor<512x512xf32> * tensor<512x512xf32>
  return %c : tensor<512x512xf32>
}
