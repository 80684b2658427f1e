// RUN: fusec compile %s --target cuda --pipeline fusec-cuda-long-softmax | filecheck %s
// RUN: fusec compile %s --target cuda | filecheck %s --check-prefix=DEFAULT
// With fusec-cuda-long-softmax a 4096-long softmax row joins its matmul (partials + finalise
// pass), tiled like any large GEMM; the cuda default keeps it a row-reduce group of its own
// (measured faster), after a GEMM group holding the LayerNorm prologue.
// CHECK: ai.fused "matmul" (%x, %g, %be, %w) {fusec.tile = {block = array<i64: 128, 256, 64>
// CHECK: ai.softmax
// CHECK-NOT: ai.fused
// DEFAULT: ai.fused "matmul" (%x, %g, %be, %w) {fusec.tile = {block = array<i64: 128, 256, 64>
// DEFAULT: ai.layernorm
// DEFAULT-NEXT: ai.matmul
// DEFAULT-NEXT: ai.yield
// DEFAULT: ai.fused "row_reduce"
func.func @large(%x: tensor<8192x4096xf16>, %g: tensor<4096xf16>, %be: tensor<4096xf16>, %w: tensor<4096x4096xf16>) -> tensor<8192x4096xf16> {
  %n = ai.layernorm %x, %g, %be : tensor<8192x4096xf16> * tensor<4096xf16> * tensor<4096xf16>
  %h = ai.matmul %n, %w : tensor<8192x4096xf16> * tensor<4096x4096xf16>
  %p = ai.softmax %h : tensor<8192x4096xf16>
  return %p : tensor<8192x4096xf16>
}
