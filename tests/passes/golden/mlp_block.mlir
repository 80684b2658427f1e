// A transformer MLP block: y = x + gelu(layernorm(x) @ w1 + b1) @ w2 + b2
func.func @mlp_block(%x: tensor<128x256xf16>, %gamma: tensor<256xf16>, %beta: tensor<256xf16>, %w1: tensor<256x1024xf16>, %b1: tensor<1024xf16>, %w2: tensor<1024x256xf16>, %b2: tensor<256xf16>) -> tensor<128x256xf16> {
  %ln = ai.layernorm %x, %gamma, %beta : tensor<128x256xf16> * tensor<256xf16> * tensor<256xf16>
  %h = ai.matmul %ln, %w1 : tensor<128x256xf16> * tensor<256x1024xf16>
  %hb = ai.bias_add %h, %b1 : tensor<128x1024xf16> * tensor<1024xf16>
  %g = ai.gelu %hb : tensor<128x1024xf16>
  %o = ai.matmul %g, %w2 : tensor<128x1024xf16> * tensor<1024x256xf16>
  %ob = ai.bias_add %o, %b2 : tensor<128x256xf16> * tensor<256xf16>
  %y = ai.add %x, %ob : tensor<128x256xf16> * tensor<128x256xf16>
  return %y : tensor<128x256xf16>
}
