"""The PyTorch fallback of conv/matmul groups on cuda (fusec/targets/cuda/torch_fallback.py).

Without a GPU: every tensor op of the dialect has a lowering; the generated
module keeps 16-bit values 16-bit (no float32 copies), lets a bias ride on the
conv/matmul call, returns PyTorch's tensors (no final copy) and never touches
PyTorch's process-wide TF32 flags. Where PyTorch is installed (any build, CPU
included), each generated ``run`` is executed on CPU tensors and compared
elementwise with the float64 reference that rounds every op's result to its
declared type (the fallback runs op by op): the same code runs on the GPU's
tensors there.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from cuda_cases import one_group, random_inputs
from cuda_cases import tensor_type as t
from numerics import assert_close

import fusec
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.runtime.reference import run_reference
from fusec.targets.cuda import torch_fallback as cuda_torch

# name -> (params, result types, body): one "matmul" or "conv" group each.
M, K, N = 6, 16, 12


def _mm(dtype: str, tail: list[str], out_dtype: str | None = None, extra=()):
    """x @ w (M x K @ K x N) followed by ``tail`` (lines using %m); result %o."""
    x, w, o = t((M, K), dtype), t((K, N), dtype), t((M, N), out_dtype or dtype)
    params = [("x", x), ("w", w), *extra]
    body = [f"%m = ai.matmul %x1, %w1 : {x} * {w}", *tail, f"ai.yield %o : {o}"]
    return params, [o], "matmul", body


def _unary(name: str, dtype: str):
    y = t((M, N), dtype)
    return _mm(dtype, [f"%o = {name} %m : {y}"])


def _unary_in_domain(name: str, dtype: str, into: list[str]):
    """``name`` of the product passed through ``into`` first (unary ops, in order), so that
    its argument lies where the op is finite: tanh for asin and the like, abs for log."""
    y = t((M, N), dtype)
    lines, value = [], "%m"
    for k, op in enumerate(into):
        lines.append(f"%d{k} = {op} {value} : {y}")
        value = f"%d{k}"
    return _mm(dtype, [*lines, f"%o = {name} {value} : {y}"])


#: The dialect's unary maths and activations: plain, or with their argument brought into
#: the op's domain (and, for the fast-growing ones, kept small in f16).
UNARY_CASES = {
    **{
        name: []
        for name in (
            "ceil", "floor", "round", "sign", "sin", "cos", "reciprocal", "celu", "elu",
            "selu", "hard_sigmoid", "hard_swish", "leaky_relu", "mish", "softplus",
            "softsign", "thresholded_relu",
        )
    },
    **{
        name: ["ai.tanh"]
        for name in ("asin", "acos", "atanh", "atan", "asinh", "sinh", "cosh", "tan")
    },
    "log": ["ai.abs"],
    "acosh": ["ai.tanh", "ai.abs", "ai.exp"],
}  # fmt: skip


def _unary_case(name: str, dtype: str):
    return _unary_in_domain(f"ai.{name}", dtype, UNARY_CASES[name])


def _binary(name: str, dtype: str, shape=(M, N)):
    y, z = t((M, N), dtype), t(shape, dtype)
    return _mm(dtype, [f"%o = {name} %m, %z1 : {y} * {z}"], extra=[("z", z)])


def _conv(dtype: str, attrs: str, x_shape, w_shape, out_shape, tail=None, extra=()):
    x, w, o = t(x_shape, dtype), t(w_shape, dtype), t(out_shape, dtype)
    lines = tail or ["%o = ai.relu %c : " + o]
    body = [f"%c = ai.conv2d %x1, %w1 {attrs} : {x} * {w}", *lines, f"ai.yield %o : {o}"]
    return [("x", x), ("w", w), *extra], [o], "conv", body


def _conv_bias_relu(dtype: str):
    o, b = t((2, 8, 6, 6), dtype), t((8,), dtype)
    tail = [f"%b = ai.bias_add %c, %bias1 : {o} * {b}", f"%o = ai.relu %b : {o}"]
    return _conv(dtype, "", (2, 4, 8, 8), (8, 4, 3, 3), (2, 8, 6, 6), tail, [("bias", b)])


def _matmul_bias(dtype: str):
    y, b = t((M, N), dtype), t((N,), dtype)
    return _mm(
        dtype, [f"%o = ai.bias_add %m, %b1 {{axis = 1 : i64}} : {y} * {b}"], extra=[("b", b)]
    )


def _batched_linear(dtype: str):
    """(2, M, K) @ (N, K)^T + (1, N) row: a 3-D product whose bias rides on addmm."""
    x, w, r, o = t((2, M, K), dtype), t((N, K), dtype), t((1, N), dtype), t((2, M, N), dtype)
    body = [
        f"%m = ai.matmul %x1, %w1 {{transpose_b = true}} : {x} * {w}",
        f"%o = ai.add %row1, %m : {r} * {o}",
        f"ai.yield %o : {o}",
    ]
    return [("x", x), ("w", w), ("row", r)], [o], "matmul", body


def _layernorm_matmul_softmax(dtype: str):
    x, v, w, o = t((M, K), dtype), t((K,), dtype), t((K, N), dtype), t((M, N), dtype)
    body = [
        f"%n = ai.layernorm %x1, %g1, %b1 {{epsilon = 1.0e-05 : f32}} : {x} * {v} * {v}",
        f"%m = ai.matmul %n, %w1 : {x} * {w}",
        f"%o = ai.softmax %m {{axis = 0 : i64}} : {o}",
        f"ai.yield %o : {o}",
    ]
    return [("x", x), ("g", v), ("b", v), ("w", w)], [o], "matmul", body


def _rms_norm_matmul_rotate_half(dtype: str):
    """Llama's pieces in a matmul group: an RMSNorm prologue, RoPE's rotate-half after."""
    x, v, w, o = t((M, K), dtype), t((K,), dtype), t((K, N), dtype), t((M, N), dtype)
    body = [
        f"%n = ai.rms_norm %x1, %g1 {{epsilon = 1.0e-05 : f32}} : {x} * {v}",
        f"%m = ai.matmul %n, %w1 : {x} * {w}",
        f"%o = ai.rotate_half %m : {o}",
        f"ai.yield %o : {o}",
    ]
    return [("x", x), ("g", v), ("w", w)], [o], "matmul", body


def _cast_chain(dtype: str):
    y, f = t((M, N), dtype), t((M, N), "f32")
    tail = [f"%c = ai.cast %m : {y} to {f}", f'%o = ai.gelu %c {{approximate = "tanh"}} : {f}']
    return _mm(dtype, tail, out_dtype="f32")


def _matmul_views(dtype: str):
    """Layout ops in a matmul group: a head split (slice, reshape, transpose), a concat
    and a gather of the weight."""
    x, w = t((2, 6, 8), dtype), t((2, 4), dtype)
    h, ht, o = t((2, 6, 2, 2), dtype), t((2, 2, 6, 2), dtype), t((2, 2, 6, 4), dtype)
    body = [
        f"%s = ai.slice %x1 {{offsets = array<i64: 0, 0, 4>, sizes = array<i64: 2, 6, 4>, "
        f"strides = array<i64: 1, 1, 1>}} : {x}",
        f"%r = ai.reshape %s {{shape = array<i64: 2, 6, 2, 2>}} : {t((2, 6, 4), dtype)}",
        f"%p = ai.transpose %r {{perm = array<i64: 0, 2, 1, 3>}} : {h}",
        f"%g = ai.gather %w1 {{axis = 1 : i64, indices = array<i64: 3, 1>}} : {w}",
        f"%c = ai.concat %g, %g {{axis = 1 : i64}} : {t((2, 2), dtype)} * {t((2, 2), dtype)}",
        f"%o = ai.matmul %p, %c : {ht} * {t((2, 4), dtype)}",
        f"ai.yield %o : {o}",
    ]
    return [("x", x), ("w", w)], [o], "matmul", body


def _reductions(dtype: str):
    x = t((3, 4, 5), dtype)
    body = [
        f"%a = ai.reduce_mean %x1 {{axes = array<i64: 2>, keepdims = true}} : {x}",
        f"%b = ai.reduce_sum %a {{axes = array<i64: 0>}} : {t((3, 4, 1), dtype)}",
        f"%o = ai.reduce_max %b : {t((4, 1), dtype)}",
        f"ai.yield %o : {t((), dtype)}",
    ]
    return [("x", x)], [t((), dtype)], "reduce", body


def _pool(dtype: str, op: str, attrs: str, in_shape, out_shape):
    x, o = t(in_shape, dtype), t(out_shape, dtype)
    body = [f"%o = ai.{op} %x1 {attrs} : {x}", f"ai.yield %o : {o}"]
    return [("x", x)], [o], "pool", body


def _attention(dtype: str):
    """ai.attention with a mask blocking one row entirely (its probabilities NaN -> 0)."""
    q, k, v = t((2, 5, 4), dtype), t((2, 6, 4), dtype), t((2, 6, 3), dtype)
    m, o = t((5, 6), dtype), t((2, 5, 3), dtype)
    body = [
        f"%o = ai.attention %q1, %k1, %v1, %m1 {{scale = 0.5 : f32, nan_to_zero = true}} : "
        f"{q} * {k} * {v} * {m}",
        f"ai.yield %o : {o}",
    ]
    return [("q", q), ("k", k), ("v", v), ("m", m)], [o], "attention", body


def _moe_experts(dtype: str):
    """ai.moe_experts: 6 tokens, top-2 of 5 experts (the integer inputs, in [-4, 5), index
    them; the negative ones from the end)."""
    x, w, e = t((6, 8), dtype), t((6, 2), "f32"), t((6, 2), "i64")
    gu, dn = t((5, 10, 8), dtype), t((5, 8, 5), dtype)
    body = [
        f"%o = ai.moe_experts %x1, %w1, %e1, %gu1, %dn1 : {x} * {w} * {e} * {gu} * {dn}",
        f"ai.yield %o : {x}",
    ]
    return [("x", x), ("w", w), ("e", e), ("gu", gu), ("dn", dn)], [x], "experts", body


def _integer_mask(dtype: str):
    """Token-mask maths beside the product: i64 arithmetic (truncating division, the
    remainder), comparisons, bool logic, casts and a where on an i1 condition, each value
    in its own type (issue 29)."""
    y, i, c, b = t((M, N), dtype), t((M, N), "i64"), t((N,), "i64"), t((M, N), "i1")
    tail = [
        f"%d = ai.div %i1, %c1 : {i} * {c}",
        f"%r = ai.mod %i1, %c1 : {i} * {c}",
        f"%s = ai.sub %d, %r : {i} * {i}",
        f"%p = ai.mul %s, %i1 : {i} * {i}",
        f"%mx = ai.maximum %p, %d : {i} * {i}",
        f"%ng = ai.neg %mx : {i}",
        f"%e = ai.equal %ng, %c1 : {i} * {c}",
        f"%l = ai.less %i1, %c1 : {i} * {c}",
        f"%g = ai.greater %i1, %c1 : {i} * {c}",
        f"%le = ai.less_equal %i1, %c1 : {i} * {c}",
        f"%ge = ai.greater_equal %i1, %c1 : {i} * {c}",
        f"%n = ai.not %e : {b}",
        f"%a = ai.and %n, %l : {b} * {b}",
        f"%or = ai.or %a, %g : {b} * {b}",
        f"%xo = ai.xor %or, %le : {b} * {b}",
        f"%a2 = ai.and %xo, %ge : {b} * {b}",
        f"%f = ai.cast %a2 : {b} to {y}",
        f"%o = ai.where %a2, %m, %f : {b} * {y} * {y}",
    ]
    return _mm(dtype, tail, extra=[("i", i), ("c", c)])


def _lookup(dtype: str):
    """An embedding lookup at run-time ids, a running sum and a broadcast: a copy group."""
    table, ids = t((10, N), dtype), t((M,), "i64")
    r, o = t((M, N), dtype), t((2, M, N), dtype)
    body = [
        f"%r = ai.take %tb1, %ids1 : {table} * {ids}",
        f"%c = ai.cumsum %r {{axis = 0 : i64, reverse = true}} : {r}",
        f"%o = ai.expand %c {{shape = array<i64: 2, {M}, {N}>}} : {r}",
        f"ai.yield %o : {o}",
    ]
    return [("tb", table), ("ids", ids)], [o], "copy", body


def _arg_reductions(dtype: str):
    """The index of each row's maximum, then the last index of their minimum: a copy group."""
    x, rows, o = t((M, N), dtype), t((M, 1), "i64"), t((1, 1), "i64")
    body = [
        f"%a = ai.argmax %x1 {{axis = 1 : i64}} : {x}",
        f"%o = ai.argmin %a {{select_last_index = true}} : {rows}",
        f"ai.yield %o : {o}",
    ]
    return [("x", x)], [o], "copy", body


