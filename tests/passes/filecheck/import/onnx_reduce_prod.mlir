// ONNX ReduceProd (issue 29) imports as ai.mul of halves, every target computing it with
// ops it has: axis 1 of 5 elements is multiplied pairwise, [0:2] * [2:4], the odd last
// element concatenated for the next round (3 left), then 3 -> 2 the same way, then 2 -> 1;
// keepdims=0 views the result without the axis.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx reduce_prod
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[A:.*]] = ai.slice %x {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 2, 3>, strides = array<i64: 1, 1, 1>}
// CHECK-NEXT: %[[B:.*]] = ai.slice %x {offsets = array<i64: 0, 2, 0>, sizes = array<i64: 2, 2, 3>, strides = array<i64: 1, 1, 1>}
// CHECK-NEXT: %[[AB:.*]] = ai.mul %[[A]], %[[B]] : tensor<2x2x3xf32> * tensor<2x2x3xf32>
// CHECK-NEXT: %[[LAST:.*]] = ai.slice %x {offsets = array<i64: 0, 4, 0>, sizes = array<i64: 2, 1, 3>
// CHECK-NEXT: %[[THREE:.*]] = ai.concat %[[AB]], %[[LAST]] {axis = 1 : i64} : tensor<2x2x3xf32> * tensor<2x1x3xf32>
// CHECK-COUNT-2: ai.mul
// CHECK-NOT: ai.mul
// CHECK: %y = ai.reshape %{{.*}} {shape = array<i64: 2, 3>} : tensor<2x1x3xf32>
// CHECK-NEXT: func.return %y : tensor<2x3xf32>
