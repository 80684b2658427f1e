// recognize-patterns: every spelling of scaled dot-product attention becomes one
// ai.attention(q, key (..., T, D), v, mask), the key taken back from the transpose
// that made k^T where there is one.
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns" --split-input-file | filecheck %s

// As PyTorch's exporters write it (GPT-2): the key's head split transposed to
// (B, H, D, T), a causal mask added, the probabilities guarded against NaN.
// CHECK-LABEL: func.func @exported
// CHECK:       %[[KEY:.*]] = ai.transpose %kh {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT:  %[[R:.*]] = ai.attention %q, %[[KEY]], %v, %mask {scale = 1.250000e-01 : f32, nan_to_zero = true}
// CHECK-NEXT:  func.return %[[R]]
func.func @exported(%q: tensor<1x2x4x8xf32>, %kh: tensor<1x4x2x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = ai.transpose %kh {perm = array<i64: 0, 2, 3, 1>} : tensor<1x4x2x8xf32>
  %s = ai.matmul %q, %kt : tensor<1x2x4x8xf32> * tensor<1x2x8x4xf32>
  %c = arith.constant dense<0.125> : tensor<f32>
  %t = ai.mul %s, %c : tensor<1x2x4x4xf32> * tensor<f32>
  %mask = arith.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %u = ai.add %mask, %t : tensor<4x4xf32> * tensor<1x2x4x4xf32>
  %p = ai.softmax %u : tensor<1x2x4x4xf32>
  %n = ai.isnan %p : tensor<1x2x4x4xf32>
  %zero = arith.constant dense<0.0> : tensor<f32>
  %g = ai.where %n, %zero, %p : tensor<1x2x4x4xf32> * tensor<f32> * tensor<1x2x4x4xf32>
  %o = ai.matmul %g, %v : tensor<1x2x4x4xf32> * tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// As fusec graphs write it: matmul {transpose_b} reads the key itself; a division by a
// constant is its reciprocal scale; no mask is a zero constant.
// CHECK-LABEL: func.func @written
// CHECK:       %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<f16>
// CHECK-NEXT:  ai.attention %q, %k, %v, %[[ZERO]] {scale = 1.250000e-01 : f32}
// CHECK-NOT:   ai.softmax
func.func @written(%q: tensor<2x4x64xf16>, %k: tensor<2x4x64xf16>, %v: tensor<2x4x64xf16>) -> tensor<2x4x64xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x64xf16> * tensor<2x4x64xf16>
  %c = arith.constant dense<8.0> : tensor<f16>
  %t = ai.div %s, %c : tensor<2x4x4xf16> * tensor<f16>
  %p = ai.softmax %t : tensor<2x4x4xf16>
  %o = ai.matmul %p, %v : tensor<2x4x4xf16> * tensor<2x4x64xf16>
  return %o : tensor<2x4x64xf16>
}

// -----

// k^T given as it is (an argument): the key is its transpose; the transposes of the
// key cancel where k^T itself was a transpose of the key.
// CHECK-LABEL: func.func @given_kt
// CHECK:       %[[KEY:.*]] = ai.transpose %kt {perm = array<i64: 0, 2, 1>}
// CHECK:       ai.attention %q, %[[KEY]], %v
// CHECK-LABEL: func.func @transposed_key
// CHECK-NOT:   ai.transpose
// CHECK:       ai.attention %q, %k, %v
func.func @given_kt(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x6xf32>, %v: tensor<2x6x8xf32>) -> tensor<2x4x8xf32> {
  %s = ai.matmul %q, %kt : tensor<2x4x8xf32> * tensor<2x8x6xf32>
  %p = ai.softmax %s : tensor<2x4x6xf32>
  %o = ai.matmul %p, %v : tensor<2x4x6xf32> * tensor<2x6x8xf32>
  return %o : tensor<2x4x8xf32>
}
func.func @transposed_key(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x8xf32>) -> tensor<2x4x8xf32> {
  %kt = ai.transpose %k {perm = array<i64: 0, 2, 1>} : tensor<2x6x8xf32>
  %s = ai.matmul %q, %kt : tensor<2x4x8xf32> * tensor<2x8x6xf32>
  %p = ai.softmax %s : tensor<2x4x6xf32>
  %o = ai.matmul %p, %v : tensor<2x4x6xf32> * tensor<2x6x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Not attention: the softmax over the queries; a scale that is not a constant.
// CHECK-LABEL: func.func @other_axis
// CHECK-NOT:   ai.attention
// CHECK-LABEL: func.func @runtime_scale
// CHECK-NOT:   ai.attention
func.func @other_axis(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x8xf32> * tensor<2x4x8xf32>
  %p = ai.softmax %s {axis = 1 : i64} : tensor<2x4x4xf32>
  %o = ai.matmul %p, %v : tensor<2x4x4xf32> * tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
func.func @runtime_scale(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %c: tensor<f32>) -> tensor<2x4x8xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x8xf32> * tensor<2x4x8xf32>
  %t = ai.mul %s, %c : tensor<2x4x4xf32> * tensor<f32>
  %p = ai.softmax %t : tensor<2x4x4xf32>
  %o = ai.matmul %p, %v : tensor<2x4x4xf32> * tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}
