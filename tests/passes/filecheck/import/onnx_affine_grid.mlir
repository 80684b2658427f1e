// ONNX AffineGrid (issue 29): the homogeneous pixel-centre coordinates [x, y, 1] of a
// 2 x 3 output, in [-1, 1], as a constant, times theta transposed (one ai.matmul), viewed
// as N x H x W x 2.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx affine_grid
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[BASE:.*]] = arith.constant dense<{{\[\[}}-0.666666687, -5.000000e-01, 1.000000e+00], [0.000000e+00, -5.000000e-01, 1.000000e+00], {{.*}}]> : tensor<6x3xf32>
// CHECK: %[[P:.*]] = ai.matmul %[[BASE]], %theta {transpose_b = true} : tensor<6x3xf32> * tensor<1x2x3xf32>
// CHECK: %grid = ai.reshape %[[P]] {shape = array<i64: 1, 2, 3, 2>} : tensor<1x6x2xf32>
