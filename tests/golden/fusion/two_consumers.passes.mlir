// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %t = ai.mul %x, %scale : tensor<8x64xf32> * tensor<64xf32>
    %p = ai.softmax %t : tensor<8x64xf32>
    %n = ai.layernorm %t, %gamma, %beta : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
    %o = ai.add %p, %n : tensor<8x64xf32> * tensor<8x64xf32>
    %h = ai.matmul %o, %w : tensor<8x64xf32> * tensor<64x32xf32>
    %a = ai.gelu %h : tensor<8x32xf32>
    %s = ai.sigmoid %h : tensor<8x32xf32>
    %y = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
    func.return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %t = ai.mul %x, %scale : tensor<8x64xf32> * tensor<64xf32>
    %p = ai.softmax %t : tensor<8x64xf32>
    %n = ai.layernorm %t, %gamma, %beta : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
    %o = ai.add %p, %n : tensor<8x64xf32> * tensor<8x64xf32>
    %h = ai.matmul %o, %w : tensor<8x64xf32> * tensor<64x32xf32>
    %a = ai.gelu %h : tensor<8x32xf32>
    %s = ai.sigmoid %h : tensor<8x32xf32>
    %y = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
    func.return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %t = ai.mul %x, %scale : tensor<8x64xf32> * tensor<64xf32>
    %p = ai.softmax %t : tensor<8x64xf32>
    %n = ai.layernorm %t, %gamma, %beta : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
    %o = ai.add %p, %n : tensor<8x64xf32> * tensor<8x64xf32>
    %h, %y = ai.fused "matmul" (%o, %w) : (tensor<8x64xf32>, tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    ^bb0(%o_1: tensor<8x64xf32>, %w_1: tensor<64x32xf32>):
      %h_1 = ai.matmul %o_1, %w_1 : tensor<8x64xf32> * tensor<64x32xf32>
      %a = ai.gelu %h_1 : tensor<8x32xf32>
      %s = ai.sigmoid %h_1 : tensor<8x32xf32>
      %y_1 = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
      ai.yield %h_1, %y_1 : tensor<8x32xf32>, tensor<8x32xf32>
    }
    func.return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %n = ai.fused "row_reduce" (%x, %scale, %gamma, %beta) : (tensor<8x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64xf32> {
    ^bb0(%x_1: tensor<8x64xf32>, %scale_1: tensor<64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>):
      %t = ai.mul %x_1, %scale_1 : tensor<8x64xf32> * tensor<64xf32>
      %n_1 = ai.layernorm %t, %gamma_1, %beta_1 : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
      ai.yield %n_1 : tensor<8x64xf32>
    }
    %o = ai.fused "row_reduce" (%x, %scale, %n) : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32> {
    ^bb0(%x_1: tensor<8x64xf32>, %scale_1: tensor<64xf32>, %n_1: tensor<8x64xf32>):
      %t = ai.mul %x_1, %scale_1 : tensor<8x64xf32> * tensor<64xf32>
      %p = ai.softmax %t : tensor<8x64xf32>
      %o_1 = ai.add %p, %n_1 : tensor<8x64xf32> * tensor<8x64xf32>
      ai.yield %o_1 : tensor<8x64xf32>
    }
    %h, %y = ai.fused "matmul" (%o, %w) : (tensor<8x64xf32>, tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    ^bb0(%o_1: tensor<8x64xf32>, %w_1: tensor<64x32xf32>):
      %h_1 = ai.matmul %o_1, %w_1 : tensor<8x64xf32> * tensor<64x32xf32>
      %a = ai.gelu %h_1 : tensor<8x32xf32>
      %s = ai.sigmoid %h_1 : tensor<8x32xf32>
      %y_1 = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
      ai.yield %h_1, %y_1 : tensor<8x32xf32>, tensor<8x32xf32>
    }
    func.return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %n = ai.fused "row_reduce" (%x, %scale, %gamma, %beta) : (tensor<8x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64xf32> {
    ^bb0(%x_1: tensor<8x64xf32>, %scale_1: tensor<64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>):
      %t = ai.mul %x_1, %scale_1 : tensor<8x64xf32> * tensor<64xf32>
      %n_1 = ai.layernorm %t, %gamma_1, %beta_1 : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
      ai.yield %n_1 : tensor<8x64xf32>
    }
    %o = ai.fused "row_reduce" (%x, %scale, %n) : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32> {
    ^bb0(%x_1: tensor<8x64xf32>, %scale_1: tensor<64xf32>, %n_1: tensor<8x64xf32>):
      %t = ai.mul %x_1, %scale_1 : tensor<8x64xf32> * tensor<64xf32>
      %p = ai.softmax %t : tensor<8x64xf32>
      %o_1 = ai.add %p, %n_1 : tensor<8x64xf32> * tensor<8x64xf32>
      ai.yield %o_1 : tensor<8x64xf32>
    }
    %h, %y = ai.fused "matmul" (%o, %w) : (tensor<8x64xf32>, tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    ^bb0(%o_1: tensor<8x64xf32>, %w_1: tensor<64x32xf32>):
      %h_1 = ai.matmul %o_1, %w_1 : tensor<8x64xf32> * tensor<64x32xf32>
      %a = ai.gelu %h_1 : tensor<8x32xf32>
      %s = ai.sigmoid %h_1 : tensor<8x32xf32>
      %y_1 = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
      ai.yield %h_1, %y_1 : tensor<8x32xf32>, tensor<8x32xf32>
    }
    func.return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %n = ai.fused "row_reduce" (%x, %scale, %gamma, %beta) : (tensor<8x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x64xf32> {
    ^bb0(%x_1: tensor<8x64xf32>, %scale_1: tensor<64xf32>, %gamma_1: tensor<64xf32>, %beta_1: tensor<64xf32>):
      %t = ai.mul %x_1, %scale_1 : tensor<8x64xf32> * tensor<64xf32>
      %n_1 = ai.layernorm %t, %gamma_1, %beta_1 : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
      ai.yield %n_1 : tensor<8x64xf32>
    }
    %o = ai.fused "row_reduce" (%x, %scale, %n) : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32> {
    ^bb0(%x_1: tensor<8x64xf32>, %scale_1: tensor<64xf32>, %n_1: tensor<8x64xf32>):
      %t = ai.mul %x_1, %scale_1 : tensor<8x64xf32> * tensor<64xf32>
      %p = ai.softmax %t : tensor<8x64xf32>
      %o_1 = ai.add %p, %n_1 : tensor<8x64xf32> * tensor<8x64xf32>
      ai.yield %o_1 : tensor<8x64xf32>
    }
    %h, %y = ai.fused "matmul" (%o, %w) : (tensor<8x64xf32>, tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    ^bb0(%o_1: tensor<8x64xf32>, %w_1: tensor<64x32xf32>):
      %h_1 = ai.matmul %o_1, %w_1 : tensor<8x64xf32> * tensor<64x32xf32>
      %a = ai.gelu %h_1 : tensor<8x32xf32>
      %s = ai.sigmoid %h_1 : tensor<8x32xf32>
      %y_1 = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
      ai.yield %h_1, %y_1 : tensor<8x32xf32>, tensor<8x32xf32>
    }
    func.return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
  }
}
