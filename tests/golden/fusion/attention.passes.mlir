// -----// IR Dump After fuse-attention //----- //
builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %s = ai.matmul %q, %k {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
    %scale = arith.constant dense<0.176776692> : tensor<f32>
    %t = ai.mul %s, %scale : tensor<4x64x64xf32> * tensor<f32>
    %p = ai.softmax %t : tensor<4x64x64xf32>
    %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
    func.return %o : tensor<4x64x32xf32>
  }
}

// -----// IR Dump After fuse-prologue //----- //
builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %s = ai.matmul %q, %k {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
    %scale = arith.constant dense<0.176776692> : tensor<f32>
    %t = ai.mul %s, %scale : tensor<4x64x64xf32> * tensor<f32>
    %p = ai.softmax %t : tensor<4x64x64xf32>
    %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
    func.return %o : tensor<4x64x32xf32>
  }
}

// -----// IR Dump After fuse-epilogue //----- //
builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %scale = arith.constant dense<0.176776692> : tensor<f32>
    %p = ai.fused "matmul" (%q, %k, %scale) : (tensor<4x64x32xf32>, tensor<4x64x32xf32>, tensor<f32>) -> tensor<4x64x64xf32> {
    ^bb0(%q_1: tensor<4x64x32xf32>, %k_1: tensor<4x64x32xf32>, %scale_1: tensor<f32>):
      %s = ai.matmul %q_1, %k_1 {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
      %t = ai.mul %s, %scale_1 : tensor<4x64x64xf32> * tensor<f32>
      %p_1 = ai.softmax %t : tensor<4x64x64xf32>
      ai.yield %p_1 : tensor<4x64x64xf32>
    }
    %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
    func.return %o : tensor<4x64x32xf32>
  }
}

// -----// IR Dump After fuse-reduction //----- //
builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %scale = arith.constant dense<0.176776692> : tensor<f32>
    %p = ai.fused "matmul" (%q, %k, %scale) : (tensor<4x64x32xf32>, tensor<4x64x32xf32>, tensor<f32>) -> tensor<4x64x64xf32> {
    ^bb0(%q_1: tensor<4x64x32xf32>, %k_1: tensor<4x64x32xf32>, %scale_1: tensor<f32>):
      %s = ai.matmul %q_1, %k_1 {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
      %t = ai.mul %s, %scale_1 : tensor<4x64x64xf32> * tensor<f32>
      %p_1 = ai.softmax %t : tensor<4x64x64xf32>
      ai.yield %p_1 : tensor<4x64x64xf32>
    }
    %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
    func.return %o : tensor<4x64x32xf32>
  }
}

// -----// IR Dump After fuse-elementwise //----- //
builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %scale = arith.constant dense<0.176776692> : tensor<f32>
    %p = ai.fused "matmul" (%q, %k, %scale) : (tensor<4x64x32xf32>, tensor<4x64x32xf32>, tensor<f32>) -> tensor<4x64x64xf32> {
    ^bb0(%q_1: tensor<4x64x32xf32>, %k_1: tensor<4x64x32xf32>, %scale_1: tensor<f32>):
      %s = ai.matmul %q_1, %k_1 {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
      %t = ai.mul %s, %scale_1 : tensor<4x64x64xf32> * tensor<f32>
      %p_1 = ai.softmax %t : tensor<4x64x64xf32>
      ai.yield %p_1 : tensor<4x64x64xf32>
    }
    %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
    func.return %o : tensor<4x64x32xf32>
  }
}

// -----// IR Dump After fuse-singletons //----- //
builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %scale = arith.constant dense<0.176776692> : tensor<f32>
    %p = ai.fused "matmul" (%q, %k, %scale) : (tensor<4x64x32xf32>, tensor<4x64x32xf32>, tensor<f32>) -> tensor<4x64x64xf32> {
    ^bb0(%q_1: tensor<4x64x32xf32>, %k_1: tensor<4x64x32xf32>, %scale_1: tensor<f32>):
      %s = ai.matmul %q_1, %k_1 {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
      %t = ai.mul %s, %scale_1 : tensor<4x64x64xf32> * tensor<f32>
      %p_1 = ai.softmax %t : tensor<4x64x64xf32>
      ai.yield %p_1 : tensor<4x64x64xf32>
    }
    %o = ai.fused "matmul" (%p, %v) : (tensor<4x64x64xf32>, tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    ^bb0(%p_1: tensor<4x64x64xf32>, %v_1: tensor<4x64x32xf32>):
      %o_1 = ai.matmul %p_1, %v_1 : tensor<4x64x64xf32> * tensor<4x64x32xf32>
      ai.yield %o_1 : tensor<4x64x32xf32>
    }
    func.return %o : tensor<4x64x32xf32>
  }
}
