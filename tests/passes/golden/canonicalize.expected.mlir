builtin.module {
  func.func @canonicalize(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
    %c0 = arith.constant dense<2.000000e+00> : tensor<f32>
    %r1 = ai.relu %x : tensor<4x8xf32>
    %e1 = ai.exp %r1 : tensor<4x8xf32>
    %a = ai.mul %e1, %c0 : tensor<4x8xf32> * tensor<f32>
    func.return %a, %a : tensor<4x8xf32>, tensor<4x8xf32>
  }
}
