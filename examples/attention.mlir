// The core of scaled dot-product attention for 4 heads, 64 tokens, head size 32:
// softmax(Q K^T * 1/sqrt(32)) V.
// Expected fusion: recognize-patterns makes the chain one ai.attention (scale
// 1/sqrt(32), no mask): one "attention" kernel, the 64 x 64 scores never stored.
func.func @attention(%q: tensor<4x64x32xf32>, %k: tensor<4x64x32xf32>, %v: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<4x64x32xf32> * tensor<4x64x32xf32>
  %scale = arith.constant dense<0.17677669> : tensor<f32>
  %t = ai.mul %s, %scale : tensor<4x64x64xf32> * tensor<f32>
  %p = ai.softmax %t : tensor<4x64x64xf32>
  %o = ai.matmul %p, %v : tensor<4x64x64xf32> * tensor<4x64x32xf32>
  return %o : tensor<4x64x32xf32>
}
