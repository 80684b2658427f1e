// fusec-opt reports bad input as fusec does: located, one line, exit 1.
// RUN: not fusec-opt %s -p fuse 2>&1 | filecheck %s
// CHECK: errors.mlir:5:8: error: unknown operation 'ai.rel'; did you mean 'ai.relu'?
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = ai.rel %x : tensor<4xf32>
  return %a : tensor<4xf32>
}
