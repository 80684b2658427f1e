// RUN: fusec-opt %s -p canonicalize --split-input-file | filecheck %s

// A BatchNorm after a conv with constant weights folds into it: new weights and
// a bias, no batch_norm left (the same for .mlir, traced and ONNX graphs).
// CHECK-LABEL: func.func @folded
// CHECK-NOT:   ai.batch_norm
// CHECK:       %[[W:.*]] = arith.constant dense<{{.*}}> : tensor<4x3x3x3xf32>
// CHECK:       %[[B:.*]] = arith.constant dense<{{.*}}> : tensor<4xf32>
// CHECK:       %[[C:.*]] = ai.conv2d %x, %[[W]]
// CHECK-NEXT:  ai.bias_add %[[C]], %[[B]]
// CHECK-NOT:   ai.batch_norm
func.func @folded(%x: tensor<1x3x8x8xf32>) -> tensor<1x4x6x6xf32> {
  %w = arith.constant dense<0.5> : tensor<4x3x3x3xf32>
  %s = arith.constant dense<[1.0, 2.0, 0.5, 1.5]> : tensor<4xf32>
  %b = arith.constant dense<[0.1, 0.2, 0.3, 0.4]> : tensor<4xf32>
  %m = arith.constant dense<[0.0, 1.0, -1.0, 2.0]> : tensor<4xf32>
  %v = arith.constant dense<[1.0, 4.0, 0.25, 2.0]> : tensor<4xf32>
  %c = ai.conv2d %x, %w : tensor<1x3x8x8xf32> * tensor<4x3x3x3xf32>
  %y = ai.batch_norm %c, %s, %b, %m, %v : tensor<1x4x6x6xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32>
  return %y : tensor<1x4x6x6xf32>
}

// -----

// Parameters known only at run time: (x - mean) * (scale / sqrt(var + eps)) + bias.
// CHECK-LABEL: func.func @runtime
// CHECK:       ai.sqrt
// CHECK:       ai.div %s
// CHECK:       ai.reshape %m {shape = array<i64: 4, 1, 1>}
// CHECK:       ai.sub %x
// CHECK:       ai.mul
// CHECK:       ai.bias_add {{.*}}, %b
// CHECK-NOT:   ai.batch_norm
func.func @runtime(%x: tensor<2x4x5x5xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>) -> tensor<2x4x5x5xf32> {
  %y = ai.batch_norm %x, %s, %b, %m, %v : tensor<2x4x5x5xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32>
  return %y : tensor<2x4x5x5xf32>
}

// -----

// A conv whose output has another user keeps its weights: the BatchNorm becomes
// a per-channel multiply and a bias_add.
// CHECK-LABEL: func.func @shared
// CHECK:       ai.conv2d %x, %w
// CHECK:       ai.mul
// CHECK-NEXT:  ai.bias_add
// CHECK-NOT:   ai.batch_norm
func.func @shared(%x: tensor<1x3x8x8xf32>) -> (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) {
  %w = arith.constant dense<0.5> : tensor<4x3x3x3xf32>
  %p = arith.constant dense<1.0> : tensor<4xf32>
  %c = ai.conv2d %x, %w : tensor<1x3x8x8xf32> * tensor<4x3x3x3xf32>
  %y = ai.batch_norm %c, %p, %p, %p, %p : tensor<1x4x6x6xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32>
  return %y, %c : tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>
}
