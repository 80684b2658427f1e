// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// ai.moe_experts is a group of its own, "experts" (issue 31): the routing before it and
// the residual after it are other kernels.

// CHECK:      ai.fused "experts"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.moe_experts
// CHECK-NEXT: ai.yield
// COUNT-COUNT-2: ai.fused
// COUNT-NOT: ai.fused
func.func @experts(%x: tensor<16x8xf32>, %w: tensor<16x2xf32>, %e: tensor<16x2xi32>, %gu: tensor<4x12x8xf32>, %dn: tensor<4x8x6xf32>) -> tensor<16x8xf32> {
  %y = ai.moe_experts %x, %w, %e, %gu, %dn : tensor<16x8xf32> * tensor<16x2xf32> * tensor<16x2xi32> * tensor<4x12x8xf32> * tensor<4x8x6xf32>
  %r = ai.add %y, %x : tensor<16x8xf32> * tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}
