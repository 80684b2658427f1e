// The ONNX import of a token-id model's front (issue 29): its INT64 inputs are
// arguments, the embedding lookups are ai.take at run-time indices (the position
// ids computed from the mask by CumSum), and the attention mask stays data built
// from attention_mask (cast to i1, expanded, and-ed with the causal constant).
// RUN: python %S/../../../frontend/onnx/token_models.py %t.onnx gpt2 cumsum
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// RUN: fusec import %t.onnx 2>/dev/null | fusec-opt -p fusec-default | filecheck %s --check-prefix=FUSED
// CHECK: func.func @gpt2_tokens(%input_ids: tensor<1x4xi64> {{.*}}, %attention_mask: tensor<1x4xi64>
// CHECK: %word = ai.take %wte, %input_ids : tensor<30x8xf32> * tensor<1x4xi64>
// CHECK: %cum = ai.cumsum %attention_mask {axis = 1 : i64} : tensor<1x4xi64>
// CHECK: %pos_ids = ai.mul %cum, %attention_mask : tensor<1x4xi64> * tensor<1x4xi64>
// CHECK: %pos = ai.take %wpe, %pos_ids : tensor<64x8xf32> * tensor<1x4xi64>
// CHECK: %mb = ai.cast %attention_mask : tensor<1x4xi64> to tensor<1x4xi1>
// CHECK: %mbe = ai.expand %mb4 {shape = array<i64: 1, 1, 4, 4>} : tensor<1x1x1x4xi1>
// CHECK: %allowed = ai.and %causal, %mbe : tensor<1x1x4x4xi1> * tensor<1x1x4x4xi1>
// CHECK: %mask = ai.where %allowed, %zero, %ninf : tensor<1x1x4x4xi1> * tensor<f32> * tensor<f32>
// The lookups are copy groups; the mask is computed by pointwise groups from the i64
// input (the cast to i1, then expand, and, where to f32), and the recognised attention
// reads it as its mask operand.
// FUSED: ai.fused "copy" (%wte, %input_ids)
// FUSED-NEXT: ^bb0
// FUSED-NEXT: ai.take
// FUSED: %mb = ai.fused "pointwise" (%attention_mask) : (tensor<1x4xi64>) -> tensor<1x4xi1>
// FUSED: %mask = ai.fused "pointwise" (%mb4, %causal, %zero, %ninf) : (tensor<1x1x1x4xi1>, tensor<1x1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x4x4xf32>
// FUSED: ai.fused "attention" ({{.*}}, %mask)
// FUSED: ai.attention
