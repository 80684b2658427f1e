"""The layout, reduction and pooling kinds on the cpu target vs the float64 reference.

Every case compiles with the default pipeline (so the fusion rules decide the
groups), runs on fresh random inputs with NaN-poisoned outputs, and compares
every result elementwise with the reference executor (``cpu_check.check``);
the kernel kinds the pipeline chose are pinned too.
"""

from __future__ import annotations

import pytest
from cpu_check import check
from numerics import assert_close

import fusec
from fusec.dialect.shapes import TensorSpec, pool2d
from fusec.runtime.cache import KernelCache


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> KernelCache:
    return KernelCache(tmp_path_factory.mktemp("kernels"))


def _t(shape, dtype="f32"):
    return f"tensor<{''.join(f'{d}x' for d in shape)}{dtype}>"


def _run(text: str, cache: KernelCache) -> list[str]:
    """Check the numerics; the kinds of the kernels launched, in order."""
    program = check(text, cache=cache, fuse=True)
    return [k.kind for k in program.kernels]


# ------------------------------------------------------------------ pooling

POOLS = {
    # name: (op, attributes, input shape)
    "max_3x3_s2_p1": (
        "max_pool2d",
        {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1)},
        (2, 3, 9, 8),
    ),
    "max_asym_dilated_ceil": (
        "max_pool2d",
        {
            "kernel": (2, 3),
            "strides": (2, 1),
            "padding": (0, 1, 1, 0),
            "dilations": (2, 1),
            "ceil_mode": True,
        },
        (1, 2, 7, 6),
    ),
    "avg_exclude_pad": ("avg_pool2d", {"kernel": (3, 3), "padding": (1, 1)}, (2, 2, 5, 5)),
    "avg_include_pad_ceil": (
        "avg_pool2d",
        {
            "kernel": (3, 2),
            "strides": (2, 2),
            "padding": (1, 0, 0, 1),
            "ceil_mode": True,
            "count_include_pad": True,
        },
        (1, 3, 8, 7),
    ),
    "avg_large_parallel": ("avg_pool2d", {"kernel": (2, 2), "strides": (2, 2)}, (4, 16, 64, 64)),
}


def _attr_text(attrs: dict) -> str:
    parts = []
    for key, value in attrs.items():
        if isinstance(value, bool):
            parts.append(f"{key} = {str(value).lower()}")
        else:
            parts.append(f"{key} = array<i64: {', '.join(map(str, value))}>")
    return ", ".join(parts)