CASES = {
    "integer_mask": _integer_mask,
    "arg_reductions": _arg_reductions,
    "lookup_cumsum_expand": _lookup,
    "add": lambda d: _binary("ai.add", d),
    "sub_broadcast_column": lambda d: _binary("ai.sub", d, (M, 1)),
    "mul_scalar": lambda d: _binary("ai.mul", d, ()),
    "div": lambda d: _binary("ai.div", d),
    "maximum_row": lambda d: _binary("ai.maximum", d, (N,)),
    "relu": lambda d: _unary("ai.relu", d),
    "sigmoid": lambda d: _unary("ai.sigmoid", d),
    "tanh": lambda d: _unary("ai.tanh", d),
    "exp": lambda d: _unary("ai.exp", d),
    "silu": lambda d: _unary("ai.silu", d),
    "neg": lambda d: _unary("ai.neg", d),
    "abs": lambda d: _unary("ai.abs", d),
    "gelu": lambda d: _unary("ai.gelu", d),
    "sqrt_of_relu": lambda d: _mm(
        d, [f"%r = ai.relu %m : {t((M, N), d)}", f"%o = ai.sqrt %r : {t((M, N), d)}"]
    ),
    "matmul_bias": _matmul_bias,
    "batched_linear_row_bias": _batched_linear,
    "layernorm_matmul_softmax_axis0": _layernorm_matmul_softmax,
    "rms_norm_matmul_rotate_half": _rms_norm_matmul_rotate_half,
    "cast_gelu": _cast_chain,
    "conv_bias_relu": _conv_bias_relu,
    "conv_strided_grouped_dilated": lambda d: _conv(
        d,
        "{strides = array<i64: 2, 2>, dilations = array<i64: 2, 1>, groups = 2 : i64}",
        (1, 4, 11, 9),
        (6, 2, 3, 3),
        (1, 6, 4, 4),
    ),
    "conv_asymmetric_padding": lambda d: _conv(
        d, "{padding = array<i64: 0, 1, 2, 1>}", (1, 3, 6, 6), (4, 3, 3, 3), (1, 4, 6, 6)
    ),
    "minimum_row": lambda d: _binary("ai.minimum", d, (N,)),
    "prelu_row": lambda d: _binary("ai.prelu", d, (N,)),
    **{f"unary_{name}": functools.partial(_unary_case, name) for name in UNARY_CASES},
    "erf": lambda d: _unary("ai.erf", d),
    "clip": lambda d: _mm(
        d, [f"%o = ai.clip %m {{min = -0.5 : f32, max = 1.5 : f32}} : {t((M, N), d)}"]
    ),
    "pow_of_abs": lambda d: _mm(
        d,
        [
            f"%a = ai.abs %m : {t((M, N), d)}",
            f"%o = ai.pow %a, %z1 : {t((M, N), d)} * {t((N,), d)}",
        ],
        extra=[("z", t((N,), d))],
    ),
    "where_isnan": lambda d: _mm(
        d,
        [
            f"%n = ai.isnan %m : {t((M, N), d)}",
            f"%o = ai.where %n, %z1, %m : {t((M, N), d)} * {t((N,), d)} * {t((M, N), d)}",
        ],
        extra=[("z", t((N,), d))],
    ),
    "matmul_through_views": _matmul_views,
    "attention": _attention,
    "moe_experts": _moe_experts,
    "reductions": _reductions,
    "max_pool_asymmetric_ceil": lambda d: _pool(
        d,
        "max_pool2d",
        "{kernel = array<i64: 2, 3>, strides = array<i64: 2, 1>, padding = array<i64: 0, 1, 1, 0>, "
        "dilations = array<i64: 2, 1>, ceil_mode = true}",
        (1, 2, 7, 6),
        (1, 2, 4, 5),
    ),
    "avg_pool_include_pad_ceil": lambda d: _pool(
        d,
        "avg_pool2d",
        "{kernel = array<i64: 3, 2>, strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 0, 1>, "
        "ceil_mode = true, count_include_pad = true}",
        (1, 3, 8, 7),
        (1, 3, 4, 4),
    ),
}


