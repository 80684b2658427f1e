// RUN: fusec compile %s --target cuda | filecheck %s
// RUN: fusec compile %s --target cuda --pipeline fusec-default | filecheck %s --check-prefix=DEFAULT
// On the cuda pipeline a 4096-long softmax row joins its matmul (partials + finalise pass),
// tiled like any large GEMM; the default pipeline keeps it a separate row-reduce group.
// CHECK: ai.fused "matmul" (%x, %g, %be, %w) {fusec.tile = {block = array<i64: 128, 256, 64>
// CHECK: ai.softmax
// CHECK-NOT: ai.fused
// DEFAULT: ai.fused "matmul"
// DEFAULT-NOT: fusec.tile
// DEFAULT: ai.fused "row_reduce"
func.func @large(%x: tensor<8192x4096xf16>, %g: tensor<4096xf16>, %be: tensor<4096xf16>, %w: tensor<4096x4096xf16>) -> tensor<8192x4096xf16> {
  %n = ai.layernorm %x, %g, %be : tensor<8192x4096xf16> * tensor<4096xf16> * tensor<4096xf16>
  %h = ai.matmul %n, %w : tensor<8192x4096xf16> * tensor<4096x4096xf16>
  %p = ai.softmax %h : tensor<8192x4096xf16>
  return %p : tensor<8192x4096xf16>
}
