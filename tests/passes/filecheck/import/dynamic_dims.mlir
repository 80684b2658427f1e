// A model with dynamic batch and sequence dimensions (issue 29): `fusec import`
// without --input-shape prints its symbolic signature, `?` for each dynamic size and
// the dim_param names in ai.dims (input_ids and attention_mask share batch and seq);
// the body is imported per input shape when the model is compiled. With one
// --input-shape the shared names fix the other input too, and the Shape -> Gather ->
// Concat -> Reshape chains fold to static reshapes.
// RUN: python %S/../../../frontend/onnx/dynamic_models.py %t.onnx encoder
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// RUN: fusec import %t.onnx 2>&1 >/dev/null | filecheck %s --check-prefix=SUMMARY
// RUN: fusec import %t.onnx --input-shape input_ids=2x3 2>/dev/null | filecheck %s --check-prefix=FIXED
// CHECK: func.func private @encoder(tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
// CHECK-SAME: ai.dims = {input_ids = ["batch", "seq"], attention_mask = ["batch", "seq"]}
// CHECK-SAME: ai.result_dims = {hidden = ["batch", "seq", 32 : i64]}
// SUMMARY: dynamic dimensions 'batch' (input_ids[0], attention_mask[0]), 'seq' (input_ids[1], attention_mask[1])
// FIXED: func.func @encoder(%input_ids: tensor<2x3xi64> {{.*}}, %attention_mask: tensor<2x3xi64>
// FIXED: %q1 = ai.reshape %q0 {shape = array<i64: 2, 3, 2, 16>} : tensor<2x3x32xf32>
// FIXED: %ctx = ai.reshape %ctx1 {shape = array<i64: 2, 3, 32>} : tensor<2x3x2x16xf32>
