// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/elementwise_chain.mlir: 1 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "pointwise"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.bias_add 
// CHECK-NEXT: ai.mul 
// CHECK-NEXT: ai.silu 
// CHECK-NEXT: ai.maximum 
// CHECK-NEXT: ai.cast 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-1: ai.fused
// COUNT-NOT: ai.fused

// A chain of elementwise ops with numpy broadcasting (a bias over the last
// axis, a per-row scale) ending in a cast.
// Expected fusion: ONE pointwise kernel.
func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
  %a = ai.add %x, %b : tensor<4x8x16xf32> * tensor<16xf32>
  %m = ai.mul %a, %s : tensor<4x8x16xf32> * tensor<8x1xf32>
  %g = ai.sigmoid %m : tensor<4x8x16xf32>
  %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
  %z = ai.maximum %y, %x : tensor<4x8x16xf32> * tensor<4x8x16xf32>
  %c = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
  return %c : tensor<4x8x16xf16>
}
