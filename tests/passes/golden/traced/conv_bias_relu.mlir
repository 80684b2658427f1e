builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %0 = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
    %1 = ai.bias_add %0, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
    %2 = ai.relu %1 : tensor<1x64x26x26xf16>
    func.return %2 : tensor<1x64x26x26xf16>
  }
}
