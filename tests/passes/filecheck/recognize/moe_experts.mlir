// recognize-patterns: the experts of a Mixtral-style block as transformers' batched_mm
// writes them (each expert's weights gathered per (token, slot) pair for batched GEMMs,
// the SwiGLU, the routing weights, the sum over the k slots) become one ai.moe_experts,
// which reads each expert's weights once (issue 31).
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns" --split-input-file | filecheck %s

// x's rows each repeated k = 2 times (repeat_interleave), as both exporters write it.
// CHECK-LABEL: func.func @batched_mm
// CHECK:       %[[R:.*]] = ai.moe_experts %x, %w, %e, %gu, %dn : tensor<4x8xf32> * tensor<4x2xf32> * tensor<4x2xi64> * tensor<3x12x8xf32> * tensor<3x8x6xf32>
// CHECK-NEXT:  func.return %[[R]]
// CHECK-NOT:   ai.take
func.func @batched_mm(%x: tensor<4x8xf32>, %w: tensor<4x2xf32>, %e: tensor<4x2xi64>, %gu: tensor<3x12x8xf32>, %dn: tensor<3x8x6xf32>) -> tensor<4x8xf32> {
  %x1 = ai.reshape %x {shape = array<i64: 4, 1, 8>} : tensor<4x8xf32>
  %x2 = ai.expand %x1 {shape = array<i64: 4, 2, 8>} : tensor<4x1x8xf32>
  %xr = ai.reshape %x2 {shape = array<i64: 8, 8>} : tensor<4x2x8xf32>
  %ef = ai.reshape %e {shape = array<i64: 8>} : tensor<4x2xi64>
  %g1 = ai.take %gu, %ef : tensor<3x12x8xf32> * tensor<8xi64>
  %xc = ai.reshape %xr {shape = array<i64: 8, 8, 1>} : tensor<8x8xf32>
  %p3 = ai.matmul %g1, %xc : tensor<8x12x8xf32> * tensor<8x8x1xf32>
  %p = ai.reshape %p3 {shape = array<i64: 8, 12>} : tensor<8x12x1xf32>
  %g = ai.slice %p {offsets = array<i64: 0, 0>, sizes = array<i64: 8, 6>, strides = array<i64: 1, 1>} : tensor<8x12xf32>
  %u = ai.slice %p {offsets = array<i64: 0, 6>, sizes = array<i64: 8, 6>, strides = array<i64: 1, 1>} : tensor<8x12xf32>
  %sg = ai.sigmoid %g : tensor<8x6xf32>
  %sl = ai.mul %g, %sg : tensor<8x6xf32> * tensor<8x6xf32>
  %h = ai.mul %sl, %u : tensor<8x6xf32> * tensor<8x6xf32>
  %d1 = ai.take %dn, %ef : tensor<3x8x6xf32> * tensor<8xi64>
  %hc = ai.reshape %h {shape = array<i64: 8, 6, 1>} : tensor<8x6xf32>
  %y3 = ai.matmul %d1, %hc : tensor<8x8x6xf32> * tensor<8x6x1xf32>
  %y = ai.reshape %y3 {shape = array<i64: 8, 8>} : tensor<8x8x1xf32>
  %wc = ai.reshape %w {shape = array<i64: 8, 1>} : tensor<4x2xf32>
  %yw = ai.mul %y, %wc : tensor<8x8xf32> * tensor<8x1xf32>
  %y2 = ai.reshape %yw {shape = array<i64: 4, 2, 8>} : tensor<8x8xf32>
  %out = ai.reduce_sum %y2 {axes = array<i64: 1>} : tensor<4x2x8xf32>
  return %out : tensor<4x8xf32>
}

// -----

