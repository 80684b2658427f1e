// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The "reduce" kind: a reduction over any axes anchors a group with its elementwise
// epilogue on the reduced values (the sqrt of each row's sum of products); the product
// before it is a pointwise kernel of its own (no prologue of a reduction).

// CHECK:      ai.fused "pointwise"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.mul
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "reduce"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.reduce_sum {{.*}}axes = array<i64: 2>
// CHECK-NEXT: ai.sqrt
// CHECK-NEXT: ai.yield
// COUNT-COUNT-2: ai.fused
// COUNT-NOT: ai.fused

func.func @reduce(%x: tensor<2x16x64xf32>, %y: tensor<2x16x64xf32>) -> tensor<2x16xf32> {
  %e = ai.mul %x, %y : tensor<2x16x64xf32> * tensor<2x16x64xf32>
  %s = ai.reduce_sum %e {axes = array<i64: 2>} : tensor<2x16x64xf32>
  %q = ai.sqrt %s : tensor<2x16xf32>
  return %q : tensor<2x16xf32>
}
