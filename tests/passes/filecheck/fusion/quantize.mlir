// ai.quantize and ai.dequantize are broadcast ops (issue 31): a Q->DQ pair fuses with its
// elementwise neighbours into one pointwise group, and a quantize of a matmul's result rides
// in its epilogue on cpu; a per-block quantize (blocks along an axis: no numpy broadcast)
// stays in a pointwise group of its own there, the only cpu loop that indexes blocks. On
// cuda the Q->DQ pair fuses the same way (its Numba kernels run the cpu helpers); the
// quantize of the matmul's result leaves the f32 product's group (the GEMM computes floats)
// for a pointwise group with the bias, and the per-block quantize joins it (the cuda
// pointwise kernel indexes blocks too; no other cuda kernel does).
// RUN: fusec-opt %s -p "fuse{target=cpu}" | filecheck %s --check-prefix=CPU
// RUN: fusec-opt %s -p "fuse{target=cuda}" | filecheck %s --check-prefix=CUDA
// CPU:      ai.fused "pointwise" (%x, %s, %z) : (tensor<8x16xf32>, tensor<8xf32>, tensor<8xi8>) -> tensor<8x16xf32>
// CPU-NEXT: ^bb0
// CPU-NEXT:   ai.quantize
// CPU-NEXT:   ai.dequantize
// CPU-NEXT:   ai.relu
// CPU-NEXT:   ai.yield
// CPU:      ai.fused "matmul" (%{{.*}}, %w, %bias, %sw, %zw) : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf8E4M3FN>) -> (tensor<8x32xf32>, tensor<8x32xf8E4M3FN>)
// CPU-NEXT: ^bb0
// CPU-NEXT:   ai.matmul
// CPU-NEXT:   ai.bias_add
// CPU-NEXT:   ai.quantize {{.*}} : tensor<8x32xf32> * tensor<32xf32> * tensor<32xf8E4M3FN>
// CPU-NEXT:   ai.yield
// CPU:      ai.fused "pointwise" (%{{.*}}, %sb, %zb) : (tensor<8x32xf32>, tensor<8x4xf32>, tensor<8x4xi8>) -> tensor<8x32xi8>
// CPU-NEXT: ^bb0
// CPU-NEXT:   ai.quantize {{.*}} {block_size = 8 : i64}
// CPU-NEXT:   ai.yield
// CUDA:      ai.fused "pointwise" (%x, %s, %z)
// CUDA-NEXT: ^bb0
// CUDA-NEXT:   ai.quantize
// CUDA-NEXT:   ai.dequantize
// CUDA-NEXT:   ai.relu
// CUDA-NEXT:   ai.yield
// CUDA:      ai.fused "matmul"
// CUDA-NEXT: ^bb0
// CUDA-NEXT:   ai.matmul
// CUDA-NEXT:   ai.yield
// CUDA:      ai.fused "pointwise"
// CUDA-NEXT: ^bb0
// CUDA-NEXT:   ai.bias_add
// CUDA-NEXT:   ai.quantize {{.*}} : tensor<8x32xf32> * tensor<32xf32> * tensor<32xf8E4M3FN>
// CUDA-NEXT:   ai.quantize {{.*}} {block_size = 8 : i64}
// CUDA-NEXT:   ai.yield
func.func @f(%x: tensor<8x16xf32>, %s: tensor<8xf32>, %z: tensor<8xi8>, %w: tensor<16x32xf32>,
             %bias: tensor<32xf32>, %sw: tensor<32xf32>, %zw: tensor<32xf8E4M3FN>,
             %sb: tensor<8x4xf32>, %zb: tensor<8x4xi8>) -> (tensor<8x32xf8E4M3FN>, tensor<8x32xi8>) {
  %q = ai.quantize %x, %s, %z {axis = 0} : tensor<8x16xf32> * tensor<8xf32> * tensor<8xi8>
  %d = ai.dequantize %q, %s, %z {axis = 0} : tensor<8x16xi8> * tensor<8xf32> * tensor<8xi8>
  %r = ai.relu %d : tensor<8x16xf32>
  %m = ai.matmul %r, %w : tensor<8x16xf32> * tensor<16x32xf32>
  %b = ai.bias_add %m, %bias {axis = 1} : tensor<8x32xf32> * tensor<32xf32>
  %y = ai.quantize %b, %sw, %zw {axis = 1} : tensor<8x32xf32> * tensor<32xf32> * tensor<32xf8E4M3FN>
  %yb = ai.quantize %b, %sb, %zb {axis = 1, block_size = 8} : tensor<8x32xf32> * tensor<8x4xf32> * tensor<8x4xi8>
  return %y, %yb : tensor<8x32xf8E4M3FN>, tensor<8x32xi8>
}
