// ONNX Resize in linear mode (issue 29) imports as one ai.matmul per resized axis with
// a constant interpolation matrix computed at import (half_pixel, edge-clamped): H
// (3 -> 6) as matrix @ the (N*C, H, W) view, W (4 -> 6) as the data @ matrix^T.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx resize_linear
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[ROWS:.*]] = ai.reshape %x {shape = array<i64: 2, 3, 4>} : tensor<1x2x3x4xf32>
// CHECK: %[[H:.*]] = arith.constant dense<{{\[\[}}1.000000e+00, 0.000000e+00, 0.000000e+00], [7.500000e-01, 2.500000e-01, 0.000000e+00], {{.*}}]> : tensor<6x3xf32>
// CHECK: %[[UP:.*]] = ai.matmul %[[H]], %[[ROWS]] : tensor<6x3xf32> * tensor<2x3x4xf32>
// CHECK: %[[BACK:.*]] = ai.reshape %[[UP]] {shape = array<i64: 1, 2, 6, 4>}
// CHECK: %[[W:.*]] = arith.constant dense<{{.*}}> : tensor<4x6xf32>
// CHECK: %y = ai.matmul %[[BACK]], %[[W]] : tensor<1x2x6x4xf32> * tensor<4x6xf32>
// CHECK: func.return %y : tensor<1x2x6x6xf32>
