"""The activations and unary maths of ONNX's float operators on the cpu target.

Each op runs alone on its own output (a chain would hide one op behind the
next), in one pointwise kernel, on random inputs, against the float64
reference; functions defined on part of the line see operands inside it.
"""

from __future__ import annotations

import pytest
from cpu_check import check

from fusec.runtime.cache import KernelCache

#: (op with attributes, operand): the operand is %x (standard normal), %s (in (0, 1)),
#: or %e (in (1, e)).
CASES = [
    ("log", "%s"),
    ("asin", "%s"),
    ("acos", "%s"),
    ("atanh", "%s"),
    ("acosh", "%e"),
    *((name, "%x") for name in ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh")),
    *((name, "%x") for name in ("floor", "ceil", "round", "sign", "reciprocal")),
    *((name, "%x") for name in ("hard_swish", "softplus", "softsign", "mish", "hard_sigmoid")),
    ("hard_sigmoid {alpha = 0.5 : f32, beta = 0.25 : f32}", "%x"),
    ("leaky_relu {alpha = 0.1 : f32}", "%x"),
    ("elu {alpha = 2.0 : f32}", "%x"),
    ("selu", "%x"),
    ("celu {alpha = 0.5 : f32}", "%x"),
    ("thresholded_relu {alpha = 0.25 : f32}", "%x"),
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_every_new_unary_op_alone_in_one_kernel(cache, dtype):
    t = f"tensor<5x33x{dtype}>"
    lines = [f"%s = ai.sigmoid %x : {t}", f"%e = ai.exp %s : {t}"]
    for k, (op, operand) in enumerate(CASES):
        name, _, attrs = op.partition(" ")
        lines.append(f"%r{k} = ai.{name} {operand} {attrs} : {t}")
    lines.append(f"%p = ai.prelu %x, %slope : {t} * tensor<33x{dtype}>")
    results = [f"%r{k}" for k in range(len(CASES))] + ["%p"]
    types = ", ".join([t] * len(results))
    body = "\n  ".join(lines)
    text = f"""
func.func @f(%x: {t}, %slope: tensor<33x{dtype}>) -> ({types}) {{
  {body}
  return {", ".join(results)} : {types}
}}"""
    check(text, cache=cache, kind="pointwise")
