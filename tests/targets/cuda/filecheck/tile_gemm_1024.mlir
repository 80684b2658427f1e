// RUN: fusec compile %s --target cuda | filecheck %s
// RUN: fusec compile %s --target cuda --pipeline "fusec-default,tile-gemm{sms=16}" | filecheck %s --check-prefix=FEW
// 1024^3: 32 tiles of 128x256 leave 100 of 132 SMs idle and 64 of 128x128 still more than
// half: 128 tiles of 64x128 (one consumer, 8 stages) fill 128 (2.1x the 128x256 tile on the
// H200, gemm-small-m.md). On a 16-SM device 128x256 fills whole waves and keeps its
// higher intensity.
// CHECK: fusec.tile = {block = array<i64: 64, 128, 64>, mma = "m64n128k16", stages = 8 : i64, consumers = 1 : i64
// FEW: fusec.tile = {block = array<i64: 128, 256, 64>, mma = "m64n256k16", stages = 4 : i64
func.func @mid(%a: tensor<1024x1024xbf16>, %b: tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16> {
  %c = ai.matmul %a, %b : tensor<1024x1024xbf16> * tensor<1024x1024xbf16>
  return %c : tensor<1024x1024xbf16>
}