def _module(case: str, dtype: str):
    params, results, kind, body = CASES[case](dtype)
    return fusec.parse(one_group("g", params, results, kind, body))


def _source(module) -> str:
    group = next(op for op in module.walk() if isinstance(op, ai.FusedOp))
    return cuda_torch.generate(group, "k0").source


#: Every op a fallback group may hold (``test_every_tensor_op_has_a_torch_lowering``).
_FALLBACK_OPS = [
    op
    for op in ai.TENSOR_OPS
    if "cuda" not in op.UNSUPPORTED and op not in (ai.QuantizeOp, ai.DequantizeOp)
]


def test_every_tensor_op_has_a_torch_lowering():
    """A new op cannot be fused into a conv/matmul group that the cuda target then cannot
    run (as ai.sqrt could: 'has no PyTorch fallback')."""
    # (an op the cuda target refuses, with its reason, never reaches a fallback group; nor
    # do the quantization ops: their quantized values keep them out of the GEMM and conv
    # groups, which compute floats, but for the float8 GEMM's own dequantized operands)
    lowered = [op for op in _FALLBACK_OPS]
    assert [op.name for op in lowered if not cuda_torch.lowerable(op)] == []


def test_every_op_is_exercised_here():
    covered = set()
    for case in CASES:
        covered |= {type(op) for op in _module(case, "f32").walk() if isinstance(op, ai.AiOp)}
    assert covered >= set(_FALLBACK_OPS)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_generated_source_is_lean(case: str, dtype: str):
    module = _module(case, dtype)
    source = _source(module)
    compile(source, "<kernel>", "exec")
    body = [op for op in module.walk() if isinstance(op, ai.AiOp)]
    by_fact = [op for op in body if not isinstance(op, (ai.FusedOp, ai.YieldOp))]
    by_fact = [op for op in by_fact if type(op) not in cuda_torch.LOWERINGS]
    by_fact += [op for op in body if isinstance(op, ai.DivOp) and _integer(op)]
    if any(not _integer(op) for op in by_fact):
        # PyTorch has no such function: float32 copies, rounded once (as a kernel)
        assert ".float()" in source and ".to(torch." in source
    else:
        assert ".float()" not in source
        assert "float32)" not in source.replace("to(torch.float32)", "")
    assert "allow_tf32" not in source and "backends" not in source  # no global flags
    assert ".copy_(" not in source  # results are PyTorch's own tensors


