// One attention concept on every target: recognize-patterns makes the chain
// matmul -> scale -> [mask] -> softmax -> matmul one ai.attention, and the planner gives
// it a group of kind "attention" (cuda runs it as the flash kernel or through PyTorch,
// decided when the kernel is generated). Probabilities read elsewhere stay two matmuls.
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cuda}" | filecheck %s --check-prefixes=CHECK,CUDA
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cpu}" | filecheck %s --check-prefixes=CHECK,CPU

// CHECK-LABEL: func.func @scaled
// CHECK:       ai.fused "attention" ({{[^)]*}}) : (
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.attention {{.*}} {scale = 1.250000e-01 : f32}
// CHECK-NEXT:  ai.yield
// CHECK-NOT:   ai.fused

// CHECK-LABEL: func.func @causal
// CHECK:       %[[MASK:.*]] = arith.constant dense<{{.*}}> : tensor<4x4xf16>
// CHECK:       ai.fused "attention" ({{.*}}%[[MASK]]) : (
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.attention {{.*}} {scale = 1.250000e-01 : f32}
// CHECK-NEXT:  ai.yield
// CHECK-NOT:   ai.fused

// CHECK-LABEL: func.func @head32
// CHECK:       ai.fused "attention"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.attention
// CHECK-NOT:   ai.fused

// The head split's transpose of the query joins the kernel on both targets: the cpu kernel
// reads it as a view, the cuda kernel through its tensor map's strides (issue 28).
// CHECK-LABEL: func.func @head_split
// CHECK:       ai.fused "attention"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:  ai.transpose
// CHECK-NEXT:  ai.attention
// CHECK-NOT:   ai.fused

// A GQA head repeat (ai.expand of the K/V heads) and the head merge after the result join
// the cuda kernel (a stride of 0: K/V head h // group; the merge is its store), which the
// cuda target's attention_layout_ops allows; on cpu they stay kernels of their own.
// CHECK-LABEL: func.func @gqa_merge
// CUDA:        ai.fused "attention"
// CUDA-NEXT:   ^bb0
// CUDA-NEXT:   ai.expand
// CUDA-NEXT:   ai.expand
// CUDA-NEXT:   ai.attention
// CUDA-NEXT:   ai.transpose
// CUDA-NEXT:   ai.yield {{.*}} : tensor<2x4x3x64xf16>
// CUDA-NOT:    ai.fused
// CPU:         ai.fused "pointwise"
// CPU-NEXT:    ^bb0
// CPU-NEXT:    ai.expand
// CPU:         ai.fused "attention"
// CPU:         ai.fused "copy"
// CPU-NEXT:    ^bb0
// CPU-NEXT:    ai.transpose

// CHECK-LABEL: func.func @probabilities_returned
// CHECK-NOT:   ai.attention
// CHECK:       ai.fused "matmul"
// CHECK:       ai.fused "matmul"

func.func @scaled(%q: tensor<2x4x64xf16>, %k: tensor<2x4x64xf16>, %v: tensor<2x4x64xf16>) -> tensor<2x4x64xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x64xf16> * tensor<2x4x64xf16>
  %c = arith.constant dense<0.125> : tensor<f16>
  %t = ai.mul %s, %c : tensor<2x4x4xf16> * tensor<f16>
  %p = ai.softmax %t : tensor<2x4x4xf16>
  %o = ai.matmul %p, %v : tensor<2x4x4xf16> * tensor<2x4x64xf16>
  return %o : tensor<2x4x64xf16>
}

func.func @causal(%q: tensor<2x4x64xf16>, %k: tensor<2x4x64xf16>, %v: tensor<2x4x64xf16>) -> tensor<2x4x64xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x64xf16> * tensor<2x4x64xf16>
  %c = arith.constant dense<8.0> : tensor<f16>
  %t = ai.div %s, %c : tensor<2x4x4xf16> * tensor<f16>
  %m = arith.constant dense<[[0.0, -1.0e4, -1.0e4, -1.0e4], [0.0, 0.0, -1.0e4, -1.0e4], [0.0, 0.0, 0.0, -1.0e4], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf16>
  %u = ai.add %t, %m : tensor<2x4x4xf16> * tensor<4x4xf16>
  %p = ai.softmax %u : tensor<2x4x4xf16>
  %o = ai.matmul %p, %v : tensor<2x4x4xf16> * tensor<2x4x64xf16>
  return %o : tensor<2x4x64xf16>
}

func.func @head32(%q: tensor<2x4x32xf16>, %k: tensor<2x4x32xf16>, %v: tensor<2x4x32xf16>) -> tensor<2x4x32xf16> {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x32xf16> * tensor<2x4x32xf16>
  %p = ai.softmax %s : tensor<2x4x4xf16>
  %o = ai.matmul %p, %v : tensor<2x4x4xf16> * tensor<2x4x32xf16>
  return %o : tensor<2x4x32xf16>
}

func.func @head_split(%x: tensor<2x4x3x64xf16>, %k: tensor<2x3x4x64xf16>, %v: tensor<2x3x4x64xf16>) -> tensor<2x3x4x64xf16> {
  %q = ai.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x3x64xf16>
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x3x4x64xf16> * tensor<2x3x4x64xf16>
  %p = ai.softmax %s : tensor<2x3x4x4xf16>
  %o = ai.matmul %p, %v : tensor<2x3x4x4xf16> * tensor<2x3x4x64xf16>
  return %o : tensor<2x3x4x64xf16>
}

func.func @gqa_merge(%q: tensor<2x3x4x64xf16>, %k: tensor<2x1x4x64xf16>, %v: tensor<2x1x4x64xf16>) -> tensor<2x4x3x64xf16> {
  %ke = ai.expand %k {shape = array<i64: 2, 3, 4, 64>} : tensor<2x1x4x64xf16>
  %ve = ai.expand %v {shape = array<i64: 2, 3, 4, 64>} : tensor<2x1x4x64xf16>
  %s = ai.matmul %q, %ke {transpose_b = true} : tensor<2x3x4x64xf16> * tensor<2x3x4x64xf16>
  %p = ai.softmax %s : tensor<2x3x4x4xf16>
  %o = ai.matmul %p, %ve : tensor<2x3x4x4xf16> * tensor<2x3x4x64xf16>
  %m = ai.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x64xf16>
  return %m : tensor<2x4x3x64xf16>
}

func.func @probabilities_returned(%q: tensor<2x4x64xf16>, %k: tensor<2x4x64xf16>, %v: tensor<2x4x64xf16>) -> (tensor<2x4x64xf16>, tensor<2x4x4xf16>) {
  %s = ai.matmul %q, %k {transpose_b = true} : tensor<2x4x64xf16> * tensor<2x4x64xf16>
  %p = ai.softmax %s : tensor<2x4x4xf16>
  %o = ai.matmul %p, %v : tensor<2x4x4xf16> * tensor<2x4x64xf16>
  return %o, %p : tensor<2x4x64xf16>, tensor<2x4x4xf16>
}
