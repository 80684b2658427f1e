// RUN: fusec-opt %s -p fusec-default | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=COUNT

// The fusion of examples/conv_bias_relu.mlir: 1 kernel(s), each with exactly these ops.

// CHECK:      ai.fused "conv"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.conv2d 
// CHECK-NEXT: ai.bias_add 
// CHECK-NEXT: ai.relu 
// CHECK-NEXT: ai.yield
// COUNT-COUNT-1: ai.fused
// COUNT-NOT: ai.fused

func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
  %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
  %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
  %r = ai.relu %b : tensor<1x64x26x26xf16>
  return %r : tensor<1x64x26x26xf16>
}
