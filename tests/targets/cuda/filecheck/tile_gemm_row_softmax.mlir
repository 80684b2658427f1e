// RUN: fusec compile %s --target cuda | filecheck %s
// LN(8192x256) -> matmul(256x256) -> softmax is ONE group; its softmax needs whole rows in a
// block tile (BN = 256), and 128-row tiles would fill only 64 SMs: 64x256, one consumer;
// K = 256 fits its 5 stages, so the kernel normalises its resident A rows (ln = "tile": one
// launch), stages its epilogue through shared memory and takes the fast 16-bit maths
// (math = "fast": one FFMA + ex2.approx per softmax exponential).
// CHECK: ai.fused "matmul" (%x, %g, %be, %w) {fusec.tile = {block = array<i64: 64, 256, 64>, mma = "m64n256k16", stages = 5 : i64, consumers = 1 : i64, group_m = 8 : i64, epilogue = "smem", math = "fast", ln = "tile", choice = "row softmax"}}
// CHECK: ai.layernorm
// CHECK-NEXT: ai.matmul
// CHECK-NEXT: ai.softmax
// CHECK-NEXT: ai.yield
// CHECK-NOT: ai.fused
func.func @small(%x: tensor<8192x256xf16>, %g: tensor<256xf16>, %be: tensor<256xf16>, %w: tensor<256x256xf16>) -> tensor<8192x256xf16> {
  %n = ai.layernorm %x, %g, %be : tensor<8192x256xf16> * tensor<256xf16> * tensor<256xf16>
  %h = ai.matmul %n, %w : tensor<8192x256xf16> * tensor<256x256xf16>
  %p = ai.softmax %h : tensor<8192x256xf16>
  return %p : tensor<8192x256xf16>
}
