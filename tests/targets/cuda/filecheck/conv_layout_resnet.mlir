// RUN: fusec compile %s --target cuda | filecheck %s
// RUN: fusec compile %s --target cuda --pipeline fusec-default,conv-layout{handoff=off} | filecheck %s --check-prefix=OFF
// RUN: fusec compile %s --target cuda --pipeline fusec-default | filecheck %s --check-prefix=NONE

// conv-layout on a ResNet basic block with graph-input weights: the NCHW argument %x and
// the KCRS weights are converted once each (ai.fused "copy" of one ai.transpose); conv1
// stores NHWC for conv2, its only reader (the NHWC -> NCHW -> NHWC pair cancelled: no
// copy between them); conv2 reads the residual %x as NCHW and returns NCHW.

// CHECK:      func.func @block(%x: tensor<2x64x9x10xf16>, %w1: tensor<64x64x3x3xf16>
// CHECK-SAME: -> tensor<2x64x9x10xf16>
// CHECK:      %[[X:.*]] = ai.fused "copy" (%x) : (tensor<2x64x9x10xf16>) -> tensor<2x9x10x64xf16>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 2, 3, 1>}
// CHECK:      %[[W1:.*]] = ai.fused "copy" (%w1) : (tensor<64x64x3x3xf16>) -> tensor<64x3x3x64xf16>
// CHECK:      %[[Y1:.*]] = ai.fused "conv" (%[[X]], %[[W1]], %s1, %t1) {fusec.layout = {input = "nhwc", weight = "krsc", output = "nhwc"}, fusec.tile = "{{[0-9]+x[0-9]+ s[0-9]+ c[0-9][mn]( sk=[0-9]+)?}}"}
// CHECK-SAME: -> tensor<2x9x10x64xf16>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 3, 1, 2>} : tensor<2x9x10x64xf16>
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 3, 1, 2>} : tensor<64x3x3x64xf16>
// CHECK-NEXT: ai.conv2d
// CHECK:      ai.relu
// CHECK-NEXT: ai.transpose %{{.*}} {perm = array<i64: 0, 2, 3, 1>} : tensor<2x64x9x10xf16>
// CHECK-NEXT: ai.yield %{{.*}} : tensor<2x9x10x64xf16>
// CHECK:      %[[W2:.*]] = ai.fused "copy" (%w2)
// CHECK:      %[[OUT:.*]] = ai.fused "conv" (%[[Y1]], %[[W2]], %s2, %t2, %x) {fusec.layout = {input = "nhwc", weight = "krsc", output = "nchw"}, fusec.tile = "{{[0-9]+x[0-9]+ s[0-9]+ c[0-9][mn]( sk=[0-9]+)?}}"}
// CHECK-SAME: -> tensor<2x64x9x10xf16>
// CHECK:      func.return %[[OUT]] : tensor<2x64x9x10xf16>
// CHECK-NOT:  ai.fused

// handoff=off: conv1's result stays NCHW and is converted for conv2 like any NCHW input
// OFF:      ai.fused "copy" (%x)
// OFF:      %[[Y1:.*]] = ai.fused "conv" {{.*}}output = "nchw"{{.*}} -> tensor<2x64x9x10xf16>
// OFF:      %[[Y1T:.*]] = ai.fused "copy" (%[[Y1]]) : (tensor<2x64x9x10xf16>) -> tensor<2x9x10x64xf16>
// OFF:      ai.fused "conv" (%[[Y1T]], {{.*}}output = "nchw"

// without the pass: no layout, no conversions (the conv template copies privately)
// NONE-NOT: fusec.layout
// NONE-NOT: ai.fused "copy"
// NONE-NOT: ai.transpose

func.func @block(%x: tensor<2x64x9x10xf16>, %w1: tensor<64x64x3x3xf16>, %s1: tensor<64x1x1xf16>, %t1: tensor<64x1x1xf16>, %w2: tensor<64x64x3x3xf16>, %s2: tensor<64x1x1xf16>, %t2: tensor<64x1x1xf16>) -> tensor<2x64x9x10xf16> {
  %c1 = ai.conv2d %x, %w1 {padding = array<i64: 1, 1>} : tensor<2x64x9x10xf16> * tensor<64x64x3x3xf16>
  %m1 = ai.mul %c1, %s1 : tensor<2x64x9x10xf16> * tensor<64x1x1xf16>
  %a1 = ai.add %m1, %t1 : tensor<2x64x9x10xf16> * tensor<64x1x1xf16>
  %r1 = ai.relu %a1 : tensor<2x64x9x10xf16>
  %c2 = ai.conv2d %r1, %w2 {padding = array<i64: 1, 1>} : tensor<2x64x9x10xf16> * tensor<64x64x3x3xf16>
  %m2 = ai.mul %c2, %s2 : tensor<2x64x9x10xf16> * tensor<64x1x1xf16>
  %a2 = ai.add %m2, %t2 : tensor<2x64x9x10xf16> * tensor<64x1x1xf16>
  %res = ai.add %a2, %x : tensor<2x64x9x10xf16> * tensor<2x64x9x10xf16>
  %out = ai.relu %res : tensor<2x64x9x10xf16>
  return %out : tensor<2x64x9x10xf16>
}
