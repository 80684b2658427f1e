"""``@fusec.fuse`` with GPU arrays: torch and cupy tensors stay on the GPU.

Results come back as the same kind of array, on the same device (no host
round-trip), and match numpy. Skipped without a usable CUDA GPU, or without
torch / cupy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numerics import assert_close

import fusec
from fusec import ops

pytestmark = pytest.mark.gpu


def block(x, w, b):
    return ops.relu(ops.conv2d(x, w, padding=1) + b[None, :, None, None])


def attention(q, k, v):
    return ops.softmax(q @ k.mT * (1.0 / math.sqrt(q.shape[-1]))) @ v


def np_block(x, w, b):
    x, w, b = (np.asarray(a, dtype=np.float64) for a in (x, w, b))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], x.shape[2], x.shape[3]))
    for i in range(3):
        for j in range(3):
            window = xp[:, :, i : i + x.shape[2], j : j + x.shape[3]]
            out += np.einsum("nchw,kc->nkhw", window, w[:, :, i, j])
    return np.maximum(out + b[None, :, None, None], 0)


def np_attention(q, k, v):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v


def host_inputs(shapes, dtype=np.float16):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


CASES = [
    (block, np_block, [(2, 8, 12, 12), (16, 8, 3, 3), (16,)]),
    (attention, np_attention, [(2, 4, 64, 32)] * 3),
]


@pytest.mark.parametrize(("program", "reference", "shapes"), CASES)
def test_torch_cuda_tensors(program, reference, shapes):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    host = host_inputs(shapes)
    args = [torch.from_numpy(a).to("cuda") for a in host]
    fused = fusec.fuse(program, disk_cache=False)
    out = fused(*args)
    assert isinstance(out, torch.Tensor)
    assert out.device == args[0].device and out.dtype == torch.float16
    assert_close(out.cpu().numpy(), reference(*host), tol=1e-2)
    fused(*args)
    assert fused.trace_count == 1


@pytest.mark.parametrize(("program", "reference", "shapes"), CASES)
def test_cupy_arrays(program, reference, shapes):
    cupy = pytest.importorskip("cupy")
    host = host_inputs(shapes)
    args = [cupy.asarray(a) for a in host]
    out = fusec.fuse(program, disk_cache=False)(*args)
    assert isinstance(out, cupy.ndarray) and out.dtype == np.float16
    assert out.device.id == args[0].device.id
    assert_close(cupy.asnumpy(out), reference(*host), tol=1e-2)


def test_numpy_inputs_on_the_cuda_target():
    host = host_inputs(CASES[0][2])
    out = fusec.fuse(block, target="cuda", disk_cache=False)(*host)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16
    assert_close(out, np_block(*host), tol=1e-2)


def test_signature_includes_the_device():
    torch = pytest.importorskip("torch")
    host = host_inputs(CASES[0][2])
    fused = fusec.fuse(block, disk_cache=False)
    fused(*host)
    fused(*[torch.from_numpy(a).to("cuda") for a in host])
    assert fused.trace_count == 2
