// ONNX SoftmaxCrossEntropyLoss (issue 29) imports as ai ops: the log-probabilities a
// stable log-softmax over the classes (the second output), the labels' one-hot an
// ai.equal against the class iota, the picked score and weight a select (ai.where)
// summed over the classes, ignore_index an ai.not of an ai.equal, and the mean the
// summed loss over the summed weights.
// RUN: python %S/../../../frontend/onnx/node_models.py %t.onnx sce_loss
// RUN: fusec import %t.onnx 2>/dev/null | filecheck %s
// CHECK: func.func @softmaxcrossentropyloss(%scores: tensor<2x3x4xf32> {{.*}}, %labels: tensor<2x4xi64> {{.*}}, %weights: tensor<3xf32>
// CHECK: ai.reduce_max %scores {axes = array<i64: 1>, keepdims = true}
// CHECK: %log_prob = ai.sub
// CHECK: %[[COL:.*]] = ai.reshape %labels {shape = array<i64: 2, 1, 4>}
// CHECK: %[[IOTA:.*]] = arith.constant dense<{{\[\[\[}}0], [1], [2]]]> : tensor<1x3x1xi64>
// CHECK: %[[HOT:.*]] = ai.equal %[[COL]], %[[IOTA]] : tensor<2x1x4xi64> * tensor<1x3x1xi64>
// CHECK: %[[SEL:.*]] = ai.where %[[HOT]], %log_prob, %{{.*}} : tensor<2x3x4xi1> * tensor<2x3x4xf32> * tensor<f32>
// CHECK: %[[PICK:.*]] = ai.reduce_sum %[[SEL]] {axes = array<i64: 1>} : tensor<2x3x4xf32>
// CHECK: %[[II:.*]] = ai.equal %labels, %{{.*}} : tensor<2x4xi64> * tensor<i64>
// CHECK: %[[KEPT:.*]] = ai.not %[[II]] : tensor<2x4xi1>
// CHECK: ai.where %[[HOT]], %{{.*}}, %{{.*}} : tensor<2x3x4xi1> * tensor<1x3x1xf32> * tensor<f32>
// CHECK: %[[NEG:.*]] = ai.neg %[[PICK]] : tensor<2x4xf32>
// CHECK: ai.where %[[KEPT]]
// CHECK: %loss = ai.div %{{.*}}, %{{.*}} : tensor<f32> * tensor<f32>
// CHECK: func.return %loss, %log_prob
