// ONNX RotaryEmbedding (issue 29), interleaved, at run-time position ids: the input
// transposed to [batch, seq, heads, head], the cache rows taken at the ids (ai.take),
// even and odd positions as strided slices, the rotation as elementwise ops, the
// halves woven back (a concat along a new last dim) and transposed back.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx rotary_embedding
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: %[[T:.*]] = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x3x4xf32>
// CHECK: %[[COS:.*]] = ai.take %cos, %ids : tensor<8x2xf32> * tensor<1x3xi64>
// CHECK: %[[SIN:.*]] = ai.take %sin, %ids : tensor<8x2xf32> * tensor<1x3xi64>
// CHECK: %[[EVEN:.*]] = ai.slice %[[T]] {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 3, 2, 2>, strides = array<i64: 1, 1, 1, 2>}
// CHECK: %[[ODD:.*]] = ai.slice %[[T]] {offsets = array<i64: 0, 0, 0, 1>, sizes = array<i64: 1, 3, 2, 2>, strides = array<i64: 1, 1, 1, 2>}
// CHECK: %[[REAL:.*]] = ai.sub
// CHECK: %[[IMAG:.*]] = ai.add
// CHECK: ai.concat %{{.*}}, %{{.*}} {axis = 4 : i64} : tensor<1x3x2x2x1xf32> * tensor<1x3x2x2x1xf32>
// CHECK: %y = ai.transpose %{{.*}} {perm = array<i64: 0, 2, 1, 3>} : tensor<1x3x2x4xf32>
