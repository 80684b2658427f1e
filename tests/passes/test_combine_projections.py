"""``combine-projections`` (issues 28, 30): the q, k and v projections of one input (Hugging
Face's BERT and Llama: three ``nn.Linear``) become one GEMM over the concatenated weights,
whose column slices the attention kernels read in place. No GPU: the IR, the reference
before and after the pass, and the kernels the cuda and cpu targets plan."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close

import fusec
from fusec.api import parse, run_pipeline
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.module import entry_function
from fusec.runtime.reference import run_reference
from fusec.tools.runner import random_inputs


def _t(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>" if shape else f"tensor<{dtype}>"


def _constant(name: str, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> str:
    data = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(numpy_dtype(dtype))
    return (
        f'%{name} = arith.constant dense<"0x{data.tobytes().hex().upper()}"> : {_t(shape, dtype)}'
    )


def projections_graph(
    seq: int = 16,
    heads: int = 2,
    kv_heads: int = 2,
    d: int = 64,
    bias: bool = True,
    relu_on_k: bool = False,
    dtype: str = "f16",
    rope: bool = False,
) -> str:
    """x [1, S, E] projected to q, k and v by three constant weights (+ biases), each split
    into heads and fed to one attention; ``relu_on_k`` reads k's projection elsewhere too;
    ``rope``: q and k split into heads go through RoPE (``x * cos + rotate_half(x) * sin``,
    cos and sin constants ``[1, S, 1, D]``) before their transpose, as Llama exports it."""
    rng = np.random.default_rng(7)
    e = heads * d
    x = _t((1, seq, e), dtype)
    lines = []
    widths = {"q": heads * d, "k": kv_heads * d, "v": kv_heads * d}
    table = _t((1, seq, 1, d), dtype)
    if rope:
        lines += [_constant("cos", (1, seq, 1, d), dtype, rng)]
        lines += [_constant("sin", (1, seq, 1, d), dtype, rng)]
    for role, n in widths.items():
        h = n // d
        y, split = _t((1, seq, n), dtype), _t((1, seq, h, d), dtype)
        lines.append(_constant(f"w{role}", (e, n), dtype, rng))
        lines.append(f"%{role}0 = ai.matmul %x, %w{role} : {x} * {_t((e, n), dtype)}")
        last = f"%{role}0"
        if bias:
            lines.append(_constant(f"b{role}", (n,), dtype, rng))
            lines.append(
                f"%{role}b = ai.bias_add %{role}0, %b{role} {{axis = 2 : i64}} : {y} * "
                f"{_t((n,), dtype)}"
            )
            last = f"%{role}b"
        lines.append(
            f"%{role}1 = ai.reshape {last} {{shape = array<i64: 1, {seq}, {h}, {d}>}} : {y}"
        )
        heads_value = f"%{role}1"
        if rope and role in "qk":
            lines += [
                f"%{role}c = ai.mul %{role}1, %cos : {split} * {table}",
                f"%{role}h = ai.rotate_half %{role}1 : {split}",
                f"%{role}s = ai.mul %{role}h, %sin : {split} * {table}",
                f"%{role}p = ai.add %{role}c, %{role}s : {split} * {split}",
            ]
            heads_value = f"%{role}p"
        lines.append(
            f"%{role} = ai.transpose {heads_value} {{perm = array<i64: 0, 2, 1, 3>}} : {split}"
        )
    group = heads // kv_heads
    if group > 1:  # GQA: k and v heads repeated as Llama's repeat_kv exports it
        for role in "kv":
            five = _t((1, kv_heads, 1, seq, d), dtype)
            lines += [
                f"%{role}u = ai.reshape %{role} {{shape = array<i64: 1, {kv_heads}, 1, {seq}, "
                f"{d}>}} : {_t((1, kv_heads, seq, d), dtype)}",
                f"%{role}e = ai.expand %{role}u {{shape = array<i64: 1, {kv_heads}, {group}, "
                f"{seq}, {d}>}} : {five}",
                f"%{role}r = ai.reshape %{role}e {{shape = array<i64: 1, {heads}, {seq}, {d}>}}"
                f" : {_t((1, kv_heads, group, seq, d), dtype)}",
            ]
    k, v = ("%kr", "%vr") if group > 1 else ("%k", "%v")
    bh = _t((1, heads, seq, d), dtype)
    lines += [
        f"%m = arith.constant dense<0.0> : {_t((), dtype)}",
        f"%o = ai.attention %q, {k}, {v}, %m {{scale = {1.0 / d**0.5!r} : f32}} : "
        f"{bh} * {bh} * {bh} * {_t((), dtype)}",
        f"%ot = ai.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : {bh}",
        f"%r = ai.reshape %ot {{shape = array<i64: 1, {seq}, {e}>}} : "
        f"{_t((1, seq, heads, d), dtype)}",
    ]
    results, types = ["%r"], [x]
    if relu_on_k:
        n = widths["k"]
        lines.append(f"%kr = ai.relu {'%kb' if bias else '%k0'} : {_t((1, seq, n), dtype)}")
        results.append("%kr")
        types.append(_t((1, seq, n), dtype))
    body = "\n".join(f"  {line}" for line in lines)
    return (
        f"func.func @f(%x: {x}) -> ({', '.join(types)}) {{\n{body}\n"
        f"  return {', '.join(results)} : {', '.join(types)}\n}}\n"
    )


def _ops(module) -> list[str]:
    return [op.name for op in entry_function(module).body.block.ops]


def _same_results(text: str, dtype: str = "f16", combine: str = "combine-projections") -> None:
    before, after = parse(text), parse(text)
    run_pipeline(before, "infer-shapes")
    run_pipeline(after, f"infer-shapes,{combine}")
    for seed in (0, 1):
        inputs = random_inputs(entry_function(before), seed=seed)
        for got, want in zip(
            run_reference(after, inputs), run_reference(before, inputs), strict=True
        ):
            assert_close(got, want, dtype, what=f"seed {seed}")


@pytest.mark.parametrize(
    "bias, dtype", [(True, "f16"), (False, "f16"), (True, "bf16")], ids=["bias", "no-bias", "bf16"]
)
def test_qkv_projections_become_one_gemm_and_slices(bias: bool, dtype: str) -> None:
    text = projections_graph(bias=bias, dtype=dtype)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 1 and ops.count("ai.slice") == 3, ops
    assert ops.count("ai.bias_add") == (1 if bias else 0)
    (matmul,) = [op for op in entry_function(module).body.block.ops if op.name == "ai.matmul"]
    assert str(matmul.results[0].type) == f"tensor<1x16x384x{dtype}>"
    offsets = [
        tuple(op.attr("offsets"))
        for op in entry_function(module).body.block.ops
        if op.name == "ai.slice"
    ]
    assert offsets == [(0, 0, 0), (0, 0, 128), (0, 0, 256)]
    _same_results(text, dtype)


def test_gqa_projections_of_different_widths_combine() -> None:
    """Llama's grouped-query attention: q 4 heads, k and v 2 each (widths 256, 128, 128),
    k and v repeated by ``ai.expand``: combined with ``repeated_heads`` (the cuda flash
    kernel reads the repeat in place), not without (the cpu kernel copies a slice before a
    repeat)."""
    text = projections_graph(heads=4, kv_heads=2)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true}")
    offsets = [
        tuple(op.attr("offsets"))[-1]
        for op in entry_function(module).body.block.ops
        if op.name == "ai.slice"
    ]
    assert offsets == [0, 256, 384]
    before, after = parse(text), parse(text)
    run_pipeline(before, "infer-shapes")
    inputs = random_inputs(entry_function(before), seed=0)
    (want,) = run_reference(before, inputs)
    (got,) = run_reference(module, inputs)
    assert_close(got, want, "f16")
    run_pipeline(after, "infer-shapes,combine-projections")
    assert _ops(after).count("ai.matmul") == 3


def test_a_projection_read_outside_the_attention_stays_its_own_gemm() -> None:
    """k's projection also feeds a relu: its GEMM stays; q and v still combine."""
    text = projections_graph(relu_on_k=True)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 2 and ops.count("ai.slice") == 2, ops
    _same_results(text)


