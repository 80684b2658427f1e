// RUN: fusec compile %s --target cuda --precision tf32 | filecheck %s
// precision=tf32 (issue 28): the module records it, and an f32 matmul group gets a Tensor Core
// tile of 32 f32 values per 128-byte row (BK = 32) and the tf32 wgmma (k8); the f16 group
// keeps its BK = 64 tile and k16.
// CHECK: builtin.module attributes {fusec.precision = "tf32"}
// CHECK: ai.fused "matmul"
// CHECK-SAME: fusec.tile = {block = array<i64: 128, 256, 32>, mma = "m64n256k8"
// CHECK: ai.fused "matmul"
// CHECK-SAME: fusec.tile = {block = array<i64: 128, 256, 64>, mma = "m64n256k16"
func.func @g(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>, %x: tensor<4096x4096xf16>, %y: tensor<4096x4096xf16>) -> (tensor<4096x4096xf32>, tensor<4096x4096xf16>) {
  %c = ai.matmul %a, %b : tensor<4096x4096xf32> * tensor<4096x4096xf32>
  %z = ai.matmul %x, %y : tensor<4096x4096xf16> * tensor<4096x4096xf16>
  return %c, %z : tensor<4096x4096xf32>, tensor<4096x4096xf16>
}
