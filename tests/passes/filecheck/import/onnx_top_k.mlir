// ONNX TopK (issue 29) imports as K selection rounds: each round's value is the maximum
// of the elements not taken yet (reduce_max; the taken ones set to -inf) and its index
// the first untaken position holding it (argmax of the hits, NaN counting as a hit),
// which joins the taken ones; the rounds' values and indices are concatenated.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx top_k
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[IOTA:.*]] = arith.constant dense<{{\[}}[0, 1, 2, 3, 4]]> : tensor<1x5xi64>
// CHECK: %[[NAN:.*]] = ai.not %{{.*}} : tensor<2x5xi1>
// CHECK: %[[V0:.*]] = ai.reduce_max %x {axes = array<i64: 1>, keepdims = true}
// CHECK: %[[HIT0:.*]] = ai.or %{{.*}}, %[[NAN]]
// CHECK: %[[I0:.*]] = ai.argmax %{{.*}} {axis = 1 : i64} : tensor<2x5xi32>
// CHECK: %[[TAKEN:.*]] = ai.equal %[[IOTA]], %[[I0]]
// CHECK: %[[LEFT:.*]] = ai.where %[[TAKEN]], %{{.*}}, %x
// CHECK: %[[V1:.*]] = ai.reduce_max %[[LEFT]] {axes = array<i64: 1>, keepdims = true}
// CHECK: %[[UNTAKEN:.*]] = ai.not %[[TAKEN]]
// CHECK: ai.and %{{.*}}, %[[UNTAKEN]]
// CHECK: %[[I1:.*]] = ai.argmax
// CHECK-NOT: ai.or
// CHECK: %values = ai.concat %[[V0]], %[[V1]] {axis = 1 : i64}
// CHECK-NEXT: %indices = ai.concat %[[I0]], %[[I1]] {axis = 1 : i64} : tensor<2x1xi64> * tensor<2x1xi64>
// CHECK-NEXT: func.return %values, %indices : tensor<2x2xf32>, tensor<2x2xi64>
