// sink-transposes (issue 28): Llama splits Q and K into heads ([B, S, H, D] -> [B, H, S, D])
// before RoPE; the transpose moves below the elementwise RoPE (cos/sin [1, 1, S, D] read
// as [1, S, 1, D], a reshape) to the attention, which reads it as strides.
// RUN: fusec-opt %s --split-input-file -p "sink-transposes" | filecheck %s
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns,canonicalize,cse,sink-transposes,fuse{target=cuda}" | filecheck %s --check-prefix=CUDA
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,recognize-patterns,canonicalize,cse,sink-transposes,fuse{target=cpu}" | filecheck %s --check-prefix=CPU

// CHECK-LABEL: func.func @rope_heads
// CHECK-DAG:   %[[C:.*]] = ai.reshape %cos {shape = array<i64: 1, 16, 1, 64>}
// CHECK-DAG:   %[[S:.*]] = ai.reshape %sin {shape = array<i64: 1, 16, 1, 64>}
// CHECK-DAG:   %[[A:.*]] = ai.mul %x, %[[C]] : tensor<1x16x4x64xf16> * tensor<1x16x1x64xf16>
// CHECK-DAG:   %[[R:.*]] = ai.rotate_half %x : tensor<1x16x4x64xf16>
// CHECK-DAG:   %[[B:.*]] = ai.mul %[[R]], %[[S]] : tensor<1x16x4x64xf16> * tensor<1x16x1x64xf16>
// CHECK:       %[[Y:.*]] = ai.add %{{.*}}, %{{.*}} : tensor<1x16x4x64xf16> * tensor<1x16x4x64xf16>
// CHECK-NEXT:  %[[T:.*]] = ai.transpose %[[Y]] {perm = array<i64: 0, 2, 1, 3>} : tensor<1x16x4x64xf16>
// CHECK-NOT:   ai.transpose
// CHECK:       ai.attention %[[T]], %k

// The head split is read by the flash kernel (cuda) and the cpu attention group: no copy.
// CUDA-LABEL: func.func @rope_heads
// CUDA-NOT:   ai.fused "copy"
// CUDA:       ai.fused "pointwise"
// CUDA:       ai.fused "attention"
// CUDA:       ai.transpose
// CUDA:       ai.attention
// CUDA-NOT:   ai.fused "copy"
// CPU-LABEL:  func.func @rope_heads
// CPU-NOT:    ai.fused "copy"
// CPU:        ai.fused "pointwise"
// CPU:        ai.fused "attention"
// CPU:        ai.transpose
// CPU:        ai.attention
// CPU-NOT:    ai.fused "copy"
func.func @rope_heads(%x: tensor<1x16x4x64xf16>, %cos: tensor<1x1x16x64xf16>, %sin: tensor<1x1x16x64xf16>, %k: tensor<1x4x16x64xf16>, %v: tensor<1x4x16x64xf16>) -> tensor<1x4x16x64xf16> {
  %q = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x16x4x64xf16>
  %a = ai.mul %q, %cos : tensor<1x4x16x64xf16> * tensor<1x1x16x64xf16>
  %r = ai.rotate_half %q : tensor<1x4x16x64xf16>
  %b = ai.mul %r, %sin : tensor<1x4x16x64xf16> * tensor<1x1x16x64xf16>
  %y = ai.add %a, %b : tensor<1x4x16x64xf16> * tensor<1x4x16x64xf16>
  %z = arith.constant dense<0.000000e+00> : tensor<f16>
  %o = ai.attention %y, %k, %v, %z {scale = 1.250000e-01 : f32} : tensor<1x4x16x64xf16> * tensor<1x4x16x64xf16> * tensor<1x4x16x64xf16> * tensor<f16>
  return %o : tensor<1x4x16x64xf16>
}

// -----

// A constant whose non-unit axes the permutation reorders is transposed at compile time.
// CUDA-LABEL: func.func @folded_constant
// CPU-LABEL:  func.func @folded_constant
// CHECK-LABEL: func.func @folded_constant
// CHECK:       %[[C:.*]] = arith.constant dense<{{\[\[\[\[}}1.000000e+00], [4.000000e+00]], {{\[\[}}2.000000e+00], [5.000000e+00]], {{\[\[}}3.000000e+00], [6.000000e+00]]]]> : tensor<1x3x2x1xf32>
// CHECK:       %[[M:.*]] = ai.mul %{{.*}}, %[[C]] : tensor<1x3x2x4xf32> * tensor<1x3x2x1xf32>
// CHECK-NEXT:  %[[T:.*]] = ai.transpose %[[M]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK:       ai.attention %[[T]]
func.func @folded_constant(%x: tensor<1x3x2x4xf32>, %k: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %q = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x3x2x4xf32>
  %c = arith.constant dense<[[[[1.0], [2.0], [3.0]], [[4.0], [5.0], [6.0]]]]> : tensor<1x2x3x1xf32>
  %m = ai.mul %q, %c : tensor<1x2x3x4xf32> * tensor<1x2x3x1xf32>
  %z = arith.constant dense<0.000000e+00> : tensor<f32>
  %o = ai.attention %m, %k, %k, %z {scale = 5.000000e-01 : f32} : tensor<1x2x3x4xf32> * tensor<1x2x3x4xf32> * tensor<1x2x3x4xf32> * tensor<f32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// Not moved: the transposed value is also returned (moving would duplicate the transpose),
// the chain ends in a return instead of an attention, or the permutation moves the
// rotate-half's last axis.
// CHECK-LABEL: func.func @other_reader
// CHECK-NEXT:  ai.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT:  ai.mul %{{.*}} : tensor<1x2x3x4xf32> * tensor<1x2x3x4xf32>
func.func @other_reader(%x: tensor<1x3x2x4xf32>, %k: tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) {
  %q = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x3x2x4xf32>
  %m = ai.mul %q, %q : tensor<1x2x3x4xf32> * tensor<1x2x3x4xf32>
  %z = arith.constant dense<0.000000e+00> : tensor<f32>
  %o = ai.attention %m, %k, %k, %z {scale = 5.000000e-01 : f32} : tensor<1x2x3x4xf32> * tensor<1x2x3x4xf32> * tensor<1x2x3x4xf32> * tensor<f32>
  return %o, %q : tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>
}

// -----

// CHECK-LABEL: func.func @no_attention
// CHECK-NEXT:  ai.transpose
// CHECK-NEXT:  ai.relu %{{.*}} : tensor<1x2x3x4xf32>
func.func @no_attention(%x: tensor<1x3x2x4xf32>) -> tensor<1x2x3x4xf32> {
  %q = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x3x2x4xf32>
  %m = ai.relu %q : tensor<1x2x3x4xf32>
  return %m : tensor<1x2x3x4xf32>
}

// -----

// CHECK-LABEL: func.func @last_axis_moves
// CHECK-NEXT:  ai.transpose
// CHECK-NEXT:  ai.rotate_half %{{.*}} : tensor<1x2x4x4xf32>
func.func @last_axis_moves(%x: tensor<1x2x4x4xf32>, %k: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %q = ai.transpose %x {perm = array<i64: 0, 1, 3, 2>} : tensor<1x2x4x4xf32>
  %r = ai.rotate_half %q : tensor<1x2x4x4xf32>
  %z = arith.constant dense<0.000000e+00> : tensor<f32>
  %o = ai.attention %r, %k, %k, %z {scale = 5.000000e-01 : f32} : tensor<1x2x4x4xf32> * tensor<1x2x4x4xf32> * tensor<1x2x4x4xf32> * tensor<f32>
  return %o : tensor<1x2x4x4xf32>
}
