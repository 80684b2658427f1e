// ONNX ConvTranspose (issue 29) imports as an ai.conv2d of a zero-inserted input: the
// stride-2 H axis gets a broadcast zero row after each row (a unit axis, a concat, a
// view back: 3 -> 6 rows), the weight [C, M/g, kh, kw] has its channels swapped per
// group (reshape, transpose, reshape) and its kernel reversed (one slice of strides -1),
// and the conv pads by (k - 1) * d less the ONNX pads, the inserted trailing zero row
// counted against the end padding (H: 2 - 1 = 1 at the top, 2 - 1 - 1 = 0 at the bottom).
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx conv_transpose
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[ZERO:.*]] = ai.expand %{{.*}} {shape = array<i64: 1, 4, 3, 1, 3>} : tensor<f32>
// CHECK: %[[ROWS:.*]] = ai.reshape %x {shape = array<i64: 1, 4, 3, 1, 3>} : tensor<1x4x3x3xf32>
// CHECK: %[[SPREAD:.*]] = ai.concat %[[ROWS]], %[[ZERO]] {axis = 3 : i64}
// CHECK: %[[XZ:.*]] = ai.reshape %[[SPREAD]] {shape = array<i64: 1, 4, 6, 3>}
// CHECK: %[[G:.*]] = ai.reshape %w {shape = array<i64: 2, 2, 1, 3, 2>} : tensor<4x1x3x2xf32>
// CHECK: %[[T:.*]] = ai.transpose %[[G]] {perm = array<i64: 0, 2, 1, 3, 4>}
// CHECK: %[[KCRS:.*]] = ai.reshape %[[T]] {shape = array<i64: 2, 2, 3, 2>}
// CHECK: %[[FLIP:.*]] = ai.slice %[[KCRS]] {offsets = array<i64: 0, 0, 2, 1>, sizes = array<i64: 2, 2, 3, 2>, strides = array<i64: 1, 1, -1, -1>}
// CHECK: %[[C:.*]] = ai.conv2d %[[XZ]], %[[FLIP]] {padding = array<i64: 1, 1, 0, 1>, groups = 2 : i64} : tensor<1x4x6x3xf32> * tensor<2x2x3x2xf32>
// CHECK: %y = ai.bias_add %[[C]], %b : tensor<1x2x5x4xf32> * tensor<2xf32>
// CHECK-NEXT: func.return %y
