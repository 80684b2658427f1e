"""User-facing tools built on the API, outside the compiler packages.

``viz`` draws the fused graph, ``runner`` is what ``fusec run`` does besides
parsing arguments, ``conformance`` runs the ONNX backend node tests.
"""
