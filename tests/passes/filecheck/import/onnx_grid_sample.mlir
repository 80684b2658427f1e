// ONNX GridSample (issue 29) imports as ai ops at the run-time grid positions: per
// spatial dim (H from the grid's component 1, W from 0), the coordinate denormalised
// (align_corners=0: (g + 1) * size / 2 - 1/2), rounded half to even (nearest), clipped
// where outside [-0.5, size - 0.5] (border), truncated to an int64 index; the image
// viewed as [N * H * W, C] rows, one ai.take at row n * H * W + h * W + w, put back
// as [N, C, out...].
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx grid_sample
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[GY:.*]] = ai.slice %grid {offsets = array<i64: 0, 0, 0, 1>, sizes = array<i64: 1, 2, 2, 1>
// CHECK: %[[RY:.*]] = ai.round
// CHECK: %[[CY:.*]] = ai.clip %[[RY]] {min = 0.000000e+00 : f32, max = 2.000000e+00 : f32}
// CHECK: %[[Y:.*]] = ai.where %{{.*}}, %[[CY]], %[[RY]]
// CHECK: ai.clip %{{.*}} {min = 0.000000e+00 : f32, max = 2.000000e+00 : f32}
// CHECK-NEXT: %[[IY:.*]] = ai.cast %{{.*}} : tensor<1x2x2xf32> to tensor<1x2x2xi64>
// CHECK: %[[GX:.*]] = ai.slice %grid {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 2, 1>
// CHECK: ai.where
// CHECK: ai.clip %{{.*}} {min = 0.000000e+00 : f32, max = 3.000000e+00 : f32}
// CHECK-NEXT: %[[IX:.*]] = ai.cast %{{.*}} : tensor<1x2x2xf32> to tensor<1x2x2xi64>
// CHECK: %[[T:.*]] = ai.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<1x2x3x4xf32>
// CHECK-NEXT: %[[ROWS:.*]] = ai.reshape %[[T]] {shape = array<i64: 12, 2>}
// CHECK: %[[HW:.*]] = ai.mul %[[IY]], %{{.*}} : tensor<1x2x2xi64> * tensor<i64>
// CHECK: %[[FLAT:.*]] = ai.add %{{.*}}, %[[IX]] : tensor<1x2x2xi64> * tensor<1x2x2xi64>
// CHECK-NEXT: %[[PICK:.*]] = ai.take %[[ROWS]], %[[FLAT]] : tensor<12x2xf32> * tensor<1x2x2xi64>
// CHECK-NEXT: %y = ai.transpose %[[PICK]] {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT: func.return %y : tensor<1x2x2x2xf32>
