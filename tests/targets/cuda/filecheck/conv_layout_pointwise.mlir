// RUN: fusec compile %s --target cuda | filecheck %s
// RUN: fusec compile %s --target cuda | filecheck %s --check-prefix=COUNT
// RUN: fusec compile %s --target cuda --pipeline fusec-default,conv-layout{handoff=off} | filecheck %s --check-prefix=OFF

// An elementwise group between convs runs in their layout: %a feeds conv %c and, through
// a scale and a relu (their own pointwise group: %a has two readers), conv %b. Every reader of %a and
// of the relu reads NHWC, so conv %a stores NHWC, the relu group computes on NHWC values
// (its body retyped, no transposes) and conv %b takes its result as it is: the only
// conversions left are of the graph's inputs.

// CHECK:      %[[X:.*]] = ai.fused "copy" (%x)
// CHECK:      %a = ai.fused "conv" (%[[X]], {{.*}}output = "nhwc"{{.*}} -> tensor<2x8x8x32xf16>
// CHECK:      %[[C:.*]] = ai.fused "conv" (%a, {{.*}}input = "nhwc"{{.*}}output = "nchw"
// CHECK:      %[[R:.*]] = ai.fused "pointwise" (%a, %{{.*}}) {fusec.layout = {input = "nhwc", output = "nhwc"}} : (tensor<2x8x8x32xf16>, tensor<f16>) -> tensor<2x8x8x32xf16>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.mul %{{.*}}, %{{.*}} : tensor<2x8x8x32xf16> * tensor<f16>
// CHECK-NEXT: ai.relu %{{.*}} : tensor<2x8x8x32xf16>
// CHECK-NEXT: ai.yield
// CHECK:      %[[B:.*]] = ai.fused "conv" (%[[R]], {{.*}}input = "nhwc"{{.*}}output = "nchw"
// CHECK:      func.return %[[C]], %[[B]] : tensor<2x32x8x8xf16>, tensor<2x32x8x8xf16>
// COUNT-COUNT-4: ai.fused "copy"
// COUNT-NOT:     ai.fused "copy"

// handoff=off: every result NCHW, the relu group too
// OFF-NOT: output = "nhwc"
// OFF:     ai.fused "pointwise" (%a, %{{.*}}) : (tensor<2x32x8x8xf16>, tensor<f16>) -> tensor<2x32x8x8xf16>
// OFF-NOT: output = "nhwc"

func.func @f(%x: tensor<2x32x8x8xf16>, %w1: tensor<32x32x3x3xf16>, %w2: tensor<32x32x3x3xf16>, %w3: tensor<32x32x3x3xf16>) -> (tensor<2x32x8x8xf16>, tensor<2x32x8x8xf16>) {
  %a = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<2x32x8x8xf16> * tensor<32x32x3x3xf16>
  %c = ai.conv2d %a, %w2 {padding = array<i64: 1, 1>} : tensor<2x32x8x8xf16> * tensor<32x32x3x3xf16>
  %k = arith.constant dense<0.5> : tensor<f16>
  %h = ai.mul %a, %k : tensor<2x32x8x8xf16> * tensor<f16>
  %r = ai.relu %h : tensor<2x32x8x8xf16>
  %b = ai.conv2d %r, %w3 {padding = array<i64: 1, 1>} : tensor<2x32x8x8xf16> * tensor<32x32x3x3xf16>
  return %c, %b : tensor<2x32x8x8xf16>, tensor<2x32x8x8xf16>
}
