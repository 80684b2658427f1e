builtin.module {
  func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
    %0 = arith.constant dense<0.176776692> : tensor<f32>
    %1 = ai.matmul %q, %k {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
    %2 = ai.mul %1, %0 : tensor<4x64x64xf32> * tensor<f32>
    %3 = ai.softmax %2 : tensor<4x64x64xf32>
    %4 = ai.matmul %3, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
    func.return %4 : tensor<4x64x32xf32>
  }
}
