// Integer and bool ops fuse like the float ones (issue 29): the lookup at run-time ids
// and the running sum are copy groups; the comparison, logic and casts from the i64 mask
// to the f32 additive mask are one pointwise group, its input i64 and its result f32.
// RUN: fusec-opt %s -p fusec-default | filecheck %s
// CHECK: ai.fused "copy" (%table, %ids) : (tensor<50x16xf32>, tensor<2x6xi64>) -> tensor<2x6x16xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.take
// CHECK: ai.fused "pointwise" (%mask, %z, %p, %big) : (tensor<2x6xi64>, tensor<i64>, tensor<2x6xi1>, tensor<f32>) -> tensor<2x6xf32>
// CHECK: ai.equal
// CHECK-NEXT: ai.not
// CHECK-NEXT: ai.and
// CHECK-NEXT: ai.cast {{.*}} to tensor<2x6xf32>
// CHECK-NEXT: ai.mul
// CHECK: ai.fused "copy" (%mask) : (tensor<2x6xi64>) -> tensor<2x6xi64>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: ai.cumsum
func.func @f(%ids: tensor<2x6xi64>, %mask: tensor<2x6xi64>, %p: tensor<2x6xi1>, %table: tensor<50x16xf32>) -> (tensor<2x6x16xf32>, tensor<2x6xf32>, tensor<2x6xi64>) {
  %e = ai.take %table, %ids : tensor<50x16xf32> * tensor<2x6xi64>
  %z = arith.constant dense<0> : tensor<i64>
  %b = ai.equal %mask, %z : tensor<2x6xi64> * tensor<i64>
  %n = ai.not %b : tensor<2x6xi1>
  %a = ai.and %n, %p : tensor<2x6xi1> * tensor<2x6xi1>
  %bf = ai.cast %a : tensor<2x6xi1> to tensor<2x6xf32>
  %big = arith.constant dense<-1.0e4> : tensor<f32>
  %m = ai.mul %bf, %big : tensor<2x6xf32> * tensor<f32>
  %c = ai.cumsum %mask {axis = 1 : i64} : tensor<2x6xi64>
  return %e, %m, %c : tensor<2x6x16xf32>, tensor<2x6xf32>, tensor<2x6xi64>
}
