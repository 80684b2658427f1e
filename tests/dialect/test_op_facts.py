"""Every ai op carries every fact, and each fact means what the reference computes.

The op classes are the single home of their facts (``fusec.dialect.facts``):
fusion pattern, scalar semantics, numpy reference, front-end names and the
targets that cannot lower them. These tests walk ``TENSOR_OPS``, so a new op is
checked the moment it is added: nothing else needs to list it.

The scalar semantics of every elementwise op is evaluated in each language the
expression generator renders (plain Python here, CUDA C++ compiled on the host
with g++ and to PTX with nvcc, PyTorch when installed) on edge values and
random ones, against the op's own numpy reference.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest
from numpy import float32 as f32
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.builtin import f32 as F32
from xdsl.dialects.builtin import i1 as I1
from xdsl.dialects.builtin import i64 as I64
from xdsl.ir import Block

import fusec.ops
from fusec.codegen.expr import (
    CUDA_CPP,
    LANGUAGES,
    TORCH,
    ExprGenerator,
    helper_source,
    operand_shape,
)
from fusec.dialect import ops as ai
from fusec.dialect.facts import FUSED_KINDS, Pattern
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.frontend.mlir import parse_module
from fusec.ir.dtypes import numpy_dtype
from fusec.passes.fusion.rules import default_rules
from fusec.target import REGISTRY, generate, get_target
from fusec.targets.cuda.cpp_expr import cpp_helper_source

N = 64


def _instances(op_type: type[ai.AiOp]) -> list[ai.AiOp]:
    """Ops of ``op_type`` on f32 block arguments, one per attribute variant that matters."""
    if op_type is ai.BiasAddOp:
        x, b = Block(arg_types=[TensorType(F32, [2, N // 2]), TensorType(F32, [N // 2])]).args
        return [ai.BiasAddOp(x, b, axis=1)]
    if op_type is ai.CastOp:
        x, i, b = Block(arg_types=[TensorType(t, [N]) for t in (F32, I64, I1)]).args
        to_float = [ai.CastOp(x, to) for to in ("f16", "bf16", "f32")]
        integers = [ai.CastOp(x, "i64"), ai.CastOp(x, "i1"), ai.CastOp(i, "f32")]
        integers += [ai.CastOp(i, "i32"), ai.CastOp(i, "i1"), ai.CastOp(b, "f16")]
        return to_float + integers + [ai.CastOp(b, "i64")]
    if op_type is ai.ExpandOp:
        (x,) = Block(arg_types=[TensorType(F32, [N // 2])]).args
        return [ai.ExpandOp(x, shape=(2, N // 2))]
    if issubclass(op_type, ai.BinaryOp):
        return _binary_instances(op_type)
    if op_type is ai.WhereOp:
        c, x, y = Block(arg_types=[TensorType(F32, [N])] * 3).args
        b, i, j = Block(arg_types=[TensorType(t, [N]) for t in (I1, I64, I64)]).args
        return [ai.WhereOp(c, x, y), ai.WhereOp(b, i, j), ai.WhereOp(b, x, y)]
    if issubclass(op_type, ai.UnaryOp):
        if op_type.DTYPES == ("i1",):
            (b,) = Block(arg_types=[TensorType(I1, [N])]).args
            return [op_type(b)]
        (x,) = Block(arg_types=[TensorType(F32, [N])]).args
        variants = [op_type(x)]
        if "i64" in op_type.DTYPES:
            variants.append(op_type(Block(arg_types=[TensorType(I64, [N])]).args[0]))
        if op_type is ai.GeluOp:
            variants.append(ai.GeluOp(x, approximate="tanh"))
        if op_type is ai.ClipOp:
            variants += [ai.ClipOp(x, min=0.0, max=6.0), ai.ClipOp(x, min=-1.5)]
        if op_type in (ai.LeakyReluOp, ai.EluOp, ai.CeluOp, ai.ThresholdedReluOp):
            variants.append(op_type(x, alpha=-0.75 if op_type is ai.ThresholdedReluOp else 2.5))
        if op_type is ai.HardSigmoidOp:
            variants.append(ai.HardSigmoidOp(x, alpha=0.5, beta=0.25))
        if op_type is ai.SeluOp:
            variants.append(ai.SeluOp(x, alpha=2.0, gamma=3.0))
        return variants
    raise AssertionError(f"no sample instance for {op_type.name}")


def _binary_instances(op_type: type[ai.BinaryOp]) -> list[ai.AiOp]:
    """An f32 instance where the op takes floats, an i64 one where it takes integers,
    an i1 one where it takes bools (each attribute variant of ``ai.mod``)."""
    variants = []
    for xdsl, name in ((F32, "f32"), (I64, "i64"), (I1, "i1")):
        if name in op_type.DTYPES:
            x, y = Block(arg_types=[TensorType(xdsl, [N])] * 2).args
            variants += (
                [op_type(x, y, fmod=f) for f in (False, True)]
                if op_type is ai.ModOp
                else [op_type(x, y)]
            )
    return variants


#: The quantization ops (issue 31) compute per element too, but their operands are
#: quantized codes and scales laid out per axis or block: tests/targets/cpu/test_quantization_cpu.py
#: checks their scalar code (Numba only: the cuda target refuses them by name).
QUANTIZATION = (ai.QuantizeOp, ai.DequantizeOp)
ELEMENTWISE = [op for op in ai.TENSOR_OPS if op.has_scalar() and op not in QUANTIZATION]
SAMPLES = [op for op_type in ELEMENTWISE for op in _instances(op_type)]


def _label(op: ai.AiOp) -> str:
    attrs = ",".join(f"{k}={v}" for k, v in op.attr_values().items())
    types_in = ",".join(spec_of(v.type).dtype for v in op.operands)
    return op.name + (f"[{attrs}]" if attrs else "") + f"({types_in})->{_dtype(op)}"


def _dtype(op: ai.AiOp) -> str:
    return spec_of(op.results[0].type).dtype


def _inputs(op: ai.AiOp, seed: int = 0) -> list[np.ndarray]:
    """Edge values (NaN, +-inf, +-0, huge, tiny) and random ones, each operand its shape;
    integers small with 0 and +-1 among them, bools random. A float cast to an integer
    gets finite values in range (NaN and overflow are undefined there, as in ONNX)."""
    rng = np.random.default_rng(seed)
    edges = f32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 1e-40, 65520.0, 0.5])
    arrays = []
    for index, value in enumerate(op.operands):
        spec = spec_of(value.type)
        count = math.prod(spec.shape)
        if spec.dtype == "i1":
            arrays.append(rng.random(count).reshape(spec.shape) < 0.5)
            continue
        if spec.dtype in ("i64", "i32"):
            flat = rng.integers(-40, 40, count)
            flat[:5] = np.roll([0, 1, -1, 7, -7], index * 2)
            arrays.append(flat.astype(numpy_dtype(spec.dtype)).reshape(spec.shape))
            continue
        flat = (rng.standard_normal(count) * 4).astype(np.float32)
        flat[: len(edges)] = np.roll(edges, index * 5)[: min(len(edges), flat.size)]
        if _dtype(op) in ("i64", "i32"):
            flat[~(np.abs(flat) < 2**24)] = 3.75
        arrays.append(flat.reshape(spec.shape))
    return arrays


def _scalar_value(value: np.generic) -> np.generic:
    """One operand element as a kernel sees it: float32, or its integer or bool type."""
    return value if value.dtype.kind in "iub" else f32(value)


def _expected(op: ai.AiOp, args: list[np.ndarray]) -> np.ndarray:
    """The reference, stored in the result's declared dtype, as float32, flattened."""
    dtype = numpy_dtype(spec_of(op.results[0].type).dtype)
    with np.errstate(all="ignore"):
        ref = np.asarray(op.reference(*args)).astype(dtype)
    return ref.astype(np.float32).reshape(-1)


