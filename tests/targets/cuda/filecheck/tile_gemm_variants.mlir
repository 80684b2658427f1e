// RUN: fusec compile %s --target cuda --pipeline "fusec-default,tile-gemm{schedule=pingpong epilogue=smem math=fast}" | filecheck %s --check-prefix=VARIANT
// RUN: fusec compile %s --target cuda --pipeline 'fusec-default,tile-gemm{tile="128x128x64 s6 c2 g8 sched=pingpong epi=smem"}' | filecheck %s --check-prefix=TILE
// RUN: fusec compile %s --target cuda --emit cuda --pipeline "fusec-default,tile-gemm{schedule=pingpong epilogue=smem math=fast}" | filecheck %s --check-prefix=CUDA
// The tile-gemm options force the opt-in variants: pingpong gives each consumer
// warpgroup the 64x256 rows it had in the cooperative 128x256 tile (4 stages beside
// the smem epilogue's 32 KB of staging); `tile` forces one exact configuration. The GELU
// epilogue runs rolled over the staged chunks (the heuristic's default, FUSEC_GEMM_LOOP=auto).
// VARIANT: fusec.tile = {block = array<i64: 64, 256, 64>, mma = "m64n256k16", stages = 4 : i64, consumers = 2 : i64, group_m = 8 : i64, schedule = "pingpong", epilogue = "smem", math = "fast", loop = "rolled", choice = "heuristic, variant option"}
// TILE: fusec.tile = {block = array<i64: 128, 128, 64>, mma = "m64n128k16", stages = 6 : i64, consumers = 2 : i64, group_m = 8 : i64, schedule = "pingpong", epilogue = "smem", choice = "pass option"}
// CUDA: // pingpong schedule, smem epilogue, fast math
// CUDA-DAG: fs_exp_approx
// CUDA-DAG: if (local > 0) fs_named_sync(1 + cw, 256);
// CUDA-DAG: fs_tma_store(map_out, buf, col0, row0, pz);
func.func @mlp_up(%x: tensor<8192x1024xf16>, %w: tensor<1024x4096xf16>, %b: tensor<4096xf16>) -> tensor<8192x4096xf16> {
  %h = ai.matmul %x, %w : tensor<8192x1024xf16> * tensor<1024x4096xf16>
  %hb = ai.bias_add %h, %b : tensor<8192x4096xf16> * tensor<4096xf16>
  %a = ai.gelu %hb {approximate = "tanh"} : tensor<8192x4096xf16>
  return %a : tensor<8192x4096xf16>
}
