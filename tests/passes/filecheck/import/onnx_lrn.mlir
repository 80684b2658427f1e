// ONNX LRN (issue 29): the squares viewed with the channels as the height of an
// ai.avg_pool2d window of size x 1 (padding counted as zeros: the mean is the windowed
// sum over the size), then x / (bias + alpha * mean)^beta.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx lrn
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[SQ:.*]] = ai.mul %x, %x : tensor<1x4x2x3xf32> * tensor<1x4x2x3xf32>
// CHECK: %[[CH:.*]] = ai.reshape %[[SQ]] {shape = array<i64: 1, 1, 4, 6>}
// CHECK: %[[MEAN:.*]] = ai.avg_pool2d %[[CH]] {count_include_pad = true, kernel = array<i64: 3, 1>, padding = array<i64: 1, 0, 1, 0>} : tensor<1x1x4x6xf32>
// CHECK: %[[BACK:.*]] = ai.reshape %[[MEAN]] {shape = array<i64: 1, 4, 2, 3>}
// CHECK: ai.pow
// CHECK: %y = ai.div %x, %{{.*}} : tensor<1x4x2x3xf32> * tensor<1x4x2x3xf32>