def _broadcast_args(op: ai.AiOp, args: list[np.ndarray]) -> list[np.ndarray]:
    """Operands broadcast to the result shape the way kernels index them, flattened."""
    shape = spec_of(op.results[0].type).shape
    views = [a.reshape(operand_shape(op, i)) for i, a in enumerate(args)]
    return [np.ascontiguousarray(np.broadcast_to(v, shape)).reshape(-1) for v in views]


def _assert_close(got: np.ndarray, want: np.ndarray, label: str) -> None:
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), (label, got[np.isnan(got) != nan])
    ok = np.isclose(got[~nan], want[~nan], rtol=2e-5, atol=1e-30) | (got[~nan] == want[~nan])
    assert ok.all(), (label, got[~nan][~ok][:5], want[~nan][~ok][:5])


# ------------------------------------------------------------------ every fact


@pytest.mark.parametrize("op_type", ai.TENSOR_OPS, ids=lambda t: t.name)
def test_every_op_has_every_fact(op_type):
    assert op_type.__doc__ and op_type.__doc__.strip(), "a docstring (the fusec.ops doc too)"
    kernel_targets = [name for name in REGISTRY if get_target(name).generates_kernels]
    rewritten = all(name in op_type.UNSUPPORTED for name in kernel_targets)
    # opaque only for ops that canonicalize rewrites before fusion (no kernel computes them)
    assert op_type.PATTERN is not Pattern.OPAQUE or rewritten, "a fusion pattern"
    assert op_type.has_reference(), "a numpy reference implementation"
    function = op_type.function_name()
    assert callable(getattr(fusec.ops, function)), "a fusec.ops function"
    assert function in fusec.ops.__all__
    for ufunc in op_type.FRONTEND.ufuncs:
        assert isinstance(getattr(np, ufunc), np.ufunc), ufunc
    # elementwise and broadcast ops are computed per element: they need scalar semantics,
    # but for an index-mapped read (ai.rotate_half), which the pointwise templates lower
    per_element = op_type.PATTERN <= Pattern.BROADCAST and not op_type.INDEX_MAPPED
    assert op_type.has_scalar() == per_element
    assert not op_type.INDEX_MAPPED or op_type.PATTERN is Pattern.BROADCAST


