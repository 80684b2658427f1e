// ONNX DFT (issue 29), one-sided, of 4 real samples: the signal axis moved next to the
// components, one ai.matmul with the constant [samples, bins x (re, im)] matrix built at
// import (its first row all ones: every bin's real part sums sample 0), moved back.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx dft
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[T:.*]] = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x4x3x1xf32>
// CHECK: %[[ROWS:.*]] = ai.reshape %[[T]] {shape = array<i64: 1, 3, 4>}
// CHECK: %[[W:.*]] = arith.constant dense<{{\[\[}}1.000000e+00, -0.000000e+00, 1.000000e+00, -0.000000e+00, 1.000000e+00, -0.000000e+00], {{.*}}]> : tensor<4x6xf32>
// CHECK: %[[P:.*]] = ai.matmul %[[ROWS]], %[[W]] : tensor<1x3x4xf32> * tensor<4x6xf32>
// CHECK: %[[S:.*]] = ai.reshape %[[P]] {shape = array<i64: 1, 3, 3, 2>}
// CHECK: %y = ai.transpose %[[S]] {perm = array<i64: 0, 2, 1, 3>} : tensor<1x3x3x2xf32>
