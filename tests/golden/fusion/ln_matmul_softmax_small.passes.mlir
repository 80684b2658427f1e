// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
    %n = ai.layernorm %x, %gamma, %beta : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
    %h = ai.matmul %n, %w : tensor<32x128xf32> * tensor<128x256xf32>
    %p = ai.softmax %h : tensor<32x256xf32>
    func.return %p : tensor<32x256xf32>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
    %h = ai.fused "matmul" (%x, %gamma, %beta, %w) : (tensor<32x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32> {
    ^bb0(%x_1: tensor<32x128xf32>, %gamma_1: tensor<128xf32>, %beta_1: tensor<128xf32>, %w_1: tensor<128x256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
      %h_1 = ai.matmul %n, %w_1 : tensor<32x128xf32> * tensor<128x256xf32>
      ai.yield %h_1 : tensor<32x256xf32>
    }
    %p = ai.softmax %h : tensor<32x256xf32>
    func.return %p : tensor<32x256xf32>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
    %p = ai.fused "matmul" (%x, %gamma, %beta, %w) : (tensor<32x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32> {
    ^bb0(%x_1: tensor<32x128xf32>, %gamma_1: tensor<128xf32>, %beta_1: tensor<128xf32>, %w_1: tensor<128x256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
      %h = ai.matmul %n, %w_1 : tensor<32x128xf32> * tensor<128x256xf32>
      %p_1 = ai.softmax %h : tensor<32x256xf32>
      ai.yield %p_1 : tensor<32x256xf32>
    }
    func.return %p : tensor<32x256xf32>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
    %p = ai.fused "matmul" (%x, %gamma, %beta, %w) : (tensor<32x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32> {
    ^bb0(%x_1: tensor<32x128xf32>, %gamma_1: tensor<128xf32>, %beta_1: tensor<128xf32>, %w_1: tensor<128x256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
      %h = ai.matmul %n, %w_1 : tensor<32x128xf32> * tensor<128x256xf32>
      %p_1 = ai.softmax %h : tensor<32x256xf32>
      ai.yield %p_1 : tensor<32x256xf32>
    }
    func.return %p : tensor<32x256xf32>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
    %p = ai.fused "matmul" (%x, %gamma, %beta, %w) : (tensor<32x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32> {
    ^bb0(%x_1: tensor<32x128xf32>, %gamma_1: tensor<128xf32>, %beta_1: tensor<128xf32>, %w_1: tensor<128x256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
      %h = ai.matmul %n, %w_1 : tensor<32x128xf32> * tensor<128x256xf32>
      %p_1 = ai.softmax %h : tensor<32x256xf32>
      ai.yield %p_1 : tensor<32x256xf32>
    }
    func.return %p : tensor<32x256xf32>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
    %p = ai.fused "matmul" (%x, %gamma, %beta, %w) : (tensor<32x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x256xf32>) -> tensor<32x256xf32> {
    ^bb0(%x_1: tensor<32x128xf32>, %gamma_1: tensor<128xf32>, %beta_1: tensor<128xf32>, %w_1: tensor<128x256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
      %h = ai.matmul %n, %w_1 : tensor<32x128xf32> * tensor<128x256xf32>
      %p_1 = ai.softmax %h : tensor<32x256xf32>
      ai.yield %p_1 : tensor<32x256xf32>
    }
    func.return %p : tensor<32x256xf32>
  }
}
