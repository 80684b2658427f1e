// ONNX 3-D pooling (issue 29) imports as two 2-D pools, a window being a box: the
// (H, W) window over the (N, C * D, H, W) view, then the depth window (kd, 1) with the
// depth stride over the (N, C, D, OH * OW) view, viewed back as (N, C, OD, OH, OW).
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx max_pool_3d
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[PLANES:.*]] = ai.reshape %x {shape = array<i64: 1, 8, 5, 6>} : tensor<1x2x4x5x6xf32>
// CHECK-NEXT: %[[HW:.*]] = ai.max_pool2d %[[PLANES]] {kernel = array<i64: 3, 3>} : tensor<1x8x5x6xf32>
// CHECK-NEXT: %[[COLS:.*]] = ai.reshape %[[HW]] {shape = array<i64: 1, 2, 4, 12>} : tensor<1x8x3x4xf32>
// CHECK-NEXT: %[[D:.*]] = ai.max_pool2d %[[COLS]] {kernel = array<i64: 2, 1>, strides = array<i64: 2, 1>}
// CHECK-NEXT: %y = ai.reshape %[[D]] {shape = array<i64: 1, 2, 2, 3, 4>} : tensor<1x2x2x12xf32>
// CHECK-NEXT: func.return %y : tensor<1x2x2x3x4xf32>
