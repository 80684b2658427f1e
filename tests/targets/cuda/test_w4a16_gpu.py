"""GPU tests of weight-only int4 layers (W4A16, issue 31) on the cuda target.

A layer as ONNX writes it (``DequantizeLinear`` of an INT4 weight with per-block scales
and zero points along K -> ``MatMul`` + bias -> ``Relu``, or a ``Gemm`` with transB of
codes stored N x K) keeps its weight as codes. Up to 16 rows of activations the W4A16
route reads the codes packed (one kernel, ``gemm/w4.py``); past them (where K and the
scale blocks are multiples of 64) the Tensor Core GEMM dequantizes them itself: up to 64
rows its producer warpgroup into each B stage (``gemm_w4.cuh``), past that its consumers
into wgmma's A registers (``gemm_w4_rs.cuh``); else, or with
``$FUSEC_W4_GEMM=separate``, one pointwise kernel dequantizes them each call and the GEMM
multiplies (``$FUSEC_W4_GEMM`` forces each route). A
layer whose codes are an argument (run-time codes, the IR ``w4a16_ir``) takes the
dequantize kernel at any M. Each case draws fresh codes, scales, zero points and
activations, runs with its output poisoned (NaN) first on a side torch stream and
compares with the float64 reference executor on the same inputs: rel L2 < 1e-2, the bound
of every 16-bit kernel here.
"""

from __future__ import annotations

import numpy as np
import pytest
from w4_cases import w4a16_ir, w4a16_onnx

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

_TORCH = {"f16": "float16", "bf16": "bfloat16"}


def _check(compiled, host: list, dev: list) -> float:
    """Rel L2 of the compiled module on ``dev`` (poisoned, a side stream) against the
    float64 reference executor on ``host``."""
    from fusec.runtime.reference import run_reference

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (out,) = compiled._runner(dev, poison=True)  # queued on `side`, NaN first
        got = out.float().cpu().numpy().astype(np.float64)
    ref = run_reference(compiled.module, host)[0].astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _device(array: np.ndarray, dtype: str):
    return torch.from_numpy(array.astype(np.float32)).to("cuda", getattr(torch, _TORCH[dtype]))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize(
    "m, k, n, block, transposed, scales",
    [
        (1, 4096, 512, 128, False, "block"),
        (1, 256, 96, 32, True, "block"),
        (16, 512, 192, 64, False, "block"),
        (200, 384, 256, 64, False, "block"),
        (4, 1024, 256, 0, False, "column"),
        (8, 2048, 192, 128, False, "block"),  # two steps of K a warp
        (1, 1088, 520, 64, True, "block"),  # the K split's last step partly outside K
        (2, 256, 96, 512, False, "block"),  # one block covering K: per column
        (300, 256, 128, 0, True, "column"),
    ],
)
def test_onnx_w4a16_layer_matches_the_reference(m, k, n, block, transposed, scales, dtype):
    import fusec

    model, x = w4a16_onnx(m, k, n, block, dtype, m * 7 + k, transposed, scales)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    kinds = [kernel.kind for kernel in compiled.kernels]
    steps = (block or k) % 64 == 0 and k % 64 == 0  # the GEMM's int4 B: 64 K a step
    one = m <= 16 or steps  # the W4A16 route, or the GEMM dequantizing its B
    assert kinds == (["matmul"] if one else ["pointwise", "matmul"])
    assert compiled.kernels[-1].remark is None  # no fallback
    assert _check(compiled, [x], [_device(x, dtype)]) < 1e-2


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize(
    "m, k, n, block, transposed, scales, unsigned",
    [
        (17, 512, 192, 128, False, "block", False),  # the fewest rows the GEMM takes
        (300, 1024, 200, 64, True, "block", True),  # N ragged (a tile past N), UINT4
        (1000, 576, 704, 192, False, "block", False),  # several tiles, a block of 3 steps
        (64, 256, 128, 0, False, "column", False),
        (130, 320, 256, 0, True, "tensor", True),
        (4096, 4096, 512, 128, False, "block", False),  # the benchmark's K, the big tile
        (256, 4096, 256, 128, False, "block", False),  # consumer: K split 4 ways
        (140, 2496, 130, 192, True, "block", True),  # consumer: 2 splits, one mid-block
        (65, 512, 201, 128, False, "block", False),  # N odd: the consumers' single stores
    ],
)
@pytest.mark.parametrize("route", ["producer", "consumer"])
def test_the_gemm_dequantizing_its_int4_b_matches_the_reference(
    m, k, n, block, transposed, scales, unsigned, dtype, route, monkeypatch
):
    """Past 16 rows with ``$FUSEC_W4_GEMM=producer`` (the default up to 64 rows): one GEMM
    whose producer dequantizes the codes into each B stage (``gemm_w4.cuh``), on tiles of
    one and two consumers; with ``consumer`` one whose consumers dequantize them into
    wgmma's A registers (``gemm_w4_rs.cuh``: 64, 128 and 256 rows of activations a tile).
    Ragged N, i4 and u4 codes, per-block, per-column and per-tensor scales, bias + ReLU in
    the epilogue."""
    import fusec
    from fusec.targets.cuda.gemm import w4

    monkeypatch.setenv(w4.GEMM_ROUTE_ENV, route)
    model, x = w4a16_onnx(m, k, n, block, dtype, m + k, transposed, scales, unsigned)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    (gemm,) = compiled.kernels
    assert gemm.specs[0].w4 is not None
    assert gemm.specs[0].w4.in_registers == (route == "consumer")
    if route == "consumer" and (m, k) in ((256, 4096), (140, 2496)):  # few deep tiles: split
        assert gemm.specs[0].config.split_k > 1
    layout = "w4rs" if route == "consumer" else "w4gemm"
    assert gemm.prepared_inputs[0][1].startswith(layout)
    assert _check(compiled, [x], [_device(x, dtype)]) < 1e-2


