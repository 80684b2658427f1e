// The plan is made for the target: on cuda an f16 conv takes its epilogue into the
// Tensor Core conv template, as on cpu; an f32 conv runs through PyTorch alone on cuda
// (IEEE f32), so its epilogue becomes a pointwise kernel.
// RUN: fusec-opt %s -p "fuse{target=cpu}" | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s -p "fuse{target=cuda}" | filecheck %s --check-prefix=CUDA

// CPU:      ai.fused "conv"
// CPU-NEXT: ^bb0
// CPU-NEXT: ai.conv2d
// CPU-NEXT: ai.bias_add
// CPU-NEXT: ai.relu
// CPU-NEXT: ai.yield
// CPU:      ai.fused "conv"
// CPU-NEXT: ^bb0
// CPU-NEXT: ai.conv2d
// CPU-NEXT: ai.bias_add
// CPU-NEXT: ai.relu
// CPU-NEXT: ai.yield
// CPU-NOT:  ai.fused

// CUDA-LABEL: func.func @conv_bias_relu_f16
// CUDA:       ai.fused "conv"
// CUDA-NEXT:  ^bb0
// CUDA-NEXT:  ai.conv2d
// CUDA-NEXT:  ai.bias_add
// CUDA-NEXT:  ai.relu
// CUDA-NEXT:  ai.yield
// CUDA-LABEL: func.func @conv_bias_relu_f32
// CUDA:       ai.fused "conv"
// CUDA-NEXT:  ^bb0
// CUDA-NEXT:  ai.conv2d
// CUDA-NEXT:  ai.yield
// CUDA:       ai.fused "pointwise"
// CUDA-NEXT:  ^bb0
// CUDA-NEXT:  ai.bias_add
// CUDA-NEXT:  ai.relu
// CUDA-NEXT:  ai.yield

func.func @conv_bias_relu_f16(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
  %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
  %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
  %r = ai.relu %b : tensor<1x64x26x26xf16>
  return %r : tensor<1x64x26x26xf16>
}

func.func @conv_bias_relu_f32(%input: tensor<1x32x28x28xf32>, %weight: tensor<64x32x3x3xf32>, %bias: tensor<64xf32>) -> tensor<1x64x26x26xf32> {
  %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf32> * tensor<64x32x3x3xf32>
  %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf32> * tensor<64xf32>
  %r = ai.relu %b : tensor<1x64x26x26xf32>
  return %r : tensor<1x64x26x26xf32>
}
