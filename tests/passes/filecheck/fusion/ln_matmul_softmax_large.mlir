// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/ln_matmul_softmax_large.mlir: 2 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "matmul"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.layernorm 
// CHECK-NEXT: ai.matmul 
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "row_reduce"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.softmax 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-2: ai.fused
// COUNT-NOT: ai.fused

// layernorm -> matmul -> softmax with rows of N = 4096: a row exceeds the tile limit.
// Expected fusion: two kernels, [layernorm -> matmul] and a row-reduce [softmax].
func.func @ln_matmul_softmax_large(%x: tensor<16x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x4096xf32>) -> tensor<16x4096xf32> {
  %n = ai.layernorm %x, %gamma, %beta : tensor<16x128xf32> * tensor<128xf32> * tensor<128xf32>
  %h = ai.matmul %n, %w : tensor<16x128xf32> * tensor<128x4096xf32>
  %p = ai.softmax %h : tensor<16x4096xf32>
  return %p : tensor<16x4096xf32>
}
