"""Dynamic shapes on the GPU (issue 29): one ``fusec.from_onnx`` + ``fusec.compile`` of an
f16 encoder layer with dynamic batch and sequence (token ids, a padding mask, heads split
by ``Shape -> Gather -> Concat -> Reshape``) runs at three shapes on torch tensors, each
shape compiled once, every output compared with the float64 reference executor on the
specialization's own IR (rounded where the cuda program rounds), outputs poisoned first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from numerics import assert_close

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "frontend" / "onnx"))
from dynamic_models import encoder, encoder_feeds  # noqa: E402

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

SHAPES = [(1, 16), (2, 40), (4, 7)]  # (batch, seq)


@pytest.fixture(scope="module")
def device():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    return torch.device("cuda")


def test_encoder_at_three_shapes_on_torch_tensors(device) -> None:
    import fusec
    from fusec.runtime.reference import run_reference

    compiles: set[int] = set()
    dynamic = fusec.from_onnx(encoder(dim=128, heads=2, dtype=np.float16))
    compiled = fusec.compile(
        dynamic, target="cuda", after_pass=lambda _name, module: compiles.add(id(module))
    )
    rng = np.random.default_rng(29)
    for batch, seq in [*SHAPES, SHAPES[1]]:
        feeds = encoder_feeds(rng, batch, seq)
        args = [torch.from_numpy(a).to(device) for a in feeds.values()]
        out = compiled(*args)
        torch.cuda.synchronize()
        assert isinstance(out, torch.Tensor) and out.is_cuda
        assert tuple(out.shape) == (batch, seq, 128) and out.dtype == torch.float16
        spec = compiled.specialize((batch, seq), (batch, seq))
        expected = run_reference(spec.module, list(feeds.values()), rounding="groups")[0]
        assert_close(out.float().cpu().numpy(), expected, "f16", what=f"{batch}x{seq}")
        (poisoned,) = spec.program(list(feeds.values()), poison=True)  # numpy in and out
        assert_close(poisoned, expected, "f16", what=f"{batch}x{seq} poisoned")
    assert len(compiles) == 3 and len(compiled.specializations) == 3
    kinds = {k.kind for s in compiled.specializations for k in s.compiled.kernels}
    assert "attention" in kinds  # the recognised attention runs as one cuda kernel
