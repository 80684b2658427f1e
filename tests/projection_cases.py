"""Graphs of attention projections (``combine-projections``, issues 28, 30): x projected to
q, k and v by three ``nn.Linear``-like constant weights, split into heads, optionally
through Llama-style RoPE, into one attention."""

from __future__ import annotations

import numpy as np

from fusec.ir.dtypes import numpy_dtype


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