@pytest.mark.parametrize("op_type", ai.TENSOR_OPS, ids=lambda t: t.name)
def test_onnx_names_are_converters(op_type):
    onnx_import = pytest.importorskip("fusec.frontend.onnx_import")
    for name in op_type.FRONTEND.onnx:
        assert name in onnx_import.CONVERTERS, name


@pytest.mark.parametrize("target", REGISTRY)
@pytest.mark.parametrize("op_type", ai.TENSOR_OPS, ids=lambda t: t.name)
def test_every_target_lowers_the_op_or_says_why_not(op_type, target):
    reason = get_target(target).can_generate(_sample(op_type))
    if target in op_type.UNSUPPORTED:
        assert reason is not None and op_type.UNSUPPORTED[target] in reason
    else:
        assert reason is None, f"{op_type.name} has no lowering on {target} and no reason why"


def test_every_anchor_and_reduction_has_a_kind_and_templates():
    rules = default_rules()
    for op_type in ai.TENSOR_OPS:
        if op_type.PATTERN not in (Pattern.ANCHOR, Pattern.REDUCTION):
            continue
        kind = rules.kind_anchored_by(_sample(op_type))
        assert kind is not None, f"no kind of the rules is anchored by {op_type.name}"
        for name in REGISTRY:
            target = get_target(name)
            if name not in op_type.UNSUPPORTED and target.generates_kernels:
                assert op_type in target.templates[kind.name].lowers, (name, op_type.name)


def test_rules_and_templates_name_only_registered_kinds():
    assert {k.name for k in default_rules().kinds} <= set(FUSED_KINDS)
    for name in REGISTRY:
        assert set(get_target(name).templates) <= set(FUSED_KINDS)


def _sample(op_type):
    if op_type.has_scalar() and op_type not in QUANTIZATION:
        return _instances(op_type)[0]
    return _any_instance(op_type)


