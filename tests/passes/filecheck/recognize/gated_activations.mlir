// recognize-patterns: x * f(x) activations as exporters write them become one unary op
// (issue 28: SiLU in EfficientNet and Llama's SwiGLU, Mish and HardSwish of older
// opsets), which the cuda GEMM's epilogue chain takes: the product's two uses of x were
// a pointwise kernel of their own after the matmul.
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns" --split-input-file | filecheck %s
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,fuse{target=cuda}" --split-input-file | filecheck %s --check-prefix=CUDA

// SiLU as torch.onnx writes it (Sigmoid, then Mul), in either operand order.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT:  %[[M:.*]] = ai.matmul %a, %b
// CHECK-NEXT:  %[[Y:.*]] = ai.silu %[[M]] : tensor<16x512xf16>
// CHECK-NEXT:  func.return %[[Y]]
// CUDA-LABEL: func.func @silu
// CUDA:       ai.fused "matmul"
// CUDA:       ai.silu
// CUDA-NEXT:  ai.yield
// CUDA-NEXT:  }
// CUDA-NEXT:  func.return
func.func @silu(%a: tensor<16x256xf16>, %b: tensor<256x512xf16>) -> tensor<16x512xf16> {
  %m = ai.matmul %a, %b : tensor<16x256xf16> * tensor<256x512xf16>
  %s = ai.sigmoid %m : tensor<16x512xf16>
  %y = ai.mul %m, %s : tensor<16x512xf16> * tensor<16x512xf16>
  return %y : tensor<16x512xf16>
}

// -----

// CHECK-LABEL: func.func @silu_gate_first
// CHECK-NEXT:  %[[Y:.*]] = ai.silu %x : tensor<2x8xf32>
// CHECK-NEXT:  func.return %[[Y]]
func.func @silu_gate_first(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = ai.sigmoid %x : tensor<2x8xf32>
  %y = ai.mul %s, %x : tensor<2x8xf32> * tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// The sigmoid has another reader: it stays for it, the product becomes the silu.
// CHECK-LABEL: func.func @silu_gate_read_twice
// CHECK-DAG:   %[[S:.*]] = ai.sigmoid %x
// CHECK-DAG:   %[[Y:.*]] = ai.silu %x
// CHECK:       func.return %[[Y]], %[[S]]
func.func @silu_gate_read_twice(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = ai.sigmoid %x : tensor<2x8xf32>
  %y = ai.mul %x, %s : tensor<2x8xf32> * tensor<2x8xf32>
  return %y, %s : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Mish spelled out: x * tanh(softplus(x)).
// CHECK-LABEL: func.func @mish
// CHECK-NEXT:  %[[Y:.*]] = ai.mish %x : tensor<4x8xf16>
// CHECK-NEXT:  func.return %[[Y]]
func.func @mish(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %p = ai.softplus %x : tensor<4x8xf16>
  %t = ai.tanh %p : tensor<4x8xf16>
  %y = ai.mul %x, %t : tensor<4x8xf16> * tensor<4x8xf16>
  return %y : tensor<4x8xf16>
}

// -----

// HardSwish spelled out: x * hard_sigmoid(x) with MobileNetV3's alpha 1/6, beta 1/2.
// CHECK-LABEL: func.func @hard_swish
// CHECK-NEXT:  %[[Y:.*]] = ai.hard_swish %x : tensor<4x8xf32>
// CHECK-NEXT:  func.return %[[Y]]
func.func @hard_swish(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %h = ai.hard_sigmoid %x {alpha = 0.16666666666666666 : f32, beta = 0.5 : f32} : tensor<4x8xf32>
  %y = ai.mul %x, %h : tensor<4x8xf32> * tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Not these: the gate of another value; a hard sigmoid of ONNX's default slope (0.2);
// a gate of a broadcast row (sigmoid(r) * x).
// CHECK-LABEL: func.func @not_gated
// CHECK-NOT:   ai.silu
// CHECK-NOT:   ai.hard_swish
// CHECK:       func.return
func.func @not_gated(%x: tensor<4x8xf32>, %z: tensor<4x8xf32>, %r: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = ai.sigmoid %z : tensor<4x8xf32>
  %a = ai.mul %x, %s : tensor<4x8xf32> * tensor<4x8xf32>
  %h = ai.hard_sigmoid %x : tensor<4x8xf32>
  %b = ai.mul %x, %h : tensor<4x8xf32> * tensor<4x8xf32>
  %sr = ai.sigmoid %r : tensor<8xf32>
  %c = ai.mul %sr, %x : tensor<8xf32> * tensor<4x8xf32>
  return %a, %b, %c : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
