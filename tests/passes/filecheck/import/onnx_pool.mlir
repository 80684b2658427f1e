// ONNX LpPool over a 1-D signal (issue 29): the signal viewed as height 1, the window's
// mean of |x|^p (padding counted as zeros) times the window's size, to the power 1/p,
// viewed back; 1-D MaxPool and AveragePool take the same height-1 view.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx lp_pool_1d
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[ROWS:.*]] = ai.reshape %x {shape = array<i64: 1, 2, 1, 8>} : tensor<1x2x8xf32>
// CHECK: %[[ABS:.*]] = ai.abs %[[ROWS]]
// CHECK: %[[POW:.*]] = ai.pow %[[ABS]], %{{.*}} : tensor<1x2x1x8xf32> * tensor<f32>
// CHECK: %[[MEAN:.*]] = ai.avg_pool2d %[[POW]] {count_include_pad = true, kernel = array<i64: 1, 3>, padding = array<i64: 0, 1>}
// CHECK: %[[SUM:.*]] = ai.mul %[[MEAN]], %{{.*}}
// CHECK: %[[ROOT:.*]] = ai.pow %[[SUM]], %{{.*}}
// CHECK: %y = ai.reshape %[[ROOT]] {shape = array<i64: 1, 2, 8>} : tensor<1x2x1x8xf32>
