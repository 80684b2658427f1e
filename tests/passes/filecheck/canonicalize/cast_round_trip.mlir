// canonicalize folds a cast to a wider type and back (every value survives it), and
// only that: a cast through a narrower type rounds, so it stays.
// RUN: fusec-opt %s --split-input-file -p "canonicalize" | filecheck %s

// CHECK-LABEL: func.func @f16_through_f32
// CHECK-NOT:   ai.cast
// CHECK:       func.return %x, %y, %i
func.func @f16_through_f32(%x: tensor<4x8xf16>, %y: tensor<4x8xbf16>, %i: tensor<4xi32>) -> (tensor<4x8xf16>, tensor<4x8xbf16>, tensor<4xi32>) {
  %a = ai.cast %x : tensor<4x8xf16> to tensor<4x8xf32>
  %b = ai.cast %a : tensor<4x8xf32> to tensor<4x8xf16>
  %c = ai.cast %y : tensor<4x8xbf16> to tensor<4x8xf32>
  %d = ai.cast %c : tensor<4x8xf32> to tensor<4x8xbf16>
  %e = ai.cast %i : tensor<4xi32> to tensor<4xi64>
  %f = ai.cast %e : tensor<4xi64> to tensor<4xi32>
  return %b, %d, %f : tensor<4x8xf16>, tensor<4x8xbf16>, tensor<4xi32>
}

// -----

// f32 -> f16 -> f32 rounds; f16 -> bf16 -> f16 rounds (bf16 has fewer mantissa bits).
// CHECK-LABEL: func.func @narrowing_stays
// CHECK:       %[[A:.*]] = ai.cast %x : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT:  %[[B:.*]] = ai.cast %[[A]] : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT:  %[[C:.*]] = ai.cast %y : tensor<4x8xf16> to tensor<4x8xbf16>
// CHECK-NEXT:  %[[D:.*]] = ai.cast %[[C]] : tensor<4x8xbf16> to tensor<4x8xf16>
// CHECK-NEXT:  func.return %[[B]], %[[D]]
func.func @narrowing_stays(%x: tensor<4x8xf32>, %y: tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<4x8xf16>) {
  %a = ai.cast %x : tensor<4x8xf32> to tensor<4x8xf16>
  %b = ai.cast %a : tensor<4x8xf16> to tensor<4x8xf32>
  %c = ai.cast %y : tensor<4x8xf16> to tensor<4x8xbf16>
  %d = ai.cast %c : tensor<4x8xbf16> to tensor<4x8xf16>
  return %b, %d : tensor<4x8xf32>, tensor<4x8xf16>
}

// -----

// The wide value also read elsewhere: the round trip folds, the widening stays for its reader.
// CHECK-LABEL: func.func @wide_value_read_too
// CHECK:       %[[A:.*]] = ai.cast %x : tensor<4xf16> to tensor<4xf32>
// CHECK-NEXT:  func.return %x, %[[A]]
func.func @wide_value_read_too(%x: tensor<4xf16>) -> (tensor<4xf16>, tensor<4xf32>) {
  %a = ai.cast %x : tensor<4xf16> to tensor<4xf32>
  %b = ai.cast %a : tensor<4xf32> to tensor<4xf16>
  return %b, %a : tensor<4xf16>, tensor<4xf32>
}