def _pool_shape(op: str, attrs: dict, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape of pooling ``shape`` with ``attrs`` (the op's defaults filled in)."""
    window = {k: attrs.get(k, d) for k, d in (("kernel", (1, 1)), ("strides", (1, 1)),
              ("padding", (0, 0)), ("dilations", (1, 1)), ("ceil_mode", False))}  # fmt: skip
    return pool2d(f"ai.{op}", TensorSpec(shape, "f32"), **window).shape


@pytest.mark.parametrize("case", POOLS)
def test_pooling_with_its_epilogue(cache, case):
    op, attrs, shape = POOLS[case]
    out = _pool_shape(op, attrs, shape)
    x, y, c = _t(shape), _t(out), _t((shape[1], 1, 1))
    text = f"""
func.func @f(%x: {x}, %c: {c}) -> {y} {{
  %p = ai.{op} %x {{{_attr_text(attrs)}}} : {x}
  %s = ai.mul %p, %c : {y} * {c}
  %r = ai.relu %s : {y}
  return %r : {y}
}}"""
    assert _run(text, cache) == ["pool"]  # the per-channel scale and relu ride along


#: Max pools alone (the result written straight from the row buffer): each case takes a
#: path of ``pool._max_body`` (name: (attributes, input shape)).
MAX_POOLS = {
    # ResNet's 3x3/2 pool after the stem, at the ResNet-18 test model's size
    "resnet_stem": ({"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1)}, (1, 16, 32, 32)),
    "odd_asym_dilated_ceil": (
        {
            "kernel": (3, 2),
            "strides": (1, 3),
            "padding": (1, 0, 0, 1),
            "dilations": (1, 2),
            "ceil_mode": True,
        },
        (2, 3, 11, 13),
    ),
    # the window of output row 1 (input rows -1 and 2 of 2) lies in the padding: -inf
    "window_in_padding": (
        {"kernel": (2, 1), "padding": (2, 0, 2, 0), "dilations": (3, 1)},
        (1, 2, 2, 5),
    ),
    # windows higher and wider than pool.UNROLL: loops over the taps
    "tall_wide_window": (
        {"kernel": (17, 18), "strides": (2, 1), "padding": (4, 5)},
        (1, 2, 20, 19),
    ),
    # 129 output rows of 70 floats: bands of 58, 58 and 13 rows
    "three_bands": ({"kernel": (2, 2)}, (1, 2, 130, 70)),
    # 46080 outputs: blocks in parallel
    "parallel": ({"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1)}, (2, 40, 48, 48)),
}


def _max_pool_text(attrs: dict, shape: tuple[int, ...]) -> str:
    """A function of one ai.max_pool2d of an input of ``shape``."""
    y = _t(_pool_shape("max_pool2d", attrs, shape))
    return f"""
func.func @f(%x: {_t(shape)}) -> {y} {{
  %p = ai.max_pool2d %x {{{_attr_text(attrs)}}} : {_t(shape)}
  return %p : {y}
}}"""


@pytest.mark.parametrize("case", MAX_POOLS)
def test_max_pooling_alone(cache, case):
    attrs, shape = MAX_POOLS[case]
    text = _max_pool_text(attrs, shape)
    assert _run(text, cache) == ["pool"]


@pytest.mark.parametrize("case", ["odd_asym_dilated_ceil", "tall_wide_window", "three_bands"])
def test_max_pooling_nan_where_the_reference_has_it(cache, case):
    """Three NaNs at random positions of the first plane (a window's first tap or a later
    one, next to padding or not): NaN exactly where the reference has it (a window
    holding a NaN), the reference's values elsewhere."""
    import numpy as np

    from fusec.api import parse
    from fusec.runtime.reference import run_reference

    attrs, shape = MAX_POOLS[case]
    text = _max_pool_text(attrs, shape)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    plane = shape[2] * shape[3]  # NaNs in the first plane only: the others have none
    x.flat[rng.choice(plane, 3, replace=False)] = np.nan
    got = fusec.compile(text, target="cpu")(x)
    want = run_reference(parse(text), [x], precision="float64")[0]
    assert 0 < np.isnan(want).sum() < want.size
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(np.nan_to_num(got, nan=0.0), np.nan_to_num(want, nan=0.0))


def test_max_pooling_propagates_nan(cache):
    import numpy as np

    x, y = _t((1, 1, 4, 4)), _t((1, 1, 2, 2))
    text = f"""
func.func @f(%x: {x}) -> {y} {{
  %p = ai.max_pool2d %x {{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}} : {x}
  return %p : {y}
}}"""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 0] = np.nan
    got = fusec.compile(text, target="cpu")(x)
    assert np.isnan(got[0, 0, 0, 0]) and got[0, 0, 1, 1] == 15.0


# ------------------------------------------------------------------ reductions


@pytest.mark.parametrize(
    ("op", "axes", "keepdims", "out"),
    [
        ("reduce_mean", (1, 3), True, (3, 1, 5, 1)),
        ("reduce_sum", (0,), False, (4, 5, 6)),
        ("reduce_max", (), False, ()),
        ("reduce_mean", (2, 3), False, (3, 4)),
    ],
)
def test_reductions_with_their_epilogue(cache, op, axes, keepdims, out):
    x, y = _t((3, 4, 5, 6)), _t(out)
    axes_text = f"axes = array<i64: {', '.join(map(str, axes))}>, " if axes else ""
    text = f"""
func.func @f(%x: {x}) -> {y} {{
  %m = ai.{op} %x {{{axes_text}keepdims = {str(keepdims).lower()}}} : {x}
  %r = ai.tanh %m : {y}
  return %r : {y}
}}"""
    assert _run(text, cache) == ["reduce"]


@pytest.mark.parametrize("op", ["reduce_mean", "reduce_sum", "reduce_max"])
def test_short_trailing_rows_reduce_in_the_compiled_loop(cache, op):
    """A global pool over 2x2 planes (trailing axes, rows of 4): ``reduce_rows``, not
    numpy; against the reference, and a NaN in a row makes its max NaN."""
    import numpy as np

    x, y = _t((5, 7, 2, 2)), _t((5, 7, 1, 1))
    text = f"""
func.func @f(%x: {x}) -> {y} {{
  %m = ai.{op} %x {{axes = array<i64: 2, 3>, keepdims = true}} : {x}
  return %m : {y}
}}"""
    assert _run(text, cache) == ["reduce"]
    compiled = fusec.compile(text, target="cpu")
    assert "reduce_rows(in0, out0, 35, 4," in compiled._runner.kernels[0].source
    if op == "reduce_max":
        data = np.random.default_rng(1).standard_normal((5, 7, 2, 2)).astype(np.float32)
        data[2, 3, 1, 0] = data[4, 6, 0, 0] = np.nan
        got = compiled(data)
        assert np.isnan(got[2, 3]).all() and np.isnan(got[4, 6]).all()
        assert np.isnan(got).sum() == 2


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the want of a sum: Inf
@pytest.mark.parametrize("op", ["reduce_mean", "reduce_sum", "reduce_max"])
def test_long_trailing_rows(cache, op):
    """A global pool over 33x33 planes (rows of 1089: 34 vector steps and a tail of 1):
    sums and means in ``reduce_rows`` (vectorised float64 sums, compiled), a max in
    numpy; against the float64 reference with poisoned outputs (``check``), then rows
    holding NaN, +-Inf and values near the float32 limit on fresh random inputs."""
    import numpy as np

    x, y = _t((2, 5, 33, 33)), _t((2, 5, 1, 1))
    text = f"""
func.func @f(%x: {x}) -> {y} {{
  %m = ai.{op} %x {{axes = array<i64: 2, 3>, keepdims = true}} : {x}
  return %m : {y}
}}"""
    check(text, cache=cache, kind="reduce")
    compiled = fusec.compile(text, target="cpu")
    source = compiled._runner.kernels[0].source
    assert ("reduce_rows(in0, out0, 10, 1089," in source) == (op != "reduce_max"), source
    data = np.random.default_rng(3).standard_normal((2, 5, 33, 33)).astype(np.float32)
    data[0, 1, 32, 32] = np.nan  # in the tail
    data[0, 2, 3, 4] = np.inf
    data[0, 3, 0, 0], data[0, 3, 20, 7] = np.inf, -np.inf
    data[1, 0] = 3.0e38  # a float32 sum would overflow; the float64 one does not
    got = compiled(data)
    want = getattr(np, {"reduce_mean": "mean", "reduce_sum": "sum", "reduce_max": "max"}[op])(
        data.astype(np.float64), axis=(2, 3), keepdims=True
    ).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)


# ------------------------------------------------------------------ layout


def test_layout_ops_copy_or_alias(cache):
    a, b = _t((2, 3, 4)), _t((2, 5, 4))
    text = f"""
func.func @f(%a: {a}, %b: {b}) -> ({_t((4, 3, 2))}, {_t((2, 4, 4))}, {_t((8, 4))}, {_t((2, 2, 4))}) {{
  %t = ai.transpose %a {{perm = array<i64: 2, 1, 0>}} : {a}
  %c = ai.concat %a, %b {{axis = 1 : i64}} : {a} * {b}
  %s = ai.slice %c {{offsets = array<i64: 0, 7, 3>, sizes = array<i64: 2, 4, 4>, strides = array<i64: 1, -2, -1>}} : {_t((2, 8, 4))}
  %r = ai.reshape %s {{shape = array<i64: 8, 4>}} : {_t((2, 4, 4))}
  %g = ai.gather %b {{axis = 1 : i64, indices = array<i64: 4, 0>}} : {b}
  return %t, %s, %r, %g : {_t((4, 3, 2))}, {_t((2, 4, 4))}, {_t((8, 4))}, {_t((2, 2, 4))}
}}"""  # noqa: E501
    # the reshape is no kernel (an alias); the concat and the slice of it are one copy
    # chain (the fuse-injective stage): transpose, concat + slice, gather
    assert sorted(_run(text, cache)) == ["copy"] * 3


def test_a_matmul_reads_its_operands_through_layout_ops(cache):
    """The attention head split: reshape + transpose (and a transposed K through a
    slice) become numpy views of the matmul kernel's operands, not copy kernels."""
    qkv, w = _t((2, 6, 24)), _t((8, 8))
    text = f"""
func.func @f(%qkv: {qkv}, %w: {w}) -> {_t((2, 2, 6, 6))} {{
  %q = ai.slice %qkv {{offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 6, 8>, strides = array<i64: 1, 1, 1>}} : {qkv}
  %k = ai.slice %qkv {{offsets = array<i64: 0, 0, 8>, sizes = array<i64: 2, 6, 8>, strides = array<i64: 1, 1, 1>}} : {qkv}
  %qh = ai.reshape %q {{shape = array<i64: 2, 6, 2, 4>}} : {_t((2, 6, 8))}
  %kh = ai.reshape %k {{shape = array<i64: 2, 6, 2, 4>}} : {_t((2, 6, 8))}
  %qt = ai.transpose %qh {{perm = array<i64: 0, 2, 1, 3>}} : {_t((2, 6, 2, 4))}
  %kt = ai.transpose %kh {{perm = array<i64: 0, 2, 3, 1>}} : {_t((2, 6, 2, 4))}
  %s = ai.matmul %qt, %kt : {_t((2, 2, 6, 4))} * {_t((2, 2, 4, 6))}
  %p = ai.softmax %s : {_t((2, 2, 6, 6))}
  return %p : {_t((2, 2, 6, 6))}
}}"""  # noqa: E501
    assert _run(text, cache) == ["matmul"]


# ------------------------------------------------------------------ attention


@pytest.mark.parametrize("nan_to_zero", [False, True])
def test_attention_with_head_split_views_and_an_epilogue(cache, nan_to_zero):
    """q and k read through the head split (views), a mask that blocks row 2 entirely
    (NaN there, or 0 with nan_to_zero), a residual add riding in the epilogue."""
    import numpy as np

    x, m = _t((2, 6, 16)), _t((6, 6))
    h, ht, o = _t((2, 6, 2, 8)), _t((2, 2, 6, 8)), _t((2, 2, 6, 8))
    mask = np.zeros((6, 6))
    mask[2, :] = -np.inf
    mask[4, 5] = -np.inf
    rows = ", ".join("[" + ", ".join("0xFF800000" if v else "0.0" for v in r) + "]" for r in mask)
    text = f"""
func.func @f(%x: {x}, %v: {o}, %res: {o}) -> {o} {{
  %mask = arith.constant dense<[{rows}]> : {m}
  %qh = ai.reshape %x {{shape = array<i64: 2, 6, 2, 8>}} : {x}
  %q = ai.transpose %qh {{perm = array<i64: 0, 2, 1, 3>}} : {h}
  %k = ai.transpose %qh {{perm = array<i64: 0, 2, 1, 3>}} : {h}
  %a = ai.attention %q, %k, %v, %mask {{scale = 0.35 : f32, nan_to_zero = {str(nan_to_zero).lower()}}} : {ht} * {ht} * {o} * {m}
  %r = ai.add %a, %res : {o} * {o}
  return %r : {o}
}}"""  # noqa: E501
    if nan_to_zero:
        assert _run(text, cache) == ["attention"]
    else:  # NaN rows: compare by hand (NaN never passes the numerics check)
        compiled = fusec.compile(text, target="cpu")
        rng = np.random.default_rng(5)
        args = [
            rng.standard_normal(s).astype(np.float32)
            for s in ((2, 6, 16), (2, 2, 6, 8), (2, 2, 6, 8))
        ]
        got = compiled(*args)
        want = fusec.reference(text)(*args)
        assert np.isnan(got[:, :, 2]).all() and np.isnan(want[:, :, 2]).all()
        keep = [0, 1, 3, 4, 5]
        assert_close(got[:, :, keep], want[:, :, keep])
        assert [k.kind for k in compiled.kernels] == ["attention"]