// x tiled (every row once, then again) is not one token's row per pair of slots: the
// graph stays as written.
// CHECK-LABEL: func.func @tiled_not_interleaved
// CHECK:       ai.take
// CHECK-NOT:   ai.moe_experts
func.func @tiled_not_interleaved(%x: tensor<4x8xf32>, %w: tensor<4x2xf32>, %e: tensor<4x2xi64>, %gu: tensor<3x12x8xf32>, %dn: tensor<3x8x6xf32>) -> tensor<4x8xf32> {
  %x1 = ai.reshape %x {shape = array<i64: 1, 4, 8>} : tensor<4x8xf32>
  %x2 = ai.expand %x1 {shape = array<i64: 2, 4, 8>} : tensor<1x4x8xf32>
  %xr = ai.reshape %x2 {shape = array<i64: 8, 8>} : tensor<2x4x8xf32>
  %ef = ai.reshape %e {shape = array<i64: 8>} : tensor<4x2xi64>
  %g1 = ai.take %gu, %ef : tensor<3x12x8xf32> * tensor<8xi64>
  %xc = ai.reshape %xr {shape = array<i64: 8, 8, 1>} : tensor<8x8xf32>
  %p3 = ai.matmul %g1, %xc : tensor<8x12x8xf32> * tensor<8x8x1xf32>
  %p = ai.reshape %p3 {shape = array<i64: 8, 12>} : tensor<8x12x1xf32>
  %g = ai.slice %p {offsets = array<i64: 0, 0>, sizes = array<i64: 8, 6>, strides = array<i64: 1, 1>} : tensor<8x12xf32>
  %u = ai.slice %p {offsets = array<i64: 0, 6>, sizes = array<i64: 8, 6>, strides = array<i64: 1, 1>} : tensor<8x12xf32>
  %sg = ai.sigmoid %g : tensor<8x6xf32>
  %sl = ai.mul %g, %sg : tensor<8x6xf32> * tensor<8x6xf32>
  %h = ai.mul %sl, %u : tensor<8x6xf32> * tensor<8x6xf32>
  %d1 = ai.take %dn, %ef : tensor<3x8x6xf32> * tensor<8xi64>
  %hc = ai.reshape %h {shape = array<i64: 8, 6, 1>} : tensor<8x6xf32>
  %y3 = ai.matmul %d1, %hc : tensor<8x8x6xf32> * tensor<8x6x1xf32>
  %y = ai.reshape %y3 {shape = array<i64: 8, 8>} : tensor<8x8x1xf32>
  %wc = ai.reshape %w {shape = array<i64: 8, 1>} : tensor<4x2xf32>
  %yw = ai.mul %y, %wc : tensor<8x8xf32> * tensor<8x1xf32>
  %y2 = ai.reshape %yw {shape = array<i64: 4, 2, 8>} : tensor<8x8xf32>
  %out = ai.reduce_sum %y2 {axes = array<i64: 1>} : tensor<4x2x8xf32>
  return %out : tensor<4x8xf32>
}

// -----

// An f16 block whose down product is cast to f32 before the f32 routing weights: the
// experts in f16, cast after.
// CHECK-LABEL: func.func @upcast
// CHECK:       %[[R:.*]] = ai.moe_experts %x, %w, %e, %gu, %dn : tensor<4x8xf16>
// CHECK-NEXT:  %[[C:.*]] = ai.cast %[[R]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT:  func.return %[[C]]
func.func @upcast(%x: tensor<4x8xf16>, %w: tensor<4x2xf32>, %e: tensor<4x2xi64>, %gu: tensor<3x12x8xf16>, %dn: tensor<3x8x6xf16>) -> tensor<4x8xf32> {
  %x1 = ai.reshape %x {shape = array<i64: 4, 1, 8>} : tensor<4x8xf16>
  %x2 = ai.expand %x1 {shape = array<i64: 4, 2, 8>} : tensor<4x1x8xf16>
  %xr = ai.reshape %x2 {shape = array<i64: 8, 8>} : tensor<4x2x8xf16>
  %ef = ai.reshape %e {shape = array<i64: 8>} : tensor<4x2xi64>
  %g1 = ai.take %gu, %ef : tensor<3x12x8xf16> * tensor<8xi64>
  %xc = ai.reshape %xr {shape = array<i64: 8, 8, 1>} : tensor<8x8xf16>
  %p3 = ai.matmul %g1, %xc : tensor<8x12x8xf16> * tensor<8x8x1xf16>
  %p = ai.reshape %p3 {shape = array<i64: 8, 12>} : tensor<8x12x1xf16>
  %g = ai.slice %p {offsets = array<i64: 0, 0>, sizes = array<i64: 8, 6>, strides = array<i64: 1, 1>} : tensor<8x12xf16>
  %u = ai.slice %p {offsets = array<i64: 0, 6>, sizes = array<i64: 8, 6>, strides = array<i64: 1, 1>} : tensor<8x12xf16>
  %sg = ai.sigmoid %g : tensor<8x6xf16>
  %sl = ai.mul %g, %sg : tensor<8x6xf16> * tensor<8x6xf16>
  %h = ai.mul %sl, %u : tensor<8x6xf16> * tensor<8x6xf16>
  %d1 = ai.take %dn, %ef : tensor<3x8x6xf16> * tensor<8xi64>
  %hc = ai.reshape %h {shape = array<i64: 8, 6, 1>} : tensor<8x6xf16>
  %y3 = ai.matmul %d1, %hc : tensor<8x8x6xf16> * tensor<8x6x1xf16>
  %y = ai.reshape %y3 {shape = array<i64: 8, 8>} : tensor<8x8x1xf16>
  %yf = ai.cast %y : tensor<8x8xf16> to tensor<8x8xf32>
  %wc = ai.reshape %w {shape = array<i64: 8, 1>} : tensor<4x2xf32>
  %yw = ai.mul %yf, %wc : tensor<8x8xf32> * tensor<8x1xf32>
  %y2 = ai.reshape %yw {shape = array<i64: 4, 2, 8>} : tensor<8x8xf32>
  %out = ai.reduce_sum %y2 {axes = array<i64: 1>} : tensor<4x2x8xf32>
  return %out : tensor<4x8xf32>
}
