"""Build the seed corpora of the fuzzers (``fuzz/corpus/TARGET``) from the examples and tests.

    python fuzz/seed.py

Re-run after adding examples; the corpora stay small (tens of files) so that
CI can run every one of them through its check (``tests/fuzz``).
"""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parent
REPO = ROOT.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "frontend" / "onnx")]


def _put(target: str, data: bytes) -> None:
    folder = ROOT / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def mlir() -> None:
    for path in sorted((REPO / "examples").glob("*.mlir")):
        _put("mlir", path.read_bytes())
    for path in sorted((REPO / "tests" / "passes" / "golden").glob("*.mlir")):
        if ".expected" not in path.name:
            _put("mlir", path.read_bytes())
    for path in sorted((REPO / "tests" / "passes" / "golden" / "fusion").glob("*.expected.mlir")):
        _put("mlir", path.read_bytes())  # already fused: ai.fused groups
    from test_adversarial import MLIR_CASES  # bad input the tests already know

    for text, *_ in MLIR_CASES.values():
        _put("mlir", text if isinstance(text, bytes) else text.encode())
    from hypothesis import HealthCheck, given, settings
    from strategies import graphs

    texts: list[str] = []

    @settings(max_examples=24, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(graphs(max_ops=4))
    def collect(graph) -> None:
        texts.append(graph.text())

    collect()
    for text in texts:
        _put("mlir", text.encode())


def rules() -> None:
    from fusec.passes.fusion.rules import default_rules_text

    text = default_rules_text()
    _put("rules", text.encode())
    _put("rules", text.replace("max_chain_ops", "max_chain_ops 2 #").encode())
    _put("rules", b'kind pointwise "p" {\n  body elementwise max 4 where same_shape\n}\n')


def onnx_models() -> None:
    import onnx
    import onnx_nets as nets

    rng = np.random.default_rng(0)
    models = [
        nets.resnet_basic_block(channels=4, size=6, batch=1),
        nets.transformer_mlp(batch=1, tokens=4, dim=8, hidden=16),
        nets.node_model("Relu", {"x": rng.standard_normal((2, 3)).astype(np.float32)}),
        nets.node_model(
            "Softmax", {"x": rng.standard_normal((2, 5)).astype(np.float16)}, axis=-1
        ),
        nets.node_model(
            "Gemm",
            {"a": rng.standard_normal((3, 4)).astype(np.float32)},
            weights={"b": rng.standard_normal((5, 4)).astype(np.float32),
                     "c": rng.standard_normal(5).astype(np.float32)},
            transB=1,
        ),
    ]  # fmt: skip
    for model in models:
        _put("onnx", model.SerializeToString())
    del onnx


def npz() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal(3).astype(np.float16)
    for save, kwargs in (
        (np.savez, {"x": x, "y": y}),
        (np.savez_compressed, {"x": x, "y": y}),
        (np.savez, {"arr_0": x, "arr_1": y}),
        (np.savez, {"x": x.astype(np.float64), "y": y.astype(np.int32)}),
        (np.savez, {"x": x, "y": y, "z": y}),
        (np.savez, {"x": x.T, "y": y}),
    ):
        buffer = io.BytesIO()
        save(buffer, **kwargs)
        _put("npz", buffer.getvalue())


if __name__ == "__main__":
    mlir()
    rules()
    onnx_models()
    npz()
    for target in ("mlir", "rules", "onnx", "npz"):
        files = list((ROOT / "corpus" / target).glob("*"))
        size = sum(f.stat().st_size for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")
