// RoPE's rotate-half as the exporters write it (issue 28/30): q * cos + concat(-q2, q1) * sin
// with q1, q2 the halves of the last axis. Canonicalisation makes the slice/neg/concat one
// ai.rotate_half, which a pointwise kernel reads its group input through: the whole RoPE
// is one pointwise group on cpu and cuda (no copy of the halves, no negation kernel).
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cpu}" | filecheck %s
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cuda}" | filecheck %s

// CHECK-LABEL: func.func @rope
// CHECK-NEXT:  ai.fused "pointwise"
// CHECK-NEXT:  ^{{.*}}(%[[Q:.*]]: tensor<1x4x16x16xf32>, %[[C:.*]]: tensor<1x1x16x16xf32>, %[[S:.*]]: tensor<1x1x16x16xf32>):
// CHECK-NEXT:  %[[A:.*]] = ai.mul %[[Q]], %[[C]]
// CHECK-NEXT:  %[[R:.*]] = ai.rotate_half %[[Q]] : tensor<1x4x16x16xf32>
// CHECK-NEXT:  %[[B:.*]] = ai.mul %[[R]], %[[S]]
// CHECK-NEXT:  %[[Y:.*]] = ai.add %[[A]], %[[B]]
// CHECK-NEXT:  ai.yield %[[Y]]
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return
func.func @rope(%q: tensor<1x4x16x16xf32>, %cos: tensor<1x1x16x16xf32>, %sin: tensor<1x1x16x16xf32>) -> tensor<1x4x16x16xf32> {
  %a = ai.mul %q, %cos : tensor<1x4x16x16xf32> * tensor<1x1x16x16xf32>
  %lo = ai.slice %q {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 4, 16, 8>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x4x16x16xf32>
  %hi = ai.slice %q {offsets = array<i64: 0, 0, 0, 8>, sizes = array<i64: 1, 4, 16, 8>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x4x16x16xf32>
  %n = ai.neg %hi : tensor<1x4x16x8xf32>
  %r = ai.concat %n, %lo {axis = -1 : i64} : tensor<1x4x16x8xf32> * tensor<1x4x16x8xf32>
  %b = ai.mul %r, %sin : tensor<1x4x16x16xf32> * tensor<1x1x16x16xf32>
  %y = ai.add %a, %b : tensor<1x4x16x16xf32> * tensor<1x4x16x16xf32>
  return %y : tensor<1x4x16x16xf32>
}

// -----

// The rotate-half reads its operand at another index, so a value computed in the group
// (x * x) is not its operand: the rotate-half starts the next group.
// CHECK-LABEL: func.func @computed
// CHECK:       %[[Q:.*]] = ai.fused "pointwise"
// CHECK:       ai.mul
// CHECK:       ai.fused "pointwise" (%[[Q]]
// CHECK:       ai.rotate_half
// CHECK-NOT:   ai.concat
func.func @computed(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %q = ai.mul %x, %x : tensor<2x8xf32> * tensor<2x8xf32>
  %lo = ai.slice %q {offsets = array<i64: 0, 0>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  %hi = ai.slice %q {offsets = array<i64: 0, 4>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  %n = ai.neg %hi : tensor<2x4xf32>
  %r = ai.concat %n, %lo {axis = 1 : i64} : tensor<2x4xf32> * tensor<2x4xf32>
  %y = ai.add %r, %q : tensor<2x8xf32> * tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Halves in the other order, an odd split or a slice along another axis are no
// rotate-half: the concat stays.
// CHECK-LABEL: func.func @not_rotate_half
// CHECK-NOT:   ai.rotate_half
// CHECK:       ai.concat
func.func @not_rotate_half(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %lo = ai.slice %x {offsets = array<i64: 0, 0>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  %hi = ai.slice %x {offsets = array<i64: 0, 4>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  %n = ai.neg %lo : tensor<2x4xf32>
  %r = ai.concat %n, %hi {axis = 1 : i64} : tensor<2x4xf32> * tensor<2x4xf32>
  return %r : tensor<2x8xf32>
}
