// RUN: fusec compile %s --target cuda --pipeline fusec-cuda-long-softmax | filecheck %s
// RUN: fusec compile %s --target cuda | filecheck %s --check-prefix=DEFAULT
// With fusec-cuda-long-softmax a 4096-long softmax row joins its matmul (partials + finalise
// pass), tiled like any large GEMM; the cuda default keeps it a row-reduce group of its own
// (measured faster). The LayerNorm over K = 4096 before an N = 4096 GEMM is a kernel of its
// own in both (measured faster than the prologue's rewrite on every output element).
// CHECK: ai.fused "row_reduce" (%x, %g, %be)
// CHECK: ai.layernorm
// CHECK: ai.fused "matmul" (%n, %w) {fusec.tile = {block = array<i64: 128, 256, 64>
// CHECK: ai.matmul
// CHECK-NEXT: ai.softmax
// CHECK-NOT: ai.fused
// DEFAULT: ai.fused "row_reduce" (%x, %g, %be)
// DEFAULT: ai.fused "matmul" (%n, %w) {fusec.tile = {block = array<i64: 128, 256, 64>
// DEFAULT: ai.matmul
// DEFAULT-NEXT: ai.yield
// DEFAULT: ai.fused "row_reduce" (%h)
// DEFAULT: ai.softmax
func.func @large(%x: tensor<8192x4096xf16>, %g: tensor<4096xf16>, %be: tensor<4096xf16>, %w: tensor<4096x4096xf16>) -> tensor<8192x4096xf16> {
  %n = ai.layernorm %x, %g, %be : tensor<8192x4096xf16> * tensor<4096xf16> * tensor<4096xf16>
  %h = ai.matmul %n, %w : tensor<8192x4096xf16> * tensor<4096x4096xf16>
  %p = ai.softmax %h : tensor<8192x4096xf16>
  return %p : tensor<8192x4096xf16>
}
