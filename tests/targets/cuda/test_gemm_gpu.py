"""GPU tests of the cuda matmul template (Hopper wgmma GEMM) through ``fusec.compile``.

Every variant (plain, transposed, batched, ragged M/N/K, elementwise epilogue,
LayerNorm prologue with both weight layouts, row softmax, long-row softmax with
its finalise pass, fp16 and bf16) is compared elementwise with the float64
reference executor on fresh random inputs, with its output poisoned (NaN)
first. Inputs are made and results read on a side torch stream, and fusec is
called there with no synchronisation: work queued on any other stream would
race with the inputs' creation.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def _t(shape, dtype: str) -> str:
    return f"tensor<{'x'.join(str(d) for d in shape)}x{dtype}>"


def matmul_ir(m, n, k, dtype, *, tb=False, batch=(), batch_b=True, tail=(), ln=False) -> str:
    """[layernorm ->] matmul (A @ B or A @ B^T) -> tail ops; ``tail`` holds op templates
    over ``{o}`` (output type) and ``%v`` (the previous value), extra inputs named %e<k>."""
    a_shape = (*batch, m, k)
    b_shape = ((*batch,) if batch_b else ()) + ((n, k) if tb else (k, n))
    o = _t((*batch, m, n), dtype)
    params = [("a", _t(a_shape, dtype)), ("b", _t(b_shape, dtype))]
    lines = []
    lhs = "%a"
    if ln:
        params += [("g", _t((k,), dtype)), ("be", _t((k,), dtype))]
        lines.append(
            f"%n = ai.layernorm %a, %g, %be {{epsilon = 1.0e-05 : f32}} : "
            f"{_t(a_shape, dtype)} * {_t((k,), dtype)} * {_t((k,), dtype)}"
        )
        lhs = "%n"
    attr = " {transpose_b = true}" if tb else ""
    lines.append(f"%v0 = ai.matmul {lhs}, %b{attr} : {_t(a_shape, dtype)} * {_t(b_shape, dtype)}")
    for index, (op, extra) in enumerate(tail):
        if extra is not None:
            params.append((f"e{index}", _t(extra, dtype)))
        lines.append(f"%v{index + 1} = " + op.format(v=f"%v{index}", e=f"%e{index}", o=o))
    args = ", ".join(f"%{name}: {ty}" for name, ty in params)
    body = "\n  ".join(lines)
    return f"func.func @g({args}) -> {o} {{\n  {body}\n  return %v{len(tail)} : {o}\n}}\n"


def bias(n: int, dtype: str) -> tuple:
    return (f"ai.bias_add {{v}}, {{e}} : {{o}} * {_t((n,), dtype)}", (n,))


GELU = ('ai.gelu {v} {{approximate = "tanh"}} : {o}', None)
RELU = ("ai.relu {v} : {o}", None)
SOFTMAX = ("ai.softmax {v} : {o}", None)


def scale(shape, dtype: str) -> tuple:
    return (f"ai.mul {{v}}, {{e}} : {{o}} * {_t(shape, dtype)}", shape)


TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
LONG_SOFTMAX = "fusec-cuda-long-softmax"  # softmax rows > 256 in the GEMM group


def _inputs(compiled, dtype: str, seed: int) -> list:
    """Random device tensors on the current stream: B scaled by K^-1/2 so that logits stay
    O(1) (a meaningful softmax); A offset by 3 when it feeds a LayerNorm (a mean that
    must not cancel), gamma near 1."""
    from fusec.dialect.ops import spec_of
    from fusec.runtime.reference import entry_function

    gen = torch.Generator(device="cuda").manual_seed(seed)
    fn = entry_function(compiled.module)
    names = [arg.name_hint for arg in fn.body.block.args]
    k = spec_of(fn.function_type.inputs.data[0]).shape[-1]
    out = []
    for name, param in zip(names, fn.function_type.inputs.data, strict=True):
        shape = spec_of(param).shape
        x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32)
        if name == "b":
            x = x / k**0.5
        elif name == "a" and "g" in names:
            x = x + 3.0
        elif name == "g":
            x = 1.0 + 0.2 * x
        elif name == "be":
            x = 0.2 * x
        out.append(x.to(TORCH[dtype]))
    return out


def _numpy(t) -> np.ndarray:
    import ml_dtypes

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def _check(text: str, dtype: str, seed: int = 0, pipeline: str | None = None) -> None:
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(text, target="cuda", pipeline=pipeline)
    assert any(k.kind == "matmul" and "GemmLaunch" in k.source for k in compiled.kernels)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensors = _inputs(compiled, dtype, seed)
        (out,) = compiled._runner(tensors, poison=True)  # queued on `side`, NaN first
        got = out.float().cpu().numpy()  # ordered on `side`: no synchronize
    ref = run_reference(compiled.module, [_numpy(t) for t in tensors])[0].astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    atol = 1e-2 * max(float(np.abs(ref).max()), 1e-6)
    bad = ~np.isclose(got, ref, rtol=1e-2, atol=atol)
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off; rel L2 {rel:.2e}"
    assert rel < 1e-2, f"rel L2 {rel:.2e}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m, n, k", [(1000, 1000, 1000), (4097, 511, 77)])
def test_matmul_ragged(dtype: str, m: int, n: int, k: int) -> None:
    _check(matmul_ir(m, n, k, dtype), dtype)


def test_matmul_transposed_b_bias_gelu() -> None:
    _check(matmul_ir(1024, 768, 520, "f16", tb=True, tail=(bias(768, "f16"), GELU)), "f16")


@pytest.mark.parametrize("batch_b", [True, False])
def test_matmul_batched(batch_b: bool) -> None:
    _check(matmul_ir(300, 200, 136, "f16", batch=(3,), batch_b=batch_b, tail=(RELU,)), "f16")


@pytest.mark.parametrize("dtype, tb", [("f16", False), ("bf16", False), ("f16", True)])
def test_layernorm_prologue(dtype: str, tb: bool) -> None:
    tail = (bias(768, dtype), GELU)
    _check(matmul_ir(1000, 768, 1000, dtype, tb=tb, ln=True, tail=tail), dtype)


@pytest.mark.parametrize("dtype, n", [("f16", 256), ("bf16", 200), ("f16", 64)])
def test_row_softmax_epilogue(dtype: str, n: int) -> None:
    tail = (scale((n,), dtype), SOFTMAX, scale((n,), dtype))
    _check(matmul_ir(2000, n, 256, dtype, tail=tail), dtype)


@pytest.mark.parametrize("dtype, n", [("f16", 4096), ("bf16", 1000)])
def test_long_row_softmax_partials_and_finalise(dtype: str, n: int) -> None:
    tail = (bias(n, dtype), SOFTMAX, scale((n,), dtype))
    _check(matmul_ir(513, n, 512, dtype, tail=tail), dtype, pipeline=LONG_SOFTMAX)


@pytest.mark.parametrize(
    "m, k, n", [(8192, 256, 256), (512, 4096, 4096), (512, 4096, 2048), (1001, 256, 1000)]
)
def test_layernorm_matmul_softmax(m: int, k: int, n: int) -> None:
    _check(matmul_ir(m, n, k, "f16", ln=True, tail=(SOFTMAX,)), "f16", pipeline=LONG_SOFTMAX)


def test_second_call_reuses_prepared_launches_on_new_data() -> None:
    """The cached launch path (same buffers, new contents) computes the new result."""
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(matmul_ir(512, 512, 512, "f16", ln=True), target="cuda")
    tensors = _inputs(compiled, "f16", 1)
    compiled(*tensors)
    for t, fresh in zip(tensors, _inputs(compiled, "f16", 2), strict=True):
        t.copy_(fresh)
    out = compiled(*tensors).float().cpu().numpy()
    ref = run_reference(compiled.module, [_numpy(t) for t in tensors])[0]
    assert float(np.linalg.norm(out - ref) / np.linalg.norm(ref)) < 1e-2


def test_cuda_graph_replay_of_a_gemm_group() -> None:
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(matmul_ir(1024, 512, 256, "f16", tail=(RELU,)), target="cuda")
    graph = compiled.capture(*_inputs(compiled, "f16", 3))
    for t, fresh in zip(graph.inputs, _inputs(compiled, "f16", 4), strict=True):
        t.copy_(fresh)
    graph.outputs[0].fill_(float("nan"))
    (out,) = graph.replay()
    torch.cuda.synchronize()
    ref = run_reference(compiled.module, [_numpy(t) for t in graph.inputs])[0]
    got = out.float().cpu().numpy()
    assert float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) < 1e-2
