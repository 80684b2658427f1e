// ONNX GatherElements at run-time indices, Hardmax and OneHot (issue 29) import as ai ops:
// GatherElements wraps negative indices (ai.less, ai.add, ai.where), compares them
// with the axis' iota along a new dim after the axis and sums the selected data over
// it; Hardmax compares ai.argmax with the iota and casts the i1 to the input's type;
// OneHot wraps the indices the same way and selects [off, on] by their one-hot.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.ge.onnx gather_elements
// RUN: fusec import %t.ge.onnx 2>/dev/null | filecheck %s --check-prefix=GATHER
// RUN: python %S/../../../frontend/onnx/node_models.py %t.hm.onnx hardmax
// RUN: fusec import %t.hm.onnx 2>/dev/null | filecheck %s --check-prefix=HARDMAX
// RUN: python %S/../../../frontend/onnx/node_models.py %t.oh.onnx one_hot
// RUN: fusec import %t.oh.onnx 2>/dev/null | filecheck %s --check-prefix=ONEHOT
// GATHER: %[[NEG:.*]] = ai.less %indices, %{{.*}} : tensor<2x2x3xi64> * tensor<i64>
// GATHER: %[[UP:.*]] = ai.add %indices, %{{.*}} : tensor<2x2x3xi64> * tensor<i64>
// GATHER: %[[IDX:.*]] = ai.where %[[NEG]], %[[UP]], %indices
// GATHER: %[[COL:.*]] = ai.reshape %[[IDX]] {shape = array<i64: 2, 2, 1, 3>}
// GATHER: %[[HOT:.*]] = ai.equal %[[COL]], %{{.*}} : tensor<2x2x1x3xi64> * tensor<1x1x5x1xi64>
// GATHER: %[[DATA:.*]] = ai.reshape %data {shape = array<i64: 2, 1, 5, 3>}
// GATHER: %[[SEL:.*]] = ai.where %[[HOT]], %[[DATA]], %{{.*}} : tensor<2x2x5x3xi1> * tensor<2x1x5x3xf32> * tensor<f32>
// GATHER: %y = ai.reduce_sum %[[SEL]] {axes = array<i64: 2>} : tensor<2x2x5x3xf32>
// HARDMAX: %[[ARG:.*]] = ai.argmax %x {axis = 1 : i64} : tensor<2x4x3xf32>
// HARDMAX: %[[IOTA:.*]] = arith.constant dense<{{\[\[\[}}0], [1], [2], [3]]]> : tensor<1x4x1xi64>
// HARDMAX: %[[HOT:.*]] = ai.equal %[[ARG]], %[[IOTA]] : tensor<2x1x3xi64> * tensor<1x4x1xi64>
// HARDMAX: %y = ai.cast %[[HOT]] : tensor<2x4x3xi1> to tensor<2x4x3xf32>
// ONEHOT: %[[WRAP:.*]] = ai.where %{{.*}}, %{{.*}}, %indices : tensor<2x3xi1> * tensor<2x3xi64> * tensor<2x3xi64>
// ONEHOT: %[[COL:.*]] = ai.reshape %[[WRAP]] {shape = array<i64: 2, 1, 3>}
// ONEHOT: %[[HOT:.*]] = ai.equal %[[COL]], %{{.*}} : tensor<2x1x3xi64> * tensor<1x4x1xi64>
// ONEHOT: %[[OFF:.*]] = ai.reshape %{{.*}} : tensor<1xf32>
// ONEHOT: %[[ON:.*]] = ai.reshape %{{.*}} : tensor<1xf32>
// ONEHOT: %y = ai.where %[[HOT]], %[[ON]], %[[OFF]] : tensor<2x4x3xi1> * tensor<f32> * tensor<f32>
