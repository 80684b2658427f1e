// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
    %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
    %r = ai.relu %b : tensor<1x64x26x26xf16>
    func.return %r : tensor<1x64x26x26xf16>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %c = ai.conv2d %input, %weight : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
    %b = ai.bias_add %c, %bias : tensor<1x64x26x26xf16> * tensor<64xf16>
    %r = ai.relu %b : tensor<1x64x26x26xf16>
    func.return %r : tensor<1x64x26x26xf16>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %r = ai.fused "conv" (%input, %weight, %bias) : (tensor<1x32x28x28xf16>, tensor<64x32x3x3xf16>, tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    ^bb0(%input_1: tensor<1x32x28x28xf16>, %weight_1: tensor<64x32x3x3xf16>, %bias_1: tensor<64xf16>):
      %c = ai.conv2d %input_1, %weight_1 : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
      %b = ai.bias_add %c, %bias_1 : tensor<1x64x26x26xf16> * tensor<64xf16>
      %r_1 = ai.relu %b : tensor<1x64x26x26xf16>
      ai.yield %r_1 : tensor<1x64x26x26xf16>
    }
    func.return %r : tensor<1x64x26x26xf16>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %r = ai.fused "conv" (%input, %weight, %bias) : (tensor<1x32x28x28xf16>, tensor<64x32x3x3xf16>, tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    ^bb0(%input_1: tensor<1x32x28x28xf16>, %weight_1: tensor<64x32x3x3xf16>, %bias_1: tensor<64xf16>):
      %c = ai.conv2d %input_1, %weight_1 : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
      %b = ai.bias_add %c, %bias_1 : tensor<1x64x26x26xf16> * tensor<64xf16>
      %r_1 = ai.relu %b : tensor<1x64x26x26xf16>
      ai.yield %r_1 : tensor<1x64x26x26xf16>
    }
    func.return %r : tensor<1x64x26x26xf16>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %r = ai.fused "conv" (%input, %weight, %bias) : (tensor<1x32x28x28xf16>, tensor<64x32x3x3xf16>, tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    ^bb0(%input_1: tensor<1x32x28x28xf16>, %weight_1: tensor<64x32x3x3xf16>, %bias_1: tensor<64xf16>):
      %c = ai.conv2d %input_1, %weight_1 : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
      %b = ai.bias_add %c, %bias_1 : tensor<1x64x26x26xf16> * tensor<64xf16>
      %r_1 = ai.relu %b : tensor<1x64x26x26xf16>
      ai.yield %r_1 : tensor<1x64x26x26xf16>
    }
    func.return %r : tensor<1x64x26x26xf16>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @fused_conv_bias_relu(%input: tensor<1x32x28x28xf16>, %weight: tensor<64x32x3x3xf16>, %bias: tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    %r = ai.fused "conv" (%input, %weight, %bias) : (tensor<1x32x28x28xf16>, tensor<64x32x3x3xf16>, tensor<64xf16>) -> tensor<1x64x26x26xf16> {
    ^bb0(%input_1: tensor<1x32x28x28xf16>, %weight_1: tensor<64x32x3x3xf16>, %bias_1: tensor<64xf16>):
      %c = ai.conv2d %input_1, %weight_1 : tensor<1x32x28x28xf16> * tensor<64x32x3x3xf16>
      %b = ai.bias_add %c, %bias_1 : tensor<1x64x26x26xf16> * tensor<64xf16>
      %r_1 = ai.relu %b : tensor<1x64x26x26xf16>
      ai.yield %r_1 : tensor<1x64x26x26xf16>
    }
    func.return %r : tensor<1x64x26x26xf16>
  }
}
