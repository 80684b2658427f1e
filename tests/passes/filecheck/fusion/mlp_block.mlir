// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/mlp_block.mlir: 2 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "matmul"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.layernorm 
// CHECK-NEXT: ai.matmul 
// CHECK-NEXT: ai.bias_add 
// CHECK-NEXT: ai.gelu 
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "matmul"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.matmul 
// CHECK-NEXT: ai.bias_add 
// CHECK-NEXT: ai.add 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-2: ai.fused
// COUNT-NOT: ai.fused

// A transformer MLP block with a pre-LayerNorm and a residual connection.
// Expected fusion: [layernorm -> matmul -> bias -> gelu] and
// [matmul -> bias -> residual add]: two matmul kernels.
func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
  %n = ai.layernorm %x, %gamma, %beta : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
  %h = ai.matmul %n, %w1 : tensor<2x16x64xf32> * tensor<64x256xf32>
  %hb = ai.bias_add %h, %b1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
  %a = ai.gelu %hb : tensor<2x16x256xf32>
  %o = ai.matmul %a, %w2 : tensor<2x16x256xf32> * tensor<256x64xf32>
  %ob = ai.bias_add %o, %b2 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
  %y = ai.add %ob, %x : tensor<2x16x64xf32> * tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}
