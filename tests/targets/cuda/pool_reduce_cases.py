"""Programs and inputs for the cuda pool and reduce templates' tests (simulator and GPU).

Each builder returns the MLIR text of one function: the anchor (a pooling or a
reduction) of a fresh input, optionally followed by an elementwise epilogue with a
broadcast operand (which the fusion planner puts into the anchor's group). Inputs are
random (never zeros); ``special`` scatters NaN and -inf into the anchor's input.
"""

from __future__ import annotations

import numpy as np

from fusec.dialect.shapes import TensorSpec, pool2d, reduce


def _t(shape, dtype: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _ints(values) -> str:
    if not len(values):
        return "array<i64>"
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>"


def pool_program(
    shape,
    dtype: str,
    kind: str,
    kernel,
    strides,
    padding,
    dilations=(1, 1),
    ceil_mode: bool = False,
    include_pad: bool = False,
    epilogue: bool = False,
) -> str:
    """``<kind>_pool2d(x)``, then ``relu(p * s + p)`` with ``s`` one value per channel
    when ``epilogue``."""
    out = pool2d(
        f"ai.{kind}_pool2d",
        TensorSpec(tuple(shape), dtype),
        kernel=kernel,
        strides=strides,
        padding=padding,
        dilations=dilations,
        ceil_mode=ceil_mode,
    ).shape
    attrs = [
        f"kernel = {_ints(kernel)}",
        f"strides = {_ints(strides)}",
        f"padding = {_ints(padding)}",
        f"dilations = {_ints(dilations)}",
    ]
    if ceil_mode:
        attrs.append("ceil_mode = true")
    if include_pad:
        attrs.append("count_include_pad = true")
    x_t, o_t = _t(shape, dtype), _t(out, dtype)
    lines = [f"  %p = ai.{kind}_pool2d %x {{{', '.join(attrs)}}} : {x_t}"]
    params = [f"%x: {x_t}"]
    result = "%p"
    if epilogue:
        s_t = _t((shape[1], 1, 1), dtype)
        params.append(f"%s: {s_t}")
        lines += [
            f"  %m = ai.mul %p, %s : {o_t} * {s_t}",
            f"  %a = ai.add %m, %p : {o_t} * {o_t}",
            f"  %r = ai.relu %a : {o_t}",
        ]
        result = "%r"
    return _function(params, lines, result, o_t)


def reduce_program(shape, dtype: str, kind: str, axes, keepdims: bool, epilogue: bool) -> str:
    """``reduce_<kind>(x, axes)``, then ``-(r * b)`` with ``b`` broadcast along the output's
    last kept dim when ``epilogue`` (a product: an error of the reduction shows at its own
    relative size, where an added term or a flat function would hide it)."""
    out = reduce(f"ai.reduce_{kind}", TensorSpec(tuple(shape), dtype), axes=axes, keepdims=keepdims)
    x_t, o_t = _t(shape, dtype), _t(out.shape, dtype)
    attrs = f"axes = {_ints(axes)}, keepdims = {'true' if keepdims else 'false'}"
    lines = [f"  %p = ai.reduce_{kind} %x {{{attrs}}} : {x_t}"]
    params = [f"%x: {x_t}"]
    result = "%p"
    if epilogue:
        b_t = _t((out.shape[-1],) if out.shape else (1,), dtype)
        params.append(f"%b: {b_t}")
        lines += [f"  %a = ai.mul %p, %b : {o_t} * {b_t}", f"  %r = ai.neg %a : {o_t}"]
        result = "%r"
    return _function(params, lines, result, o_t)


def two_results_program(shape, dtype: str, kind: str) -> str:
    """``p = <kind>(x)`` and ``exp(p) * s``, both returned: one group (the epilogue fused)
    with two results, the anchor's value among them. ``kind``: "max_pool2d" (3x3/2,
    padding 1) or "reduce_max" (over the last two axes, kept)."""
    n, c, h, w = shape
    if kind == "max_pool2d":
        attrs = "kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>"
        out = (n, c, (h - 1) // 2 + 1, (w - 1) // 2 + 1)
    else:
        attrs = "axes = array<i64: 2, 3>, keepdims = true"
        out = (n, c, 1, 1)
    x_t, o_t, s_t = _t(shape, dtype), _t(out, dtype), _t((c, 1, 1), dtype)
    return (
        f"func.func @f(%x: {x_t}, %s: {s_t}) -> ({o_t}, {o_t}) {{\n"
        f"  %p = ai.{kind} %x {{{attrs}}} : {x_t}\n"
        f"  %e = ai.exp %p : {o_t}\n"
        f"  %m = ai.mul %e, %s : {o_t} * {s_t}\n"
        f"  return %p, %m : {o_t}, {o_t}\n}}\n"
    )


def channels_last_group(
    kind: str,
    shape,
    dtype: str,
    attrs: str,
    out_shape,
    store_nhwc: bool,
    epilogue: bool,
    input_nhwc: bool = True,
    anchor_too: bool = False,
) -> str:
    """One hand-made ``ai.fused`` group as the conv layout writes them: an NHWC input
    (``shape`` is NCHW) viewed NCHW by ``ai.transpose [0, 3, 1, 2]`` (an NCHW input as
    it is, unless ``input_nhwc``), the anchor ``kind`` (``max_pool2d``, ``reduce_mean``...)
    with ``attrs``, ``relu(y * s)`` with ``s`` one value per channel when ``epilogue``,
    and the result stored NHWC (a transpose ``[0, 2, 3, 1]`` before the yield) when
    ``store_nhwc``; with ``anchor_too`` (an NCHW store) the anchor's value is a second
    result (DenseNet's transition: the pooled tensor also feeds the next concat)."""
    assert not (anchor_too and (store_nhwc or not epilogue))
    n, c, h, w = shape
    x_t = _t((n, h, w, c) if input_nhwc else shape, dtype)
    v_t, o_t = _t(shape, dtype), _t(out_shape, dtype)
    on, oc, oh, ow = out_shape
    r_t = _t((on, oh, ow, oc), dtype) if store_nhwc else o_t
    s_t = _t((c, 1, 1), dtype)
    body = [f"%v = ai.transpose %x1 {{perm = array<i64: 0, 3, 1, 2>}} : {x_t}"]
    if not input_nhwc:
        body = []
    body.append(f"%y = ai.{kind} {'%v' if input_nhwc else '%x1'} {{{attrs}}} : {v_t}")
    last = "%y"
    if epilogue:
        body += [f"%m = ai.mul %y, %s1 : {o_t} * {s_t}", f"%e = ai.relu %m : {o_t}"]
        last = "%e"
    if store_nhwc:
        body.append(f"%z = ai.transpose {last} {{perm = array<i64: 0, 2, 3, 1>}} : {o_t}")
        last = "%z"
    results, types = ("%r#0, %r#1", f"{o_t}, {r_t}") if anchor_too else ("%r", r_t)
    body.append(f"ai.yield {'%y, ' if anchor_too else ''}{last} : {types}")
    group = "\n".join(f"    {line}" for line in body)
    return (
        f"func.func @f(%x: {x_t}, %s: {s_t}) -> ({types}) {{\n"
        f'  %r{":2" if anchor_too else ""} = ai.fused "{"pool" if "pool" in kind else "reduce"}"'
        f" (%x, %s) : ({x_t}, {s_t}) -> ({types}) {{\n  ^bb0(%x1: {x_t}, %s1: {s_t}):\n"
        f"{group}\n  }}\n  return {results} : {types}\n}}\n"
    )


def _function(params, lines, result: str, out_t: str) -> str:
    body = "\n".join(lines)
    return (
        f"func.func @f({', '.join(params)}) -> {out_t} {{\n{body}\n"
        f"  return {result} : {out_t}\n}}\n"
    )


def inputs(module, seed: int, special: bool | str) -> list[np.ndarray]:
    """Random arguments of ``module``'s entry; NaN and -inf in the first when ``special``,
    or only 0.0 and -0.0 there when ``special`` is "zeros" (which one a max returns), or
    positive values near float32's largest, [1.5e38, 3e38], when it is "huge" (a float32
    sum of two overflows; their mean is finite)."""
    from fusec.dialect.ops import spec_of
    from fusec.ir.dtypes import numpy_dtype
    from fusec.ir.module import entry_function

    rng = np.random.default_rng(seed)
    out = []
    for param in entry_function(module).function_type.inputs.data:
        spec = spec_of(param)
        values = rng.uniform(0.5, 1.5, spec.shape) * rng.choice([-1.0, 1.0], spec.shape)
        out.append(np.asarray(values).astype(numpy_dtype(spec.dtype)))
    if special == "huge":
        values = rng.uniform(0.5, 1.0, out[0].shape) * 3e38
        out[0] = np.asarray(values).astype(out[0].dtype)
    elif special == "zeros":
        out[0] = np.where(rng.random(out[0].shape) < 0.5, -0.0, 0.0).astype(out[0].dtype)
    elif special:
        flat = out[0].reshape(-1)
        picks = rng.choice(flat.size, size=max(2, flat.size // 16), replace=False)
        half = len(picks) // 2
        flat[picks[:half]] = np.nan
        flat[picks[half:]] = -np.inf
    return out
