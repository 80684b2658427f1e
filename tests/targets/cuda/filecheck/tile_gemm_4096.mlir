// RUN: fusec compile %s --target cuda | filecheck %s
// A large square problem takes the 128x256 tile (two consumer warpgroups, 4 stages):
// 512 tiles fill the 132 SMs of an H200 (the device without a GPU) in 4 waves; the
// epilogue is staged through shared memory and stored by TMA, with fast 16-bit maths.
// CHECK: ai.fused "matmul" (%a, %b, %bias) {fusec.tile = {block = array<i64: 128, 256, 64>, mma = "m64n256k16", stages = 4 : i64, consumers = 2 : i64, group_m = 8 : i64, epilogue = "smem", math = "fast", choice = "heuristic"}}
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.matmul
func.func @big(%a: tensor<4096x4096xf16>, %b: tensor<4096x4096xf16>, %bias: tensor<4096xf16>) -> tensor<4096x4096xf16> {
  %c = ai.matmul %a, %b : tensor<4096x4096xf16> * tensor<4096x4096xf16>
  %d = ai.bias_add %c, %bias : tensor<4096x4096xf16> * tensor<4096xf16>
  %e = ai.relu %d : tensor<4096x4096xf16>
  return %e : tensor<4096x4096xf16>
}
