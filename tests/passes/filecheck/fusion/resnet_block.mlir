// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/resnet_block.mlir: 2 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "conv"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.conv2d 
// CHECK-NEXT: ai.bias_add 
// CHECK-NEXT: ai.relu 
// CHECK-NEXT: ai.yield
// CHECK:      ai.fused "conv"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.conv2d 
// CHECK-NEXT: ai.bias_add 
// CHECK-NEXT: ai.add 
// CHECK-NEXT: ai.relu 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-2: ai.fused
// COUNT-NOT: ai.fused

// A ResNet basic block: conv3x3 -> bias -> relu -> conv3x3 -> bias -> + x -> relu.
// Expected fusion: two conv kernels, the second with the residual add and the
// final relu in its epilogue.
func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
  %c1 = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
  %y1 = ai.bias_add %c1, %b1 : tensor<1x64x14x14xf32> * tensor<64xf32>
  %r1 = ai.relu %y1 : tensor<1x64x14x14xf32>
  %c2 = ai.conv2d %r1, %w2 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
  %y2 = ai.bias_add %c2, %b2 : tensor<1x64x14x14xf32> * tensor<64xf32>
  %s = ai.add %y2, %x : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
  %out = ai.relu %s : tensor<1x64x14x14xf32>
  return %out : tensor<1x64x14x14xf32>
}
