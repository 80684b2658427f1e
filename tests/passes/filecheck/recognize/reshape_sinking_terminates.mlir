// recognize-patterns: a reshape sinks below an elementwise consumer only when one of
// the consumer's operands is replaced by the reshape's source. A broadcast of a
// reshaped scalar (ONNX Pad's constant_value computed at run time, expanded into the
// pad blocks) has nothing to sink: the pass once rebuilt that ai.expand forever.
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns" | filecheck %s

// CHECK-LABEL: func.func @expanded_scalar
// CHECK:       %[[R:.*]] = ai.reshape %v : tensor<1xf32>
// CHECK-NEXT:  %[[E:.*]] = ai.expand %[[R]] {shape = array<i64: 2, 3>} : tensor<f32>
// CHECK-NEXT:  %[[Y:.*]] = ai.add %x, %[[E]]
// CHECK-NEXT:  func.return %[[Y]]
func.func @expanded_scalar(%v: tensor<1xf32>, %x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = ai.reshape %v {shape = array<i64>} : tensor<1xf32>
  %e = ai.expand %r {shape = array<i64: 2, 3>} : tensor<f32>
  %y = ai.add %x, %e : tensor<2x3xf32> * tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
