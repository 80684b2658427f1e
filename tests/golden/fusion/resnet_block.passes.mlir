// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    %c1 = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
    %y1 = ai.bias_add %c1, %b1 : tensor<1x64x14x14xf32> * tensor<64xf32>
    %r1 = ai.relu %y1 : tensor<1x64x14x14xf32>
    %c2 = ai.conv2d %r1, %w2 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
    %y2 = ai.bias_add %c2, %b2 : tensor<1x64x14x14xf32> * tensor<64xf32>
    %s = ai.add %y2, %x : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
    %out = ai.relu %s : tensor<1x64x14x14xf32>
    func.return %out : tensor<1x64x14x14xf32>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    %c1 = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
    %y1 = ai.bias_add %c1, %b1 : tensor<1x64x14x14xf32> * tensor<64xf32>
    %r1 = ai.relu %y1 : tensor<1x64x14x14xf32>
    %c2 = ai.conv2d %r1, %w2 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
    %y2 = ai.bias_add %c2, %b2 : tensor<1x64x14x14xf32> * tensor<64xf32>
    %s = ai.add %y2, %x : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
    %out = ai.relu %s : tensor<1x64x14x14xf32>
    func.return %out : tensor<1x64x14x14xf32>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    %r1 = ai.fused "conv" (%x, %w1, %b1) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%x_1: tensor<1x64x14x14xf32>, %w1_1: tensor<64x64x3x3xf32>, %b1_1: tensor<64xf32>):
      %c1 = ai.conv2d %x_1, %w1_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y1 = ai.bias_add %c1, %b1_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %r1_1 = ai.relu %y1 : tensor<1x64x14x14xf32>
      ai.yield %r1_1 : tensor<1x64x14x14xf32>
    }
    %out = ai.fused "conv" (%r1, %w2, %b2, %x) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>, tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%r1_1: tensor<1x64x14x14xf32>, %w2_1: tensor<64x64x3x3xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<1x64x14x14xf32>):
      %c2 = ai.conv2d %r1_1, %w2_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y2 = ai.bias_add %c2, %b2_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %s = ai.add %y2, %x_1 : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
      %out_1 = ai.relu %s : tensor<1x64x14x14xf32>
      ai.yield %out_1 : tensor<1x64x14x14xf32>
    }
    func.return %out : tensor<1x64x14x14xf32>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    %r1 = ai.fused "conv" (%x, %w1, %b1) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%x_1: tensor<1x64x14x14xf32>, %w1_1: tensor<64x64x3x3xf32>, %b1_1: tensor<64xf32>):
      %c1 = ai.conv2d %x_1, %w1_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y1 = ai.bias_add %c1, %b1_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %r1_1 = ai.relu %y1 : tensor<1x64x14x14xf32>
      ai.yield %r1_1 : tensor<1x64x14x14xf32>
    }
    %out = ai.fused "conv" (%r1, %w2, %b2, %x) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>, tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%r1_1: tensor<1x64x14x14xf32>, %w2_1: tensor<64x64x3x3xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<1x64x14x14xf32>):
      %c2 = ai.conv2d %r1_1, %w2_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y2 = ai.bias_add %c2, %b2_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %s = ai.add %y2, %x_1 : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
      %out_1 = ai.relu %s : tensor<1x64x14x14xf32>
      ai.yield %out_1 : tensor<1x64x14x14xf32>
    }
    func.return %out : tensor<1x64x14x14xf32>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    %r1 = ai.fused "conv" (%x, %w1, %b1) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%x_1: tensor<1x64x14x14xf32>, %w1_1: tensor<64x64x3x3xf32>, %b1_1: tensor<64xf32>):
      %c1 = ai.conv2d %x_1, %w1_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y1 = ai.bias_add %c1, %b1_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %r1_1 = ai.relu %y1 : tensor<1x64x14x14xf32>
      ai.yield %r1_1 : tensor<1x64x14x14xf32>
    }
    %out = ai.fused "conv" (%r1, %w2, %b2, %x) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>, tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%r1_1: tensor<1x64x14x14xf32>, %w2_1: tensor<64x64x3x3xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<1x64x14x14xf32>):
      %c2 = ai.conv2d %r1_1, %w2_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y2 = ai.bias_add %c2, %b2_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %s = ai.add %y2, %x_1 : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
      %out_1 = ai.relu %s : tensor<1x64x14x14xf32>
      ai.yield %out_1 : tensor<1x64x14x14xf32>
    }
    func.return %out : tensor<1x64x14x14xf32>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @resnet_block(%x: tensor<1x64x14x14xf32>, %w1: tensor<64x64x3x3xf32>, %b1: tensor<64xf32>, %w2: tensor<64x64x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    %r1 = ai.fused "conv" (%x, %w1, %b1) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%x_1: tensor<1x64x14x14xf32>, %w1_1: tensor<64x64x3x3xf32>, %b1_1: tensor<64xf32>):
      %c1 = ai.conv2d %x_1, %w1_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y1 = ai.bias_add %c1, %b1_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %r1_1 = ai.relu %y1 : tensor<1x64x14x14xf32>
      ai.yield %r1_1 : tensor<1x64x14x14xf32>
    }
    %out = ai.fused "conv" (%r1, %w2, %b2, %x) : (tensor<1x64x14x14xf32>, tensor<64x64x3x3xf32>, tensor<64xf32>, tensor<1x64x14x14xf32>) -> tensor<1x64x14x14xf32> {
    ^bb0(%r1_1: tensor<1x64x14x14xf32>, %w2_1: tensor<64x64x3x3xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<1x64x14x14xf32>):
      %c2 = ai.conv2d %r1_1, %w2_1 {padding = array<i64: 1, 1>} : tensor<1x64x14x14xf32> * tensor<64x64x3x3xf32>
      %y2 = ai.bias_add %c2, %b2_1 : tensor<1x64x14x14xf32> * tensor<64xf32>
      %s = ai.add %y2, %x_1 : tensor<1x64x14x14xf32> * tensor<1x64x14x14xf32>
      %out_1 = ai.relu %s : tensor<1x64x14x14xf32>
      ai.yield %out_1 : tensor<1x64x14x14xf32>
    }
    func.return %out : tensor<1x64x14x14xf32>
  }
}
