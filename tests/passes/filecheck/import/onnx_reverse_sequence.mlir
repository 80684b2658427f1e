// ONNX ReverseSequence (issue 29) with constant lengths imports as one slice per batch
// (batch_axis 1), its first sequence_lens[b] time steps reversed by an ai.gather along
// the time axis (axis 0: 2, 1, 0, then 3 kept), a batch of length 1 left as it is, the
// slices concatenated along the batch axis again.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx reverse_sequence
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[B0:.*]] = ai.slice %x {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 4, 1, 3>
// CHECK-NEXT: %[[R0:.*]] = ai.gather %[[B0]] {indices = array<i64: 2, 1, 0, 3>} : tensor<4x1x3xf32>
// CHECK-NEXT: %[[B1:.*]] = ai.slice %x {offsets = array<i64: 0, 1, 0>, sizes = array<i64: 4, 1, 3>
// CHECK-NEXT: %y = ai.concat %[[R0]], %[[B1]] {axis = 1 : i64}
// CHECK-NEXT: func.return %y : tensor<4x2x3xf32>