def test_projections_through_rope_combine_with_the_option() -> None:
    """q and k reach the attention through RoPE's elementwise ops: without ``rope`` the
    three GEMMs stay (their slices would not be read in place), with it they are one GEMM
    and three slices, the same results."""
    text = projections_graph(rope=True, bias=False)
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true}")
    assert _ops(module).count("ai.matmul") == 3
    module = parse(text)
    run_pipeline(module, "infer-shapes,combine-projections{repeated_heads=true rope=true}")
    ops = _ops(module)
    assert ops.count("ai.matmul") == 1 and ops.count("ai.slice") == 3, ops
    _same_results(text, combine="combine-projections{rope=true}")


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize("kv_heads", [2, 1], ids=["mha", "mqa"])
def test_the_targets_run_the_layer_as_one_gemm_and_the_attention(
    kv_heads: int, target: str
) -> None:
    """In the target's pipeline: one GEMM (the biases in its epilogue) and the attention
    kernel, which reads the three slices in place: no copy kernel between them (the cpu
    target copies the head merge of an attention whose result the function returns)."""
    text = projections_graph(kv_heads=kv_heads)
    compiled = fusec.compile(text, target=target, executable=False)
    kinds = [k.kind for k in compiled.kernels]
    if target == "cpu" and kv_heads == 1:  # the repeat: the projections stay apart
        assert kinds.count("matmul") == 3 and kinds.count("copy") == 1, kinds
        return
    assert kinds[:2] == ["matmul", "attention"] and kinds.count("matmul") == 1, kinds
    assert kinds[2:] == ([] if target == "cuda" else ["copy"]), kinds
    if target == "cuda":
        (attention,) = [k for k in compiled.kernels if k.kind == "attention"]
        assert "flash-style attention" in attention.source


def test_the_combined_rope_pipeline_runs_one_gemm_for_a_llama_layer() -> None:
    """``fusec-cuda-combined-rope`` (opt-in): the q, k and v projections of a Llama-style
    layer (RoPE on q and k) as one GEMM, the RoPE kernels reading the q and k slices in
    place (``read-views-in-place``), v's read in place by the attention: four kernels
    where ``fusec-cuda`` runs three GEMMs and two RoPE kernels before the attention."""
    text = projections_graph(rope=True, bias=False, heads=4, kv_heads=2)
    default = fusec.compile(text, target="cuda", executable=False)
    assert [k.kind for k in default.kernels].count("matmul") == 3
    combined = fusec.compile(
        text, target="cuda", pipeline="fusec-cuda-combined-rope", executable=False
    )
    kinds = [k.kind for k in combined.kernels]
    assert kinds == ["matmul", "pointwise", "pointwise", "attention"], kinds
