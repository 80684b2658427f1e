// Gemma-2's soft-capped attention: softcap * tanh(q @ k^T * scale / softcap) + mask before
// the softmax is one ai.attention with the softcap property, in the forms exporters write
// it (the dynamo exporter's f16 HF eager attention: the f16 mask added before the f32
// softmax; a reciprocal cap; the cap's product commuted; no scale). Only a positive
// finite constant cap is one: a negative cap, a cap known at run time or soft-capped
// scores read elsewhere stay as they are.
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns,canonicalize,cse" | filecheck %s
// RUN: fusec-opt %s --split-input-file -p "fusec-cpu" | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns{softcap=false}" | filecheck %s --check-prefix=KEEP
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns{softcap_heads=128,256}" | filecheck %s --check-prefix=KEEP

// CHECK-LABEL: func.func @gemma2_f16
// CHECK-NOT:   ai.tanh
// CHECK:       %[[A:.*]] = ai.attention %q, %k, %v, %mask {scale = 1.250000e-01 : f32, softcap = 5.000000e+01 : f32} : tensor<1x4x32x64xf16> * tensor<1x4x32x64xf16> * tensor<1x4x32x64xf16> * tensor<32x32xf16>
// CHECK-NEXT:  func.return %[[A]]
// CPU-LABEL:   func.func @gemma2_f16
// CPU-NEXT:    ai.fused "attention"
// CPU-NEXT:    ^bb0
// CPU-NEXT:    ai.attention {{.*}}softcap = 5.000000e+01 : f32
// CPU-NEXT:    ai.yield
// CPU-NOT:     ai.fused
// softcap=false, or softcap_heads without q's head size (64 here), keeps the ops
// KEEP-LABEL:  func.func @gemma2_f16
// KEEP-NOT:    ai.attention
// KEEP:        ai.tanh
// KEEP-NOT:    ai.attention
// KEEP:        func.return
func.func @gemma2_f16(%q: tensor<1x4x32x64xf16>, %k: tensor<1x4x32x64xf16>, %v: tensor<1x4x32x64xf16>, %mask: tensor<32x32xf16>) -> tensor<1x4x32x64xf16> {
  %kt = ai.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<1x4x32x64xf16>
  %s = ai.matmul %q, %kt : tensor<1x4x32x64xf16> * tensor<1x4x64x32xf16>
  %c = arith.constant dense<1.250000e-01> : tensor<f16>
  %ss = ai.mul %s, %c : tensor<1x4x32x32xf16> * tensor<f16>
  %cap = arith.constant dense<5.000000e+01> : tensor<f16>
  %d = ai.div %ss, %cap : tensor<1x4x32x32xf16> * tensor<f16>
  %t = ai.tanh %d : tensor<1x4x32x32xf16>
  %sc = ai.mul %t, %cap : tensor<1x4x32x32xf16> * tensor<f16>
  %sm = ai.add %sc, %mask : tensor<1x4x32x32xf16> * tensor<32x32xf16>
  %s32 = ai.cast %sm : tensor<1x4x32x32xf16> to tensor<1x4x32x32xf32>
  %p = ai.softmax %s32 : tensor<1x4x32x32xf32>
  %p16 = ai.cast %p : tensor<1x4x32x32xf32> to tensor<1x4x32x32xf16>
  %o = ai.matmul %p16, %v : tensor<1x4x32x32xf16> * tensor<1x4x32x64xf16>
  return %o : tensor<1x4x32x64xf16>
}

// -----

// The division by the cap written as a product by its reciprocal, before the scale, the
// cap's product commuted, no mask: the scale is the factors' product times the cap.
// CHECK-LABEL: func.func @reciprocal_cap
// CPU-LABEL:   func.func @reciprocal_cap
// CHECK:       %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:  ai.attention %q, %k, %v, %[[ZERO]] {scale = 2.500000e-01 : f32, softcap = 3.000000e+01 : f32}
// CHECK-NOT:   ai.tanh
func.func @reciprocal_cap(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>) -> tensor<2x6x8xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x6x8xf32> * tensor<2x6x8xf32>
  %r = arith.constant dense<0.0333333351> : tensor<f32>
  %d = ai.mul %r, %s : tensor<f32> * tensor<2x6x6xf32>
  %c = arith.constant dense<0.25> : tensor<f32>
  %ss = ai.mul %d, %c : tensor<2x6x6xf32> * tensor<f32>
  %t = ai.tanh %ss : tensor<2x6x6xf32>
  %cap = arith.constant dense<30.0> : tensor<f32>
  %sc = ai.mul %cap, %t : tensor<f32> * tensor<2x6x6xf32>
  %p = ai.softmax %sc : tensor<2x6x6xf32>
  %o = ai.matmul %p, %v : tensor<2x6x6xf32> * tensor<2x6x8xf32>
  return %o : tensor<2x6x8xf32>
}

