// ONNX Einsum (issue 29) imports as transposes, reshapes and one batched ai.matmul per
// pair of operands: bqd,bkd->bqk moves k's contracted letter d before its kept one and
// multiplies (no reshape is needed: one letter per group).
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx einsum
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[KT:.*]] = ai.transpose %k {perm = array<i64: 0, 2, 1>} : tensor<2x5x4xf32>
// CHECK-NEXT: %y = ai.matmul %q, %[[KT]] : tensor<2x3x4xf32> * tensor<2x4x5xf32>
// CHECK-NEXT: func.return %y : tensor<2x3x5xf32>
