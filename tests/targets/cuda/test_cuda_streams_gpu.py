"""Results on the cuda target are ordered on the caller's stream (needs a GPU and torch).

For each group kind (pointwise, row_reduce, matmul, conv, the float8 matmul), with at least about
a millisecond of work: the caller's stream is kept busy (``torch.cuda._sleep``),
then the input is written on it (it held NaN before), fusec is called, and the
result is read on the same stream with no synchronisation. Work that fusec
enqueued anywhere else would read the NaN input, or be read before it ends.
The expected values come from the same compiled function called between full
device synchronisations, so only the ordering is under test here (numerics
are checked against the reference elsewhere).

Cases: torch's default stream (raw handle 0, the legacy default stream), a
torch side stream, an explicit ``stream=`` while the current stream is the
default one, and cupy's current stream.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import layernorm_residual, one_group, pointwise_tail, tensor_type
from fp8_cases import fp8_gemm_ir

import fusec

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 200_000_000  # ~0.1 s at the H200's clock: far longer than any launch gap


def _matmul(n: int) -> str:
    a, o, b = tensor_type((n, n), "f16"), tensor_type((n, n), "f16"), tensor_type((n,), "f16")
    body = [
        f"%m = ai.matmul %a1, %w1 : {a} * {a}",
        f"%c = ai.bias_add %m, %b1 {{axis = 1 : i64}} : {o} * {b}",
        f"%o = ai.relu %c : {o}",
        f"ai.yield %o : {o}",
    ]
    return one_group("mm", [("a", a), ("w", a), ("b", b)], [o], "matmul", body)


def _conv(n: int, c: int, hw: int) -> str:
    x, w = tensor_type((n, c, hw, hw), "f16"), tensor_type((c, c, 3, 3), "f16")
    o, b = tensor_type((n, c, hw, hw), "f16"), tensor_type((c,), "f16")
    body = [
        f"%c = ai.conv2d %x1, %w1 {{padding = array<i64: 1, 1>}} : {x} * {w}",
        f"%d = ai.bias_add %c, %b1 : {o} * {b}",
        f"%o = ai.relu %d : {o}",
        f"ai.yield %o : {o}",
    ]
    return one_group("conv", [("x", x), ("w", w), ("b", b)], [o], "conv", body)


# kind -> IR of one group with >= ~1 ms of work on an H200
CASES = {
    "pointwise": lambda: pointwise_tail(1 << 29, "f32"),  # 6 GiB moved
    "row_reduce": lambda: layernorm_residual(131072, 4096, "f16"),  # 4 GiB moved
    "matmul": lambda: _matmul(8192),  # 1.1 TFLOP
    "conv": lambda: _conv(64, 512, 56),  # 1.9 TFLOP
    # the float8 GEMM (issue 31): dequantized e4m3 codes, fused by the whole pipeline
    "matmul:fp8": lambda: fp8_gemm_ir(8192, 8192, 8192, tail="bf16"),  # 1.1 TFLOP
}
#: the pipeline of a case whose IR is not one group already
PIPELINES = {"matmul:fp8": None}


def _inputs(torch, compiled, seed: int) -> list:
    from fusec.dialect.ops import spec_of
    from fusec.ir.module import entry_function

    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    dtypes["f8E4M3FN"] = torch.float8_e4m3fn
    tensors = []
    for param in entry_function(compiled.module).function_type.inputs.data:
        spec = spec_of(param)
        t = torch.rand(spec.shape, generator=gen, device="cuda", dtype=torch.float32)
        tensors.append((t + 0.5).to(dtypes[spec.dtype]))  # in [0.5, 1.5): sqrt/div safe
    return tensors


def _race(torch, compiled, sources: list, explicit=None) -> list:
    """Poisoned inputs written on the (busy) caller's stream, then fusec, then a read on it.

    The caller's stream is ``explicit`` (passed as ``stream=`` while the current stream
    stays torch's default) or else the current stream.
    """
    stream = explicit if explicit is not None else torch.cuda.current_stream()
    inputs = [torch.full_like(s, float("nan")) for s in sources]  # on the current stream
    stream.wait_stream(torch.cuda.current_stream())  # the poison lands first
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)
        for dst, src in zip(inputs, sources, strict=True):
            dst.copy_(src)
        if explicit is None:
            out = compiled(*inputs)
    if explicit is not None:
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        out = compiled(*inputs, stream=explicit)
    outs = out if isinstance(out, tuple) else (out,)
    with torch.cuda.stream(stream):
        return [o.float().cpu() for o in outs]  # a copy on this stream, then its sync only


def _expected(torch, compiled, sources: list) -> list:
    torch.cuda.synchronize()
    out = compiled(*sources)
    torch.cuda.synchronize()
    outs = out if isinstance(out, tuple) else (out,)
    return [o.float().cpu() for o in outs]


def _same(torch, got: list, want: list) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert not torch.isnan(g).any(), f"result #{k} read NaN: fusec ran before its input"
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2, msg=f"result #{k}")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("where", ["default_stream", "side_stream"])
def test_results_are_ordered_on_the_callers_stream(torch, kind: str, where: str):
    pipeline = PIPELINES.get(kind, "infer-shapes")
    compiled = fusec.compile(CASES[kind](), target="cuda", pipeline=pipeline)
    assert [k.kind for k in compiled.kernels] == [kind.split(":")[0]]
    sources = _inputs(torch, compiled, seed=1)
    want = _expected(torch, compiled, sources)
    if where == "default_stream":
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        got = _race(torch, compiled, sources)
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = _race(torch, compiled, sources)
    _same(torch, got, want)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_an_explicit_stream_orders_the_call(torch, kind: str):
    compiled = fusec.compile(
        CASES[kind](), target="cuda", pipeline=PIPELINES.get(kind, "infer-shapes")
    )
    sources = _inputs(torch, compiled, seed=2)
    want = _expected(torch, compiled, sources)
    side = torch.cuda.Stream()
    got = _race(torch, compiled, sources, explicit=side)
    _same(torch, got, want)


@pytest.mark.parametrize("kind", ["pointwise", "matmul"])
def test_cupy_current_stream_orders_the_call(torch, kind: str):
    cp = pytest.importorskip("cupy")
    compiled = fusec.compile(
        CASES[kind](), target="cuda", pipeline=PIPELINES.get(kind, "infer-shapes")
    )
    sources = _inputs(torch, compiled, seed=3)
    want = _expected(torch, compiled, sources)
    torch.cuda.synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        inputs = [cp.full(tuple(s.shape), cp.nan, dtype=_cupy_dtype(cp, s)) for s in sources]
        cp.cuda.runtime.streamSynchronize(stream.ptr)
        busy = torch.cuda.ExternalStream(stream.ptr)
        with torch.cuda.stream(busy):
            torch.cuda._sleep(SLEEP_CYCLES)
        for dst, src in zip(inputs, sources, strict=True):
            dst[...] = cp.asarray(src)  # queued on cupy's current stream, after the sleep
        out = compiled(*inputs)
        got = [torch.from_numpy(np.asarray(cp.asnumpy(out, stream=stream), np.float32))]
        stream.synchronize()
    _same(torch, got, want)


def _cupy_dtype(cp, tensor):
    return {"torch.float16": cp.float16, "torch.float32": cp.float32}[str(tensor.dtype)]


def test_torch_external_stream_of_a_zero_handle_is_not_the_default_stream(torch):
    """The cause of the race: a zero pointer gives a new pool stream, not stream 0."""
    from fusec.targets.cuda.streams import LEGACY, current_torch_ref

    assert torch.cuda.ExternalStream(0) != torch.cuda.default_stream()
    ref = current_torch_ref(0)  # what a call on torch's default stream uses
    assert ref.ptr == LEGACY and ref.torch_stream(torch) == torch.cuda.default_stream()
