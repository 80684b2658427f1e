builtin.module {
  func.func @mlp_block(%x: tensor<2x16x64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w1: tensor<64x256xf32>, %b1: tensor<256xf32>, %w2: tensor<256x64xf32>, %b2: tensor<64xf32>) -> tensor<2x16x64xf32> {
    %0 = ai.layernorm %x, %gamma, %beta : tensor<2x16x64xf32> * tensor<64xf32> * tensor<64xf32>
    %1 = ai.matmul %0, %w1 : tensor<2x16x64xf32> * tensor<64x256xf32>
    %2 = ai.bias_add %1, %b1 {axis = 2 : i64} : tensor<2x16x256xf32> * tensor<256xf32>
    %3 = ai.gelu %2 : tensor<2x16x256xf32>
    %4 = ai.matmul %3, %w2 : tensor<2x16x256xf32> * tensor<256x64xf32>
    %5 = ai.bias_add %4, %b2 {axis = 2 : i64} : tensor<2x16x64xf32> * tensor<64xf32>
    %6 = ai.add %5, %x : tensor<2x16x64xf32> * tensor<2x16x64xf32>
    func.return %6 : tensor<2x16x64xf32>
  }
}
