// ONNX ScatterND with reduction add at constant indices (issue 29), row 2 updated twice:
// two rounds over the flattened data, each one ai.gather of the updates (the update each
// element takes in that round) and one ai.where of the constant mask of the elements hit.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx scatter_nd
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[U:.*]] = ai.reshape %updates {shape = array<i64: 6>}
// CHECK: %[[D:.*]] = ai.reshape %data {shape = array<i64: 6>}
// CHECK: %[[G1:.*]] = ai.gather %[[U]] {indices = array<i64: 2, 3, 0, 0, 0, 1>}
// CHECK: %[[S1:.*]] = ai.add %[[D]], %[[G1]]
// CHECK: %[[M1:.*]] = arith.constant dense<[true, true, false, false, true, true]> : tensor<6xi1>
// CHECK: %[[R1:.*]] = ai.where %[[M1]], %[[S1]], %[[D]]
// CHECK: %[[G2:.*]] = ai.gather %[[U]] {indices = array<i64: 0, 0, 0, 0, 4, 5>}
// CHECK: %[[S2:.*]] = ai.add %[[R1]], %[[G2]]
// CHECK: %[[M2:.*]] = arith.constant dense<[false, false, false, false, true, true]> : tensor<6xi1>
// CHECK: %[[R2:.*]] = ai.where %[[M2]], %[[S2]], %[[R1]]
// CHECK: %y = ai.reshape %[[R2]] {shape = array<i64: 3, 2>}