@pytest.mark.parametrize("shape", [(4, 4, 4), (2, 8, 4), (8, 1, 4), (1, 8, 2), (4, 2, 1)], ids=str)
@pytest.mark.parametrize("m", [1, 5])
def test_every_warp_shape_matches_the_reference(m, shape, monkeypatch):
    """The shapes ``gemm_bench.py --w4-sweep`` tries (columns, K split, words a load), each
    forced: columns past N, a K split longer than K's steps, the epilogue a thread an
    output."""
    import fusec
    from fusec.targets.cuda.gemm import w4
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, "cuda-cores")  # (the Tensor Core kernel's shape is fixed)
    monkeypatch.setattr(w4, "SHAPES", ((w4.MAX_ROWS, *shape),))
    model, x = w4a16_onnx(m, 1536, 200, 128, "bf16", m + 11, False, "block")
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    assert [kernel.kind for kernel in compiled.kernels] == ["matmul"]
    assert _check(compiled, [x], [_device(x, "bf16")]) < 1e-2


@pytest.mark.parametrize("kernel", ["registers", "cuda-cores", "ring"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize(
    "m, k, n, block, transposed, unsigned",
    [
        (1, 4096, 520, 128, False, False),
        (12, 1024, 96, 64, True, True),
        (16, 640, 64, 0, False, False),
    ],
)
def test_both_w4a16_kernels_match_the_reference(
    m, k, n, block, transposed, unsigned, dtype, kernel, monkeypatch
):
    """The Tensor Core kernel (``gemm/w4_mma.py``), its variant with the codes through
    shared memory (``FUSEC_W4_KERNEL=ring``) and the CUDA-core kernel on the
    same layers: a tile past N, two B fragments (M > 8), UINT4 codes, scales per column."""
    import fusec
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, kernel)
    scales = "column" if block == 0 else "block"
    model, x = w4a16_onnx(m, k, n, block, dtype, m + n, transposed, scales, unsigned)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    (only,) = compiled.kernels
    assert (only.prepared_inputs[0][1].startswith("w4mma")) == (kernel != "cuda-cores")
    assert _check(compiled, [x], [_device(x, dtype)]) < 1e-2


@pytest.mark.parametrize("kernel", ["registers", "ring"])
def test_blocks_that_walk_several_tiles_match_the_reference(kernel, monkeypatch):
    """1064 tiles of 16 columns, more than a grid of 8 blocks a multiprocessor on an H100 or
    H200 (1056): some blocks take two tiles, and the ring runs on into the second."""
    import fusec
    from fusec.targets.cuda.gemm.w4_mma import KERNEL_CHOICE

    monkeypatch.setenv(KERNEL_CHOICE, kernel)
    model, x = w4a16_onnx(2, 1024, 17024, 128, "bf16", 23, False, "block")
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    assert compiled.kernels[0].prepared_inputs[0][1].startswith("w4mma")
    assert _check(compiled, [x], [_device(x, "bf16")]) < 1e-2


@pytest.mark.parametrize("kernel", ["registers", "ring"])
@pytest.mark.parametrize("staggered", [False, True])
@pytest.mark.parametrize("m, dtype", [(2, "bf16"), (12, "f16")])
def test_x_sums_from_a_shared_table_match_the_reference(kernel, staggered, m, dtype, monkeypatch):
    """``SHARED_X_SUMS`` (x's chunk sums computed once a block) with and without
    ``STAGGERED_HALVES``, one and two B fragments, on more tiles than blocks."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, kernel)
    monkeypatch.setattr(w4_mma, "SHARED_X_SUMS", True)
    monkeypatch.setattr(w4_mma, "STAGGERED_HALVES", staggered)
    model, x = w4a16_onnx(m, 1024, 17024, 128, dtype, 31, False, "block")
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    assert compiled.kernels[0].prepared_inputs[0][1].startswith("w4mma")
    assert _check(compiled, [x], [_device(x, dtype)]) < 1e-2


@pytest.mark.parametrize(
    "knobs",
    [
        {"MIN_BLOCKS_PER_SM": 3},
        {"MIN_BLOCKS_PER_SM": 3, "SHARED_X_SUMS": True, "STAGGERED_HALVES": True},
        {"CHUNKS_PER_STEP": 2, "STAGES": 2},
        {"STAGES": 4},
        {"MIN_BLOCKS_PER_SM": 3, "RING_SCALES": True},
        {"RING_SCALES": True, "SHARED_X_SUMS": True, "STAGGERED_HALVES": True, "STAGES": 4},
    ],
    ids=str,
)
@pytest.mark.parametrize("m, dtype", [(2, "bf16"), (12, "f16")])
def test_the_ring_with_a_producer_warp_matches_the_reference(knobs, m, dtype, monkeypatch):
    """``PRODUCER_WARP`` (a ninth warp copies, the readers release each stage on its
    mbarrier, no block barrier a step) with the ring's other knobs, on more tiles than
    blocks: stages refilled across tiles while faster warps run ahead."""
    import fusec
    from fusec.targets.cuda.gemm import w4_mma

    monkeypatch.setenv(w4_mma.KERNEL_CHOICE, "ring")
    monkeypatch.setattr(w4_mma, "PRODUCER_WARP", True)
    for name, value in knobs.items():
        monkeypatch.setattr(w4_mma, name, value)
    model, x = w4a16_onnx(m, 1024, 17024, 128, dtype, 37, False, "block")
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    source = compiled.kernels[0].source
    assert "mbar_arrive(empty, slot)" in source
    assert ("cp_async16(" in source) == knobs.get("RING_SCALES", False)
    assert _check(compiled, [x], [_device(x, dtype)]) < 1e-2


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_positive_activations_keep_the_tensor_core_sums_exact_enough(dtype):
    """The Tensor Core kernel sums ``(MAGIC + q) x`` and subtracts ``(MAGIC + z) sum x``
    (``w4_mma_device``): with activations all positive (after a ReLU or GELU) x's sum does
    not cancel, the largest case for that subtraction (f16's MAGIC is 1024); a float32
    model of the sums loses ~2e-5 there."""
    import fusec

    model, x = w4a16_onnx(4, 4096, 96, 128, dtype, 17, False, "block")
    x = (np.abs(x.astype(np.float32)) + np.float32(0.5)).astype(x.dtype)
    compiled = fusec.compile(fusec.from_onnx(model), target="cuda")
    assert compiled.kernels[0].prepared_inputs[0][1].startswith("w4mma")
    assert _check(compiled, [x], [_device(x, dtype)]) < 1e-2


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m, zero", [(1, True), (16, False), (200, True)])
def test_run_time_codes_are_dequantized_then_multiplied(m, zero, dtype):
    import ml_dtypes

    import fusec

    k, n, block = 384, 256, 64
    compiled = fusec.compile(w4a16_ir(m, k, n, block, dtype, zero), target="cuda")
    assert [kernel.kind for kernel in compiled.kernels] == ["pointwise", "matmul"]
    assert compiled.kernels[1].remark is None
    rng = np.random.default_rng(m + 3)
    x = rng.standard_normal((m, k)).astype(np.float32)
    q = rng.integers(-8, 8, (k, n)).astype(np.int8)
    s = rng.uniform(0.01, 0.05, (k // block, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    z = rng.integers(-2, 3, (k // block, n)).astype(np.int8)
    host_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16
    host = [x.astype(host_dtype), q.astype(ml_dtypes.int4), s.astype(host_dtype)]
    host += [bias.astype(host_dtype)] + ([z.astype(ml_dtypes.int4)] if zero else [])
    dev = [_device(x, dtype), torch.from_numpy(q).cuda(), _device(s, dtype), _device(bias, dtype)]
    dev += [torch.from_numpy(z).cuda()] if zero else []
    assert _check(compiled, host, dev) < 1e-2
