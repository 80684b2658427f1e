// recognize-patterns: Llama's RMSNorm as the exporters write it (issue 28) becomes one
// ai.rms_norm: torch.onnx (opset 17) writes Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul;
// the dynamo exporter Reciprocal for the Div; a 16-bit model casts x to f32 and the result
// back before the scale. The op is then one row_reduce kernel on cuda and cpu (it was a
// pointwise, a reduce and a pointwise kernel, the f32 copy of x written and read between).
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns" --split-input-file | filecheck %s
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cuda}" --split-input-file | filecheck %s --check-prefix=FUSED
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cpu}" --split-input-file | filecheck %s --check-prefix=FUSED

// torch.onnx.export(dynamo=False), f16: casts around the f32 statistics, 1 / sqrt.
// CHECK-LABEL: func.func @llama_f16
// CHECK-NEXT:  %[[Y:.*]] = ai.rms_norm %x, %w : tensor<2x8x64xf16> * tensor<64xf16>
// CHECK-NEXT:  func.return %[[Y]]
// FUSED-LABEL: func.func @llama_f16
// FUSED-NEXT:  ai.fused "row_reduce"
// FUSED-NEXT:  ^{{.*}}:
// FUSED-NEXT:  ai.rms_norm
// FUSED-NEXT:  ai.yield
func.func @llama_f16(%x: tensor<2x8x64xf16>, %w: tensor<64xf16>) -> tensor<2x8x64xf16> {
  %xs = ai.cast %x : tensor<2x8x64xf16> to tensor<2x8x64xf32>
  %two = arith.constant dense<2.0> : tensor<f32>
  %sq = ai.pow %xs, %two : tensor<2x8x64xf32> * tensor<f32>
  %ms = ai.reduce_mean %sq {axes = array<i64: 2>, keepdims = true} : tensor<2x8x64xf32>
  %eps = arith.constant dense<1.0e-06> : tensor<f32>
  %a = ai.add %ms, %eps : tensor<2x8x1xf32> * tensor<f32>
  %s = ai.sqrt %a : tensor<2x8x1xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %r = ai.div %one, %s : tensor<f32> * tensor<2x8x1xf32>
  %y = ai.mul %xs, %r : tensor<2x8x64xf32> * tensor<2x8x1xf32>
  %yh = ai.cast %y : tensor<2x8x64xf32> to tensor<2x8x64xf16>
  %o = ai.mul %yh, %w : tensor<2x8x64xf16> * tensor<64xf16>
  return %o : tensor<2x8x64xf16>
}

// -----

// torch.onnx.export(dynamo=True), bf16: Reciprocal, the scale first.
// CHECK-LABEL: func.func @llama_dynamo_bf16
// CHECK-NEXT:  %[[Y:.*]] = ai.rms_norm %x, %w {{.*}} : tensor<4x128xbf16> * tensor<128xbf16>
// CHECK-NEXT:  func.return %[[Y]]
// FUSED-LABEL: func.func @llama_dynamo_bf16
// FUSED-NEXT:  ai.fused "row_reduce"
// FUSED-NEXT:  ^{{.*}}:
// FUSED-NEXT:  ai.rms_norm
// FUSED-NEXT:  ai.yield
func.func @llama_dynamo_bf16(%x: tensor<4x128xbf16>, %w: tensor<128xbf16>) -> tensor<4x128xbf16> {
  %xs = ai.cast %x : tensor<4x128xbf16> to tensor<4x128xf32>
  %sq = ai.mul %xs, %xs : tensor<4x128xf32> * tensor<4x128xf32>
  %ms = ai.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<4x128xf32>
  %eps = arith.constant dense<1.0e-05> : tensor<f32>
  %a = ai.add %ms, %eps : tensor<4x1xf32> * tensor<f32>
  %s = ai.sqrt %a : tensor<4x1xf32>
  %r = ai.reciprocal %s : tensor<4x1xf32>
  %y = ai.mul %xs, %r : tensor<4x128xf32> * tensor<4x1xf32>
  %yh = ai.cast %y : tensor<4x128xf32> to tensor<4x128xbf16>
  %o = ai.mul %w, %yh : tensor<128xbf16> * tensor<4x128xbf16>
  return %o : tensor<4x128xbf16>
}

// -----

// f32, the division x / sqrt(.), then the scale.
// CHECK-LABEL: func.func @div_f32
// CHECK-NEXT:  %[[Y:.*]] = ai.rms_norm %x, %w {{.*}} : tensor<3x32xf32> * tensor<32xf32>
// CHECK-NEXT:  func.return %[[Y]]
func.func @div_f32(%x: tensor<3x32xf32>, %w: tensor<32xf32>) -> tensor<3x32xf32> {
  %sq = ai.mul %x, %x : tensor<3x32xf32> * tensor<3x32xf32>
  %ms = ai.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<3x32xf32>
  %eps = arith.constant dense<1.0e-05> : tensor<f32>
  %a = ai.add %eps, %ms : tensor<f32> * tensor<3x1xf32>
  %s = ai.sqrt %a : tensor<3x1xf32>
  %y = ai.div %x, %s : tensor<3x32xf32> * tensor<3x1xf32>
  %o = ai.mul %y, %w : tensor<3x32xf32> * tensor<32xf32>
  return %o : tensor<3x32xf32>
}

// -----

// No scale: gamma is a constant of ones.
// CHECK-LABEL: func.func @unscaled
// CHECK-NEXT:  %[[G:.*]] = arith.constant dense<1.000000e+00> : tensor<32xf32>
// CHECK-NEXT:  %[[Y:.*]] = ai.rms_norm %x, %[[G]] {{.*}} : tensor<3x32xf32> * tensor<32xf32>
// CHECK-NEXT:  func.return %[[Y]]
func.func @unscaled(%x: tensor<3x32xf32>) -> tensor<3x32xf32> {
  %sq = ai.mul %x, %x : tensor<3x32xf32> * tensor<3x32xf32>
  %ms = ai.reduce_mean %sq {axes = array<i64: 1>, keepdims = true} : tensor<3x32xf32>
  %eps = arith.constant dense<1.0e-05> : tensor<f32>
  %a = ai.add %ms, %eps : tensor<3x1xf32> * tensor<f32>
  %s = ai.sqrt %a : tensor<3x1xf32>
  %y = ai.div %x, %s : tensor<3x32xf32> * tensor<3x1xf32>
  return %y : tensor<3x32xf32>
}

// -----

// Not an RMSNorm: the mean over another axis than the last stays as written.
// CHECK-LABEL: func.func @other_axis
// CHECK-NOT:   ai.rms_norm
// CHECK:       ai.reduce_mean
func.func @other_axis(%x: tensor<3x32xf32>) -> tensor<3x32xf32> {
  %sq = ai.mul %x, %x : tensor<3x32xf32> * tensor<3x32xf32>
  %ms = ai.reduce_mean %sq {axes = array<i64: 0>, keepdims = true} : tensor<3x32xf32>
  %eps = arith.constant dense<1.0e-05> : tensor<f32>
  %a = ai.add %ms, %eps : tensor<1x32xf32> * tensor<f32>
  %s = ai.sqrt %a : tensor<1x32xf32>
  %y = ai.div %x, %s : tensor<3x32xf32> * tensor<1x32xf32>
  return %y : tensor<3x32xf32>
}
