// cpu-expand-depthwise (issue #30): a MobileNet block's 1x1 expansion (+ bias + relu) and
// the stride-2 depthwise conv that alone reads it become one "conv" group on the cpu, the
// expanded 64 channels never stored; a second expansion whose result is also returned stays
// a group of its own, and the default pipeline keeps two groups.
// RUN: fusec-opt %s -p fusec-cpu | filecheck %s
// RUN: fusec-opt %s -p fusec-default | filecheck %s --check-prefix=DEFAULT

// CHECK-LABEL: func.func @joined
// CHECK:      %{{.*}} = ai.fused "conv" (%x, %w1, %b1, %w2, %b2) : {{.*}} -> tensor<1x64x16x16xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.conv2d %{{.*}} : tensor<1x16x32x32xf32> * tensor<64x16x1x1xf32>
// CHECK-NEXT: ai.bias_add
// CHECK-NEXT: ai.relu
// CHECK-NEXT: ai.conv2d %{{.*}} {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>, groups = 64 : i64}
// CHECK-NEXT: ai.bias_add
// CHECK-NEXT: ai.yield
// CHECK-NOT:  ai.fused

// CHECK-LABEL: func.func @read_twice
// CHECK-COUNT-2: ai.fused "conv"

// DEFAULT-LABEL: func.func @joined
// DEFAULT-COUNT-2: ai.fused "conv"

func.func @joined(%x: tensor<1x16x32x32xf32>, %w1: tensor<64x16x1x1xf32>, %b1: tensor<64xf32>, %w2: tensor<64x1x3x3xf32>, %b2: tensor<64xf32>) -> tensor<1x64x16x16xf32> {
  %c = ai.conv2d %x, %w1 : tensor<1x16x32x32xf32> * tensor<64x16x1x1xf32>
  %cb = ai.bias_add %c, %b1 : tensor<1x64x32x32xf32> * tensor<64xf32>
  %e = ai.relu %cb : tensor<1x64x32x32xf32>
  %d = ai.conv2d %e, %w2 {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>, groups = 64 : i64} : tensor<1x64x32x32xf32> * tensor<64x1x3x3xf32>
  %db = ai.bias_add %d, %b2 : tensor<1x64x16x16xf32> * tensor<64xf32>
  return %db : tensor<1x64x16x16xf32>
}

func.func @read_twice(%x: tensor<1x16x32x32xf32>, %w1: tensor<64x16x1x1xf32>, %b1: tensor<64xf32>, %w2: tensor<64x1x3x3xf32>, %b2: tensor<64xf32>) -> (tensor<1x64x16x16xf32>, tensor<1x64x32x32xf32>) {
  %c = ai.conv2d %x, %w1 : tensor<1x16x32x32xf32> * tensor<64x16x1x1xf32>
  %cb = ai.bias_add %c, %b1 : tensor<1x64x32x32xf32> * tensor<64xf32>
  %e = ai.relu %cb : tensor<1x64x32x32xf32>
  %d = ai.conv2d %e, %w2 {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>, groups = 64 : i64} : tensor<1x64x32x32xf32> * tensor<64x1x3x3xf32>
  %db = ai.bias_add %d, %b2 : tensor<1x64x16x16xf32> * tensor<64xf32>
  return %db, %e : tensor<1x64x16x16xf32>, tensor<1x64x32x32xf32>
}
