// A weight-only int4 layer (issue 31's W4A16) on cuda from 17 to 512 rows (by default;
// FUSEC_W4_GEMM=producer at any number) is one matmul group: the Tensor Core GEMM's
// producer dequantizes the codes into each B stage (gemm_w4.cuh), except where it cannot
// read the weight (here blocks of 32 along K, not a whole 64-value K step). Past 512 rows
// (or with FUSEC_W4_GEMM=separate) the dequantize is a pointwise kernel of its own, its
// 16-bit weight written each call, before the GEMM.
// RUN: fusec-opt %s -p "infer-shapes,canonicalize,fuse{target=cuda}" | filecheck %s
// RUN: env FUSEC_W4_GEMM=separate fusec-opt %s -p "infer-shapes,canonicalize,fuse{target=cuda}" | filecheck %s --check-prefix=SEPARATE

// SEPARATE-LABEL: func.func @prefill
// SEPARATE:       ai.fused "pointwise"
// SEPARATE-NEXT:  ^bb0
// SEPARATE-NEXT:  ai.dequantize
// SEPARATE-NEXT:  ai.yield
// SEPARATE:       ai.fused "matmul"
// SEPARATE-NEXT:  ^bb0
// SEPARATE-NEXT:  ai.matmul

// CHECK-LABEL: func.func @prefill
// CHECK:       ai.fused "matmul" ({{[^)]*}}) : (tensor<512x256xi4>, tensor<4x256xbf16>, tensor<4x256xi4>, tensor<300x512xbf16>, tensor<256xbf16>)
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.dequantize
// CHECK-NEXT:  ai.matmul
// CHECK-NEXT:  ai.bias_add
// CHECK-NEXT:  ai.relu
// CHECK-NEXT:  ai.yield
// CHECK-NOT:   ai.fused
func.func @prefill(%x: tensor<300x512xbf16>, %s: tensor<4x256xbf16>, %z: tensor<4x256xi4>, %b: tensor<256xbf16>) -> tensor<300x256xbf16> {
  %q = arith.constant dense<3> : tensor<512x256xi4>
  %w = ai.dequantize %q, %s, %z {axis = 0 : i64, block_size = 128 : i64} : tensor<512x256xi4> * tensor<4x256xbf16> * tensor<4x256xi4>
  %y = ai.matmul %x, %w : tensor<300x512xbf16> * tensor<512x256xbf16>
  %t = ai.add %y, %b : tensor<300x256xbf16> * tensor<256xbf16>
  %r = ai.relu %t : tensor<300x256xbf16>
  return %r : tensor<300x256xbf16>
}

// CHECK-LABEL: func.func @small_blocks
// CHECK:       ai.fused "pointwise"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.dequantize
// CHECK-NEXT:  ai.yield
// CHECK:       ai.fused "matmul"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.matmul
// CHECK-NEXT:  ai.yield
func.func @small_blocks(%x: tensor<300x512xbf16>, %s: tensor<16x256xbf16>, %z: tensor<16x256xi4>) -> tensor<300x256xbf16> {
  %q = arith.constant dense<3> : tensor<512x256xi4>
  %w = ai.dequantize %q, %s, %z {axis = 0 : i64, block_size = 32 : i64} : tensor<512x256xi4> * tensor<16x256xbf16> * tensor<16x256xi4>
  %y = ai.matmul %x, %w : tensor<300x512xbf16> * tensor<512x256xbf16>
  return %y : tensor<300x256xbf16>
}
