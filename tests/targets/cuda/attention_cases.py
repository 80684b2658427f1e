"""Attention graphs, for the CPU and GPU tests of the attention kernel: as fusec writes them
(``attention_graph``) and as PyTorch's exporters do (``exported_attention_graph``)."""

from __future__ import annotations


def _t(shape, dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def _dense(rows: int, cols: int, masked: str) -> str:
    """A causal mask literal: 0 on and below the diagonal, ``masked`` above."""
    body = ", ".join(
        "[" + ", ".join("0.0" if c <= r else masked for c in range(cols)) + "]" for r in range(rows)
    )
    return f"dense<[{body}]>"


def attention_graph(
    batch: tuple[int, ...],
    sq: int,
    sk: int,
    d: int,
    dv: int,
    dtype: str = "f16",
    *,
    scale: str = "mul",
    causal: bool = False,
    mask_value: str = "-1.0e4",
    mask: tuple[int, ...] | None = None,
    mask_dtype: str | None = None,
) -> str:
    """softmax(q k^T (* or /) c [+ causal constant] [+ mask]) v over ``batch`` leading
    dims; ``mask``: the shape of a mask given as an input (``%mask``, of ``mask_dtype``,
    the operands' by default), added after the scale (a padding mask ``(B, 1, 1, T)``, a
    bias ``(1, H, S, T)``: anything that broadcasts to the scores)."""
    q, k, v = _t((*batch, sq, d), dtype), _t((*batch, sk, d), dtype), _t((*batch, sk, dv), dtype)
    s, o, c = _t((*batch, sq, sk), dtype), _t((*batch, sq, dv), dtype), _t((), dtype)
    lines = [f"%s = ai.matmul %q, %k {{transpose_b = true}} : {q} * {k}"]
    last = "%s"
    if scale != "none":
        value = "0.125" if scale == "mul" else "8.0"
        lines.append(f"%c = arith.constant dense<{value}> : {c}")
        lines.append(f"%t = ai.{scale} %s, %c : {s} * {c}")
        last = "%t"
    if causal:
        m = _t((sq, sk), dtype)
        lines.append(f"%m = arith.constant {_dense(sq, sk, mask_value)} : {m}")
        lines.append(f"%u = ai.add {last}, %m : {s} * {m}")
        last = "%u"
    params = f"%q: {q}, %k: {k}, %v: {v}"
    if mask is not None:
        m = _t(mask, mask_dtype or dtype)
        params += f", %mask: {m}"
        lines.append(f"%w = ai.add {last}, %mask : {s} * {m}")
        last = "%w"
    lines.append(f"%p = ai.softmax {last} : {s}")
    lines.append(f"%o = ai.matmul %p, %v : {s} * {v}")
    body = "\n  ".join(lines)
    return f"func.func @attention({params}) -> {o} {{\n  {body}\n  return %o : {o}\n}}\n"


def exported_attention_graph(batch: int, seq: int, heads: int, d: int, dtype: str = "f16") -> str:
    """GPT-2's attention as exported: q, k, v split into heads from (batch, seq, heads * d)
    by reshape + transpose (the key to (B, H, D, S)), the score scaled, a causal mask of
    -inf added, the probabilities guarded against NaN, the heads merged back."""
    x, h = _t((batch, seq, heads * d), dtype), _t((batch, seq, heads, d), dtype)
    bh, kt = _t((batch, heads, seq, d), dtype), _t((batch, heads, d, seq), dtype)
    s, m, c = _t((batch, heads, seq, seq), dtype), _t((seq, seq), dtype), _t((), dtype)
    split = f"{{shape = array<i64: {batch}, {seq}, {heads}, {d}>}}"
    merge = f"{{shape = array<i64: {batch}, {seq}, {heads * d}>}}"
    lines = [
        f"%qh = ai.reshape %xq {split} : {x}",
        f"%kh = ai.reshape %xk {split} : {x}",
        f"%vh = ai.reshape %xv {split} : {x}",
        f"%q = ai.transpose %qh {{perm = array<i64: 0, 2, 1, 3>}} : {h}",
        f"%kt = ai.transpose %kh {{perm = array<i64: 0, 2, 3, 1>}} : {h}",
        f"%v = ai.transpose %vh {{perm = array<i64: 0, 2, 1, 3>}} : {h}",
        f"%s = ai.matmul %q, %kt : {bh} * {kt}",
        f"%c = arith.constant dense<{1.0 / d**0.5!r}> : {c}",
        f"%t = ai.mul %s, %c : {s} * {c}",
        f"%m = arith.constant {_dense(seq, seq, '0xFC00' if dtype == 'f16' else '-1.0e4')} : {m}",
        f"%u = ai.add %t, %m : {s} * {m}",
        f"%p = ai.softmax %u : {s}",
        f"%n = ai.isnan %p : {s}",
        f"%z = arith.constant dense<0.0> : {c}",
        f"%g = ai.where %n, %z, %p : {s} * {c} * {s}",
        f"%o = ai.matmul %g, %v : {s} * {bh}",
        f"%ot = ai.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : {bh}",
        f"%r = ai.reshape %ot {merge} : {h}",
    ]
    body = "\n  ".join(lines)
    return (
        f"func.func @gpt2_attention(%xq: {x}, %xk: {x}, %xv: {x}) -> {x} {{\n  {body}\n"
        f"  return %r : {x}\n}}\n"
    )


def strided_attention_graph(
    batch: int,
    seq: int,
    heads: int,
    kv_heads: int,
    d: int,
    dtype: str = "f16",
    *,
    packed: bool = False,
    causal: bool = False,
) -> str:
    """Attention over heads split from projections ``(batch, seq, heads * d)`` as exporters
    write it (reshape + transpose; with ``packed`` one ``(batch, seq, (heads + 2 kv_heads) d)``
    input sliced into q, k and v, as GPT-2's fused QKV), K and V of ``kv_heads`` heads
    repeated to ``heads`` by reshape + ``ai.expand`` + reshape (GQA/MQA, as Llama's
    ``repeat_kv``), the heads merged back into ``(batch, seq, heads * d)``."""
    group = heads // kv_heads
    widths = {"q": heads * d, "k": kv_heads * d, "v": kv_heads * d}
    lines: list[str] = []
    if packed:
        total = sum(widths.values())
        args = [f"%x: {_t((batch, seq, total), dtype)}"]
        start = 0
        for role, width in widths.items():
            lines.append(
                f"%x{role} = ai.slice %x {{offsets = array<i64: 0, 0, {start}>, sizes = "
                f"array<i64: {batch}, {seq}, {width}>, strides = array<i64: 1, 1, 1>}} : "
                f"{_t((batch, seq, total), dtype)}"
            )
            start += width
    else:
        args = [f"%x{role}: {_t((batch, seq, w), dtype)}" for role, w in widths.items()]
    for role, width in widths.items():
        h = width // d
        split = f"{{shape = array<i64: {batch}, {seq}, {h}, {d}>}}"
        lines += [
            f"%{role}s = ai.reshape %x{role} {split} : {_t((batch, seq, width), dtype)}",
            f"%{role}t = ai.transpose %{role}s {{perm = array<i64: 0, 2, 1, 3>}} : "
            f"{_t((batch, seq, h, d), dtype)}",
        ]
        last = f"%{role}t"
        if h != heads:
            lines += [
                f"%{role}u = ai.reshape %{role}t {{shape = array<i64: {batch}, {h}, 1, {seq}, "
                f"{d}>}} : {_t((batch, h, seq, d), dtype)}",
                f"%{role}e = ai.expand %{role}u {{shape = array<i64: {batch}, {h}, {group}, "
                f"{seq}, {d}>}} : {_t((batch, h, 1, seq, d), dtype)}",
                f"%{role}r = ai.reshape %{role}e {{shape = array<i64: {batch}, {heads}, {seq}, "
                f"{d}>}} : {_t((batch, h, group, seq, d), dtype)}",
            ]
            last = f"%{role}r"
        lines.append(
            f"%{role} = ai.reshape {last} {{shape = array<i64: {batch}, {heads}, "
            f"{seq}, {d}>}} : {_t((batch, heads, seq, d), dtype)}"
        )
    bh, s, c = _t((batch, heads, seq, d), dtype), _t((batch, heads, seq, seq), dtype), _t((), dtype)
    lines += [
        f"%sc = ai.matmul %q, %k {{transpose_b = true}} : {bh} * {bh}",
        f"%c = arith.constant dense<{1.0 / d**0.5!r}> : {c}",
        f"%t = ai.mul %sc, %c : {s} * {c}",
    ]
    last = "%t"
    if causal:
        m = _t((seq, seq), dtype)
        lines.append(f"%m = arith.constant {_dense(seq, seq, '-1.0e4')} : {m}")
        lines.append(f"%u = ai.add %t, %m : {s} * {m}")
        last = "%u"
    out = _t((batch, seq, heads * d), dtype)
    lines += [
        f"%p = ai.softmax {last} : {s}",
        f"%o = ai.matmul %p, %v : {s} * {bh}",
        f"%ot = ai.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : {bh}",
        f"%r = ai.reshape %ot {{shape = array<i64: {batch}, {seq}, {heads * d}>}} : "
        f"{_t((batch, seq, heads, d), dtype)}",
    ]
    body = "\n  ".join(lines)
    head = f"func.func @attention({', '.join(args)}) -> {out} {{"
    return f"{head}\n  {body}\n  return %r : {out}\n}}\n"


def scattered_heads_graph(x: int, seq: int, batch: int, heads: int, d: int) -> str:
    """Attention over a batch of three dims none of which merge in memory: q, k and v
    ``(x, seq, batch, heads * d)``, attended as ``(batch, x, heads, seq, d)`` (strides
    ``heads * d``, ``seq * batch * heads * d``, ``d``: a 5-D tensor map) and written back in
    the input's layout."""
    t = _t((x, seq, batch, heads * d), "f16")
    split = _t((x, seq, batch, heads, d), "f16")
    bh, s = _t((batch, x, heads, seq, d), "f16"), _t((batch, x, heads, seq, seq), "f16")
    lines = []
    for role in "qkv":
        lines += [
            f"%{role}s = ai.reshape %{role}x {{shape = array<i64: {x}, {seq}, {batch}, {heads}, "
            f"{d}>}} : {t}",
            f"%{role} = ai.transpose %{role}s {{perm = array<i64: 2, 0, 3, 1, 4>}} : {split}",
        ]
    lines += [
        f"%sc = ai.matmul %q, %k {{transpose_b = true}} : {bh} * {bh}",
        f"%c = arith.constant dense<0.125> : {_t((), 'f16')}",
        f"%sm = ai.mul %sc, %c : {s} * {_t((), 'f16')}",
        f"%p = ai.softmax %sm : {s}",
        f"%o = ai.matmul %p, %v : {s} * {bh}",
        f"%ot = ai.transpose %o {{perm = array<i64: 1, 3, 0, 2, 4>}} : {bh}",
        f"%r = ai.reshape %ot {{shape = array<i64: {x}, {seq}, {batch}, {heads * d}>}} : {split}",
    ]
    body = "\n  ".join(lines)
    args = ", ".join(f"%{role}x: {t}" for role in "qkv")
    return f"func.func @attention({args}) -> {t} {{\n  {body}\n  return %r : {t}\n}}\n"


def sequence_first_mha_graph(batch: int, seq: int, heads: int, d: int, dtype: str = "f16") -> str:
    """``nn.MultiheadAttention`` as exported sequence-first (ViT's at batch > 1): the tokens
    ``[B, S, E]`` transposed to ``[S, B, E]`` before the packed QKV projection (+ bias),
    q, k and v sliced from it and split into heads, the heads merged back, the output
    projection (+ bias) transposed back to ``[B, S, E]`` and added to the input."""
    e = heads * d
    x, sb = _t((batch, seq, e), dtype), _t((seq, batch, e), dtype)
    packed, w_in, w_out = _t((seq, batch, 3 * e), dtype), _t((e, 3 * e), dtype), _t((e, e), dtype)
    bh, s, c = _t((batch, heads, seq, d), dtype), _t((batch, heads, seq, seq), dtype), _t((), dtype)
    lines = [
        f"%t = ai.transpose %x {{perm = array<i64: 1, 0, 2>}} : {x}",
        f"%p = ai.matmul %t, %w_in : {sb} * {w_in}",
        f"%pb = ai.bias_add %p, %b_in {{axis = 2 : i64}} : {packed} * {_t((3 * e,), dtype)}",
    ]
    for k, role in enumerate("qkv"):
        lines += [
            f"%{role}0 = ai.slice %pb {{offsets = array<i64: 0, 0, {k * e}>, sizes = array<i64: "
            f"{seq}, {batch}, {e}>, strides = array<i64: 1, 1, 1>}} : {packed}",
            f"%{role}1 = ai.reshape %{role}0 {{shape = array<i64: {seq}, {batch * heads}, {d}>}}"
            f" : {sb}",
            f"%{role}2 = ai.transpose %{role}1 {{perm = array<i64: 1, 0, 2>}} : "
            f"{_t((seq, batch * heads, d), dtype)}",
            f"%{role} = ai.reshape %{role}2 {{shape = array<i64: {batch}, {heads}, {seq}, {d}>}}"
            f" : {_t((batch * heads, seq, d), dtype)}",
        ]
    lines += [
        f"%sc = ai.matmul %q, %k {{transpose_b = true}} : {bh} * {bh}",
        f"%c = arith.constant dense<{1.0 / d**0.5!r}> : {c}",
        f"%sm = ai.mul %sc, %c : {s} * {c}",
        f"%pr = ai.softmax %sm : {s}",
        f"%o = ai.matmul %pr, %v : {s} * {bh}",
        f"%ot = ai.transpose %o {{perm = array<i64: 2, 0, 1, 3>}} : {bh}",
        f"%om = ai.reshape %ot {{shape = array<i64: {seq}, {batch}, {e}>}} : "
        f"{_t((seq, batch, heads, d), dtype)}",
        f"%y = ai.matmul %om, %w_out : {sb} * {w_out}",
        f"%yb = ai.bias_add %y, %b_out {{axis = 2 : i64}} : {sb} * {_t((e,), dtype)}",
        f"%yt = ai.transpose %yb {{perm = array<i64: 1, 0, 2>}} : {sb}",
        f"%r = ai.add %yt, %x : {x} * {x}",
    ]
    args = (
        f"%x: {x}, %w_in: {w_in}, %b_in: {_t((3 * e,), dtype)}, %w_out: {w_out}, "
        f"%b_out: {_t((e,), dtype)}"
    )
    body = "\n  ".join(lines)
    return f"func.func @mha({args}) -> {x} {{\n  {body}\n  return %r : {x}\n}}\n"
