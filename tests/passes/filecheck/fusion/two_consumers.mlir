// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/two_consumers.mlir: 3 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "row_reduce"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.mul 
// CHECK-NEXT: ai.layernorm 
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "row_reduce"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.mul 
// CHECK-NEXT: ai.softmax 
// CHECK-NEXT: ai.add 
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "matmul"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.matmul 
// CHECK-NEXT: ai.gelu 
// CHECK-NEXT: ai.sigmoid 
// CHECK-NEXT: ai.mul 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-3: ai.fused
// COUNT-NOT: ai.fused

// Values with two consumers.
// %t is a cheap elementwise value read by two row reductions: each row-reduce
// kernel recomputes it (it is cloned), so it is never written to memory.
// %h is a matmul (an anchor) read by two epilogue ops and returned: it is
// computed once, in a multi-output matmul kernel that yields %h and %y.
// Expected fusion: three kernels.
func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %t = ai.mul %x, %scale : tensor<8x64xf32> * tensor<64xf32>
  %p = ai.softmax %t : tensor<8x64xf32>
  %n = ai.layernorm %t, %gamma, %beta : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
  %o = ai.add %p, %n : tensor<8x64xf32> * tensor<8x64xf32>
  %h = ai.matmul %o, %w : tensor<8x64xf32> * tensor<64x32xf32>
  %a = ai.gelu %h : tensor<8x32xf32>
  %s = ai.sigmoid %h : tensor<8x32xf32>
  %y = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
  return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
}
