builtin.module {
  func.func @attention(%q: tensor<2x8x128x64xf16>, %k: tensor<2x8x128x64xf16>, %v: tensor<2x8x128x64xf16>) -> tensor<2x8x128x64xf16> {
    %scale = arith.constant dense<1.250000e-01> : tensor<f16>
    %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x8x128x64xf16> * tensor<2x8x128x64xf16>
    %ss = ai.mul %s, %scale : tensor<2x8x128x128xf16> * tensor<f16>
    %p = ai.softmax %ss : tensor<2x8x128x128xf16>
    %o = ai.matmul %p, %v : tensor<2x8x128x128xf16> * tensor<2x8x128x64xf16>
    func.return %o : tensor<2x8x128x64xf16>
  }
}
