// RUN: fusec compile %s --entry mlp_up --target cuda --pipeline "fusec-default,tile-gemm{loop=rolled}" | filecheck %s --check-prefix=TILE
// RUN: fusec compile %s --entry mlp_up --target cuda --emit cuda --pipeline "fusec-default,tile-gemm{loop=rolled}" | filecheck %s --check-prefix=CUDA
// RUN: fusec compile %s --entry ln_softmax --target cuda --pipeline "fusec-default,tile-gemm{loop=rolled}" | filecheck %s --check-prefix=KEPT
// RUN: fusec compile %s --entry ln_softmax --target cuda --emit cuda --pipeline "fusec-default,tile-gemm{loop=rolled}" | filecheck %s --check-prefix=KEPT-CUDA
// RUN: fusec compile %s --entry small_m --target cuda --pipeline "fusec-default,tile-gemm{loop=rolled}" | filecheck %s --check-prefix=DIRECT
// loop=rolled (with the heuristic's smem epilogue): the bias + GELU GEMM runs its epilogue
// on the staged chunks in a rolled loop; the LayerNorm -> matmul -> softmax group keeps
// the unrolled epilogue (its rewrite needs the unrounded accumulators), and so does the
// small-M tile's direct epilogue (nothing staged).
// TILE: fusec.tile = {block = array<i64: 192, 192, 64>, {{.*}}, epilogue = "smem", math = "fast", loop = "rolled", choice = "heuristic, variant option"}
// CUDA: gemm_rolled_apply<C>(epi, buf, gemm_rows<C>(pm, cw) + m * 64 + warp * 16,
// CUDA: ROLLED = 1,
// KEPT: fusec.tile = {{.*}}ln = "tile", choice = "row softmax, variant option"}
// KEPT-NOT: loop = "rolled"
// KEPT-CUDA: ROLLED = 0,
// DIRECT: fusec.tile = {block = array<i64: 64, 64, 64>, {{.*}}, math = "fast", choice = "heuristic, variant option"}
func.func @mlp_up(%x: tensor<6272x384xf16>, %w: tensor<384x1536xf16>, %b: tensor<1536xf16>) -> tensor<6272x1536xf16> {
  %h = ai.matmul %x, %w : tensor<6272x384xf16> * tensor<384x1536xf16>
  %hb = ai.bias_add %h, %b : tensor<6272x1536xf16> * tensor<1536xf16>
  %a = ai.gelu %hb : tensor<6272x1536xf16>
  return %a : tensor<6272x1536xf16>
}
func.func @ln_softmax(%x: tensor<8192x256xf16>, %g: tensor<256xf16>, %be: tensor<256xf16>, %w: tensor<256x256xf16>) -> tensor<8192x256xf16> {
  %n = ai.layernorm %x, %g, %be {epsilon = 1.0e-05 : f32} : tensor<8192x256xf16> * tensor<256xf16> * tensor<256xf16>
  %h = ai.matmul %n, %w : tensor<8192x256xf16> * tensor<256x256xf16>
  %s = ai.softmax %h : tensor<8192x256xf16>
  return %s : tensor<8192x256xf16>
}
func.func @small_m(%x: tensor<128x768xf16>, %w: tensor<768x3072xf16>, %b: tensor<3072xf16>) -> tensor<128x3072xf16> {
  %h = ai.matmul %x, %w : tensor<128x768xf16> * tensor<768x3072xf16>
  %hb = ai.bias_add %h, %b : tensor<128x3072xf16> * tensor<3072xf16>
  %a = ai.gelu %hb : tensor<128x3072xf16>
  return %a : tensor<128x3072xf16>
}
