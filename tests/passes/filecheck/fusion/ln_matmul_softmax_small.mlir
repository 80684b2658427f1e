// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/ln_matmul_softmax_small.mlir: 1 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "matmul"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.layernorm 
// CHECK-NEXT: ai.matmul 
// CHECK-NEXT: ai.softmax 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-1: ai.fused
// COUNT-NOT: ai.fused

// layernorm -> matmul -> softmax with rows of N = 256: the row fits one tile.
// Expected fusion: ONE matmul kernel (LayerNorm prologue, softmax epilogue).
func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
  %n = ai.layernorm %x, %gamma, %beta : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
  %h = ai.matmul %n, %w : tensor<32x128xf32> * tensor<128x256xf32>
  %p = ai.softmax %h : tensor<32x256xf32>
  return %p : tensor<32x256xf32>
}
