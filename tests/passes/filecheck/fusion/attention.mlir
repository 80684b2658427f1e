// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/attention.mlir: 1 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "attention"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.attention {{.*}}{scale = 0.176776692 : f32}
// CHECK-NEXT: ai.yield
// COUNT-COUNT-1: ai.fused
// COUNT-NOT: ai.fused

// The core of scaled dot-product attention for 4 heads, 64 tokens, head size 32:
// softmax(Q K^T * 1/sqrt(32)) V.
// Expected fusion: recognize-patterns makes the chain one ai.attention (scale
// 1/sqrt(32), no mask): one "attention" kernel, the 64 x 64 scores never stored.
func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
  %scale = arith.constant dense<0.17677669> : tensor<f32>
  %t = ai.mul %s, %scale : tensor<4x64x64xf32> * tensor<f32>
  %p = ai.softmax %t : tensor<4x64x64xf32>
  %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
  return %o : tensor<4x64x32xf32>
}
