"""Attention graphs as fusec writes them, for the CPU and GPU tests of the fused kernel."""

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
) -> str:
    """softmax(q k^T (* or /) c [+ causal constant]) v over ``batch`` leading dims."""
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
    lines.append(f"%p = ai.softmax {last} : {s}")
    lines.append(f"%o = ai.matmul %p, %v : {s} * {v}")
    body = "\n  ".join(lines)
    return (
        f"func.func @attention(%q: {q}, %k: {k}, %v: {v}) -> {o} {{\n  {body}\n"
        f"  return %o : {o}\n}}\n"
    )
