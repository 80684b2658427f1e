"""Fused attention on the cuda target (flash-style online softmax on the Hopper core)."""
