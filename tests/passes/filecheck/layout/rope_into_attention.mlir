// rope-into-attention (cuda, issue 28): Llama's RoPE over q's and k's heads (after the
// combined q/k/v projection, a GQA head repeat, a causal mask), a pointwise group that only
// the attention group reads, moves into the attention group, where the flash kernel applies
// it to the Q tile and each K stage after loading them; the cos/sin views stay as they are.
// The same RoPE with heads of 32 (which the flash kernel does not take) stays a pointwise
// group: the pass moves a group only where the merged group plans onto the kernel.
// GPT-NeoX's partial rotary (the first 16 of 64 head dims, concatenated with the rest by a
// copy group that reads the RoPE group): both groups move in.
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,fuse{target=cuda},read-views-in-place,rope-into-attention" | filecheck %s
// RUN: fusec-opt %s --split-input-file -p "infer-shapes,fuse{target=cuda},read-views-in-place" | filecheck %s --check-prefix=BEFORE

// BEFORE-LABEL: func.func @f
// BEFORE:       ai.fused "pointwise"
// BEFORE:       ai.fused "attention"

// CHECK-LABEL: func.func @f
// CHECK-NOT:   ai.fused "pointwise"
// CHECK:       ai.fused "attention" (%qkv, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<1x8x256xf16>, tensor<8x1x64xf16>, tensor<8x1x64xf16>, tensor<8x8xf16>) -> tensor<1x8x128xf16>
// CHECK:       ai.rotate_half
// CHECK:       ai.attention
// CHECK-NOT:   ai.fused "pointwise"
func.func @f(%qkv: tensor<1x8x256xf16>, %cos: tensor<8x64xf16>, %sin: tensor<8x64xf16>) -> tensor<1x8x128xf16> {
  %qk = ai.slice %qkv {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 1, 8, 192>, strides = array<i64: 1, 1, 1>} : tensor<1x8x256xf16>
  %qk4 = ai.reshape %qk {shape = array<i64: 1, 8, 3, 64>} : tensor<1x8x192xf16>
  %c3 = ai.reshape %cos {shape = array<i64: 8, 1, 64>} : tensor<8x64xf16>
  %s3 = ai.reshape %sin {shape = array<i64: 8, 1, 64>} : tensor<8x64xf16>
  %a = ai.mul %qk4, %c3 : tensor<1x8x3x64xf16> * tensor<8x1x64xf16>
  %r = ai.rotate_half %qk4 : tensor<1x8x3x64xf16>
  %b = ai.mul %r, %s3 : tensor<1x8x3x64xf16> * tensor<8x1x64xf16>
  %y = ai.add %a, %b : tensor<1x8x3x64xf16> * tensor<1x8x3x64xf16>
  %q = ai.slice %y {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 8, 2, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x64xf16>
  %qt = ai.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x64xf16>
  %k = ai.slice %y {offsets = array<i64: 0, 0, 2, 0>, sizes = array<i64: 1, 8, 1, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x64xf16>
  %kt = ai.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x1x64xf16>
  %k5 = ai.reshape %kt {shape = array<i64: 1, 1, 1, 8, 64>} : tensor<1x1x8x64xf16>
  %ke = ai.expand %k5 {shape = array<i64: 1, 1, 2, 8, 64>} : tensor<1x1x1x8x64xf16>
  %kx = ai.reshape %ke {shape = array<i64: 1, 2, 8, 64>} : tensor<1x1x2x8x64xf16>
  %v = ai.slice %qkv {offsets = array<i64: 0, 0, 192>, sizes = array<i64: 1, 8, 64>, strides = array<i64: 1, 1, 1>} : tensor<1x8x256xf16>
  %v4 = ai.reshape %v {shape = array<i64: 1, 8, 1, 64>} : tensor<1x8x64xf16>
  %vt = ai.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x1x64xf16>
  %v5 = ai.reshape %vt {shape = array<i64: 1, 1, 1, 8, 64>} : tensor<1x1x8x64xf16>
  %ve = ai.expand %v5 {shape = array<i64: 1, 1, 2, 8, 64>} : tensor<1x1x1x8x64xf16>
  %vx = ai.reshape %ve {shape = array<i64: 1, 2, 8, 64>} : tensor<1x1x2x8x64xf16>
  %m = arith.constant dense<[[0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<8x8xf16>
  %o = ai.attention %qt, %kx, %vx, %m {scale = 0.125 : f32, nan_to_zero = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<8x8xf16>
  %ot = ai.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf16>
  %out = ai.reshape %ot {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf16>
  return %out : tensor<1x8x128xf16>
}

// -----

// CHECK-LABEL: func.func @f
// CHECK:       ai.fused "pointwise"
// CHECK:       ai.rotate_half
// CHECK:       ai.fused "attention"
// CHECK-NOT:   ai.rotate_half
func.func @f(%qkv: tensor<1x8x128xf16>, %cos: tensor<8x32xf16>, %sin: tensor<8x32xf16>) -> tensor<1x8x64xf16> {
  %qk = ai.slice %qkv {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 1, 8, 96>, strides = array<i64: 1, 1, 1>} : tensor<1x8x128xf16>
  %qk4 = ai.reshape %qk {shape = array<i64: 1, 8, 3, 32>} : tensor<1x8x96xf16>
  %c3 = ai.reshape %cos {shape = array<i64: 8, 1, 32>} : tensor<8x32xf16>
  %s3 = ai.reshape %sin {shape = array<i64: 8, 1, 32>} : tensor<8x32xf16>
  %a = ai.mul %qk4, %c3 : tensor<1x8x3x32xf16> * tensor<8x1x32xf16>
  %r = ai.rotate_half %qk4 : tensor<1x8x3x32xf16>
  %b = ai.mul %r, %s3 : tensor<1x8x3x32xf16> * tensor<8x1x32xf16>
  %y = ai.add %a, %b : tensor<1x8x3x32xf16> * tensor<1x8x3x32xf16>
  %q = ai.slice %y {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 8, 2, 32>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x32xf16>
  %qt = ai.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x32xf16>
  %k = ai.slice %y {offsets = array<i64: 0, 0, 2, 0>, sizes = array<i64: 1, 8, 1, 32>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x32xf16>
  %kt = ai.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x1x32xf16>
  %k5 = ai.reshape %kt {shape = array<i64: 1, 1, 1, 8, 32>} : tensor<1x1x8x32xf16>
  %ke = ai.expand %k5 {shape = array<i64: 1, 1, 2, 8, 32>} : tensor<1x1x1x8x32xf16>
  %kx = ai.reshape %ke {shape = array<i64: 1, 2, 8, 32>} : tensor<1x1x2x8x32xf16>
  %v = ai.slice %qkv {offsets = array<i64: 0, 0, 96>, sizes = array<i64: 1, 8, 32>, strides = array<i64: 1, 1, 1>} : tensor<1x8x128xf16>
  %v4 = ai.reshape %v {shape = array<i64: 1, 8, 1, 32>} : tensor<1x8x32xf16>
  %vt = ai.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x1x32xf16>
  %v5 = ai.reshape %vt {shape = array<i64: 1, 1, 1, 8, 32>} : tensor<1x1x8x32xf16>
  %ve = ai.expand %v5 {shape = array<i64: 1, 1, 2, 8, 32>} : tensor<1x1x1x8x32xf16>
  %vx = ai.reshape %ve {shape = array<i64: 1, 2, 8, 32>} : tensor<1x1x2x8x32xf16>
  %m = arith.constant dense<[[0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<8x8xf16>
  %o = ai.attention %qt, %kx, %vx, %m {scale = 0.1767766952966369 : f32, nan_to_zero = true} : tensor<1x2x8x32xf16> * tensor<1x2x8x32xf16> * tensor<1x2x8x32xf16> * tensor<8x8xf16>
  %ot = ai.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x32xf16>
  %out = ai.reshape %ot {shape = array<i64: 1, 8, 64>} : tensor<1x8x2x32xf16>
  return %out : tensor<1x8x64xf16>
}

// -----

// BEFORE-LABEL: func.func @f
// BEFORE:       ai.fused "pointwise"
// BEFORE:       ai.fused "copy"
// BEFORE:       ai.fused "attention"

// CHECK-LABEL: func.func @f
// CHECK-NOT:   ai.fused "pointwise"
// CHECK-NOT:   ai.fused "copy"
// CHECK:       ai.fused "attention" (%qkv, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<1x8x256xf16>, tensor<8x1x16xf16>, tensor<8x1x16xf16>, tensor<8x8xf16>) -> tensor<1x8x128xf16>
// CHECK:       ai.rotate_half %{{.*}} : tensor<1x8x3x16xf16>
// CHECK:       ai.concat
// CHECK:       ai.attention
func.func @f(%qkv: tensor<1x8x256xf16>, %cos: tensor<8x16xf16>, %sin: tensor<8x16xf16>) -> tensor<1x8x128xf16> {
  %qk = ai.slice %qkv {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 1, 8, 192>, strides = array<i64: 1, 1, 1>} : tensor<1x8x256xf16>
  %qk4 = ai.reshape %qk {shape = array<i64: 1, 8, 3, 64>} : tensor<1x8x192xf16>
  %c3 = ai.reshape %cos {shape = array<i64: 8, 1, 16>} : tensor<8x16xf16>
  %s3 = ai.reshape %sin {shape = array<i64: 8, 1, 16>} : tensor<8x16xf16>
  %xr = ai.slice %qk4 {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 8, 3, 16>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x64xf16>
  %xp = ai.slice %qk4 {offsets = array<i64: 0, 0, 0, 16>, sizes = array<i64: 1, 8, 3, 48>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x64xf16>
  %a = ai.mul %xr, %c3 : tensor<1x8x3x16xf16> * tensor<8x1x16xf16>
  %r = ai.rotate_half %xr : tensor<1x8x3x16xf16>
  %b = ai.mul %r, %s3 : tensor<1x8x3x16xf16> * tensor<8x1x16xf16>
  %yr = ai.add %a, %b : tensor<1x8x3x16xf16> * tensor<1x8x3x16xf16>
  %y = ai.concat %yr, %xp {axis = -1 : i64} : tensor<1x8x3x16xf16> * tensor<1x8x3x48xf16>
  %q = ai.slice %y {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 1, 8, 2, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x64xf16>
  %qt = ai.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x2x64xf16>
  %k = ai.slice %y {offsets = array<i64: 0, 0, 2, 0>, sizes = array<i64: 1, 8, 1, 64>, strides = array<i64: 1, 1, 1, 1>} : tensor<1x8x3x64xf16>
  %kt = ai.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x1x64xf16>
  %k5 = ai.reshape %kt {shape = array<i64: 1, 1, 1, 8, 64>} : tensor<1x1x8x64xf16>
  %ke = ai.expand %k5 {shape = array<i64: 1, 1, 2, 8, 64>} : tensor<1x1x1x8x64xf16>
  %kx = ai.reshape %ke {shape = array<i64: 1, 2, 8, 64>} : tensor<1x1x2x8x64xf16>
  %v = ai.slice %qkv {offsets = array<i64: 0, 0, 192>, sizes = array<i64: 1, 8, 64>, strides = array<i64: 1, 1, 1>} : tensor<1x8x256xf16>
  %v4 = ai.reshape %v {shape = array<i64: 1, 8, 1, 64>} : tensor<1x8x64xf16>
  %vt = ai.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : tensor<1x8x1x64xf16>
  %v5 = ai.reshape %vt {shape = array<i64: 1, 1, 1, 8, 64>} : tensor<1x1x8x64xf16>
  %ve = ai.expand %v5 {shape = array<i64: 1, 1, 2, 8, 64>} : tensor<1x1x1x8x64xf16>
  %vx = ai.reshape %ve {shape = array<i64: 1, 2, 8, 64>} : tensor<1x1x2x8x64xf16>
  %m = arith.constant dense<[[0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0xFC00], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]> : tensor<8x8xf16>
  %o = ai.attention %qt, %kx, %vx, %m {scale = 0.125 : f32, nan_to_zero = true} : tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<1x2x8x64xf16> * tensor<8x8xf16>
  %ot = ai.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<1x2x8x64xf16>
  %out = ai.reshape %ot {shape = array<i64: 1, 8, 128>} : tensor<1x8x2x64xf16>
  return %out : tensor<1x8x128xf16>
}
