// ONNX LinearAttention (issue 29) imports with its recurrence unrolled: per step, the
// step's key as a column times its value row (an outer product) added to the state
// (zeros without a past state), the query row times the state (a one-row ai.matmul),
// scaled by 1/sqrt(d_k); the rows concatenated over the steps and put back as
// [B, T, H * d_v]; present_state is the last state.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx linear_attention
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : tensor<1x1x2x3xf32>
// CHECK: %[[SCALE:.*]] = arith.constant dense<0.707106769> : tensor<f32>
// CHECK: %[[K0:.*]] = ai.reshape %{{.*}} {shape = array<i64: 1, 1, 2, 1>} : tensor<1x1x1x2xf32>
// CHECK-NEXT: %[[KV0:.*]] = ai.mul %[[K0]], %{{.*}} : tensor<1x1x2x1xf32> * tensor<1x1x1x3xf32>
// CHECK-NEXT: %[[S0:.*]] = ai.add %[[ZERO]], %[[KV0]]
// CHECK-NEXT: %[[R0:.*]] = ai.matmul %{{.*}}, %[[S0]] : tensor<1x1x1x2xf32> * tensor<1x1x2x3xf32>
// CHECK-NEXT: %[[O0:.*]] = ai.mul %[[R0]], %[[SCALE]]
// CHECK: %state = ai.add %[[S0]], %{{.*}}
// CHECK-NEXT: %[[R1:.*]] = ai.matmul %{{.*}}, %state
// CHECK-NEXT: %[[O1:.*]] = ai.mul %[[R1]], %[[SCALE]]
// CHECK-NEXT: %[[ROWS:.*]] = ai.concat %[[O0]], %[[O1]] {axis = 2 : i64}
// CHECK-NEXT: %[[T:.*]] = ai.transpose %[[ROWS]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT: %y = ai.reshape %[[T]] {shape = array<i64: 1, 2, 3>}
// CHECK-NEXT: func.return %y, %state : tensor<1x2x3xf32>, tensor<1x1x2x3xf32>
