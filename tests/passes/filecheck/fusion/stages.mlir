// Each stage of `fuse` alone (fuse-<stage>), on one graph: what that stage groups.
// RUN: fusec-opt %s -p fuse-prologue | filecheck %s --check-prefix=PROLOGUE
// RUN: fusec-opt %s -p fuse-epilogue | filecheck %s --check-prefix=EPILOGUE
// RUN: fusec-opt %s -p fuse-reduction | filecheck %s --check-prefix=REDUCTION
// RUN: fusec-opt %s -p fuse-elementwise | filecheck %s --check-prefix=ELEMENTWISE
// RUN: fusec-opt %s -p fuse-singletons | filecheck %s --check-prefix=SINGLETONS
// The stages one pass each give what the one pass gives:
// RUN: fusec-opt %s -p fuse-prologue,fuse-epilogue,fuse-reduction,fuse-elementwise,fuse-injective,fuse-singletons > %t.staged
// RUN: fusec-opt %s -p fuse | diff - %t.staged

// prologue: no matmul here has a LayerNorm on its A operand: nothing to group.
// PROLOGUE-NOT: ai.fused

// epilogue: the matmul takes its elementwise consumers, and yields %h too (returned).
// EPILOGUE:       %h, %y = ai.fused "matmul"
// EPILOGUE-NEXT:  ^bb0
// EPILOGUE-NEXT:  ai.matmul
// EPILOGUE-NEXT:  ai.gelu
// EPILOGUE-NEXT:  ai.sigmoid
// EPILOGUE-NEXT:  ai.mul
// EPILOGUE-NEXT:  ai.yield
// EPILOGUE-NOT:   ai.fused

// reduction: each row reduction clones the cheap %t it reads (never written out)
// and the softmax takes the add that follows it.
// REDUCTION:      ai.fused "row_reduce"
// REDUCTION-NEXT: ^bb0
// REDUCTION-NEXT: %t = ai.mul
// REDUCTION-NEXT: ai.layernorm
// REDUCTION-NEXT: ai.yield
// REDUCTION:      ai.fused "row_reduce"
// REDUCTION-NEXT: ^bb0
// REDUCTION-NEXT: %t = ai.mul
// REDUCTION-NEXT: ai.softmax
// REDUCTION-NEXT: ai.add
// REDUCTION-NEXT: ai.yield
// REDUCTION-NOT:  ai.fused

// elementwise: the pointwise tail of the matmul, alone.
// ELEMENTWISE:      %y = ai.fused "pointwise"
// ELEMENTWISE-NEXT: ^bb0
// ELEMENTWISE-NEXT: ai.gelu
// ELEMENTWISE-NEXT: ai.sigmoid
// ELEMENTWISE-NEXT: ai.mul
// ELEMENTWISE-NEXT: ai.yield
// ELEMENTWISE-NOT:  ai.fused

// singletons: every op in its own kernel, of the kind its rules give it.
// SINGLETONS-COUNT-8: ai.fused
// SINGLETONS-NOT:     ai.fused

func.func @two_consumers(%x: tensor<8x64xf32>, %scale: tensor<64xf32>, %gamma: tensor<64xf32>, %beta: tensor<64xf32>, %w: tensor<64x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %t = ai.mul %x, %scale : tensor<8x64xf32> * tensor<64xf32>
  %p = ai.softmax %t : tensor<8x64xf32>
  %n = ai.layernorm %t, %gamma, %beta : tensor<8x64xf32> * tensor<64xf32> * tensor<64xf32>
  %o = ai.add %p, %n : tensor<8x64xf32> * tensor<8x64xf32>
  %h = ai.matmul %o, %w : tensor<8x64xf32> * tensor<64x32xf32>
  %a = ai.gelu %h : tensor<8x32xf32>
  %s = ai.sigmoid %h : tensor<8x32xf32>
  %y = ai.mul %a, %s : tensor<8x32xf32> * tensor<8x32xf32>
  return %h, %y : tensor<8x32xf32>, tensor<8x32xf32>
}
