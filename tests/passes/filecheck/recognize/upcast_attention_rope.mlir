// The TorchScript exporter's f16 GPT-NeoX (issue 28): layer 0's upcast attention leaves the
// residual in f32, so layer 1's q/k/v projection and its partial RoPE (the first 16 of 64
// head dims rotated: q * cos + rotate_half(q) * sin, concatenated with the 48 passed
// through) are f32, and with them layer 1's attention. demote-upcasts follows the f32 tail
// through RoPE's rotate_half (a move and a negation) and the concat (a move): both exact
// in f16, so layer 1's RoPE, attention and projections are f16 again and the only f32
// value left is the program's result. The cos and sin tables are f32 constants f16 holds
// exactly (the exporter's casts of the f16 tables).
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse" | filecheck %s --check-prefix=RECOGNIZED
// RUN: fusec-opt %s -p "infer-shapes,recognize-patterns,canonicalize,cse,demote-upcasts" | filecheck %s
// RUN: fusec-opt %s -p "fusec-cuda" | filecheck %s --check-prefix=CUDA

// Without the pass the tail, RoPE and layer 1's attention included, is f32.
// RECOGNIZED-LABEL: func.func @gptneox_two_layers
// RECOGNIZED:       ai.attention {{.*}} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// RECOGNIZED:       ai.rotate_half %{{.*}} : tensor<1x2x8x16xf32>
// RECOGNIZED:       ai.concat %{{.*}}, %{{.*}} {axis = -1 : i64} : tensor<1x2x8x16xf32> * tensor<1x2x8x48xf32>
// RECOGNIZED:       ai.attention {{.*}} : tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32> * tensor<1x1x8x8xf32>

// CHECK-LABEL: func.func @gptneox_two_layers
// CHECK:       ai.attention %q0, %k0, %v0
// CHECK-NOT:   xf32>
// CHECK:       ai.matmul %{{.*}} : tensor<1x8x128xf16> * tensor<128x384xf16>
// CHECK:       %[[QR:.*]] = ai.slice %{{.*}} {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 16>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x64xf16>
// CHECK:       %[[QP:.*]] = ai.slice %{{.*}} {offsets = array<i64: 0, 0, 0, 16>, sizes = array<i64: 1, 2, 8, 48>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x64xf16>
// CHECK:       %[[QC:.*]] = ai.mul %[[QR]], %{{.*}} : tensor<1x2x8x16xf16> * tensor<1x1x8x16xf16>
// CHECK:       %[[QH:.*]] = ai.rotate_half %[[QR]] : tensor<1x2x8x16xf16>
// CHECK:       %[[QS:.*]] = ai.mul %[[QH]], %{{.*}} : tensor<1x2x8x16xf16> * tensor<1x1x8x16xf16>
// CHECK:       %[[QE:.*]] = ai.add %[[QC]], %[[QS]] : tensor<1x2x8x16xf16> * tensor<1x2x8x16xf16>
// CHECK:       %[[Q:.*]] = ai.concat %[[QE]], %[[QP]] {axis = -1 : i64} : tensor<1x2x8x16xf16> * tensor<1x2x8x48xf16>
// CHECK:       ai.rotate_half %{{.*}} : tensor<1x2x8x16xf16>
// CHECK:       %[[K:.*]] = ai.concat %{{.*}}, %{{.*}} {axis = -1 : i64} : tensor<1x2x8x16xf16> * tensor<1x2x8x48xf16>
// CHECK:       ai.attention %[[Q]], %[[K]], %{{.*}} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// CHECK:       ai.matmul %{{.*}} : tensor<1x8x128xf16> * tensor<128x128xf16>
// CHECK:       %[[Y:.*]] = ai.cast %{{.*}} : tensor<1x8x128xf16> to tensor<1x8x128xf32>
// CHECK-NEXT:  func.return %[[Y]]

