// HF's eager attention in f16 (issue 28): softmax(scores.float(), dim=-1).to(f16) @ v, the
// scores upcast to f32 for the softmax and the probabilities cast back: the f16 attention
// (f32 statistics inside), no cast around it; an f32 mask becomes an f16 constant.
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns,canonicalize,cse" | filecheck %s

// CHECK-LABEL: func.func @hf_eager
// CHECK-NOT:   ai.softmax
// CHECK-NOT:   ai.cast
// CHECK:       %[[M:.*]] = arith.constant dense<{{.*}}> : tensor<1x1x8x8xf16>
// CHECK:       %[[A:.*]] = ai.attention %q, %k, %v, %[[M]] {scale = 1.250000e-01 : f32} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// CHECK-NEXT:  func.return %[[A]]
func.func @hf_eager(%q: tensor<1x2x8x64xf16>, %k: tensor<1x2x8x64xf16>, %v: tensor<1x2x8x64xf16>) -> tensor<1x2x8x64xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16>
  %c = arith.constant dense<1.250000e-01> : tensor<f16>
  %ss = ai.mul %s, %c : tensor<1x2x8x8xf16> * tensor<f16>
  %s32 = ai.cast %ss : tensor<1x2x8x8xf16> to tensor<1x2x8x8xf32>
  %mask = arith.constant dense<-1.000000e+09> : tensor<1x1x8x8xf32>
  %sm = ai.add %s32, %mask : tensor<1x2x8x8xf32> * tensor<1x1x8x8xf32>
  %p = ai.softmax %sm : tensor<1x2x8x8xf32>
  %p16 = ai.cast %p : tensor<1x2x8x8xf32> to tensor<1x2x8x8xf16>
  %o = ai.matmul %p16, %v : tensor<1x2x8x8xf16> * tensor<1x2x8x64xf16>
  return %o : tensor<1x2x8x64xf16>
}

// -----

// f32 scores (no upcast) whose probabilities are cast to f16: no f16 attention.
// CHECK-LABEL: func.func @f32_scores
// CHECK:       ai.softmax
// CHECK-NOT:   ai.attention
func.func @f32_scores(%q: tensor<1x2x8x64xf32>, %k: tensor<1x2x8x64xf32>, %v: tensor<1x2x8x64xf16>) -> tensor<1x2x8x64xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32>
  %p = ai.softmax %s : tensor<1x2x8x8xf32>
  %p16 = ai.cast %p : tensor<1x2x8x8xf32> to tensor<1x2x8x8xf16>
  %o = ai.matmul %p16, %v : tensor<1x2x8x8xf16> * tensor<1x2x8x64xf16>
  return %o : tensor<1x2x8x64xf16>
}

// -----

// TorchScript's Gemma-2 export: an f16 softmax whose probabilities go to f32 and back to
// f16 (exact) before the product with v: the f16 attention, the casts gone with it.
// CHECK-LABEL: func.func @f16_round_trip
// CHECK-NOT:   ai.cast
// CHECK:       %[[A:.*]] = ai.attention %q, %k, %v, %{{.*}} {scale = 1.250000e-01 : f32} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<f16>
// CHECK-NEXT:  func.return %[[A]]
func.func @f16_round_trip(%q: tensor<1x2x8x64xf16>, %k: tensor<1x2x8x64xf16>, %v: tensor<1x2x8x64xf16>) -> tensor<1x2x8x64xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16>
  %c = arith.constant dense<1.250000e-01> : tensor<f16>
  %ss = ai.mul %s, %c : tensor<1x2x8x8xf16> * tensor<f16>
  %p = ai.softmax %ss : tensor<1x2x8x8xf16>
  %p32 = ai.cast %p : tensor<1x2x8x8xf16> to tensor<1x2x8x8xf32>
  %p16 = ai.cast %p32 : tensor<1x2x8x8xf32> to tensor<1x2x8x8xf16>
  %o = ai.matmul %p16, %v : tensor<1x2x8x8xf16> * tensor<1x2x8x64xf16>
  return %o : tensor<1x2x8x64xf16>
}

// -----

// The same round trip with the f32 probabilities also returned: they stay a tensor, so
// no attention.
// CHECK-LABEL: func.func @f16_round_trip_read_twice
// CHECK:       ai.softmax
// CHECK-NOT:   ai.attention
func.func @f16_round_trip_read_twice(%q: tensor<1x2x8x64xf16>, %k: tensor<1x2x8x64xf16>, %v: tensor<1x2x8x64xf16>) -> (tensor<1x2x8x64xf16>, tensor<1x2x8x8xf32>) {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16>
  %p = ai.softmax %s : tensor<1x2x8x8xf16>
  %p32 = ai.cast %p : tensor<1x2x8x8xf16> to tensor<1x2x8x8xf32>
  %p16 = ai.cast %p32 : tensor<1x2x8x8xf32> to tensor<1x2x8x8xf16>
  %o = ai.matmul %p16, %v : tensor<1x2x8x8xf16> * tensor<1x2x8x64xf16>
  return %o, %p32 : tensor<1x2x8x64xf16>, tensor<1x2x8x8xf32>
}