def _any_instance(op_type):
    text = {
        "ai.conv2d": "%r = ai.conv2d %a, %w : tensor<1x2x4x4xf32> * tensor<3x2x3x3xf32>",
        "ai.matmul": "%r = ai.matmul %m, %m : tensor<4x4xf32> * tensor<4x4xf32>",
        "ai.layernorm": "%r = ai.layernorm %m, %v, %v : tensor<4x4xf32> * tensor<4xf32> * "
        "tensor<4xf32>",
        "ai.rms_norm": "%r = ai.rms_norm %m, %v : tensor<4x4xf32> * tensor<4xf32>",
        "ai.softmax": "%r = ai.softmax %m : tensor<4x4xf32>",
        "ai.reduce_mean": "%r = ai.reduce_mean %m {axes = array<i64: 1>} : tensor<4x4xf32>",
        "ai.reduce_sum": "%r = ai.reduce_sum %m : tensor<4x4xf32>",
        "ai.reduce_max": "%r = ai.reduce_max %m {keepdims = true} : tensor<4x4xf32>",
        "ai.max_pool2d": "%r = ai.max_pool2d %a {kernel = array<i64: 2, 2>} : tensor<1x2x4x4xf32>",
        "ai.avg_pool2d": "%r = ai.avg_pool2d %a {kernel = array<i64: 3, 3>, "
        "padding = array<i64: 1, 1>} : tensor<1x2x4x4xf32>",
        "ai.reshape": "%r = ai.reshape %m {shape = array<i64: 2, 8>} : tensor<4x4xf32>",
        "ai.transpose": "%r = ai.transpose %a {perm = array<i64: 0, 2, 3, 1>} : "
        "tensor<1x2x4x4xf32>",
        "ai.slice": "%r = ai.slice %m {offsets = array<i64: 0, 3>, sizes = array<i64: 2, 2>, "
        "strides = array<i64: 2, -2>} : tensor<4x4xf32>",
        "ai.concat": "%r = ai.concat %m, %m {axis = 1 : i64} : tensor<4x4xf32> * tensor<4x4xf32>",
        "ai.rotate_half": "%r = ai.rotate_half %m : tensor<4x4xf32>",
        "ai.gather": "%r = ai.gather %v {indices = array<i64: 3, 0, 3>} : tensor<4xf32>",
        "ai.take": "%r = ai.take %m, %i {axis = 1 : i64} : tensor<4x4xf32> * tensor<2x3xi64>",
        "ai.cumsum": "%r = ai.cumsum %m {axis = 1 : i64, reverse = true} : tensor<4x4xf32>",
        "ai.argmax": "%r = ai.argmax %m {axis = 1 : i64} : tensor<4x4xf32>",
        "ai.argmin": "%r = ai.argmin %i {select_last_index = true} : tensor<2x3xi64>",
        "ai.attention": "%r = ai.attention %m, %m, %m, %v {scale = 5.0e-01 : f32} : "
        "tensor<4x4xf32> * tensor<4x4xf32> * tensor<4x4xf32> * tensor<4xf32>",
        "ai.batch_norm": "%r = ai.batch_norm %m, %v, %v, %v, %v : tensor<4x4xf32> * "
        "tensor<4xf32> * tensor<4xf32> * tensor<4xf32> * tensor<4xf32>",
        "ai.moe_experts": "%r = ai.moe_experts %m, %k, %e, %gu, %dn : tensor<4x4xf32> * "
        "tensor<4x2xf32> * tensor<4x2xi64> * tensor<3x6x4xf32> * tensor<3x4x3xf32>",
        "ai.quantize": "%r = ai.quantize %m, %v, %z {axis = 1 : i64} : tensor<4x4xf32> * "
        "tensor<4xf32> * tensor<4xf8E4M3FN>",
        "ai.dequantize": "%r = ai.dequantize %q, %v, %z {axis = 1 : i64} : "
        "tensor<4x4xf8E4M3FN> * tensor<4xf32> * tensor<4xf8E4M3FN>",
    }[op_type.name]
    module = parse_module(
        "func.func @f(%a: tensor<1x2x4x4xf32>, %w: tensor<3x2x3x3xf32>, %m: tensor<4x4xf32>, "
        f"%v: tensor<4xf32>, %i: tensor<2x3xi64>, %q: tensor<4x4xf8E4M3FN>, "
        f"%z: tensor<4xf8E4M3FN>, %k: tensor<4x2xf32>, %e: tensor<4x2xi64>, "
        f"%gu: tensor<3x6x4xf32>, %dn: tensor<3x4x3xf32>) {{\n  {text}\n  return\n}}"
    )
    return next(op for op in module.walk() if isinstance(op, op_type))


