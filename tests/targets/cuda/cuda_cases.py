"""IR cases shared by the CUDA tests: one builder per template path, any size and dtype.

Each builder returns ``.mlir`` text of one function holding one ``ai.fused``
group, so the tests exercise the CUDA templates whatever the fusion passes do.
"""

from __future__ import annotations

import numpy as np


def _t(shape, dtype: str) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{dtype}>"


def _func(name, params, results, kind, body) -> str:
    args = ", ".join(f"%{n}: {t}" for n, t in params)
    inner = ", ".join(f"%{n}1: {t}" for n, t in params)
    operands = ", ".join(f"%{n}" for n, _ in params)
    in_types = ", ".join(t for _, t in params)
    out_types = ", ".join(results)
    count = f":{len(results)}" if len(results) > 1 else ""
    returned = ", ".join(f"%r#{k}" for k in range(len(results))) if len(results) > 1 else "%r"
    lines = "\n".join(f"    {line}" for line in body)
    return (
        f"func.func @{name}({args}) -> ({out_types}) {{\n"
        f'  %r{count} = ai.fused "{kind}" ({operands}) : ({in_types}) -> ({out_types}) {{\n'
        f"  ^bb0({inner}):\n{lines}\n  }}\n"
        f"  return {returned} : {out_types}\n}}\n"
    )


def pointwise_broadcast(rows: int, cols: int, dtype: str) -> str:
    """gelu(x * a + b) * c with a scalar, b a row vector, c a column; a second f32 result."""
    x, s, b, c = _t((rows, cols), dtype), _t((), dtype), _t((cols,), dtype), _t((rows, 1), dtype)
    f = _t((rows, cols), "f32")
    body = [
        f"%m = ai.mul %x1, %a1 : {x} * {s}",
        f"%p = ai.add %m, %b1 : {x} * {b}",
        f"%g = ai.gelu %p : {x}",
        f"%o = ai.mul %g, %c1 : {x} * {c}",
        f"%w = ai.cast %o : {x} to {f}" if dtype != "f32" else f"%w = ai.sigmoid %o : {f}",
        f"%z = ai.silu %w : {f}",
        f"ai.yield %o, %z : {x}, {f}",
    ]
    return _func("pw_bcast", [("x", x), ("a", s), ("b", b), ("c", c)], [x, f], "pointwise", body)


def pointwise_rope(shape, dtype: str) -> str:
    """RoPE: x * cos + rotate_half(x) * sin, cos and sin over the last two dims (issue 28):
    x read in place at two indices; a second result, rotate_half(x) alone."""
    x, cs = _t(shape, dtype), _t(shape[-2:], dtype)
    body = [
        f"%a = ai.mul %x1, %c1 : {x} * {cs}",
        f"%r = ai.rotate_half %x1 : {x}",
        f"%b = ai.mul %r, %s1 : {x} * {cs}",
        f"%y = ai.add %a, %b : {x} * {x}",
        f"ai.yield %y, %r : {x}, {x}",
    ]
    return _func("rope", [("x", x), ("c", cs), ("s", cs)], [x, x], "pointwise", body)


def sliced_rope(seq: int, heads: int, d: int, width: int, start: int, dtype: str) -> str:
    """RoPE on a column slice of a wider tensor, unfused (issue 28: the q or k slice of a
    combined QKV projection): ``x[..., start:start + heads * d]`` split into heads, then
    ``x * cos + rotate_half(x) * sin``, cos and sin ``[1, S, 1, D]``. Through the
    ``fusec-cuda`` pipeline the pointwise kernel reads the slice in place."""
    n = heads * d
    x, part, split = (
        _t((1, seq, width), dtype),
        _t((1, seq, n), dtype),
        _t((1, seq, heads, d), dtype),
    )
    table = _t((1, seq, 1, d), dtype)
    return (
        f"func.func @sliced_rope(%x: {x}, %c: {table}, %s: {table}) -> {split} {{\n"
        f"  %p = ai.slice %x {{offsets = array<i64: 0, 0, {start}>, sizes = array<i64: 1, "
        f"{seq}, {n}>, strides = array<i64: 1, 1, 1>}} : {x}\n"
        f"  %h = ai.reshape %p {{shape = array<i64: 1, {seq}, {heads}, {d}>}} : {part}\n"
        f"  %a = ai.mul %h, %c : {split} * {table}\n"
        f"  %r = ai.rotate_half %h : {split}\n"
        f"  %b = ai.mul %r, %s : {split} * {table}\n"
        f"  %y = ai.add %a, %b : {split} * {split}\n"
        f"  return %y : {split}\n}}\n"
    )


