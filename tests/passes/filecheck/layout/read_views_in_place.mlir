// read-views-in-place (cuda, issue 28): the q slice of a combined projection, copied by
// a copy group and reshaped by a view group before Llama's RoPE, moves into the RoPE's
// pointwise group, which reads the projection's output itself (its kernel at the slice's
// strides); the cos/sin tables, views of constants without a copy, stay as they are.
// RUN: fusec-opt %s -p "infer-shapes,fuse{target=cuda},read-views-in-place" | filecheck %s
// RUN: fusec-opt %s -p "infer-shapes,fuse{target=cuda}" | filecheck %s --check-prefix=BEFORE

// BEFORE:      ai.fused "copy"
// BEFORE:      ai.fused "pointwise"

// CHECK-LABEL: func.func @rope_of_a_slice
// CHECK-NOT:   ai.fused "copy"
// CHECK:       ai.fused "pointwise" (%[[X:[^,]*]], %{{.*}}, %{{.*}}) : (tensor<1x16x512xf16>, tensor<1x16x1x64xf16>, tensor<1x16x1x64xf16>) -> tensor<1x16x4x64xf16>
// CHECK-NEXT:  ^{{.*}}(%[[A:.*]]: tensor<1x16x512xf16>, %{{.*}}: tensor<1x16x1x64xf16>, %{{.*}}: tensor<1x16x1x64xf16>):
// CHECK-NEXT:  %[[P:.*]] = ai.slice %[[A]] {offsets = array<i64: 0, 0, 128>, sizes = array<i64: 1, 16, 256>, strides = array<i64: 1, 1, 1>}
// CHECK-NEXT:  %[[H:.*]] = ai.reshape %[[P]] {shape = array<i64: 1, 16, 4, 64>}
// CHECK-NEXT:  ai.mul %[[H]]
// CHECK-NEXT:  ai.rotate_half %[[H]]
// CHECK-NOT:   ai.fused "copy"
func.func @rope_of_a_slice(%x: tensor<1x16x512xf16>, %c: tensor<1x16x1x64xf16>, %s: tensor<1x16x1x64xf16>) -> tensor<1x16x4x64xf16> {
  %p = ai.slice %x {offsets = array<i64: 0, 0, 128>, sizes = array<i64: 1, 16, 256>, strides = array<i64: 1, 1, 1>} : tensor<1x16x512xf16>
  %h = ai.reshape %p {shape = array<i64: 1, 16, 4, 64>} : tensor<1x16x256xf16>
  %a = ai.mul %h, %c : tensor<1x16x4x64xf16> * tensor<1x16x1x64xf16>
  %r = ai.rotate_half %h : tensor<1x16x4x64xf16>
  %b = ai.mul %r, %s : tensor<1x16x4x64xf16> * tensor<1x16x1x64xf16>
  %y = ai.add %a, %b : tensor<1x16x4x64xf16> * tensor<1x16x4x64xf16>
  return %y : tensor<1x16x4x64xf16>
}
