// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    %a = ai.add %x, %b : tensor<4x8x16xf32> * tensor<16xf32>
    %m = ai.mul %a, %s : tensor<4x8x16xf32> * tensor<8x1xf32>
    %g = ai.sigmoid %m : tensor<4x8x16xf32>
    %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %z = ai.maximum %y, %x : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %c = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
    func.return %c : tensor<4x8x16xf16>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    %a = ai.add %x, %b : tensor<4x8x16xf32> * tensor<16xf32>
    %m = ai.mul %a, %s : tensor<4x8x16xf32> * tensor<8x1xf32>
    %g = ai.sigmoid %m : tensor<4x8x16xf32>
    %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %z = ai.maximum %y, %x : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %c = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
    func.return %c : tensor<4x8x16xf16>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    %a = ai.add %x, %b : tensor<4x8x16xf32> * tensor<16xf32>
    %m = ai.mul %a, %s : tensor<4x8x16xf32> * tensor<8x1xf32>
    %g = ai.sigmoid %m : tensor<4x8x16xf32>
    %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %z = ai.maximum %y, %x : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %c = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
    func.return %c : tensor<4x8x16xf16>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    %a = ai.add %x, %b : tensor<4x8x16xf32> * tensor<16xf32>
    %m = ai.mul %a, %s : tensor<4x8x16xf32> * tensor<8x1xf32>
    %g = ai.sigmoid %m : tensor<4x8x16xf32>
    %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %z = ai.maximum %y, %x : tensor<4x8x16xf32> * tensor<4x8x16xf32>
    %c = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
    func.return %c : tensor<4x8x16xf16>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    %c = ai.fused "pointwise" (%x, %b, %s) : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    ^bb0(%x_1: tensor<4x8x16xf32>, %b_1: tensor<16xf32>, %s_1: tensor<8x1xf32>):
      %a = ai.add %x_1, %b_1 : tensor<4x8x16xf32> * tensor<16xf32>
      %m = ai.mul %a, %s_1 : tensor<4x8x16xf32> * tensor<8x1xf32>
      %g = ai.sigmoid %m : tensor<4x8x16xf32>
      %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
      %z = ai.maximum %y, %x_1 : tensor<4x8x16xf32> * tensor<4x8x16xf32>
      %c_1 = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
      ai.yield %c_1 : tensor<4x8x16xf16>
    }
    func.return %c : tensor<4x8x16xf16>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @elementwise_chain(%x: tensor<4x8x16xf32>, %b: tensor<16xf32>, %s: tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    %c = ai.fused "pointwise" (%x, %b, %s) : (tensor<4x8x16xf32>, tensor<16xf32>, tensor<8x1xf32>) -> tensor<4x8x16xf16> {
    ^bb0(%x_1: tensor<4x8x16xf32>, %b_1: tensor<16xf32>, %s_1: tensor<8x1xf32>):
      %a = ai.add %x_1, %b_1 : tensor<4x8x16xf32> * tensor<16xf32>
      %m = ai.mul %a, %s_1 : tensor<4x8x16xf32> * tensor<8x1xf32>
      %g = ai.sigmoid %m : tensor<4x8x16xf32>
      %y = ai.mul %m, %g : tensor<4x8x16xf32> * tensor<4x8x16xf32>
      %z = ai.maximum %y, %x_1 : tensor<4x8x16xf32> * tensor<4x8x16xf32>
      %c_1 = ai.cast %z : tensor<4x8x16xf32> to tensor<4x8x16xf16>
      ai.yield %c_1 : tensor<4x8x16xf16>
    }
    func.return %c : tensor<4x8x16xf16>
  }
}
