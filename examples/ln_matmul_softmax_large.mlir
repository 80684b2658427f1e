// layernorm -> matmul -> softmax, rows of N = 4096: over default.rules' tile limit (256), not cpu's (16384).
// Expected fusion: by the rules (--target reference) [layernorm -> matmul] + row-reduce [softmax]; cpu ONE matmul kernel; cuda (f32) three.
func.func @ln_matmul_softmax_large(%x: tensor<16x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x4096xf32>) -> tensor<16x4096xf32> {
  %n = ai.layernorm %x, %gamma, %beta : tensor<16x128xf32> * tensor<128xf32> * tensor<128xf32>
  %h = ai.matmul %n, %w : tensor<16x128xf32> * tensor<128x4096xf32>
  %p = ai.softmax %h : tensor<16x4096xf32>
  return %p : tensor<16x4096xf32>
}
