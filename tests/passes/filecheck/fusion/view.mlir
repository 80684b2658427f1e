// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The "view" kind: a reshape that is the result of a function is a group of its own,
// the same buffer under another shape (no kernel runs); an elementwise producer does
// not absorb it.

// CHECK:      ai.fused "view"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.reshape {{.*}}shape = array<i64: 6, 4>
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "pointwise"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.exp
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "view"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.reshape
// CHECK-NEXT: ai.yield
// COUNT-COUNT-3: ai.fused
// COUNT-NOT: ai.fused

func.func @view(%x: tensor<2x3x4xf32>) -> (tensor<6x4xf32>, tensor<6x4xf32>) {
  %v = ai.reshape %x {shape = array<i64: 6, 4>} : tensor<2x3x4xf32>
  %e = ai.exp %x : tensor<2x3x4xf32>
  %w = ai.reshape %e {shape = array<i64: 6, 4>} : tensor<2x3x4xf32>
  return %v, %w : tensor<6x4xf32>, tensor<6x4xf32>
}
