"""An attention whose q and k pass rotary position embeddings (Llama's layer after its
combined q/k/v projection: ``x * cos + rotate_half(x) * sin`` over q's and k's heads, a GQA
head repeat, a causal mask), as IR text, for the RoPE prologue's tests."""

from __future__ import annotations

import numpy as np


def _t(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _slice(
    value: str, shape: tuple[int, ...], offsets: tuple[int, ...], sizes: tuple[int, ...]
) -> str:
    ones = ", ".join("1" for _ in shape)
    return (
        f"ai.slice {value} {{offsets = array<i64: {', '.join(map(str, offsets))}>, "
        f"sizes = array<i64: {', '.join(map(str, sizes))}>, strides = array<i64: {ones}>}}"
    )


def _causal_rows(seq: int) -> str:
    """The rows of a causal mask of ``seq`` queries and keys (-inf above the diagonal)."""
    return ", ".join(
        "[" + ", ".join("0xFC00" if j > i else "0.0" for j in range(seq)) + "]" for i in range(seq)
    )


def _mask(seq: int, causal: bool) -> str:
    """The attention's mask constant: causal, or zero."""
    return f"dense<[{_causal_rows(seq)}]>" if causal else "dense<0.0>"


def rope_attention_graph(
    batch: int,
    seq: int,
    heads: int,
    kv_heads: int,
    d: int,
    dtype: str = "f16",
    rotary: int | None = None,
    causal: bool = True,
) -> str:
    """``qkv`` ``[batch, seq, (heads + 2 kv_heads) d]`` (a combined projection's result),
    ``cos`` and ``sin`` ``[seq, rotary]``: RoPE on the first ``rotary`` (default all ``d``)
    of q's and k's head dims (GPT-NeoX's partial rotary below ``d``: the rotated part
    concatenated with the rest), a causal attention with k and v repeated over ``heads /
    kv_heads``, the heads merged: ``[batch, seq, heads d]``. ``causal=False``: a zero mask
    instead (a splat constant: no text of seq x seq elements at long lengths)."""
    h, k, g = heads, kv_heads, heads // kv_heads
    r = d if rotary is None else rotary
    qkv = _t((batch, seq, (h + 2 * k) * d), dtype)
    table = _t((seq, r), dtype)
    part, part4 = _t((batch, seq, (h + k) * d), dtype), _t((batch, seq, h + k, d), dtype)
    q4, k4 = _t((batch, seq, h, d), dtype), _t((batch, seq, k, d), dtype)
    qt, kt = _t((batch, h, seq, d), dtype), _t((batch, k, seq, d), dtype)
    k5, kx = _t((batch, k, 1, seq, d), dtype), _t((batch, k, g, seq, d), dtype)
    vcols = _t((batch, seq, k * d), dtype)
    mask = _t((seq, seq), dtype)
    lines = [
        f"%qk = {_slice('%qkv', (0, 0, 0), (0, 0, 0), (batch, seq, (h + k) * d))} : {qkv}",
        f"%qk4 = ai.reshape %qk {{shape = array<i64: {batch}, {seq}, {h + k}, {d}>}} : {part}",
        f"%c3 = ai.reshape %cos {{shape = array<i64: {seq}, 1, {r}>}} : {table}",
        f"%s3 = ai.reshape %sin {{shape = array<i64: {seq}, 1, {r}>}} : {table}",
        *_rope_lines(batch, seq, h + k, d, r, dtype),
        f"%q = {_slice('%y', (0,) * 4, (0, 0, 0, 0), (batch, seq, h, d))} : {part4}",
        f"%qt = ai.transpose %q {{perm = array<i64: 0, 2, 1, 3>}} : {q4}",
        f"%k = {_slice('%y', (0,) * 4, (0, 0, h, 0), (batch, seq, k, d))} : {part4}",
        f"%kt = ai.transpose %k {{perm = array<i64: 0, 2, 1, 3>}} : {k4}",
        f"%k5 = ai.reshape %kt {{shape = array<i64: {batch}, {k}, 1, {seq}, {d}>}} : {kt}",
        f"%ke = ai.expand %k5 {{shape = array<i64: {batch}, {k}, {g}, {seq}, {d}>}} : {k5}",
        f"%kx = ai.reshape %ke {{shape = array<i64: {batch}, {h}, {seq}, {d}>}} : {kx}",
        f"%v = {_slice('%qkv', (0, 0, 0), (0, 0, (h + k) * d), (batch, seq, k * d))} : {qkv}",
        f"%v4 = ai.reshape %v {{shape = array<i64: {batch}, {seq}, {k}, {d}>}} : {vcols}",
        f"%vt = ai.transpose %v4 {{perm = array<i64: 0, 2, 1, 3>}} : {k4}",
        f"%v5 = ai.reshape %vt {{shape = array<i64: {batch}, {k}, 1, {seq}, {d}>}} : {kt}",
        f"%ve = ai.expand %v5 {{shape = array<i64: {batch}, {k}, {g}, {seq}, {d}>}} : {k5}",
        f"%vx = ai.reshape %ve {{shape = array<i64: {batch}, {h}, {seq}, {d}>}} : {kx}",
        f"%m = arith.constant {_mask(seq, causal)} : {mask}",
        f"%o = ai.attention %qt, %kx, %vx, %m {{scale = {d**-0.5} : f32, nan_to_zero = true}} : "
        f"{qt} * {qt} * {qt} * {mask}",
        f"%ot = ai.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : {qt}",
        f"%out = ai.reshape %ot {{shape = array<i64: {batch}, {seq}, {h * d}>}} : {q4}",
    ]
    out = _t((batch, seq, h * d), dtype)
    body = "\n  ".join(lines)
    return f"""func.func @f(%qkv: {qkv}, %cos: {table}, %sin: {table}) -> {out} {{
  {body}
  return %out : {out}
}}"""


def neox_attention_graph(batch: int, seq: int, heads: int, d: int, rotary: int) -> str:
    """GPT-NeoX's layer after its q/k/v projection (f16): ``qkv`` ``[batch, seq, heads 3d]``
    split per head into q, k and v (``[batch, heads, seq, 3d]``, a slice of d each), RoPE on
    the first ``rotary`` dims of q and k (``cos``, ``sin`` ``[seq, rotary]``), a causal
    attention, the heads merged: ``[batch, seq, heads d]``."""
    h, r = heads, rotary
    qkv, split = _t((batch, seq, h * 3 * d), "f16"), _t((batch, seq, h, 3 * d), "f16")
    heads3, x4 = _t((batch, h, seq, 3 * d), "f16"), _t((batch, h, seq, d), "f16")
    part, rest = _t((batch, h, seq, r), "f16"), _t((batch, h, seq, d - r), "f16")
    table, table4 = _t((seq, r), "f16"), _t((1, 1, seq, r), "f16")
    mask = _t((seq, seq), "f16")
    lines = [
        f"%s = ai.reshape %qkv {{shape = array<i64: {batch}, {seq}, {h}, {3 * d}>}} : {qkv}",
        f"%t = ai.transpose %s {{perm = array<i64: 0, 2, 1, 3>}} : {split}",
        f"%c4 = ai.reshape %cos {{shape = array<i64: 1, 1, {seq}, {r}>}} : {table}",
        f"%s4 = ai.reshape %sin {{shape = array<i64: 1, 1, {seq}, {r}>}} : {table}",
    ]
    for name, start in (("q", 0), ("k", d)):
        lines += [
            f"%{name} = {_slice('%t', (0,) * 4, (0, 0, 0, start), (batch, h, seq, d))} : {heads3}",
            f"%{name}r = {_slice(f'%{name}', (0,) * 4, (0, 0, 0, 0), (batch, h, seq, r))} : {x4}",
            f"%{name}p = {_slice(f'%{name}', (0,) * 4, (0, 0, 0, r), (batch, h, seq, d - r))} "
            f": {x4}",
            f"%{name}a = ai.mul %{name}r, %c4 : {part} * {table4}",
            f"%{name}h = ai.rotate_half %{name}r : {part}",
            f"%{name}b = ai.mul %{name}h, %s4 : {part} * {table4}",
            f"%{name}y = ai.add %{name}a, %{name}b : {part} * {part}",
            f"%{name}e = ai.concat %{name}y, %{name}p {{axis = -1 : i64}} : {part} * {rest}",
        ]
    lines += [
        f"%v = {_slice('%t', (0,) * 4, (0, 0, 0, 2 * d), (batch, h, seq, d))} : {heads3}",
        f"%m = arith.constant dense<[{_causal_rows(seq)}]> : {mask}",
        f"%o = ai.attention %qe, %ke, %v, %m {{scale = {d**-0.5} : f32, nan_to_zero = true}} : "
        f"{x4} * {x4} * {x4} * {mask}",
        f"%ot = ai.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : {x4}",
        f"%out = ai.reshape %ot {{shape = array<i64: {batch}, {seq}, {h * d}>}} : "
        f"{_t((batch, seq, h, d), 'f16')}",
    ]
    out = _t((batch, seq, h * d), "f16")
    body = "\n  ".join(lines)
    return f"""func.func @f(%qkv: {qkv}, %cos: {table}, %sin: {table}) -> {out} {{
  {body}
  return %out : {out}
}}"""


def _rope_lines(batch: int, seq: int, heads: int, d: int, r: int, dtype: str) -> list[str]:
    """``%y``: RoPE of ``%qk4`` ``[batch, seq, heads, d]`` by ``%c3``, ``%s3`` ``[seq, 1,
    r]``; below ``d``, of its first ``r`` dims, the rest concatenated after them."""
    whole, table3 = _t((batch, seq, heads, d), dtype), _t((seq, 1, r), dtype)
    part = _t((batch, seq, heads, r), dtype)
    x, lines = "%qk4", []
    if r != d:
        rest = _t((batch, seq, heads, d - r), dtype)
        lines += [
            f"%xr = {_slice('%qk4', (0,) * 4, (0, 0, 0, 0), (batch, seq, heads, r))} : {whole}",
            f"%xp = {_slice('%qk4', (0,) * 4, (0, 0, 0, r), (batch, seq, heads, d - r))} : {whole}",
        ]
        x = "%xr"
    lines += [
        f"%a = ai.mul {x}, %c3 : {part} * {table3}",
        f"%r = ai.rotate_half {x} : {part}",
        f"%b = ai.mul %r, %s3 : {part} * {table3}",
        f"%{'y' if r == d else 'yr'} = ai.add %a, %b : {part} * {part}",
    ]
    if r != d:
        lines.append(f"%y = ai.concat %yr, %xp {{axis = -1 : i64}} : {part} * {rest}")
    return lines


def rope_tables(seq: int, d: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """Llama's cos and sin tables ``[seq, d]`` (the two halves alike), float32."""
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.outer(np.arange(seq), inv)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
