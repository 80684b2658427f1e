// The TorchScript exporter's scaled_dot_product_attention of an f16 model (issue 28): the
// scores are cast to f32 for the softmax (an f32 causal mask added), v cast to f32, and the
// f32 result promotes the output projection (its weights folded to f32), the residual and
// the LayerNorm. recognize-patterns makes it the f16 attention, cast to f32; demote-upcasts
// runs the tail in f16 again (f16 weights the exporter upcast are f16 constants again):
// the only f32 value left is the program's result.
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse" | filecheck %s --check-prefix=RECOGNIZED
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,demote-upcasts" | filecheck %s
// RUN: fusec-opt %s -p "fusec-cuda" | filecheck %s --check-prefix=CUDA

// RECOGNIZED-LABEL: func.func @torchscript_sdpa
// RECOGNIZED:       %[[A:.*]] = ai.attention %{{.*}} {scale = 1.250000e-01 : f32, nan_to_zero = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// RECOGNIZED-NEXT:  ai.cast %[[A]] : tensor<1x2x8x64xf16> to tensor<1x2x8x64xf32>
// RECOGNIZED-NOT:   ai.softmax
// RECOGNIZED:       ai.matmul %{{.*}} : tensor<1x8x128xf32> * tensor<128x128xf32>

// CHECK-LABEL: func.func @torchscript_sdpa
// CHECK:       %[[A:.*]] = ai.attention {{.*}} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// CHECK-NOT:   xf32>
// CHECK:       %[[M:.*]] = ai.matmul %{{.*}} : tensor<1x8x128xf16> * tensor<128x128xf16>
// CHECK:       %[[B:.*]] = ai.bias_add %[[M]], %{{.*}} {axis = 2 : i64} : tensor<1x8x128xf16> * tensor<128xf16>
// CHECK-NEXT:  %[[R:.*]] = ai.add %[[B]], %x : tensor<1x8x128xf16> * tensor<1x8x128xf16>
// CHECK:       %[[L:.*]] = ai.layernorm %[[R]], %{{.*}}, %{{.*}} : tensor<1x8x128xf16> * tensor<128xf16> * tensor<128xf16>
// CHECK-NEXT:  %[[Y:.*]] = ai.cast %[[L]] : tensor<1x8x128xf16> to tensor<1x8x128xf32>
// CHECK-NEXT:  func.return %[[Y]]

// The flash kernel's group (causal: the f32 minimum is -inf in f16), the f16 Tensor Core
// GEMM with the residual in its epilogue, the f16 LayerNorm and the result's cast.
// CUDA-LABEL: func.func @torchscript_sdpa
// CUDA:       ai.fused "attention"
// CUDA:       ai.fused "matmul"
// CUDA:       ai.matmul %{{.*}} : tensor<1x8x128xf16> * tensor<128x128xf16>
// CUDA:       ai.layernorm %{{.*}} : tensor<1x8x128xf16> * tensor<128xf16> * tensor<128xf16>
func.func @torchscript_sdpa(%x: tensor<1x8x128xf16>, %qkv: tensor<1x8x384xf16>) -> tensor<1x8x128xf32> {
  %qs = ai.slice %qkv {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 1, 8, 128>, strides = array<i64: 1, 1, 1>} : tensor<1x8x384xf16>
  %ks = ai.slice %qkv {offsets = array<i64: 0, 0, 128>, sizes = array<i64: 1, 8, 128>, strides = array<i64: 1, 1, 1>} : tensor<1x8x384xf16>
  %vs = ai.slice %qkv {offsets = array<i64: 0, 0, 256>, sizes = array<i64: 1, 8, 128>, strides = array<i64: 1, 1, 1>} : tensor<1x8x384xf16>
  %q0 = ai.reshape %qs {shape = array<i64: 1, 8, 2, 64>} : tensor<1x8x128xf16>
  %q = ai.transpose %q0 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x64xf16>
  %k0 = ai.reshape %ks {shape = array<i64: 1, 8, 2, 64>} : tensor<1x8x128xf16>
  %kt = ai.transpose %k0 {perm = array<i64: 0, 2, 3, 1>} : tensor<1x8x2x64xf16>
  %v0 = ai.reshape %vs {shape = array<i64: 1, 8, 2, 64>} : tensor<1x8x128xf16>
  %v = ai.transpose %v0 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x64xf16>
  %s = ai.matmul %q, %kt : tensor<1x2x8x64xf16> * tensor<1x2x64x8xf16>
  %c = arith.constant dense<1.250000e-01> : tensor<f16>
  %ss = ai.mul %s, %c : tensor<1x2x8x8xf16> * tensor<f16>
  %s32 = ai.cast %ss : tensor<1x2x8x8xf16> to tensor<1x2x8x8xf32>
  %mask = arith.constant dense<[[[[0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x8x8xf32>
  %sm = ai.add %s32, %mask : tensor<1x2x8x8xf32> * tensor<1x1x8x8xf32>
  %p = ai.softmax %sm : tensor<1x2x8x8xf32>
  %nan = ai.isnan %p : tensor<1x2x8x8xf32>
  %nanb = ai.cast %nan : tensor<1x2x8x8xf32> to tensor<1x2x8x8xi1>
  %zero = arith.constant dense<0.000000e+00> : tensor<1xf32>
  %pg = ai.where %nanb, %zero, %p : tensor<1x2x8x8xi1> * tensor<1xf32> * tensor<1x2x8x8xf32>
  %v32 = ai.cast %v : tensor<1x2x8x64xf16> to tensor<1x2x8x64xf32>
  %o = ai.matmul %pg, %v32 : tensor<1x2x8x8xf32> * tensor<1x2x8x64xf32>
  %ot = ai.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf32>
  %om = ai.reshape %ot {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf32>
  %w = arith.constant dense<2.500000e-01> : tensor<128x128xf32>
  %proj = ai.matmul %om, %w : tensor<1x8x128xf32> * tensor<128x128xf32>
  %b = arith.constant dense<5.000000e-01> : tensor<128xf32>
  %pb = ai.bias_add %proj, %b {axis = 2 : i64} : tensor<1x8x128xf32> * tensor<128xf32>
  %x32 = ai.cast %x : tensor<1x8x128xf16> to tensor<1x8x128xf32>
  %r = ai.add %pb, %x32 : tensor<1x8x128xf32> * tensor<1x8x128xf32>
  %g = arith.constant dense<1.000000e+00> : tensor<128xf32>
  %be = arith.constant dense<0.000000e+00> : tensor<128xf32>
  %y = ai.layernorm %r, %g, %be : tensor<1x8x128xf32> * tensor<128xf32> * tensor<128xf32>
  return %y : tensor<1x8x128xf32>
}
