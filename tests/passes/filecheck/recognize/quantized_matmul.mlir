// A quantized GEMM (issue 31), as exporters write an fp8 or int8 linear layer: the
// activations quantized and dequantized, the weight's codes dequantized (per column of
// B), a matmul, a bias, an activation and the output quantized. recognize-patterns moves
// the per-tensor and per-column scales after the product; fuse makes it one "matmul"
// group on cpu: the dequantized operands its prologues, the scales, bias, relu and output
// quantize its epilogue. A per-block scale along K (the int4 weight-only form) stays in
// its dequantize, a prologue too.
// RUN: fusec-opt %s -p "recognize-patterns" --split-input-file | filecheck %s --check-prefix=REC
// RUN: fusec-opt %s -p "recognize-patterns,canonicalize,cse,fuse{target=cpu}" --split-input-file | filecheck %s --check-prefix=CPU

// REC-LABEL: func.func @fp8_linear
// REC:       %[[ONE:.*]] = arith.constant dense<1.000000e+00> : tensor<f32>
// REC-NEXT:  %[[A:.*]] = ai.dequantize %xq, %[[ONE]], %zx
// REC-NEXT:  %[[ONES:.*]] = arith.constant dense<1.000000e+00> : tensor<32xf32>
// REC-NEXT:  %[[B:.*]] = ai.dequantize %wq, %[[ONES]], %zw
// REC-NEXT:  %[[M:.*]] = ai.matmul %[[A]], %[[B]]
// REC-NEXT:  %[[MA:.*]] = ai.mul %[[M]], %sx
// REC-NEXT:  %[[MB:.*]] = ai.mul %[[MA]], %sw
// REC-NEXT:  ai.bias_add %[[MB]], %bias
// CPU-LABEL: func.func @fp8_linear
// CPU:       ai.fused "matmul"
// CPU-NEXT:  ^bb0
// CPU-NEXT:    ai.quantize
// CPU-NEXT:    ai.dequantize
// CPU-NEXT:    ai.dequantize
// CPU-NEXT:    ai.matmul
// CPU-NEXT:    ai.mul
// CPU-NEXT:    ai.mul
// CPU-NEXT:    ai.bias_add
// CPU-NEXT:    ai.relu
// CPU-NEXT:    ai.quantize {{.*}} : tensor<16x32xf32> * tensor<f32> * tensor<f8E4M3FN>
// CPU-NEXT:    ai.yield
// CPU-NOT:   ai.fused
func.func @fp8_linear(%x: tensor<16x64xf32>, %wq: tensor<64x32xf8E4M3FN>, %sw: tensor<32xf32>,
                      %bias: tensor<32xf32>) -> tensor<16x32xf8E4M3FN> {
  %sx = arith.constant dense<0.02> : tensor<f32>
  %zx = arith.constant dense<0.0> : tensor<f8E4M3FN>
  %zw = arith.constant dense<0.0> : tensor<32xf8E4M3FN>
  %so = arith.constant dense<0.05> : tensor<f32>
  %xq = ai.quantize %x, %sx, %zx : tensor<16x64xf32> * tensor<f32> * tensor<f8E4M3FN>
  %xd = ai.dequantize %xq, %sx, %zx : tensor<16x64xf8E4M3FN> * tensor<f32> * tensor<f8E4M3FN>
  %w = ai.dequantize %wq, %sw, %zw {axis = 1 : i64} : tensor<64x32xf8E4M3FN> * tensor<32xf32> * tensor<32xf8E4M3FN>
  %m = ai.matmul %xd, %w : tensor<16x64xf32> * tensor<64x32xf32>
  %b = ai.bias_add %m, %bias : tensor<16x32xf32> * tensor<32xf32>
  %r = ai.relu %b : tensor<16x32xf32>
  %y = ai.quantize %r, %so, %zx : tensor<16x32xf32> * tensor<f32> * tensor<f8E4M3FN>
  return %y : tensor<16x32xf8E4M3FN>
}

// -----

// W4A16: int4 codes with per-block (32 along K) scales and zero points; the scales
// cannot leave the dequantize, which is the matmul's B prologue; a clip and a cast to
// f16 in the epilogue.
// REC-LABEL: func.func @w4a16
// REC:       ai.dequantize %wq, %s, %z {axis = 0 : i64, block_size = 32 : i64}
// REC-NOT:   ai.mul
// CPU-LABEL: func.func @w4a16
// CPU:       ai.fused "matmul" (%wq, %s, %z, %x) : (tensor<128x64xi4>, tensor<4x64xf32>, tensor<4x64xi4>, tensor<4x128xf32>) -> tensor<4x64xf16>
// CPU-NEXT:  ^bb0
// CPU-NEXT:    ai.dequantize {{.*}} {axis = 0 : i64, block_size = 32 : i64}
// CPU-NEXT:    ai.matmul
// CPU-NEXT:    ai.clip
// CPU-NEXT:    ai.cast
// CPU-NEXT:    ai.yield
func.func @w4a16(%x: tensor<4x128xf32>, %wq: tensor<128x64xi4>, %s: tensor<4x64xf32>,
                 %z: tensor<4x64xi4>) -> tensor<4x64xf16> {
  %w = ai.dequantize %wq, %s, %z {axis = 0 : i64, block_size = 32 : i64} : tensor<128x64xi4> * tensor<4x64xf32> * tensor<4x64xi4>
  %m = ai.matmul %x, %w : tensor<4x128xf32> * tensor<128x64xf32>
  %c = ai.clip %m {min = -6.0 : f32, max = 6.0 : f32} : tensor<4x64xf32>
  %h = ai.cast %c : tensor<4x64xf32> to tensor<4x64xf16>
  return %h : tensor<4x64xf16>
}

// -----

// An f16 product keeps its scales in the dequantize: the codes' product (up to
// 448 * 448 * K) is no f16 value.
// REC-LABEL: func.func @f16_linear
// REC:       %[[B:.*]] = ai.dequantize %wq, %sw, %zw
// REC-NEXT:  ai.matmul %x, %[[B]]
// REC-NOT:   ai.mul
func.func @f16_linear(%x: tensor<4x64xf16>, %wq: tensor<64x32xf8E4M3FN>, %sw: tensor<32xf16>) -> tensor<4x32xf16> {
  %zw = arith.constant dense<0.0> : tensor<32xf8E4M3FN>
  %w = ai.dequantize %wq, %sw, %zw {axis = 1 : i64} : tensor<64x32xf8E4M3FN> * tensor<32xf16> * tensor<32xf8E4M3FN>
  %m = ai.matmul %x, %w : tensor<4x64xf16> * tensor<64x32xf16>
  return %m : tensor<4x32xf16>
}