def interleaved_rope(seq: int, heads: int, d: int, part: int, dtype: str) -> str:
    """RoPE on q, k or v (``part`` 0, 1 or 2) of GPT-NeoX's fused QKV projection, whose
    columns hold each head's q, k and v side by side: ``[1, S, H * 3D]`` split into
    ``[1, S, H, 3D]``, the heads moved before the sequence (``transpose [0, 2, 1, 3]``),
    the part's D columns sliced, then ``x * cos + rotate_half(x) * sin`` (cos and sin
    ``[1, 1, S, D]``). Through ``fusec-cuda`` the pointwise kernel reads it in place: a
    transpose that keeps the last dim is a strided view."""
    x, split = _t((1, seq, heads * 3 * d), dtype), _t((1, seq, heads, 3 * d), dtype)
    heads_first, q = _t((1, heads, seq, 3 * d), dtype), _t((1, heads, seq, d), dtype)
    table = _t((1, 1, seq, d), dtype)
    return (
        f"func.func @interleaved_rope(%x: {x}, %c: {table}, %s: {table}) -> {q} {{\n"
        f"  %h = ai.reshape %x {{shape = array<i64: 1, {seq}, {heads}, {3 * d}>}} : {x}\n"
        f"  %t = ai.transpose %h {{perm = array<i64: 0, 2, 1, 3>}} : {split}\n"
        f"  %p = ai.slice %t {{offsets = array<i64: 0, 0, 0, {part * d}>, sizes = array<i64: "
        f"1, {heads}, {seq}, {d}>, strides = array<i64: 1, 1, 1, 1>}} : {heads_first}\n"
        f"  %a = ai.mul %p, %c : {q} * {table}\n"
        f"  %r = ai.rotate_half %p : {q}\n"
        f"  %b = ai.mul %r, %s : {q} * {table}\n"
        f"  %y = ai.add %a, %b : {q} * {q}\n"
        f"  return %y : {q}\n}}\n"
    )


def slice_square(shape, offsets, sizes, steps, dtype: str) -> str:
    """``p * sigmoid(p)`` of a slice ``p`` of x (unfused): the pointwise kernel reads the
    slice in place (``read-views-in-place``) where its strides allow."""
    x, p = _t(shape, dtype), _t(sizes, dtype)
    ints = lambda values: ", ".join(map(str, values))  # noqa: E731
    return (
        f"func.func @slice_square(%x: {x}) -> {p} {{\n"
        f"  %p = ai.slice %x {{offsets = array<i64: {ints(offsets)}>, sizes = array<i64: "
        f"{ints(sizes)}>, strides = array<i64: {ints(steps)}>}} : {x}\n"
        f"  %g = ai.sigmoid %p : {p}\n"
        f"  %y = ai.mul %p, %g : {p} * {p}\n"
        f"  return %y : {p}\n}}\n"
    )


