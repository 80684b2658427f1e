"""``conv-patchify``: patchify convs become views and one matmul, with the same results.

The pass runs without a GPU; each graph is run by the numpy reference executor before
and after it on fresh random inputs (the result rounded to the graph's 16-bit type
either way, the products summed in another order).
"""

from __future__ import annotations

import pytest
from numerics import assert_close

import fusec
from fusec.api import parse, run_pipeline
from fusec.dialect import ops as ai
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference
from fusec.tools.runner import random_inputs


def patch_graph(n, c, h, w, k, p, *, t="f16", bias=True, tokens=True) -> str:
    """A p x p / p conv (+ bias) on [n, c, h, w], flattened to tokens [n, P*Q, k] or kept."""
    pp, qq = h // p, w // p
    x, wt, o = (
        f"tensor<{n}x{c}x{h}x{w}x{t}>",
        f"tensor<{k}x{c}x{p}x{p}x{t}>",
        f"tensor<{n}x{k}x{pp}x{qq}x{t}>",
    )
    b = f"tensor<{k}x{t}>"
    args = [f"%x: {x}", f"%w: {wt}"] + ([f"%b: {b}"] if bias else [])
    lines = [f"%c = ai.conv2d %x, %w {{strides = array<i64: {p}, {p}>}} : {x} * {wt}"]
    last = "%c"
    if bias:
        lines.append(f"%y = ai.bias_add %c, %b : {o} * {b}")
        last = "%y"
    result = o
    if tokens:
        flat, out = f"tensor<{n}x{k}x{pp * qq}x{t}>", f"tensor<{n}x{pp * qq}x{k}x{t}>"
        lines.append(f"%f = ai.reshape {last} {{shape = array<i64: {n}, {k}, {pp * qq}>}} : {o}")
        lines.append(f"%t = ai.transpose %f {{perm = array<i64: 0, 2, 1>}} : {flat}")
        last, result = "%t", out
    else:
        lines.append(f"%r = ai.relu {last} : {o}")
        last = "%r"
    body = "\n  ".join(lines)
    return (
        f"func.func @f({', '.join(args)}) -> {result} {{\n  {body}\n  return {last} : {result}\n}}"
    )


GRAPHS = {
    "vit-16x16": patch_graph(2, 3, 32, 48, 64, 16),
    "vit-bf16-batch1": patch_graph(1, 3, 32, 32, 32, 16, t="bf16"),
    "convnext-stem-relu": patch_graph(2, 3, 16, 12, 96, 4, bias=False, tokens=False),
    "swin-4x4-bias": patch_graph(3, 3, 8, 8, 48, 4, tokens=False),
}


def _ops(module) -> list[str]:
    return [op.name for op in entry_function(module).body.block.ops]


@pytest.mark.parametrize("name", list(GRAPHS))
def test_patchify_keeps_the_results(name: str) -> None:
    before, after = parse(GRAPHS[name]), parse(GRAPHS[name])
    run_pipeline(before, "infer-shapes")
    run_pipeline(after, "infer-shapes,conv-patchify")
    assert "ai.conv2d" not in _ops(after) and _ops(after).count("ai.matmul") == 1
    dtype = ai.spec_of(entry_function(after).function_type.outputs.data[0]).dtype
    for seed in (0, 1):
        args = random_inputs(entry_function(before), seed=seed)
        (want,) = run_reference(before, args, rounding="groups")
        (got,) = run_reference(after, args, rounding="groups")
        assert_close(got, want, dtype, what=f"{name}, seed {seed}")


def test_a_view_chain_that_moves_elements_stays() -> None:
    """Only chains that leave the elements in row-major order collapse: a transpose that
    is not undone is kept (ViT's tokens without the final transpose)."""
    text = patch_graph(2, 3, 32, 48, 64, 16).replace(
        "%t = ai.transpose %f {perm = array<i64: 0, 2, 1>} : tensor<2x64x6xf16>",
        "%t = ai.transpose %f {perm = array<i64: 0, 1, 2>} : tensor<2x64x6xf16>",
    )
    text = text.replace("-> tensor<2x6x64xf16>", "-> tensor<2x64x6xf16>").replace(
        "return %t : tensor<2x6x64xf16>", "return %t : tensor<2x64x6xf16>"
    )
    module = parse(text)
    run_pipeline(module, "infer-shapes,conv-patchify")
    assert "ai.transpose" in _ops(module)  # [N, P*Q, K] rows back to [N, K, P*Q]


def test_the_cuda_pipeline_runs_the_patch_embedding_as_a_copy_and_a_gemm() -> None:
    compiled = fusec.compile(GRAPHS["vit-16x16"], target="cuda", executable=False)
    kinds = sorted(k.kind for k in compiled.kernels)
    assert kinds == ["copy", "matmul"], kinds
    (gemm,) = [k for k in compiled.kernels if k.kind == "matmul"]
    assert "Hopper Tensor Core GEMM" in gemm.source.split("\n\n")[0]