def _integer(op) -> bool:
    """Whether every operand of ``op`` is an integer or bool (kept as it is, no copy)."""
    return all(spec_of(v.type).dtype in ("i64", "i32", "i1") for v in op.operands)


def test_a_bias_rides_on_the_conv_and_matmul_call():
    conv = _source(_module("conv_bias_relu", "f16"))
    assert "torch.nn.functional.conv2d(x0, x1, x2," in conv and "torch.add(" not in conv
    conv32 = _source(_module("conv_bias_relu", "f32"))
    assert "ieee_conv2d(torch, x0, x1, x2," in conv32
    assert "torch.addmm(x2, x0, x1)" in _source(_module("matmul_bias", "f16"))
    linear = _source(_module("batched_linear_row_bias", "bf16"))
    assert "torch.addmm(x2, x0.reshape(-1, 16), x1.transpose(-1, -2)).view((2, 6, 12))" in linear


# ------------------------------------------------------------- run on CPU torch


def _to_torch(torch, array: np.ndarray):
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def _to_numpy(tensor) -> np.ndarray:
    import ml_dtypes

    if str(tensor.dtype) == "torch.bfloat16":
        return tensor.view(__import__("torch").int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_generated_run_matches_the_reference(case: str, dtype: str):
    torch = pytest.importorskip("torch")
    module = _module(case, dtype)
    namespace: dict = {}
    exec(compile(_source(module), "<kernel>", "exec"), namespace)
    args = random_inputs(module, seed=11)
    results = namespace["run"](torch, *(_to_torch(torch, a) for a in args))
    # op by op: every result is rounded to its declared type, as the reference does here
    references = run_reference(module, args, precision="float64", rounding="every-op")
    for k, (got, want) in enumerate(zip(results, references, strict=True)):
        assert tuple(got.shape) == want.shape and got.is_contiguous()
        assert_close(_to_numpy(got), want, what=f"{case} {dtype} result #{k}")


def test_f32_conv_and_matmul_leave_the_tf32_flags_alone():
    torch = pytest.importorskip("torch")
    before = (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    for case in ("conv_bias_relu", "matmul_bias", "layernorm_matmul_softmax_axis0"):
        module = _module(case, "f32")
        namespace: dict = {}
        exec(compile(_source(module), "<kernel>", "exec"), namespace)
        namespace["run"](torch, *(_to_torch(torch, a) for a in random_inputs(module, 1)))
    assert (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()) == before


@pytest.mark.parametrize("case", ["relu", "gelu", "maximum_row", "sigmoid"])
def test_ops_without_a_torch_function_use_their_scalar_fact(case: str, monkeypatch):
    """An elementwise op missing from LOWERINGS (a new op) still runs: its scalar
    semantics on float32 copies, rounded once to its declared type."""
    torch = pytest.importorskip("torch")
    module = _module(case, "f16")
    op_type = next(type(op) for op in module.walk() if op.name == f"ai.{case.split('_')[0]}")
    monkeypatch.delitem(cuda_torch.LOWERINGS, op_type)
    source = _source(module)
    assert ".float()" in source and ").to(torch.float16)" in source
    namespace: dict = {}
    exec(compile(source, "<kernel>", "exec"), namespace)
    args = random_inputs(module, seed=5)
    (got,) = namespace["run"](torch, *(_to_torch(torch, a) for a in args))
    (want,) = run_reference(module, args, precision="float64", rounding="every-op")
    assert_close(_to_numpy(got), want, what=case)
