// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %n = ai.layernorm %x, %gamma, %beta : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
    %h = ai.matmul %n, %w1 : tensor<2x16x64xf32> * tensor<64x256xf32>
    %hb = ai.bias_add %h, %b1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
    %a = ai.gelu %hb : tensor<2x16x256xf32>
    %o = ai.matmul %a, %w2 : tensor<2x16x256xf32> * tensor<256x64xf32>
    %ob = ai.bias_add %o, %b2 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
    %y = ai.add %ob, %x : tensor<2x16x64xf32> * tensor<2x16x64xf32>
    func.return %y : tensor<2x16x64xf32>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %h = ai.fused "matmul" (%x, %gamma, %beta, %w1) : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32> {
    ^bb0(%x_1: tensor<2x16x64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>, %w1_1: tensor<64x256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
      %h_1 = ai.matmul %n, %w1_1 : tensor<2x16x64xf32> * tensor<64x256xf32>
      ai.yield %h_1 : tensor<2x16x256xf32>
    }
    %hb = ai.bias_add %h, %b1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
    %a = ai.gelu %hb : tensor<2x16x256xf32>
    %o = ai.matmul %a, %w2 : tensor<2x16x256xf32> * tensor<256x64xf32>
    %ob = ai.bias_add %o, %b2 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
    %y = ai.add %ob, %x : tensor<2x16x64xf32> * tensor<2x16x64xf32>
    func.return %y : tensor<2x16x64xf32>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %a = ai.fused "matmul" (%x, %gamma, %beta, %w1, %b1) : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32> {
    ^bb0(%x_1: tensor<2x16x64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>, %w1_1: tensor<64x256xf32>, %b1_1: tensor<256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
      %h = ai.matmul %n, %w1_1 : tensor<2x16x64xf32> * tensor<64x256xf32>
      %hb = ai.bias_add %h, %b1_1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
      %a_1 = ai.gelu %hb : tensor<2x16x256xf32>
      ai.yield %a_1 : tensor<2x16x256xf32>
    }
    %y = ai.fused "matmul" (%a, %w2, %b2, %x) : (tensor<2x16x256xf32>, tensor<256x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
    ^bb0(%a_1: tensor<2x16x256xf32>, %w2_1: tensor<256x64xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<2x16x64xf32>):
      %o = ai.matmul %a_1, %w2_1 : tensor<2x16x256xf32> * tensor<256x64xf32>
      %ob = ai.bias_add %o, %b2_1 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
      %y_1 = ai.add %ob, %x_1 : tensor<2x16x64xf32> * tensor<2x16x64xf32>
      ai.yield %y_1 : tensor<2x16x64xf32>
    }
    func.return %y : tensor<2x16x64xf32>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %a = ai.fused "matmul" (%x, %gamma, %beta, %w1, %b1) : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32> {
    ^bb0(%x_1: tensor<2x16x64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>, %w1_1: tensor<64x256xf32>, %b1_1: tensor<256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
      %h = ai.matmul %n, %w1_1 : tensor<2x16x64xf32> * tensor<64x256xf32>
      %hb = ai.bias_add %h, %b1_1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
      %a_1 = ai.gelu %hb : tensor<2x16x256xf32>
      ai.yield %a_1 : tensor<2x16x256xf32>
    }
    %y = ai.fused "matmul" (%a, %w2, %b2, %x) : (tensor<2x16x256xf32>, tensor<256x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
    ^bb0(%a_1: tensor<2x16x256xf32>, %w2_1: tensor<256x64xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<2x16x64xf32>):
      %o = ai.matmul %a_1, %w2_1 : tensor<2x16x256xf32> * tensor<256x64xf32>
      %ob = ai.bias_add %o, %b2_1 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
      %y_1 = ai.add %ob, %x_1 : tensor<2x16x64xf32> * tensor<2x16x64xf32>
      ai.yield %y_1 : tensor<2x16x64xf32>
    }
    func.return %y : tensor<2x16x64xf32>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %a = ai.fused "matmul" (%x, %gamma, %beta, %w1, %b1) : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32> {
    ^bb0(%x_1: tensor<2x16x64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>, %w1_1: tensor<64x256xf32>, %b1_1: tensor<256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
      %h = ai.matmul %n, %w1_1 : tensor<2x16x64xf32> * tensor<64x256xf32>
      %hb = ai.bias_add %h, %b1_1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
      %a_1 = ai.gelu %hb : tensor<2x16x256xf32>
      ai.yield %a_1 : tensor<2x16x256xf32>
    }
    %y = ai.fused "matmul" (%a, %w2, %b2, %x) : (tensor<2x16x256xf32>, tensor<256x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
    ^bb0(%a_1: tensor<2x16x256xf32>, %w2_1: tensor<256x64xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<2x16x64xf32>):
      %o = ai.matmul %a_1, %w2_1 : tensor<2x16x256xf32> * tensor<256x64xf32>
      %ob = ai.bias_add %o, %b2_1 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
      %y_1 = ai.add %ob, %x_1 : tensor<2x16x64xf32> * tensor<2x16x64xf32>
      ai.yield %y_1 : tensor<2x16x64xf32>
    }
    func.return %y : tensor<2x16x64xf32>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %a = ai.fused "matmul" (%x, %gamma, %beta, %w1, %b1) : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64x256xf32>, tensor<256xf32>) -> tensor<2x16x256xf32> {
    ^bb0(%x_1: tensor<2x16x64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>, %w1_1: tensor<64x256xf32>, %b1_1: tensor<256xf32>):
      %n = ai.layernorm %x_1, %gamma_1, %beta_1 : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
      %h = ai.matmul %n, %w1_1 : tensor<2x16x64xf32> * tensor<64x256xf32>
      %hb = ai.bias_add %h, %b1_1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
      %a_1 = ai.gelu %hb : tensor<2x16x256xf32>
      ai.yield %a_1 : tensor<2x16x256xf32>
    }
    %y = ai.fused "matmul" (%a, %w2, %b2, %x) : (tensor<2x16x256xf32>, tensor<256x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
    ^bb0(%a_1: tensor<2x16x256xf32>, %w2_1: tensor<256x64xf32>, %b2_1: tensor<64xf32>, %x_1: tensor<2x16x64xf32>):
      %o = ai.matmul %a_1, %w2_1 : tensor<2x16x256xf32> * tensor<256x64xf32>
      %ob = ai.bias_add %o, %b2_1 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
      %y_1 = ai.add %ob, %x_1 : tensor<2x16x64xf32> * tensor<2x16x64xf32>
      ai.yield %y_1 : tensor<2x16x64xf32>
    }
    func.return %y : tensor<2x16x64xf32>
  }
}
