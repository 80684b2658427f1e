"""Llama's RMSNorm as the exporters write it, for the cuda and cpu tests of issue #28."""

from __future__ import annotations


def _t(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>" if shape else f"tensor<{dtype}>"


def llama_rms_norm(
    shape: tuple[int, ...], dtype: str, *, reciprocal: bool = False, matmul: int = 0
) -> str:
    """x -> [cast f32] -> x * x -> mean over the last axis -> + 1e-6 -> sqrt -> 1 / . (or
    reciprocal: the dynamo exporter) -> x * . -> [cast back] -> * weight [-> @ W (D x
    ``matmul``)], as ``torch.onnx.export`` writes ``LlamaRMSNorm``."""
    d = shape[-1]
    rows = (*shape[:-1], 1)
    t, tf, r, v, s = (
        _t(shape, dtype),
        _t(shape, "f32"),
        _t(rows, "f32"),
        _t((d,), dtype),
        _t((), "f32"),
    )
    cast = dtype != "f32"
    xs = "%xs" if cast else "%x"
    body = [f"%xs = ai.cast %x : {t} to {tf}"] if cast else []
    body += [
        f"%sq = ai.mul {xs}, {xs} : {tf} * {tf}",
        f"%ms = ai.reduce_mean %sq {{axes = array<i64: {len(shape) - 1}>, keepdims = true}} : {tf}",
        f"%eps = arith.constant dense<1.0e-06> : {s}",
        f"%a = ai.add %ms, %eps : {r} * {s}",
        f"%sd = ai.sqrt %a : {r}",
    ]
    if reciprocal:
        body.append(f"%inv = ai.reciprocal %sd : {r}")
    else:
        body += [f"%one = arith.constant dense<1.0> : {s}", f"%inv = ai.div %one, %sd : {s} * {r}"]
    body.append(f"%y = ai.mul {xs}, %inv : {tf} * {r}")
    body += [f"%yh = ai.cast %y : {tf} to {t}"] if cast else []
    body.append(f"%o = ai.mul %w, {'%yh' if cast else '%y'} : {v} * {t}")
    params = [f"%x: {t}", f"%w: {v}"]
    out, result = "%o", t
    if matmul:
        tw, result = _t((d, matmul), dtype), _t((*shape[:-1], matmul), dtype)
        params.append(f"%wm: {tw}")
        body.append(f"%p = ai.matmul %o, %wm : {t} * {tw}")
        out = "%p"
    lines = "".join(f"  {line}\n" for line in body)
    return (
        f"func.func @rms({', '.join(params)}) -> {result} {{\n{lines}"
        f"  return {out} : {result}\n}}\n"
    )
