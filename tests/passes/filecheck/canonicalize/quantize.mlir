// RUN: fusec-opt %s -p canonicalize --split-input-file | filecheck %s

// Q -> DQ -> Q with the same scale and zero point is the first Q (issue 31): the
// dequantized values quantize back to the same codes.
// CHECK-LABEL: func.func @requantize
// CHECK-NEXT:  %[[Q:.*]] = ai.quantize %x, %s, %z {axis = 0 : i64} : tensor<4x6xf32> * tensor<4xf32> * tensor<4xi8>
// CHECK-NEXT:  func.return %[[Q]] : tensor<4x6xi8>
func.func @requantize(%x: tensor<4x6xf32>, %s: tensor<4xf32>, %z: tensor<4xi8>) -> tensor<4x6xi8> {
  %q = ai.quantize %x, %s, %z {axis = 0} : tensor<4x6xf32> * tensor<4xf32> * tensor<4xi8>
  %d = ai.dequantize %q, %s, %z {axis = 0} : tensor<4x6xi8> * tensor<4xf32> * tensor<4xi8>
  %q2 = ai.quantize %d, %s, %z {axis = 0} : tensor<4x6xf32> * tensor<4xf32> * tensor<4xi8>
  return %q2 : tensor<4x6xi8>
}

// -----

// Equal constant scales (two constants of one value) fold too; float8 per block.
// CHECK-LABEL: func.func @requantize_constants
// CHECK:       %[[Q:.*]] = ai.quantize %x, %{{.*}}, %{{.*}} {block_size = 4 : i64} : tensor<2x8xf32> * tensor<2x2xf32> * tensor<2x2xf8E4M3FN>
// CHECK-NEXT:  func.return %[[Q]] : tensor<2x8xf8E4M3FN>
func.func @requantize_constants(%x: tensor<2x8xf32>) -> tensor<2x8xf8E4M3FN> {
  %s1 = arith.constant dense<[[0.5, 2.0], [1.0, 0.25]]> : tensor<2x2xf32>
  %s2 = arith.constant dense<[[0.5, 2.0], [1.0, 0.25]]> : tensor<2x2xf32>
  %z = arith.constant dense<0.0> : tensor<2x2xf8E4M3FN>
  %q = ai.quantize %x, %s1, %z {block_size = 4} : tensor<2x8xf32> * tensor<2x2xf32> * tensor<2x2xf8E4M3FN>
  %d = ai.dequantize %q, %s2, %z {block_size = 4} : tensor<2x8xf8E4M3FN> * tensor<2x2xf32> * tensor<2x2xf8E4M3FN>
  %q2 = ai.quantize %d, %s2, %z {block_size = 4} : tensor<2x8xf32> * tensor<2x2xf32> * tensor<2x2xf8E4M3FN>
  return %q2 : tensor<2x8xf8E4M3FN>
}

// -----

// DQ(Q(x)) rounds x to the quantization grid (fake quantization): kept.
// CHECK-LABEL: func.func @fake_quant_kept
// CHECK:       %[[Q:.*]] = ai.quantize %x, %s, %z
// CHECK-NEXT:  %[[D:.*]] = ai.dequantize %[[Q]], %s, %z
// CHECK-NEXT:  func.return %[[D]]
func.func @fake_quant_kept(%x: tensor<8xf32>, %s: tensor<f32>, %z: tensor<ui8>) -> tensor<8xf32> {
  %q = ai.quantize %x, %s, %z : tensor<8xf32> * tensor<f32> * tensor<ui8>
  %d = ai.dequantize %q, %s, %z : tensor<8xui8> * tensor<f32> * tensor<ui8>
  return %d : tensor<8xf32>
}

// -----

// A different scale for the second Q: not folded.
// CHECK-LABEL: func.func @other_scale
// CHECK-COUNT-2: ai.quantize
func.func @other_scale(%x: tensor<8xf32>, %s: tensor<f32>, %t: tensor<f32>, %z: tensor<i8>) -> tensor<8xi8> {
  %q = ai.quantize %x, %s, %z : tensor<8xf32> * tensor<f32> * tensor<i8>
  %d = ai.dequantize %q, %s, %z : tensor<8xi8> * tensor<f32> * tensor<i8>
  %q2 = ai.quantize %d, %t, %z : tensor<8xf32> * tensor<f32> * tensor<i8>
  return %q2 : tensor<8xi8>
}

// -----

// A float8 E5M2 result without saturation prints its attribute; the types round-trip.
// CHECK-LABEL: func.func @e5m2
// CHECK:       ai.quantize %x, %s, %z {saturate = false} : tensor<3xf16> * tensor<1xf16> * tensor<1xf8E5M2>
// CHECK:       ai.dequantize %{{.*}}, %s, %z : tensor<3xf8E5M2> * tensor<1xf16> * tensor<1xf8E5M2>
func.func @e5m2(%x: tensor<3xf16>, %s: tensor<1xf16>, %z: tensor<1xf8E5M2>) -> tensor<3xf16> {
  %q = ai.quantize %x, %s, %z {saturate = false} : tensor<3xf16> * tensor<1xf16> * tensor<1xf8E5M2>
  %d = ai.dequantize %q, %s, %z : tensor<3xf8E5M2> * tensor<1xf16> * tensor<1xf8E5M2>
  return %d : tensor<3xf16>
}

// -----

// A weight read transposed (x @ W.T: Transpose of DequantizeLinear, as exporters write a
// Linear layer) is the dequantize of the transposed constants along the other axis: no
// transpose between the weight's codes and the matmul (the cuda W4A16 route reads them).
// CHECK-LABEL: func.func @weight_read_transposed
// CHECK-NOT:   ai.transpose
// CHECK-DAG:   %[[Q:.*]] = arith.constant dense<{{.*}}> : tensor<16x2xi4>
// CHECK-DAG:   %[[S:.*]] = arith.constant dense<{{.*}}> : tensor<2x2xf16>
// CHECK-DAG:   %[[Z:.*]] = arith.constant dense<{{.*}}> : tensor<2x2xi4>
// CHECK:       %[[W:.*]] = ai.dequantize %[[Q]], %[[S]], %[[Z]] {axis = 0 : i64, block_size = 8 : i64}
// CHECK:       ai.matmul %x, %[[W]]
// CHECK-NOT:   ai.transpose
func.func @weight_read_transposed(%x: tensor<3x16xf16>) -> tensor<3x2xf16> {
  %q = arith.constant dense<[[1, 2, 3, 4, 5, 6, 7, -8, 1, 2, 3, 4, 5, 6, 7, -8], [0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2, 2, 3, 3, 3, 3]]> : tensor<2x16xi4>
  %s = arith.constant dense<[[0.5, 0.25], [1.0, 2.0]]> : tensor<2x2xf16>
  %z = arith.constant dense<[[0, 1], [-1, 2]]> : tensor<2x2xi4>
  %w = ai.dequantize %q, %s, %z {axis = 1 : i64, block_size = 8 : i64} : tensor<2x16xi4> * tensor<2x2xf16> * tensor<2x2xi4>
  %t = ai.transpose %w {perm = array<i64: 1, 0>} : tensor<2x16xf16>
  %y = ai.matmul %x, %t : tensor<3x16xf16> * tensor<16x2xf16>
  return %y : tensor<3x2xf16>
}
