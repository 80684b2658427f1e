// A QDQ convolution as onnxruntime's quantize_static writes it (issue 31): uint8 (or
// int8) activations quantized and dequantized, a constant int8 weight dequantized per
// output channel, a bias and the output quantized. recognize-patterns moves both scales
// after the conv (the weight's as a (K, 1, 1) constant) and canonicalize folds the codes
// into a constant of integers; the cpu conv group then multiplies the codes themselves
// (conv_method "q8"): the block's input rows as a padded plane of 4-byte channel quads
// (the padding the zero point's code, + 128 for int8 codes), im2row of word runs into
// strips of pixels, gemm_q8_rows of the weight's int8 rows (packed once) straight into
// the channel rows, the scales, bias and quantize in the epilogue. The small plane of one
// image goes in blocks of output channels; a grouped conv (K/G 4: not whole vectors) by
// groups; a depthwise conv keeps the float path (its float sums of the codes are exact).
// REQUIRES: cpu-int8-gemm
// RUN: fusec-opt %s -p "recognize-patterns" | filecheck %s --check-prefix=REC
// RUN: fusec compile %s --target cpu --emit kernels | filecheck %s

// REC-LABEL: func.func @qdq_conv
// REC:       %[[ONE:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// REC-NEXT:  %[[X:.*]] = ai.dequantize %xq, %[[ONE]], %zx
// REC-NEXT:  %[[ONES:.*]] = arith.constant dense<1.000000e+00> : tensor<16xf32>
// REC-NEXT:  %[[W:.*]] = ai.dequantize %wq, %[[ONES]], %zw {axis = 0 : i64}
// REC-NEXT:  %[[SW:.*]] = arith.constant dense<{{.*}}> : tensor<16x1x1xf32>
// REC-NEXT:  %[[C:.*]] = ai.conv2d %[[X]], %[[W]] {padding = array<i64: 1, 1>}
// REC-NEXT:  %[[CA:.*]] = ai.mul %[[C]], %sx
// REC-NEXT:  %[[CB:.*]] = ai.mul %[[CA]], %[[SW]]
// REC-NEXT:  ai.bias_add %[[CB]], %bias

