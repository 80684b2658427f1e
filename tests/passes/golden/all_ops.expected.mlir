builtin.module {
  func.func @all_ops(%x: tensor<1x4x8x8xf32>, %w: tensor<8x2x3x3xf32>, %b: tensor<8xf32>, %res: tensor<1x8x4x5xf32>, %a: tensor<2x6x16xf32>, %m: tensor<32x16xf32>, %gamma: tensor<16xf32>, %beta: tensor<16xf32>, %n: tensor<2x6x16xf32>, %ids: tensor<2x6xi64>, %table: tensor<10x16xf32>, %route: tensor<32x2xf32>, %picks: tensor<32x2xi32>, %gu: tensor<4x16x16xf32>, %dn: tensor<4x16x8xf32>) -> (tensor<1x8x4x5xf16>, tensor<1x8x4x5xbf16>, tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x16x16xf32>, tensor<2x6x1xf32>, tensor<f32>, tensor<16x2xf32>, tensor<1x4x4x4xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>, tensor<2x6xi32>, tensor<32x16xf32>) {
    %half = arith.constant dense<5.000000e-01> : tensor<f32>
    %c = ai.conv2d %x, %w {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 2, 2>, dilations = array<i64: 2, 1>, groups = 2 : i64} : tensor<1x4x8x8xf32> * tensor<8x2x3x3xf32>
    %cb0 = ai.bias_add %c, %b : tensor<1x8x4x5xf32> * tensor<8xf32>
    %var = ai.exp %b : tensor<8xf32>
    %0 = arith.constant dense<1.000000e-05> : tensor<f32>
    %1 = ai.add %var, %0 : tensor<8xf32> * tensor<f32>
    %2 = ai.sqrt %1 : tensor<8xf32>
    %3 = ai.div %b, %2 : tensor<8xf32> * tensor<8xf32>
    %4 = ai.reshape %b {shape = array<i64: 8, 1, 1>} : tensor<8xf32>
    %5 = ai.reshape %3 {shape = array<i64: 8, 1, 1>} : tensor<8xf32>
    %6 = ai.sub %cb0, %4 : tensor<1x8x4x5xf32> * tensor<8x1x1xf32>
    %7 = ai.mul %6, %5 : tensor<1x8x4x5xf32> * tensor<8x1x1xf32>
    %cb = ai.bias_add %7, %b : tensor<1x8x4x5xf32> * tensor<8xf32>
    %sum = ai.add %cb, %res : tensor<1x8x4x5xf32> * tensor<1x8x4x5xf32>
    %diff = ai.sub %sum, %half : tensor<1x8x4x5xf32> * tensor<f32>
    %mx = ai.maximum %diff, %half : tensor<1x8x4x5xf32> * tensor<f32>
    %re = ai.relu %mx : tensor<1x8x4x5xf32>
    %h = ai.cast %re : tensor<1x8x4x5xf32> to tensor<1x8x4x5xf16>
    %hb = ai.cast %h : tensor<1x8x4x5xf16> to tensor<1x8x4x5xbf16>
    %ln = ai.layernorm %a, %gamma, %beta {epsilon = 1.000000e-06 : f32} : tensor<2x6x16xf32> * tensor<16xf32> * tensor<16xf32>
    %rn = ai.rms_norm %ln, %gamma : tensor<2x6x16xf32> * tensor<16xf32>
    %mm = ai.matmul %rn, %m {transpose_b = true} : tensor<2x6x16xf32> * tensor<32x16xf32>
    %gt = ai.gelu %mm {approximate = "tanh"} : tensor<2x6x32xf32>
    %ge = ai.gelu %mm : tensor<2x6x32xf32>
    %mu = ai.mul %gt, %ge : tensor<2x6x32xf32> * tensor<2x6x32xf32>
    %sm = ai.softmax %mu : tensor<2x6x32xf32>
    %sg = ai.sigmoid %sm : tensor<2x6x32xf32>
    %sq = ai.sqrt %sg : tensor<2x6x32xf32>
    %th = ai.tanh %sq : tensor<2x6x32xf32>
    %ex = ai.exp %th : tensor<2x6x32xf32>
    %dv = ai.div %ex, %half : tensor<2x6x32xf32> * tensor<f32>
    %sl = ai.silu %dv : tensor<2x6x32xf32>
    %ng = ai.neg %sl : tensor<2x6x32xf32>
    %si = ai.abs %ng : tensor<2x6x32xf32>
    %er = ai.erf %si : tensor<2x6x32xf32>
    %m0 = ai.asin %er : tensor<2x6x32xf32>
    %m1 = ai.sin %m0 : tensor<2x6x32xf32>
    %m2 = ai.acos %m1 : tensor<2x6x32xf32>
    %m3 = ai.cos %m2 : tensor<2x6x32xf32>
    %m4 = ai.atanh %m3 : tensor<2x6x32xf32>
    %m5 = ai.softsign %m4 : tensor<2x6x32xf32>
    %m6 = ai.cosh %m5 : tensor<2x6x32xf32>
    %m7 = ai.acosh %m6 : tensor<2x6x32xf32>
    %m8 = ai.sinh %m7 : tensor<2x6x32xf32>
    %m9 = ai.asinh %m8 : tensor<2x6x32xf32>
    %m10 = ai.atan %m9 : tensor<2x6x32xf32>
    %m11 = ai.tan %m10 : tensor<2x6x32xf32>
    %m12 = ai.log %m11 : tensor<2x6x32xf32>
    %m13 = ai.reciprocal %m12 : tensor<2x6x32xf32>
    %m14 = ai.floor %m13 : tensor<2x6x32xf32>
    %m15 = ai.ceil %m14 : tensor<2x6x32xf32>
    %m16 = ai.round %m15 : tensor<2x6x32xf32>
    %m17 = ai.sign %m16 : tensor<2x6x32xf32>
    %m18 = ai.hard_sigmoid %m17 {alpha = 2.500000e-01 : f32} : tensor<2x6x32xf32>
    %m19 = ai.hard_swish %m18 : tensor<2x6x32xf32>
    %m20 = ai.leaky_relu %m19 {alpha = 2.000000e-01 : f32} : tensor<2x6x32xf32>
    %m21 = ai.prelu %m20, %half : tensor<2x6x32xf32> * tensor<f32>
    %m22 = ai.elu %m21 {alpha = 2.000000e+00 : f32} : tensor<2x6x32xf32>
    %m23 = ai.selu %m22 : tensor<2x6x32xf32>
    %m24 = ai.celu %m23 : tensor<2x6x32xf32>
    %m25 = ai.softplus %m24 : tensor<2x6x32xf32>
    %m26 = ai.mish %m25 : tensor<2x6x32xf32>
    %m27 = ai.thresholded_relu %m26 {alpha = 5.000000e-01 : f32} : tensor<2x6x32xf32>
    %cl = ai.clip %m27 {min = -5.000000e-01 : f32} : tensor<2x6x32xf32>
    %pw = ai.pow %cl, %half : tensor<2x6x32xf32> * tensor<f32>
    %mn = ai.minimum %pw, %half : tensor<2x6x32xf32> * tensor<f32>
    %nn = ai.isnan %mn : tensor<2x6x32xf32>
    %wh = ai.where %nn, %half, %mn : tensor<2x6x32xf32> * tensor<f32> * tensor<2x6x32xf32>
    %rm = ai.reduce_mean %wh {axes = array<i64: 2>, keepdims = true} : tensor<2x6x32xf32>
    %rs = ai.reduce_sum %wh {axes = array<i64: 1>} : tensor<2x6x32xf32>
    %rx = ai.reduce_max %rs : tensor<2x32xf32>
    %rp = ai.reshape %wh {shape = array<i64: 12, 32>} : tensor<2x6x32xf32>
    %tp = ai.transpose %rp {perm = array<i64: 1, 0>} : tensor<12x32xf32>
    %sc = ai.slice %tp {offsets = array<i64: 31, 0>, sizes = array<i64: 16, 12>, strides = array<i64: -2, 1>} : tensor<32x12xf32>
    %cc = ai.concat %sc, %sc {axis = 1 : i64} : tensor<16x12xf32> * tensor<16x12xf32>
    %ga = ai.gather %cc {axis = 1 : i64, indices = array<i64: 3, 0>} : tensor<16x24xf32>
    %rh = ai.rotate_half %ga : tensor<16x2xf32>
    %mp = ai.max_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>} : tensor<1x4x8x8xf32>
    %at = ai.attention %n, %m, %m, %half {scale = 2.500000e-01 : f32, nan_to_zero = true} : tensor<2x6x16xf32> * tensor<32x16xf32> * tensor<32x16xf32> * tensor<f32>
    %moe = ai.moe_experts %m, %route, %picks, %gu, %dn : tensor<32x16xf32> * tensor<32x2xf32> * tensor<32x2xi32> * tensor<4x16x16xf32> * tensor<4x16x8xf32>
    %ap = ai.avg_pool2d %mp {count_include_pad = true, kernel = array<i64: 2, 2>, padding = array<i64: 0, 0, 1, 1>} : tensor<1x4x4x4xf32>
    %f = ai.fused "pointwise" (%a, %half) : (tensor<2x6x16xf32>, tensor<f32>) -> tensor<2x6x16xf32> {
    ^bb0(%p: tensor<2x6x16xf32>, %s: tensor<f32>):
      %t = ai.mul %p, %s : tensor<2x6x16xf32> * tensor<f32>
      %u = ai.tanh %t : tensor<2x6x16xf32>
      ai.yield %u : tensor<2x6x16xf32>
    }
    %sm1 = ai.softmax %f {axis = 1 : i64} : tensor<2x6x16xf32>
    %ta = ai.matmul %n, %sm1 {transpose_a = true} : tensor<2x6x16xf32> * tensor<2x6x16xf32>
    %three = arith.constant dense<3> : tensor<i64>
    %pos = ai.cumsum %ids {axis = 1 : i64, reverse = true} : tensor<2x6xi64>
    %imd = ai.mod %pos, %three {fmod = true} : tensor<2x6xi64> * tensor<i64>
    %idv = ai.div %imd, %three : tensor<2x6xi64> * tensor<i64>
    %ieq = ai.equal %idv, %three : tensor<2x6xi64> * tensor<i64>
    %ilt = ai.less %ids, %three : tensor<2x6xi64> * tensor<i64>
    %igt = ai.greater %ids, %three : tensor<2x6xi64> * tensor<i64>
    %ile = ai.less_equal %ids, %three : tensor<2x6xi64> * tensor<i64>
    %ige = ai.greater_equal %ids, %three : tensor<2x6xi64> * tensor<i64>
    %inot = ai.not %ieq : tensor<2x6xi1>
    %iand = ai.and %inot, %ilt : tensor<2x6xi1> * tensor<2x6xi1>
    %ior = ai.or %iand, %igt : tensor<2x6xi1> * tensor<2x6xi1>
    %ixor = ai.xor %ior, %ile : tensor<2x6xi1> * tensor<2x6xi1>
    %iall = ai.and %ixor, %ige : tensor<2x6xi1> * tensor<2x6xi1>
    %i3d = ai.reshape %iall {shape = array<i64: 2, 6, 1>} : tensor<2x6xi1>
    %iexp = ai.expand %i3d {shape = array<i64: 2, 6, 16>} : tensor<2x6x1xi1>
    %emb = ai.take %table, %ids : tensor<10x16xf32> * tensor<2x6xi64>
    %ifl = ai.cast %iexp : tensor<2x6x16xi1> to tensor<2x6x16xf32>
    %iwh = ai.where %iexp, %emb, %ifl : tensor<2x6x16xi1> * tensor<2x6x16xf32> * tensor<2x6x16xf32>
    %iam = ai.argmax %emb {axis = 1 : i64, keepdims = false} : tensor<2x6x16xf32>
    %ian = ai.argmin %iam {axis = -1 : i64, select_last_index = true} : tensor<2x16xi64>
    %ias = ai.add %idv, %ian : tensor<2x6xi64> * tensor<2x1xi64>
    %i32 = ai.cast %ias : tensor<2x6xi64> to tensor<2x6xi32>
    func.return %h, %hb, %si, %sm1, %ta, %rm, %rx, %rh, %ap, %at, %iwh, %i32, %moe : tensor<1x8x4x5xf16>, tensor<1x8x4x5xbf16>, tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x16x16xf32>, tensor<2x6x1xf32>, tensor<f32>, tensor<16x2xf32>, tensor<1x4x4x4xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>, tensor<2x6xi32>, tensor<32x16xf32>
  }
}