def random_view_graph(seed: int, transposes: bool = False) -> str | None:
    """A random chain of 1-3 slices (outer steps 1, 2 or -1; the last dim's 1) and reshapes
    (a dim split or merged, a size-1 dim added or dropped) of x, then ``view * c`` (c
    broadcast with size-1 dims anywhere), ``rotate_half`` of the view on even rows, the
    view cast to f32 as a second result at times: the graphs ``read-views-in-place`` and
    the pointwise kernel's strided inputs were fuzzed with (a review, 2026-12-06). With
    ``transposes``, a random permutation of the dims joins the chain at a random place
    (one moving the last dim too: such a chain stays a copy). None where the draw ends on
    a dim of one element."""
    import random

    rng = random.Random(seed)
    transpose_at = rng.randint(0, 3) if transposes else -1
    dtype = rng.choice(["f32", "f16", "bf16"])
    root = [rng.choice([1, 2, 3, 4, 5, 6]) for _ in range(rng.choice([1, 2, 3]))]
    root.append(rng.choice([8, 16, 32, 48]))
    lines, value, shape = [], "%x", list(root)
    for n in range(rng.randint(1, 3)):
        if n == transpose_at or (transpose_at == 3 and n == 0 and len(shape) > 1):
            perm = list(range(len(shape)))
            rng.shuffle(perm)
            lines.append(
                f"%t{n} = ai.transpose {value} {{perm = array<i64: {_ints(perm)}>}} : "
                f"{_t(shape, dtype)}"
            )
            value, shape = f"%t{n}", [shape[k] for k in perm]
        if rng.random() < 0.6:
            offsets, sizes, steps = _random_slice(rng, shape)
            lines.append(
                f"%v{n} = ai.slice {value} {{offsets = array<i64: {_ints(offsets)}>, sizes = "
                f"array<i64: {_ints(sizes)}>, strides = array<i64: {_ints(steps)}>}} : "
                f"{_t(shape, dtype)}"
            )
            new: list[int] | None = sizes
        else:
            new = _random_reshape(rng, shape)
            if new is None:
                continue
            lines.append(
                f"%v{n} = ai.reshape {value} {{shape = array<i64: {_ints(new)}>}} : "
                f"{_t(shape, dtype)}"
            )
        value, shape = f"%v{n}", list(new)
    if not lines or shape[-1] == 1:
        return None
    v = _t(shape, dtype)
    c = [d if rng.random() < 0.5 else 1 for d in shape]
    lines.append(f"%a = ai.mul {value}, %c : {v} * {_t(c, dtype)}")
    result = "%a"
    if shape[-1] % 2 == 0 and rng.random() < 0.5:
        lines += [f"%r = ai.rotate_half {value} : {v}", f"%y = ai.add %a, %r : {v} * {v}"]
        result = "%y"
    results = [(result, v)]
    if rng.random() < 0.3:
        f32 = _t(shape, "f32")
        lines.append(f"%z = ai.cast {value} : {v} to {f32}")
        results.append(("%z", f32))
    types = ", ".join(t for _, t in results)
    body = "".join(f"  {line}\n" for line in lines)
    return (
        f"func.func @views(%x: {_t(root, dtype)}, %c: {_t(c, dtype)}) -> ({types}) {{\n"
        f"{body}  return {', '.join(n for n, _ in results)} : {types}\n}}\n"
    )


def _ints(values) -> str:
    return ", ".join(map(str, values))