def test_an_unsupported_op_is_a_located_error_naming_the_reason(monkeypatch):
    monkeypatch.setattr(ai.TanhOp, "UNSUPPORTED", {"cpu": "no tanh on this machine"})
    assert "no tanh" in get_target("cpu").can_generate(_sample(ai.TanhOp))
    module = parse_module(
        "func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
        '  %r = ai.fused "pointwise" (%x) : (tensor<8xf32>) -> tensor<8xf32> {\n'
        "  ^bb0(%a: tensor<8xf32>):\n"
        "    %t = ai.tanh %a : tensor<8xf32>\n"
        "    ai.yield %t : tensor<8xf32>\n  }\n"
        "  return %r : tensor<8xf32>\n}"
    )
    group = next(op for op in module.walk() if isinstance(op, ai.FusedOp))
    with pytest.raises(FusecError, match="'ai.tanh' op is not supported on target 'cpu': no tanh"):
        generate(group, "cpu", "k0")


# ----------------------------------------------------- scalar semantics, Python


@pytest.mark.parametrize("op", SAMPLES, ids=_label)
def test_python_scalar_semantics_match_the_reference(op):
    gen = ExprGenerator()
    names = [f"x{i}" for i in range(len(op.operands))]
    expr = gen.scalar(op, names)
    namespace = {"math": FLOAT32_MATH, "f32": f32}
    exec(helper_source(gen.helpers, ""), namespace)  # noqa: S102 - our own helpers
    args = _inputs(op)
    columns = _broadcast_args(op, args)
    got = []
    with np.errstate(all="ignore"):
        for values in zip(*columns, strict=True):
            env = dict(
                namespace, **{n: _scalar_value(v) for n, v in zip(names, values, strict=True)}
            )
            got.append(f32(eval(expr, env)))  # noqa: S307 - our own generated text
    _assert_close(np.asarray(got, dtype=np.float32), _expected(op, args), _label(op))


#: ``math`` as Numba compiles it for float32 (IEEE results, no Python exceptions).
FLOAT32_MATH = types.SimpleNamespace(
    exp=np.exp,
    tanh=np.tanh,
    sqrt=np.sqrt,
    fabs=np.fabs,
    copysign=np.copysign,
    erf=lambda x: f32(math.erf(x)),
    erfc=lambda x: f32(math.erfc(x)),
    pow=np.power,
    log=np.log,
    log1p=np.log1p,
    expm1=np.expm1,
    sin=np.sin,
    cos=np.cos,
    tan=np.tan,
    asin=np.arcsin,
    acos=np.arccos,
    atan=np.arctan,
    sinh=np.sinh,
    cosh=np.cosh,
    asinh=np.arcsinh,
    acosh=np.arccosh,
    atanh=np.arctanh,
    inf=math.inf,
    nan=math.nan,
)


# ----------------------------------------------------- scalar semantics, C++


def _cpp_body(op: ai.AiOp, index: int) -> tuple[str, set[str]]:
    gen = ExprGenerator(language=CUDA_CPP)
    arity = len(op.operands)
    expr = gen.scalar(op, [f"x{i}[k]" for i in range(arity)])
    params = ", ".join(f"const float* x{i}" for i in range(arity))
    body = (
        f'extern "C" void op{index}({params}, float* out, int n) {{\n'
        f"  for (int k = 0; k < n; ++k) out[k] = {expr};\n}}\n"
    )
    return body, gen.helpers


HOST_PRELUDE = """\
#include <cmath>
#include <cstdint>
#include <cstring>
using std::copysign;
static float __int_as_float(unsigned int i) { float f; std::memcpy(&f, &i, 4); return f; }
static float round_f16(float x) { return (float)(_Float16)x; }
static float round_bf16(float x) {
  if (x != x) return x;
  std::uint32_t u; std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;  // nearest-even on the top 16 bits
  float r; std::memcpy(&r, &u, 4); return r;
}
"""


