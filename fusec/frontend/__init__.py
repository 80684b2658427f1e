"""Front ends: turn .mlir text, traced Python and ONNX models into ``ai`` IR."""
