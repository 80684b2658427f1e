// A TorchScript export of an f16 transformer fed an attention_mask (issue 28): layer 1's
// attention is f32 behind layer 0's upcast one, and its additive mask is computed at run
// time (the exporter's where(keep, 0, -inf) in f32; here a function argument), not a
// constant. demote-upcasts casts that mask to f16 for the demoted attention, as
// recognize_attention casts layer 0's, so the attention and the q/k/v projection are f16
// (before: f32, and on cuda the PyTorch fallback for both).
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,demote-upcasts" | filecheck %s
// CHECK-LABEL: func.func @f
// CHECK:       ai.matmul %{{.*}} : tensor<1x8x128xf16> * tensor<128x384xf16>
// CHECK:       %[[M:.*]] = ai.cast %mask : tensor<1x1x8x8xf32> to tensor<1x1x8x8xf16>
// CHECK:       ai.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[M]] {{.*}} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// CHECK-NOT:   ai.attention

func.func @f(%q0: tensor<1x2x8x64xf16>, %k0: tensor<1x2x8x64xf16>, %v0: tensor<1x2x8x64xf16>, %mask: tensor<1x1x8x8xf32>) -> tensor<1x8x128xf32> {
  %zero = arith.constant dense<0.0> : tensor<1x1x8x8xf16>
  %a0 = ai.attention %q0, %k0, %v0, %zero {scale = 1.250000e-01 : f32, nan_to_zero = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
  %a0u = ai.cast %a0 : tensor<1x2x8x64xf16> to tensor<1x2x8x64xf32>
  %a0t = ai.transpose %a0u {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf32>
  %h = ai.reshape %a0t {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf32>
  %wqkv = arith.constant dense<6.250000e-02> : tensor<128x384xf32>
  %qkv = ai.matmul %h, %wqkv : tensor<1x8x128xf32> * tensor<128x384xf32>
  %qkv4 = ai.reshape %qkv {shape = array<i64: 1, 8, 2, 192>} : tensor<1x8x384xf32>
  %qkvt = ai.transpose %qkv4 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x192xf32>
  %q = ai.slice %qkvt {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x192xf32>
  %k = ai.slice %qkvt {offsets = array<i64: 0, 0, 0, 64>, sizes = array<i64: 1, 2, 8, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x192xf32>
  %v = ai.slice %qkvt {offsets = array<i64: 0, 0, 0, 128>, sizes = array<i64: 1, 2, 8, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x192xf32>
  %a1 = ai.attention %q, %k, %v, %mask {scale = 1.250000e-01 : f32, nan_to_zero = true} : tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32> * tensor<1x1x8x8xf32>
  %a1t = ai.transpose %a1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf32>
  %y = ai.reshape %a1t {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf32>
  return %y : tensor<1x8x128xf32>
}