@pytest.fixture(scope="module")
def host_library(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    directory = tmp_path_factory.mktemp("cpp")
    source = HOST_PRELUDE + "".join(_cpp_body(op, i)[0] for i, op in enumerate(SAMPLES))
    (directory / "ops.cpp").write_text(source)
    library = directory / "ops.so"
    command = ["g++", "-O1", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC"]
    subprocess.run([*command, "-o", library, directory / "ops.cpp"], check=True)
    return ctypes.CDLL(str(library))


@pytest.mark.parametrize("index", range(len(SAMPLES)), ids=lambda i: _label(SAMPLES[i]))
def test_cpp_scalar_semantics_match_the_reference(host_library, index):
    op = SAMPLES[index]
    args = _inputs(op, seed=1)
    columns = _broadcast_args(op, args)
    pointer = ctypes.POINTER(ctypes.c_float)
    fn = getattr(host_library, f"op{index}")
    columns = [c.astype(np.float32) for c in columns]  # C++ carries integers as floats
    out = np.empty_like(columns[0])
    fn(*(c.ctypes.data_as(pointer) for c in columns), out.ctypes.data_as(pointer), out.size)
    _assert_close(out, _expected(op, args), _label(op))


def test_cpp_semantics_compile_to_ptx_for_hopper(tmp_path: Path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    helpers: set[str] = set()
    kernels = []
    for index, op in enumerate(SAMPLES):
        gen = ExprGenerator(language=CUDA_CPP)
        names = [f"x{i}[k]" for i in range(len(op.operands))]
        stmts, _ = gen.chain([op], lambda v, names=names, op=op: names[list(op.operands).index(v)])
        helpers |= gen.helpers
        params = ", ".join(f"const float* x{i}" for i in range(len(op.operands)))
        body = "\n".join(f"  {s}" for s in stmts)
        kernels.append(
            f"__global__ void op{index}({params}, float* out) {{\n"
            f"  const int k = threadIdx.x;\n{body}\n  out[k] = t0;\n}}\n"
        )
    source = tmp_path / "ops.cu"
    source.write_text(cpp_helper_source(helpers) + "".join(kernels))
    ptx = tmp_path / "ops.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=sm_90a", "-o", ptx, source], check=True)
    assert ptx.read_text().count(".entry") == len(SAMPLES)


def test_cpp_literals_are_exact_float32():
    for value in (0.1, 1e-45, 3.4028234663852886e38, -0.0, 0.7071067811865476):
        text = CUDA_CPP.literal(value)
        assert text.endswith("f") and float.fromhex(text[:-1]) == float(f32(value))
        assert math.copysign(1, float.fromhex(text[:-1])) == math.copysign(1, value)
    assert "0x7fc00000" in CUDA_CPP.literal(math.nan)


# ----------------------------------------------------- scalar semantics, torch


@pytest.mark.parametrize("op", SAMPLES, ids=_label)
def test_torch_scalar_semantics_match_the_reference(op):
    torch = pytest.importorskip("torch")
    gen = ExprGenerator(language=TORCH)
    names = [f"x{i}" for i in range(len(op.operands))]
    expr = gen.scalar(op, names)
    args = _inputs(op, seed=2)
    env = {"torch": torch}
    env.update(
        {n: torch.from_numpy(c) for n, c in zip(names, _broadcast_args(op, args), strict=True)}
    )
    got = eval(expr, env).numpy().astype(np.float32)  # noqa: S307 - our own generated text
    _assert_close(got, _expected(op, args), _label(op))


def test_every_language_renders_every_op():
    for language in LANGUAGES:
        for op in SAMPLES:
            text = ExprGenerator(language=language).scalar(op, ["a", "b", "c"][: len(op.operands)])
            assert text and "None" not in text, (language.name, _label(op))


def test_the_planner_respects_an_unsupported_op(monkeypatch):
    from fusec.api import compile as fusec_compile
    from fusec.api import run_pipeline

    monkeypatch.setattr(ai.TanhOp, "UNSUPPORTED", {"cpu": "no tanh on this machine"})
    text = (
        "func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
        "  %a = ai.relu %x : tensor<8xf32>\n"
        "  %t = ai.tanh %a : tensor<8xf32>\n"
        "  %e = ai.exp %t : tensor<8xf32>\n"
        "  return %e : tensor<8xf32>\n}"
    )
    module = parse_module(text)
    run_pipeline(module, target="cpu")
    grouped = {
        inner.name for op in module.walk() if isinstance(op, ai.FusedOp) for inner in op.walk()
    }
    assert "ai.tanh" not in grouped and {"ai.relu", "ai.exp"} <= grouped  # planned around it
    with pytest.raises(FusecError, match="ai.tanh is not supported on target 'cpu': no tanh"):
        fusec_compile(text, target="cpu", executable=False)
