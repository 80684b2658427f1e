// The softmax row limit is the target's: on cpu a matmul block holds whole rows, so a
// softmax of 4096 runs in the matmul's epilogue; under the rules file's 256 (a GPU tile,
// cuda and no target) it is a kernel of its own. A pass option still overrides the cpu value.
// RUN: fusec-opt %s -p "fuse{target=cpu}" | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s -p "fuse{target=cuda}" | filecheck %s --check-prefix=TILE
// RUN: fusec-opt %s -p fuse | filecheck %s --check-prefix=TILE
// RUN: fusec-opt %s -p "fuse{target=cpu softmax_tile_limit=256}" | filecheck %s --check-prefix=TILE

// CPU:      ai.fused "matmul"
// CPU-NEXT: ^bb0
// CPU-NEXT: ai.layernorm
// CPU-NEXT: ai.matmul
// CPU-NEXT: ai.softmax
// CPU-NEXT: ai.yield
// CPU-NOT:  ai.fused

// TILE:      ai.fused "matmul"
// TILE-NOT:  ai.softmax
// TILE:      ai.yield
// TILE:      ai.fused "row_reduce"
// TILE-NEXT: ^bb0
// TILE-NEXT: ai.softmax

func.func @ln_matmul_softmax(%x: tensor<16x128xf32>, %gamma: tensor<128xf32>, %beta: tensor<128xf32>, %w: tensor<128x4096xf32>) -> tensor<16x4096xf32> {
  %n = ai.layernorm %x, %gamma, %beta : tensor<16x128xf32> * tensor<128xf32> * tensor<128xf32>
  %h = ai.matmul %n, %w : tensor<16x128xf32> * tensor<128x4096xf32>
  %p = ai.softmax %h : tensor<16x4096xf32>
  return %p : tensor<16x4096xf32>
}
