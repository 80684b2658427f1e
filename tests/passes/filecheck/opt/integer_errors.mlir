// A float-only op refuses an integer operand by name, located (issue 29).
// RUN: not fusec-opt %s -p fuse 2>&1 | filecheck %s
// CHECK: integer_errors.mlir:6:3: error: 'ai.exp' op operand 'input' has element type i64; ai.exp takes f16, bf16, f32
func.func @f(%x: tensor<4xi64>) -> tensor<4xf32> {
  %c = ai.cast %x : tensor<4xi64> to tensor<4xf32>
  %a = ai.exp %x : tensor<4xi64>
  return %c : tensor<4xf32>
}