// On the cuda target both attentions are f16 ones, the flash kernel's (an f32 one falls
// back to PyTorch: "f32 attention: the kernel takes f16 or bf16").
// CUDA-LABEL: func.func @gptneox_two_layers
// CUDA:       ai.fused "attention"
// CUDA:       ai.attention {{.*}} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// CUDA:       ai.fused "attention"
// CUDA:       ai.attention {{.*}} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
// CUDA-NOT:   ai.attention
func.func @gptneox_two_layers(%x: tensor<1x8x128xf16>, %q0: tensor<1x2x8x64xf16>, %k0: tensor<1x2x8x64xf16>, %v0: tensor<1x2x8x64xf16>) -> tensor<1x8x128xf32> {
  // layer 0: the recognised upcast attention (recognize_attention), cast to f32
  %m16 = arith.constant dense<[[[[0.0, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04], [0.0, 0.0, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04], [0.0, 0.0, 0.0, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04], [0.0, 0.0, 0.0, 0.0, -6.550400e+04, -6.550400e+04, -6.550400e+04, -6.550400e+04], [0.0, 0.0, 0.0, 0.0, 0.0, -6.550400e+04, -6.550400e+04, -6.550400e+04], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -6.550400e+04, -6.550400e+04], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -6.550400e+04], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x8x8xf16>
  %a0 = ai.attention %q0, %k0, %v0, %m16 {scale = 1.250000e-01 : f32, nan_to_zero = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x1x8x8xf16>
  %a0u = ai.cast %a0 : tensor<1x2x8x64xf16> to tensor<1x2x8x64xf32>
  %a0t = ai.transpose %a0u {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf32>
  %a0r = ai.reshape %a0t {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf32>
  %wo0 = arith.constant dense<1.250000e-01> : tensor<128x128xf32>
  %p0 = ai.matmul %a0r, %wo0 : tensor<1x8x128xf32> * tensor<128x128xf32>
  %x32 = ai.cast %x : tensor<1x8x128xf16> to tensor<1x8x128xf32>
  %h = ai.add %p0, %x32 : tensor<1x8x128xf32> * tensor<1x8x128xf32>
  // layer 1: the fused q/k/v projection in f32, heads of 64, the first 16 dims rotated
  %wqkv = arith.constant dense<6.250000e-02> : tensor<128x384xf32>
  %qkv = ai.matmul %h, %wqkv : tensor<1x8x128xf32> * tensor<128x384xf32>
  %qkv4 = ai.reshape %qkv {shape = array<i64: 1, 8, 2, 192>} : tensor<1x8x384xf32>
  %qkvt = ai.transpose %qkv4 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x192xf32>
  %q = ai.slice %qkvt {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x192xf32>
  %k = ai.slice %qkvt {offsets = array<i64: 0, 0, 0, 64>, sizes = array<i64: 1, 2, 8, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x192xf32>
  %v = ai.slice %qkvt {offsets = array<i64: 0, 0, 0, 128>, sizes = array<i64: 1, 2, 8, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x192xf32>
  %cos = arith.constant dense<[[[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [0.5400390625, 0.9501953125, 0.9951171875, 0.9990234375, 1.0, 1.0, 1.0, 1.0, 0.5400390625, 0.9501953125, 0.9951171875, 0.9990234375, 1.0, 1.0, 1.0, 1.0], [-0.416015625, 0.806640625, 0.98046875, 0.998046875, 1.0, 1.0, 1.0, 1.0, -0.416015625, 0.806640625, 0.98046875, 0.998046875, 1.0, 1.0, 1.0, 1.0], [-0.990234375, 0.5830078125, 0.955078125, 0.9951171875, 1.0, 1.0, 1.0, 1.0, -0.990234375, 0.5830078125, 0.955078125, 0.9951171875, 1.0, 1.0, 1.0, 1.0], [-0.6533203125, 0.30078125, 0.9208984375, 0.9921875, 0.9990234375, 1.0, 1.0, 1.0, -0.6533203125, 0.30078125, 0.9208984375, 0.9921875, 0.9990234375, 1.0, 1.0, 1.0], [0.283203125, -0.0107421875, 0.8779296875, 0.9873046875, 0.9990234375, 1.0, 1.0, 1.0, 0.283203125, -0.0107421875, 0.8779296875, 0.9873046875, 0.9990234375, 1.0, 1.0, 1.0], [0.9599609375, -0.3203125, 0.8251953125, 0.982421875, 0.998046875, 1.0, 1.0, 1.0, 0.9599609375, -0.3203125, 0.8251953125, 0.982421875, 0.998046875, 1.0, 1.0, 1.0], [0.75390625, -0.599609375, 0.7646484375, 0.9755859375, 0.9970703125, 1.0, 1.0, 1.0, 0.75390625, -0.599609375, 0.7646484375, 0.9755859375, 0.9970703125, 1.0, 1.0, 1.0]]]]> : tensor<1x1x8x16xf32>
  %sin = arith.constant dense<[[[[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.841796875, 0.310546875, 0.099609375, 0.03125, 0.009765625, 0.0029296875, 0.0009765625, 0.0, 0.841796875, 0.310546875, 0.099609375, 0.03125, 0.009765625, 0.0029296875, 0.0009765625, 0.0], [0.9091796875, 0.5908203125, 0.1982421875, 0.0634765625, 0.01953125, 0.005859375, 0.001953125, 0.0009765625, 0.9091796875, 0.5908203125, 0.1982421875, 0.0634765625, 0.01953125, 0.005859375, 0.001953125, 0.0009765625], [0.1416015625, 0.8125, 0.2958984375, 0.0947265625, 0.0302734375, 0.009765625, 0.0029296875, 0.0009765625, 0.1416015625, 0.8125, 0.2958984375, 0.0947265625, 0.0302734375, 0.009765625, 0.0029296875, 0.0009765625], [-0.7568359375, 0.953125, 0.3896484375, 0.1259765625, 0.0400390625, 0.0126953125, 0.00390625, 0.0009765625, -0.7568359375, 0.953125, 0.3896484375, 0.1259765625, 0.0400390625, 0.0126953125, 0.00390625, 0.0009765625], [-0.958984375, 1.0, 0.4794921875, 0.1572265625, 0.0498046875, 0.015625, 0.0048828125, 0.001953125, -0.958984375, 1.0, 0.4794921875, 0.1572265625, 0.0498046875, 0.015625, 0.0048828125, 0.001953125], [-0.279296875, 0.947265625, 0.564453125, 0.1884765625, 0.0595703125, 0.0185546875, 0.005859375, 0.001953125, -0.279296875, 0.947265625, 0.564453125, 0.1884765625, 0.0595703125, 0.0185546875, 0.005859375, 0.001953125], [0.6572265625, 0.80078125, 0.64453125, 0.2197265625, 0.0703125, 0.0224609375, 0.0068359375, 0.001953125, 0.6572265625, 0.80078125, 0.64453125, 0.2197265625, 0.0703125, 0.0224609375, 0.0068359375, 0.001953125]]]]> : tensor<1x1x8x16xf32>
  %qr = ai.slice %q {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 16>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x64xf32>
  %qp = ai.slice %q {offsets = array<i64: 0, 0, 0, 16>, sizes = array<i64: 1, 2, 8, 48>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x64xf32>
  %qc = ai.mul %qr, %cos : tensor<1x2x8x16xf32> * tensor<1x1x8x16xf32>
  %qlo = ai.slice %qr {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 8>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x16xf32>
  %qhi = ai.slice %qr {offsets = array<i64: 0, 0, 0, 8>, sizes = array<i64: 1, 2, 8, 8>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x16xf32>
  %qn = ai.neg %qhi : tensor<1x2x8x8xf32>
  %qh = ai.concat %qn, %qlo {axis = -1 : i64} : tensor<1x2x8x8xf32> * tensor<1x2x8x8xf32>
  %qs = ai.mul %qh, %sin : tensor<1x2x8x16xf32> * tensor<1x1x8x16xf32>
  %qe = ai.add %qc, %qs : tensor<1x2x8x16xf32> * tensor<1x2x8x16xf32>
  %qf = ai.concat %qe, %qp {axis = -1 : i64} : tensor<1x2x8x16xf32> * tensor<1x2x8x48xf32>
  %kr = ai.slice %k {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 16>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x64xf32>
  %kp = ai.slice %k {offsets = array<i64: 0, 0, 0, 16>, sizes = array<i64: 1, 2, 8, 48>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x64xf32>
  %kc = ai.mul %kr, %cos : tensor<1x2x8x16xf32> * tensor<1x1x8x16xf32>
  %klo = ai.slice %kr {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 2, 8, 8>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x16xf32>
  %khi = ai.slice %kr {offsets = array<i64: 0, 0, 0, 8>, sizes = array<i64: 1, 2, 8, 8>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x2x8x16xf32>
  %kn = ai.neg %khi : tensor<1x2x8x8xf32>
  %kh = ai.concat %kn, %klo {axis = -1 : i64} : tensor<1x2x8x8xf32> * tensor<1x2x8x8xf32>
  %ks = ai.mul %kh, %sin : tensor<1x2x8x16xf32> * tensor<1x1x8x16xf32>
  %ke = ai.add %kc, %ks : tensor<1x2x8x16xf32> * tensor<1x2x8x16xf32>
  %kf = ai.concat %ke, %kp {axis = -1 : i64} : tensor<1x2x8x16xf32> * tensor<1x2x8x48xf32>
  // layer 1's attention as recognised from the exporter's f32 chain (its f32 causal mask)
  %m32 = arith.constant dense<[[[[0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347e+38, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347e+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x8x8xf32>
  %a1 = ai.attention %qf, %kf, %v, %m32 {scale = 1.250000e-01 : f32, nan_to_zero = true} : tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32> * tensor<1x2x8x64xf32> * tensor<1x1x8x8xf32>
  %a1t = ai.transpose %a1 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf32>
  %a1r = ai.reshape %a1t {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf32>
  %wo1 = arith.constant dense<1.250000e-01> : tensor<128x128xf32>
  %p1 = ai.matmul %a1r, %wo1 : tensor<1x8x128xf32> * tensor<128x128xf32>
  %y = ai.add %p1, %h : tensor<1x8x128xf32> * tensor<1x8x128xf32>
  return %y : tensor<1x8x128xf32>
}
