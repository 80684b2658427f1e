builtin.module {
  func.func @quantize(%x: tensor<2x6x16xf32>) -> tensor<2x6x16xf32> {
    %qsc = arith.constant dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>
    %qzp = arith.constant dense<0.000000e+00> : tensor<2xf8E4M3FN>
    %q8 = ai.quantize %x, %qsc, %qzp {axis = 0 : i64} : tensor<2x6x16xf32> * tensor<2xf32> * tensor<2xf8E4M3FN>
    %dq9 = ai.dequantize %q8, %qsc, %qzp {axis = 0 : i64} : tensor<2x6x16xf8E4M3FN> * tensor<2xf32> * tensor<2xf8E4M3FN>
    %y = ai.add %dq9, %x : tensor<2x6x16xf32> * tensor<2x6x16xf32>
    func.return %y : tensor<2x6x16xf32>
  }
}
