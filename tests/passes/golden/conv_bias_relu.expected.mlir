builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
    %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
    %r = ai.relu %b : tensor<1x64x26x26xf16>
    func.return %r : tensor<1x64x26x26xf16>
  }
}
