// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The "pool" kind: a pooling op anchors a group with its elementwise epilogue (the
// bias and the sigmoid run on each pooled value before the one store); the relu before
// it is no prologue of a pool (the window reads each input element several times):
// it stays a pointwise kernel of its own.

// CHECK:      ai.fused "pointwise"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.relu
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "pool"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.max_pool2d
// CHECK-NEXT: ai.bias_add
// CHECK-NEXT: ai.sigmoid
// CHECK-NEXT: ai.yield
// COUNT-COUNT-2: ai.fused
// COUNT-NOT: ai.fused

func.func @pool(%x: tensor<1x8x16x16xf32>, %b: tensor<8xf32>) -> tensor<1x8x8x8xf32> {
  %r = ai.relu %x : tensor<1x8x16x16xf32>
  %p = ai.max_pool2d %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<1x8x16x16xf32>
  %a = ai.bias_add %p, %b {axis = 1 : i64} : tensor<1x8x8x8xf32> * tensor<8xf32>
  %s = ai.sigmoid %a : tensor<1x8x8x8xf32>
  return %s : tensor<1x8x8x8xf32>
}