// -----

// No scale at all: cap * tanh(s / cap) is scale 1.
// CHECK-LABEL: func.func @unscaled
// CHECK:       ai.attention %q, %k, %v, %mask {softcap = 2.000000e+00 : f32}
func.func @unscaled(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>, %mask: tensor<6x6xf32>) -> tensor<2x6x8xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x6x8xf32> * tensor<2x6x8xf32>
  %cap = arith.constant dense<2.0> : tensor<f32>
  %d = ai.div %s, %cap : tensor<2x6x6xf32> * tensor<f32>
  %t = ai.tanh %d : tensor<2x6x6xf32>
  %sc = ai.mul %t, %cap : tensor<2x6x6xf32> * tensor<f32>
  %sm = ai.add %mask, %sc : tensor<6x6xf32> * tensor<2x6x6xf32>
  %p = ai.softmax %sm : tensor<2x6x6xf32>
  %o = ai.matmul %p, %v : tensor<2x6x6xf32> * tensor<2x6x8xf32>
  return %o : tensor<2x6x8xf32>
}

// -----

// Not ai.attention's softcap: a negative cap, a cap known at run time, capped scores that
// are also a result.
// CHECK-LABEL: func.func @negative_cap
// CHECK-NOT:   ai.attention
// CHECK:       ai.tanh
// CHECK-LABEL: func.func @runtime_cap
// CHECK-NOT:   ai.attention
// CHECK:       ai.tanh
// CHECK-LABEL: func.func @capped_scores_returned
// CHECK-NOT:   ai.attention
// CHECK:       ai.tanh
func.func @negative_cap(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>) -> tensor<2x6x8xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x6x8xf32> * tensor<2x6x8xf32>
  %cap = arith.constant dense<-2.0> : tensor<f32>
  %d = ai.div %s, %cap : tensor<2x6x6xf32> * tensor<f32>
  %t = ai.tanh %d : tensor<2x6x6xf32>
  %sc = ai.mul %t, %cap : tensor<2x6x6xf32> * tensor<f32>
  %p = ai.softmax %sc : tensor<2x6x6xf32>
  %o = ai.matmul %p, %v : tensor<2x6x6xf32> * tensor<2x6x8xf32>
  return %o : tensor<2x6x8xf32>
}
func.func @runtime_cap(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>, %cap: tensor<f32>) -> tensor<2x6x8xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x6x8xf32> * tensor<2x6x8xf32>
  %d = ai.div %s, %cap : tensor<2x6x6xf32> * tensor<f32>
  %t = ai.tanh %d : tensor<2x6x6xf32>
  %sc = ai.mul %t, %cap : tensor<2x6x6xf32> * tensor<f32>
  %p = ai.softmax %sc : tensor<2x6x6xf32>
  %o = ai.matmul %p, %v : tensor<2x6x6xf32> * tensor<2x6x8xf32>
  return %o : tensor<2x6x8xf32>
}
func.func @capped_scores_returned(%q: tensor<2x6x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>) -> (tensor<2x6x8xf32>, tensor<2x6x6xf32>) {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x6x8xf32> * tensor<2x6x8xf32>
  %cap = arith.constant dense<2.0> : tensor<f32>
  %d = ai.div %s, %cap : tensor<2x6x6xf32> * tensor<f32>
  %t = ai.tanh %d : tensor<2x6x6xf32>
  %sc = ai.mul %t, %cap : tensor<2x6x6xf32> * tensor<f32>
  %p = ai.softmax %sc : tensor<2x6x6xf32>
  %o = ai.matmul %p, %v : tensor<2x6x6xf32> * tensor<2x6x8xf32>
  return %o, %t : tensor<2x6x8xf32>, tensor<2x6x6xf32>
}
