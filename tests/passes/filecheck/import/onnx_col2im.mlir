// ONNX Col2Im (issue 29) imports as the blocks' columns put back and added: per kernel
// position (here kh = 0, 1 of a 2 x 1 block), its channels' columns (a slice of stride 2
// over the rows) viewed as [N, C, Lh, Lw], the H stride's zeros inserted (a concat with
// a broadcast zero block), moved down by kh (a zero row concatenated before, the
// overhang sliced off), the two canvases added and the top pad cropped.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx col2im
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[C0:.*]] = ai.slice %x {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 1, 2, 4>, strides = array<i64: 1, 2, 1>}
// CHECK: %[[Z0:.*]] = ai.reshape %{{.*}} {shape = array<i64: 1, 2, 4, 2>} : tensor<1x2x2x2x2xf32>
// CHECK: %[[C1:.*]] = ai.slice %x {offsets = array<i64: 0, 1, 0>, sizes = array<i64: 1, 2, 4>, strides = array<i64: 1, 2, 1>}
// CHECK: %[[Z1:.*]] = ai.reshape %{{.*}} {shape = array<i64: 1, 2, 4, 2>} : tensor<1x2x2x2x2xf32>
// CHECK-NEXT: %[[CUT:.*]] = ai.slice %[[Z1]] {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 3, 2>
// CHECK-NEXT: %[[ROW:.*]] = arith.constant dense<0.000000e+00> : tensor<1x2x1x2xf32>
// CHECK-NEXT: %[[MOVED:.*]] = ai.concat %[[ROW]], %[[CUT]] {axis = 2 : i64}
// CHECK-NEXT: %[[SUM:.*]] = ai.add %[[Z0]], %[[MOVED]] : tensor<1x2x4x2xf32> * tensor<1x2x4x2xf32>
// CHECK-NEXT: %y = ai.slice %[[SUM]] {offsets = array<i64: 0, 0, 1, 0>, sizes = array<i64: 1, 2, 3, 2>
// CHECK-NEXT: func.return %y : tensor<1x2x3x2xf32>
