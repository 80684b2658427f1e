// The attention stage: on cuda an f16 chain with head size 64 is one "attention" kernel,
// a causal constant mask is recognised (fusec.causal); elsewhere it is two matmul kernels.
// RUN: fusec-opt %s -p "fuse{target=cuda}" | filecheck %s --check-prefix=CUDA
// RUN: fusec-opt %s -p "fuse{target=cpu}" | filecheck %s --check-prefix=CPU

// CUDA-LABEL: func.func @scaled
// CUDA:       ai.fused "attention" ({{[^)]*}}) : (
// CUDA-NEXT:  ^bb0
// CUDA-NEXT:  ai.matmul {{.*}}transpose_b = true
// CUDA-NEXT:  ai.mul
// CUDA-NEXT:  ai.softmax
// CUDA-NEXT:  ai.matmul
// CUDA-NEXT:  ai.yield
// CUDA-LABEL: func.func @causal
// CUDA:       ai.fused "attention" ({{[^)]*}}) {fusec.causal} : (
// CUDA-NEXT:  ^bb0
// CUDA-NEXT:  ai.matmul
// CUDA-NEXT:  ai.div
// CUDA-NEXT:  ai.add
// CUDA-NEXT:  ai.softmax
// CUDA-NEXT:  ai.matmul
// CUDA-NEXT:  ai.yield
// CUDA-LABEL: func.func @head32
// CUDA-NOT:   ai.fused "attention"

// CPU-NOT: ai.fused "attention"

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
