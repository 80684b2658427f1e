// Values with two consumers.
// %t is a cheap elementwise value read by two row reductions: each row-reduce
// kernel recomputes it (it is cloned), so it is never written to memory.
// %h is a matmul (an anchor) read by two epilogue ops and returned: it is
// computed once, in a multi-output matmul kernel that yields %h and %y.
// Expected fusion: three kernels.
func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %t = ai.mul %x, %scale : tensor<8x64xf32> * tensor<64xf32>
  %p = ai.softmax %t : tensor<8x64xf32>
  %n = ai.layernorm %t, %gamma, %beta : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
  %o = ai.add %p, %n : tensor<8x64xf32> * tensor<8x64xf32>
  %h = ai.matmul %o, %w : tensor<8x64xf32> * tensor<64x32xf32>
  %a = ai.gelu %h : tensor<8x32xf32>
  %s = ai.sigmoid %h : tensor<8x32xf32>
  %y = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
  return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
}
