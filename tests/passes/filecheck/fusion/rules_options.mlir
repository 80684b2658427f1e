// The rules' limits as pass options: a softmax row of 256 rides on its matmul
// under the default tile limit (256), not under a limit of 128.
// RUN: fusec-opt %s -p fuse | filecheck %s --check-prefix=DEFAULT
// RUN: fusec-opt %s -p "fuse{softmax_tile_limit=128}" | filecheck %s --check-prefix=SMALL

// DEFAULT:      ai.fused "matmul"
// DEFAULT-NEXT: ^bb0
// DEFAULT-NEXT: ai.layernorm
// DEFAULT-NEXT: ai.matmul
// DEFAULT-NEXT: ai.softmax
// DEFAULT-NEXT: ai.yield
// DEFAULT-NOT:  ai.fused

// SMALL:      ai.fused "matmul"
// SMALL-NEXT: ^bb0
// SMALL-NEXT: ai.layernorm
// SMALL-NEXT: ai.matmul
// SMALL-NEXT: ai.yield
// SMALL:      ai.fused "row_reduce"
// SMALL-NEXT: ^bb0
// SMALL-NEXT: ai.softmax
// SMALL-NEXT: ai.yield

func.func @ln_matmul_softmax_small(%x: tensor<32x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x256xf32>) -> tensor<32x256xf32> {
  %n = ai.layernorm %x, %gamma, %beta : tensor<32x128xf32> * tensor<128xf32> * tensor<128xf32>
  %h = ai.matmul %n, %w : tensor<32x128xf32> * tensor<128x256xf32>
  %p = ai.softmax %h : tensor<32x256xf32>
  return %p : tensor<32x256xf32>
}
