// Issue 31's quantization ops, apart from all_ops.mlir: the cuda target refuses the
// quantized element types by name (the cpu target computes them: tests/targets/cpu/test_cpu_abi.py).
// A per-axis fake quantization to f8E4M3FN, and a Q->DQ->Q chain the canonicalizer folds.
func.func @quantize(%x: tensor<2x6x16xf32>) -> tensor<2x6x16xf32> {
  %qsc = arith.constant dense<[0.5, 0.25]> : tensor<2xf32>
  %qzp = arith.constant dense<0.0> : tensor<2xf8E4M3FN>
  %q8 = ai.quantize %x, %qsc, %qzp {axis = 0 : i64} : tensor<2x6x16xf32> * tensor<2xf32> * tensor<2xf8E4M3FN>
  %dq8 = ai.dequantize %q8, %qsc, %qzp {axis = 0 : i64} : tensor<2x6x16xf8E4M3FN> * tensor<2xf32> * tensor<2xf8E4M3FN>
  %q9 = ai.quantize %dq8, %qsc, %qzp {axis = 0 : i64} : tensor<2x6x16xf32> * tensor<2xf32> * tensor<2xf8E4M3FN>
  %dq9 = ai.dequantize %q9, %qsc, %qzp {axis = 0 : i64} : tensor<2x6x16xf8E4M3FN> * tensor<2xf32> * tensor<2xf8E4M3FN>
  %y = ai.add %dq9, %x : tensor<2x6x16xf32> * tensor<2x6x16xf32>
  func.return %y : tensor<2x6x16xf32>
}
