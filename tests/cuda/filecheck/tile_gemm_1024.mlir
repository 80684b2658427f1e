// RUN: fusec compile %s --target cuda | filecheck %s
// RUN: fusec compile %s --target cuda --pipeline "fusec-default,tile-gemm{sms=16}" | filecheck %s --check-prefix=FEW
// 1024^3: 32 tiles of 128x256 leave 100 of 132 SMs idle; 64 tiles of 128x128 (6 stages) fill
// twice as many. On a 16-SM device 128x256 fills whole waves and keeps its higher intensity.
// CHECK: fusec.tile = {block = array<i64: 128, 128, 64>, mma = "m64n128k16", stages = 6 : i64, consumers = 2 : i64
// FEW: fusec.tile = {block = array<i64: 128, 256, 64>, mma = "m64n256k16", stages = 4 : i64
func.func @mid(%a: tensor<1024x1024xbf16>, %b: tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16> {
  %c = ai.matmul %a, %b : tensor<1024x1024xbf16> * tensor<1024x1024xbf16>
  return %c : tensor<1024x1024xbf16>
}