def _random_slice(rng, shape: list[int]) -> tuple[list[int], list[int], list[int]]:
    offsets, sizes, steps = [], [], []
    for k, n in enumerate(shape):
        step = 1 if k == len(shape) - 1 else rng.choice([1, 1, 2, -1])
        offset = rng.randrange(n)
        size = rng.randint(1, -(-(n - offset) // step)) if step > 0 else rng.randint(1, offset + 1)
        if rng.random() < 0.4:
            offset, size, step = 0, n, 1
        offsets.append(offset)
        sizes.append(size)
        steps.append(step)
    return offsets, sizes, steps


def _random_reshape(rng, shape: list[int]) -> list[int] | None:
    choice, k = rng.choice(["split", "merge", "add1", "drop1"]), rng.randrange(len(shape))
    if choice == "split":
        factors = [f for f in range(2, shape[k]) if shape[k] % f == 0]
        if factors:
            f = rng.choice(factors)
            return shape[:k] + [f, shape[k] // f] + shape[k + 1 :]
    if choice == "merge" and k + 1 < len(shape):
        return shape[:k] + [shape[k] * shape[k + 1]] + shape[k + 2 :]
    if choice == "add1":
        return shape[:k] + [1] + shape[k:]
    if choice == "drop1" and 1 in shape[:-1]:
        k = shape.index(1)
        return shape[:k] + shape[k + 1 :]
    return None


def pointwise_tail(n: int, dtype: str) -> str:
    """maximum(tanh(x), y) - exp(y) / x on a length that no vector width divides."""
    v = _t((n,), dtype)
    body = [
        f"%t = ai.tanh %x1 : {v}",
        f"%m = ai.maximum %t, %y1 : {v} * {v}",
        f"%e = ai.exp %y1 : {v}",
        f"%d = ai.div %e, %x1 : {v} * {v}",
        f"%o = ai.sub %m, %d : {v} * {v}",
        f"ai.yield %o : {v}",
    ]
    return _func("pw_tail", [("x", v), ("y", v)], [v], "pointwise", body)


def pointwise_every_unary(n: int, dtype: str, part: int = 0, parts: int = 1) -> str:
    """Every unary op of the dialect in one chain (new ops join it by themselves), or the
    ``part``-th of ``parts`` slices of it."""
    from fusec.dialect import ops as ai

    v = _t((n,), dtype)
    # functions defined on part of the line only would make every value NaN (and raise
    # in the simulator's Python math), and libdevice's sin/cos/tan keep a local array
    # (their reduction of huge arguments): pointwise_domain_math runs them
    limited = ("ai.log", "ai.asin", "ai.acos", "ai.acosh", "ai.atanh", "ai.sin", "ai.cos", "ai.tan")
    floats = [op for op in ai.TENSOR_OPS if issubclass(op, ai.UnaryOp) and "f32" in op.DTYPES]
    names = [op.name for op in floats if op.name not in limited]  # (ai.not: bools only)
    names = names[part * len(names) // parts : (part + 1) * len(names) // parts]
    body = [f"%u0 = ai.abs %x1 : {v}"]  # sqrt anywhere in the chain sees x >= 0
    for k, name in enumerate(names):
        body.append(f"%u{k + 1} = {name} %u{k} : {v}")
    body.append(f'%g = ai.gelu %u{len(names)} {{approximate = "tanh"}} : {v}')
    body.append(f"ai.yield %g : {v}")
    return _func("pw_unary", [("x", v)], [v], "pointwise", body)


def pointwise_domain_math(n: int, dtype: str, trig: bool = True) -> str:
    """The functions pointwise_every_unary leaves out: log, asin, acos, atanh of
    s = sigmoid(x) in (0, 1), acosh of exp(s) >= 1, and (``trig``) sin, cos, tan of s,
    summed."""
    v = _t((n,), dtype)
    body = [f"%s = ai.sigmoid %x1 : {v}", f"%e = ai.exp %s : {v}"]
    terms = [("log", "%s"), ("asin", "%s"), ("acos", "%s"), ("atanh", "%s"), ("acosh", "%e")]
    if trig:
        terms += [("sin", "%s"), ("cos", "%s"), ("tan", "%s")]
    body += [f"%f{k} = ai.{name} {operand} : {v}" for k, (name, operand) in enumerate(terms)]
    body.append(f"%a0 = ai.add %f0, %f1 : {v} * {v}")
    for k in range(2, len(terms)):
        body.append(f"%a{k - 1} = ai.add %a{k - 2}, %f{k} : {v} * {v}")
    body.append(f"ai.yield %a{len(terms) - 2} : {v}")
    return _func("pw_domain", [("x", v)], [v], "pointwise", body)


def pointwise_select(rows: int, cols: int, dtype: str) -> str:
    """where(isnan(x), y, pow(|x|, y)) clipped, minimum with y: the ternary and binary ops."""
    x, y = _t((rows, cols), dtype), _t((cols,), dtype)
    body = [
        f"%a = ai.abs %x1 : {x}",
        f"%p = ai.pow %a, %y1 : {x} * {y}",
        f"%n = ai.isnan %x1 : {x}",
        f"%w = ai.where %n, %y1, %p : {x} * {y} * {x}",
        f"%c = ai.clip %w {{min = -1.5 : f32, max = 2.0 : f32}} : {x}",
        f"%m = ai.minimum %c, %y1 : {x} * {y}",
        f"ai.yield %m : {x}",
    ]
    return _func("pw_select", [("x", x), ("y", y)], [x], "pointwise", body)


def pointwise_bias(n: int, c: int, h: int, w: int, dtype: str) -> str:
    """relu(bias_add(x, bias)) over NCHW, bias along channels; a smaller broadcast result."""
    x, bias = _t((n, c, h, w), dtype), _t((c,), dtype)
    body = [
        f"%b = ai.bias_add %x1, %bias1 : {x} * {bias}",
        f"%o = ai.relu %b : {x}",
        f"ai.yield %o : {x}",
    ]
    return _func("pw_bias", [("x", x), ("bias", bias)], [x], "pointwise", body)


def layernorm_residual(rows: int, cols: int, dtype: str) -> str:
    """h = x + y (yielded); out = gelu(layernorm(h)) * s + h, s one value per row."""
    x, v, s = _t((rows, cols), dtype), _t((cols,), dtype), _t((rows, 1), dtype)
    body = [
        f"%h = ai.add %x1, %y1 : {x} * {x}",
        f"%n = ai.layernorm %h, %g1, %b1 {{epsilon = 1.0e-05 : f32}} : {x} * {v} * {v}",
        f'%a = ai.gelu %n {{approximate = "tanh"}} : {x}',
        f"%m = ai.mul %a, %s1 : {x} * {s}",
        f"%o = ai.add %m, %h : {x} * {x}",
        f"ai.yield %h, %o : {x}, {x}",
    ]
    params = [("x", x), ("y", x), ("g", v), ("b", v), ("s", s)]
    return _func("ln_res", params, [x, x], "row_reduce", body)


def softmax_last(rows: int, cols: int, dtype: str) -> str:
    """softmax(x * scale + mask) over the last axis."""
    x, s, v = _t((rows, cols), dtype), _t((), dtype), _t((cols,), dtype)
    body = [
        f"%m = ai.mul %x1, %s1 : {x} * {s}",
        f"%a = ai.add %m, %k1 : {x} * {v}",
        f"%o = ai.softmax %a : {x}",
        f"ai.yield %o : {x}",
    ]
    return _func("sm_last", [("x", x), ("s", s), ("k", v)], [x], "row_reduce", body)


def softmax_axis(shape, axis: int, dtype: str) -> str:
    """exp(x) * softmax(x, axis) over a non-last axis."""
    x = _t(shape, dtype)
    body = [
        f"%o = ai.softmax %x1 {{axis = {axis} : i64}} : {x}",
        f"%e = ai.exp %x1 : {x}",
        f"%p = ai.mul %o, %e : {x} * {x}",
        f"ai.yield %p : {x}",
    ]
    return _func("sm_axis", [("x", x)], [x], "row_reduce", body)


_CODE_RANGES = {"i4": (-8, 8), "ui4": (0, 16), "i8": (-128, 128), "ui8": (0, 256)}


def random_inputs(module, seed: int = 0) -> list[np.ndarray]:
    """Fresh random arguments (never zeros) for the entry function of ``module``; integers
    in [-4, 5) and fair-coin bools for the integer and bool ones."""
    from fusec.dialect.ops import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function

    rng = np.random.default_rng(seed)
    fn = entry_function(module)
    out = []
    for param in fn.function_type.inputs.data:
        spec = spec_of(param)
        if spec.dtype in ("i64", "i32", "i1"):
            values = rng.integers(-4, 5, spec.shape)
            values = values > 0 if spec.dtype == "i1" else values
            out.append(np.asarray(values).astype(numpy_dtype(spec.dtype)))
            continue
        if spec.dtype in _CODE_RANGES:  # quantized codes: their whole range
            values = rng.integers(*_CODE_RANGES[spec.dtype], spec.shape)
            out.append(np.asarray(values).astype(numpy_dtype(spec.dtype)))
            continue
        values = rng.uniform(0.5, 1.5, spec.shape) * rng.choice([-1.0, 1.0], spec.shape)
        out.append(np.asarray(values).astype(numpy_dtype(spec.dtype)))
    return out


def one_group(name, params, results, kind, body) -> str:
    """A function of one ``ai.fused`` group of ``kind``: ``params`` are (name, type) pairs,
    ``body`` lines use ``%<name>1`` for the block arguments."""
    return _func(name, params, results, kind, body)


def tensor_type(shape, dtype: str) -> str:
    return _t(shape, dtype)


def cast_roundtrip(rows: int, cols: int, mid: str) -> str:
    """(x + x) rounded through ``mid`` and back, plus x: exact in float32 arithmetic, so a
    cast that does not round shows (the simulator compares it bit for bit)."""
    t32, tmid = _t((rows, cols), "f32"), _t((rows, cols), mid)
    body = [
        f"%a = ai.add %x1, %x1 : {t32} * {t32}",
        f"%h = ai.cast %a : {t32} to {tmid}",
        f"%b = ai.cast %h : {tmid} to {t32}",
        f"%o = ai.add %b, %x1 : {t32} * {t32}",
        f"ai.yield %o : {t32}",
    ]
    return _func("cast_rt", [("x", t32)], [t32], "pointwise", body)


def integer_pointwise(rows: int, cols: int, dtype: str) -> str:
    """Token-mask maths in one pointwise group (issue 29): i64 truncating division and a
    remainder by a row of divisors (a zero among them), a comparison, bool logic, casts
    both ways and a where; the integer and bool values loaded, computed and stored as
    themselves; three results (float, i1, i64)."""
    i, c = _t((rows, cols), "i64"), _t((cols,), "i64")
    b, x = _t((rows, cols), "i1"), _t((rows, cols), dtype)
    body = [
        f"%d = ai.div %i1, %c1 : {i} * {c}",
        f"%r = ai.mod %i1, %c1 {{fmod = true}} : {i} * {c}",
        f"%s = ai.sub %d, %r : {i} * {i}",
        f"%l = ai.less %s, %c1 : {i} * {c}",
        f"%n = ai.not %p1 : {b}",
        f"%o = ai.xor %l, %n : {b} * {b}",
        f"%f = ai.cast %o : {b} to {x}",
        f"%w = ai.where %o, %x1, %f : {b} * {x} * {x}",
        f"%g = ai.cast %x1 : {x} to {i}",
        f"%h = ai.maximum %g, %s : {i} * {i}",
        f"ai.yield %w, %o, %h : {x}, {b}, {i}",
    ]
    params = [("i", i), ("c", c), ("p", b), ("x", x)]
    return _func("pw_int", params, [x, b, i], "pointwise", body)


def dequantize_codes(rows: int, cols: int, codes: str, block: int) -> str:
    """Run-time codes (and zero points) of ``codes`` dequantized with f32 scales per block of
    ``block`` rows, plus x, in one pointwise group: one-byte integer inputs whose vectors
    (``cols`` a multiple of 4) load as 4, 8 or 16 bytes at once."""
    blocks = -(-rows // block)
    q, z = _t((rows, cols), codes), _t((blocks, cols), codes)
    s, x = _t((blocks, cols), "f32"), _t((rows, cols), "f32")
    attrs = f"{{axis = 0 : i64, block_size = {block} : i64}}"
    body = [
        f"%d = ai.dequantize %q1, %s1, %z1 {attrs} : {q} * {s} * {z}",
        f"%o = ai.add %d, %x1 : {x} * {x}",
        f"ai.yield %o : {x}",
    ]
    return _func("deq", [("q", q), ("s", s), ("z", z), ("x", x)], [x], "pointwise", body)


def squeeze_excite(n: int, c: int, r: int, hw: int, dtype: str) -> str:
    """A squeeze-excite block, unfused (the cuda pipeline fuses it): the mean of each
    channel plane, a 1x1 conv to ``r`` channels + bias + silu, a 1x1 conv back to ``c`` +
    bias + sigmoid, the input scaled by it. Its two convs run on a 1x1 plane."""
    x, m, s = _t((n, c, hw, hw), dtype), _t((n, c, 1, 1), dtype), _t((n, r, 1, 1), dtype)
    w1, w2, b1, b2 = (
        _t((r, c, 1, 1), dtype),
        _t((c, r, 1, 1), dtype),
        _t((r,), dtype),
        _t((c,), dtype),
    )
    params = [("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)]
    args = ", ".join(f"%{name}: {t}" for name, t in params)
    body = [
        f"%m = ai.reduce_mean %x {{axes = array<i64: 2, 3>, keepdims = true}} : {x}",
        f"%c1 = ai.conv2d %m, %w1 : {m} * {w1}",
        f"%a1 = ai.bias_add %c1, %b1 : {s} * {b1}",
        f"%s1 = ai.silu %a1 : {s}",
        f"%c2 = ai.conv2d %s1, %w2 : {s} * {w2}",
        f"%a2 = ai.bias_add %c2, %b2 : {m} * {b2}",
        f"%g = ai.sigmoid %a2 : {m}",
        f"%y = ai.mul %x, %g : {x} * {m}",
        f"return %y : {x}",
    ]
    lines = "\n".join(f"  {line}" for line in body)
    return f"func.func @se({args}) -> {x} {{\n{lines}\n}}\n"


def conv_gemv_nhwc(n: int, c: int, k: int, dtype: str, output: str = "nhwc") -> str:
    """A 1x1 conv on a 1x1 plane + bias + silu as ``conv-layout`` relays it: the input
    channels-last and the weights KRSC through transposed views, the result stored NHWC
    (``output`` "nhwc") or NCHW: the squeeze-excite convs of a channels-last CNN."""
    xin, win, b = _t((n, 1, 1, c), dtype), _t((k, 1, 1, c), dtype), _t((k,), dtype)
    x, w, y = _t((n, c, 1, 1), dtype), _t((k, c, 1, 1), dtype), _t((n, k, 1, 1), dtype)
    out = _t((n, 1, 1, k), dtype) if output == "nhwc" else y
    body = [
        f"%xv = ai.transpose %x1 {{perm = array<i64: 0, 3, 1, 2>}} : {xin}",
        f"%wv = ai.transpose %w1 {{perm = array<i64: 0, 3, 1, 2>}} : {win}",
        f"%c = ai.conv2d %xv, %wv : {x} * {w}",
        f"%a = ai.bias_add %c, %b1 : {y} * {b}",
        f"%s = ai.silu %a : {y}",
    ]
    if output == "nhwc":
        body += [
            f"%o = ai.transpose %s {{perm = array<i64: 0, 2, 3, 1>}} : {y}",
            f"ai.yield %o : {out}",
        ]
    else:
        body += [f"ai.yield %s : {y}"]
    text = _func("gemv", [("x", xin), ("w", win), ("b", b)], [out], "conv", body)
    layout = f'{{fusec.layout = {{input = "nhwc", weight = "krsc", output = "{output}"}}}}'
    return text.replace('ai.fused "conv" (%x, %w, %b)', f'ai.fused "conv" (%x, %w, %b) {layout}')


def constant_dense(shape, seed: int, dtype: str = "f16", scale: float | None = None) -> str:
    """A random ``arith.constant`` value (standard normal times ``scale``, by default
    1 / sqrt of the last dimension, so that products stay O(1)) as MLIR hex text."""
    rng = np.random.default_rng(seed)
    scaled = rng.standard_normal(shape) * (1 / np.sqrt(shape[-1]) if scale is None else scale)
    value = scaled.astype({"f16": np.float16, "f32": np.float32}[dtype])
    return f'dense<"0x{value.tobytes().hex().upper()}"> : {_t(shape, dtype)}'


def decoder_mlp(m: int, d: int, dtype: str = "f16") -> str:
    """softmax -> GEMM + residual + relu -> GEMM + residual at batch ``m``, width ``d``,
    constant weights: three kernels, each GEMM's A and its epilogue's residual the output
    of the kernel just before it (what a dependent launch may read only after its wait)."""
    x, w = _t((m, d), dtype), _t((d, d), dtype)
    return f"""
func.func @f(%x: {x}) -> {x} {{
  %w1 = arith.constant {constant_dense((d, d), 1, dtype)}
  %w2 = arith.constant {constant_dense((d, d), 2, dtype)}
  %s = ai.softmax %x {{axis = -1 : i64}} : {x}
  %h = ai.matmul %s, %w1 : {x} * {w}
  %hr = ai.add %h, %s : {x} * {x}
  %g = ai.relu %hr : {x}
  %o = ai.matmul %g, %w2 : {x} * {w}
  %r = ai.add %o, %g : {x} * {x}
  return %r : {x}
}}
"""
