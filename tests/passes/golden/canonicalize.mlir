// What canonicalize and cse do to ai IR: an identity cast and relu(relu(x))
// fold away, equal ops and equal constants merge, dead pure ops disappear.
func.func @canonicalize(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c0 = arith.constant dense<2.000000e+00> : tensor<f32>
  %c1 = arith.constant dense<2.000000e+00> : tensor<f32>
  %i = ai.cast %x : tensor<4x8xf32> to tensor<4x8xf32>
  %r1 = ai.relu %i : tensor<4x8xf32>
  %r2 = ai.relu %r1 : tensor<4x8xf32>
  %e1 = ai.exp %r2 : tensor<4x8xf32>
  %e2 = ai.exp %r2 : tensor<4x8xf32>
  %a = ai.mul %e1, %c0 : tensor<4x8xf32> * tensor<f32>
  %b = ai.mul %e2, %c1 : tensor<4x8xf32> * tensor<f32>
  %dead = ai.tanh %y : tensor<4x8xf32>
  return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
}