// CHECK:      # fusec kernel for one ai.fused "conv" group
// CHECK:      #   ai.conv2d -> ai.mul -> ai.mul -> ai.bias_add -> ai.quantize
// CHECK:      # conv2d 1x8x6x6 * 16x8x3x3 (groups 1) in 2 blocks of 12 output channels of the whole plane: codes in padded channel quads, im2row, gemm_q8_rows (int8 weight x uint8 codes -> int32, weight packed once) into the channel rows, epilogue per block
// CHECK:      kc0 = blk % 2 * 12
// CHECK-NEXT: kn = min(12, 16 - kc0)
// CHECK:      xw[at + j] = np.uint32(2206434179)
// CHECK:      word = np.uint32(((np.int32({{in[0-9]+}}[src + 0 + j]) + 131) << 0) | {{.*}} | ((np.int32({{in[0-9]+}}[src + 108 + j]) + 131) << 24))
// CHECK-NEXT: xw[dst + j] = word
// CHECK:      bw[d + j] = xw[at + j]
// CHECK:      r0 = g * 16 + kc0
// CHECK-NEXT: gemm_q8_rows(kn, npad, 18, {{in[0-9]+}}[r0 * 18:], 288 + r0 - r0 * 18, np.int32(131), q8buf, cbuf, 0, npad)
// CHECK:      q0 = n * 16 + g * 16 + kc0
// CHECK-NEXT: for row in range(q0, q0 + kn):
// CHECK:      lc = (row - q0) * npad
// CHECK:      # fusec kernel for one ai.fused "conv" group
// CHECK:      # conv2d 1x8x6x6 * 16x8x3x3 (groups 1) in 2 blocks of 12 output channels of the whole plane
// CHECK:      xw[at + j] = np.uint32(2105376125)
// CHECK:      gemm_q8_rows(kn, npad, 18, {{in[0-9]+}}[r0 * 18:], 288 + r0 - r0 * 18, np.int32(125), q8buf, cbuf, 0, npad)
// CHECK:      # fusec kernel for one ai.fused "conv" group
// CHECK:      # conv2d 1x8x6x6 * 8x8x3x3 (groups 1) in 2 blocks of 6 output channels of the whole plane
// CHECK:      gemm_q8_rows(kn, npad, 18, {{in[0-9]+}}[r0 * 18:], 144 + r0 - r0 * 18, np.int32(131), q8buf, cbuf, 0, npad)
// CHECK:      # fusec kernel for one ai.fused "conv" group
// CHECK:      # conv2d 1x8x6x6 * 8x4x3x3 (groups 2) in 2 blocks of 6 output rows: codes in padded channel quads, im2row, gemm_q8_rows
// CHECK:      word = np.uint32(((np.int32({{in[0-9]+}}[src + 0 + j]) + 131) << 0) | {{.*}} | ((np.int32({{in[0-9]+}}[src + 108 + j]) + 131) << 24))
// CHECK:      gemm_q8_rows(4, npad, 9, {{in[0-9]+}}[g * 36:], 72 + g * 4 - g * 36, np.int32(131), q8buf, cbuf, 0, npad)
// CHECK:      # fusec kernel for one ai.fused "conv" group
// CHECK-NOT:  gemm_q8_
// CHECK:      # conv2d 1x8x6x6 * 8x1x3x3
// CHECK-NOT:  gemm_q8_
func.func @qdq_conv(%x: tensor<1x8x6x6xf32>, %bias: tensor<16xf32>, %bias8: tensor<8xf32>) -> (tensor<1x16x6x6xui8>, tensor<1x16x6x6xi8>, tensor<1x8x6x6xui8>, tensor<1x8x6x6xui8>, tensor<1x8x6x6xui8>) {
  %sx = arith.constant dense<0.02> : tensor<f32>
  %zx = arith.constant dense<131> : tensor<ui8>
  %zs = arith.constant dense<-3> : tensor<i8>
  %wq = arith.constant dense<-7> : tensor<16x8x3x3xi8>
  %sw = arith.constant dense<[0.01, 0.02, 0.03, 0.04, 0.01, 0.02, 0.03, 0.04, 0.01, 0.02, 0.03, 0.04, 0.01, 0.02, 0.03, 0.04]> : tensor<16xf32>
  %zw = arith.constant dense<0> : tensor<16xi8>
  %so = arith.constant dense<0.05> : tensor<f32>
  %zo = arith.constant dense<7> : tensor<ui8>
  %zi = arith.constant dense<7> : tensor<i8>
  %xq = ai.quantize %x, %sx, %zx : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  %xd = ai.dequantize %xq, %sx, %zx : tensor<1x8x6x6xui8> * tensor<f32> * tensor<ui8>
  %w = ai.dequantize %wq, %sw, %zw {axis = 0 : i64} : tensor<16x8x3x3xi8> * tensor<16xf32> * tensor<16xi8>
  %c = ai.conv2d %xd, %w {padding = array<i64: 1, 1>} : tensor<1x8x6x6xf32> * tensor<16x8x3x3xf32>
  %b = ai.bias_add %c, %bias : tensor<1x16x6x6xf32> * tensor<16xf32>
  %y = ai.quantize %b, %so, %zo : tensor<1x16x6x6xf32> * tensor<f32> * tensor<ui8>
  %sq = ai.quantize %x, %sx, %zs : tensor<1x8x6x6xf32> * tensor<f32> * tensor<i8>
  %sd = ai.dequantize %sq, %sx, %zs : tensor<1x8x6x6xi8> * tensor<f32> * tensor<i8>
  %w2 = ai.dequantize %wq, %sw, %zw {axis = 0 : i64} : tensor<16x8x3x3xi8> * tensor<16xf32> * tensor<16xi8>
  %c2 = ai.conv2d %sd, %w2 {padding = array<i64: 1, 1>} : tensor<1x8x6x6xf32> * tensor<16x8x3x3xf32>
  %b2 = ai.bias_add %c2, %bias : tensor<1x16x6x6xf32> * tensor<16xf32>
  %y2 = ai.quantize %b2, %so, %zi : tensor<1x16x6x6xf32> * tensor<f32> * tensor<i8>
  %wq8 = arith.constant dense<5> : tensor<8x8x3x3xi8>
  %sw8 = arith.constant dense<0.01> : tensor<8xf32>
  %zw8 = arith.constant dense<0> : tensor<8xi8>
  %xq3 = ai.quantize %x, %sx, %zx : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  %xd3 = ai.dequantize %xq3, %sx, %zx : tensor<1x8x6x6xui8> * tensor<f32> * tensor<ui8>
  %w3 = ai.dequantize %wq8, %sw8, %zw8 {axis = 0 : i64} : tensor<8x8x3x3xi8> * tensor<8xf32> * tensor<8xi8>
  %c3 = ai.conv2d %xd3, %w3 {padding = array<i64: 1, 1>} : tensor<1x8x6x6xf32> * tensor<8x8x3x3xf32>
  %b3 = ai.bias_add %c3, %bias8 : tensor<1x8x6x6xf32> * tensor<8xf32>
  %y3 = ai.quantize %b3, %so, %zo : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  %wq4 = arith.constant dense<-3> : tensor<8x4x3x3xi8>
  %xq4 = ai.quantize %x, %sx, %zx : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  %xd4 = ai.dequantize %xq4, %sx, %zx : tensor<1x8x6x6xui8> * tensor<f32> * tensor<ui8>
  %w4 = ai.dequantize %wq4, %sw8, %zw8 {axis = 0 : i64} : tensor<8x4x3x3xi8> * tensor<8xf32> * tensor<8xi8>
  %c4 = ai.conv2d %xd4, %w4 {padding = array<i64: 1, 1>, groups = 2 : i64} : tensor<1x8x6x6xf32> * tensor<8x4x3x3xf32>
  %b4 = ai.bias_add %c4, %bias8 : tensor<1x8x6x6xf32> * tensor<8xf32>
  %y4 = ai.quantize %b4, %so, %zo : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  %wq5 = arith.constant dense<9> : tensor<8x1x3x3xi8>
  %xq5 = ai.quantize %x, %sx, %zx : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  %xd5 = ai.dequantize %xq5, %sx, %zx : tensor<1x8x6x6xui8> * tensor<f32> * tensor<ui8>
  %w5 = ai.dequantize %wq5, %sw8, %zw8 {axis = 0 : i64} : tensor<8x1x3x3xi8> * tensor<8xf32> * tensor<8xi8>
  %c5 = ai.conv2d %xd5, %w5 {padding = array<i64: 1, 1>, groups = 8 : i64} : tensor<1x8x6x6xf32> * tensor<8x1x3x3xf32>
  %b5 = ai.bias_add %c5, %bias8 : tensor<1x8x6x6xf32> * tensor<8xf32>
  %y5 = ai.quantize %b5, %so, %zo : tensor<1x8x6x6xf32> * tensor<f32> * tensor<ui8>
  return %y, %y2, %y3, %y4, %y5 : tensor<1x16x6x6xui8>, tensor<1x16x6x6xi8>, tensor<1x8x6x6xui8>, tensor<1x8x6x6xui8>, tensor<1x8x6x6xui8>
}
