"""Pure-numpy kernels of the reference executor.

These kernels are the ground truth for every numerics test of the project, so
they favour clarity and accuracy over speed, while staying fully vectorised
(no per-element Python loops).

Dtype rules
-----------
* Every kernel computes in the dtype of its inputs and returns that dtype; a
  caller that wants a float64 reference upcasts the inputs first.
* Low-precision floats (``float16``, ``ml_dtypes.bfloat16`` and the other
  ``ml_dtypes`` float formats) are computed in ``float32`` and the result is
  rounded back to the input dtype.  In particular the reducing kernels
  (``conv2d``, ``matmul``, ``layernorm``, ``softmax``) accumulate in float32.
* ``erf``/``erfc`` (and therefore the exact ``gelu``) are always evaluated in
  float64 and cast back.
* Integer inputs to the transcendental / normalising kernels give float64
  results (numpy's usual promotion); ``conv2d``/``matmul`` on integers stay
  integral.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = [
    "add",
    "batch_norm",
    "bias_add",
    "cast",
    "conv2d",
    "div",
    "erf",
    "erfc",
    "exp",
    "gelu",
    "layernorm",
    "matmul",
    "maximum",
    "mul",
    "pool2d",
    "reduce",
    "relu",
    "rms_norm",
    "sigmoid",
    "silu",
    "softmax",
    "sqrt",
    "sub",
    "tanh",
]


# --------------------------------------------------------------------------
# dtype helpers
# --------------------------------------------------------------------------


def _is_low_precision_float(dt: np.dtype) -> bool:
    """True for float16 and the (sub-32-bit) ml_dtypes float formats."""
    if dt == np.float16:
        return True
    # ml_dtypes registers its types as numpy "void"-kind custom dtypes.
    return dt.kind == "V" and (dt.name == "bfloat16" or dt.name.startswith("float"))


def _float_dtype(dt: np.dtype) -> np.dtype:
    """The dtype a floating-point kernel returns for inputs of dtype ``dt``."""
    dt = np.dtype(dt)
    if dt.kind in "fc" or _is_low_precision_float(dt):
        return dt
    return np.dtype(np.float64)


def _compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype arithmetic is carried out in: float32 for low-precision floats."""
    dt = np.dtype(dt)
    if _is_low_precision_float(dt):
        return np.dtype(np.float32)
    return dt


def _result_dtype(*arrays: np.ndarray) -> np.dtype:
    """numpy's promoted dtype of ``arrays`` (identical dtypes short-circuit)."""
    first = arrays[0].dtype
    if all(a.dtype == first for a in arrays):
        return first
    return np.result_type(*arrays)


def _unary_float(x: np.ndarray) -> tuple[np.ndarray, np.dtype]:
    """Return ``x`` converted to its compute dtype, and the output dtype."""
    x = np.asarray(x)
    out_dt = _float_dtype(x.dtype)
    return x.astype(_compute_dtype(out_dt), copy=False), out_dt


def _finish(y: np.ndarray | np.generic, out_dt: np.dtype) -> np.ndarray:
    return np.asarray(y).astype(out_dt, copy=False)


# --------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------


def _pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    vals = tuple(int(v) for v in value)
    if len(vals) != 2:
        raise ValueError(f"{name} must have 2 values, got {len(vals)}")
    return vals


def _conv_padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """Normalise padding to (h_begin, w_begin, h_end, w_end)."""
    if isinstance(padding, (int, np.integer)):
        p = int(padding)
        pads = (p, p, p, p)
    else:
        vals = tuple(int(v) for v in padding)
        if len(vals) == 2:
            pads = (vals[0], vals[1], vals[0], vals[1])
        elif len(vals) == 4:
            pads = vals
        else:
            raise ValueError(f"padding must have 2 or 4 values, got {len(vals)}")
    if any(p < 0 for p in pads):
        raise ValueError(f"padding must be non-negative, got {pads}")
    return pads[0], pads[1], pads[2], pads[3]


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    strides: int | Sequence[int] = (1, 1),
    padding: int | Sequence[int] = (0, 0),
    dilations: int | Sequence[int] = (1, 1),
    groups: int = 1,
) -> np.ndarray:
    """2-D cross-correlation (deep-learning "convolution") without bias.

    ``x`` is NCHW, ``w`` is KCRS = (out_channels, in_channels/groups, kh, kw).
    ``padding`` is ``(ph, pw)`` (symmetric) or ONNX-ordered
    ``(h_begin, w_begin, h_end, w_end)``; zero padding is used.  Implemented as
    im2col (a strided window view) followed by one batched matmul per group.
    Returns ``(N, K, OH, OW)`` in the promoted input dtype.
    """
    x = np.asarray(x)
    w = np.asarray(w)
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv2d expects 4-D x and w, got {x.shape} and {w.shape}")
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    if min(sh, sw, dh, dw) < 1:
        raise ValueError("strides and dilations must be >= 1")
    pt, pl, pb, pr = _conv_padding(padding)
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    groups = int(groups)
    if groups < 1 or c % groups or k % groups:
        raise ValueError(f"groups={groups} must divide C={c} and K={k}")
    if cg != c // groups:
        raise ValueError(f"weight has {cg} input channels per group, expected {c // groups}")
    kg = k // groups

    out_dt = _result_dtype(x, w)
    acc = _compute_dtype(out_dt)
    xa = x.astype(acc, copy=False)
    wa = w.astype(acc, copy=False)
    if pt or pl or pb or pr:
        xa = np.pad(xa, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    hp, wp = h + pt + pb, wd + pl + pr
    oh = (hp - dh * (r - 1) - 1) // sh + 1
    ow = (wp - dw * (s - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ValueError(
            f"conv2d output would be empty: input {h}x{wd} padded to {hp}x{wp}, "
            f"kernel {r}x{s}, dilations ({dh}, {dw})"
        )

    s0, s1, s2, s3 = xa.strides
    # patches[n, g, c, i, j, r, s] = xa[n, g*cg + c, i*sh + r*dh, j*sw + s*dw]
    patches = as_strided(
        xa,
        shape=(n, groups, cg, oh, ow, r, s),
        strides=(s0, s1 * cg, s1, s2 * sh, s3 * sw, s2 * dh, s3 * dw),
        writeable=False,
    )
    # im2col: (G, N*OH*OW, Cg*R*S) @ (G, Cg*R*S, Kg) -> (G, N*OH*OW, Kg)
    cols = patches.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, n * oh * ow, cg * r * s)
    wmat = wa.reshape(groups, kg, cg * r * s).transpose(0, 2, 1)
    out = np.matmul(cols, wmat)
    out = out.reshape(groups, n, oh, ow, kg).transpose(1, 0, 4, 2, 3).reshape(n, k, oh, ow)
    return np.ascontiguousarray(out).astype(out_dt, copy=False)


def bias_add(x: np.ndarray, b: np.ndarray, axis: int = 1) -> np.ndarray:
    """Add the 1-D bias ``b`` along ``axis`` of ``x`` (axis 1 = channels of NCHW)."""
    x = np.asarray(x)
    b = np.asarray(b)
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim:
        raise ValueError(f"axis {axis} out of range for a {x.ndim}-D input")
    if b.ndim != 1 or b.shape[0] != x.shape[ax]:
        raise ValueError(f"bias of shape {b.shape} does not match axis {axis} of {x.shape}")
    shape = [1] * x.ndim
    shape[ax] = b.shape[0]
    out_dt = _result_dtype(x, b)
    acc = _compute_dtype(out_dt)
    y = x.astype(acc, copy=False) + b.astype(acc, copy=False).reshape(shape)
    return _finish(y, out_dt)


# --------------------------------------------------------------------------
# error function (W. J. Cody, "Rational Chebyshev approximations for the
# error function", Math. Comp. 23 (1969) 631-637; netlib specfun CALERF)
# --------------------------------------------------------------------------

_ERF_A = (
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
    1.85777706184603153e-1,
)
_ERF_B = (
    2.36012909523441209e01,
    2.44024637934444173e02,
    1.28261652607737228e03,
    2.84423683343917062e03,
)
_ERF_C = (
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
    2.15311535474403846e-8,
)
_ERF_D = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
_ERF_P = (
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
    1.63153871373020978e-2,
)
_ERF_Q = (
    2.56852019228982242e00,
    1.87295284992346047e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1
_ERF_THRESH = 0.46875
# Above this, erfc(|x|) is below the smallest subnormal double and exp() underflows.
_ERFC_CLAMP = 30.0


def _erf_small(x: np.ndarray) -> np.ndarray:
    """erf(x) for |x| <= 0.46875."""
    ysq = x * x
    xnum = _ERF_A[4] * ysq
    xden = ysq
    for i in range(3):
        xnum = (xnum + _ERF_A[i]) * ysq
        xden = (xden + _ERF_B[i]) * ysq
    # ratio first: a single rounding of the product keeps subnormal x accurate
    return x * ((xnum + _ERF_A[3]) / (xden + _ERF_B[3]))


def _exp_neg_sq(y: np.ndarray) -> np.ndarray:
    """exp(-y*y), with y*y split so the rounding error of y*y is not amplified."""
    ysq = np.trunc(y * 16.0) / 16.0
    delta = (y - ysq) * (y + ysq)
    return np.exp(-ysq * ysq) * np.exp(-delta)


def _erfc_mid(y: np.ndarray) -> np.ndarray:
    """erfc(y) for 0.46875 < y <= 4."""
    xnum = _ERF_C[8] * y
    xden = y
    for i in range(7):
        xnum = (xnum + _ERF_C[i]) * y
        xden = (xden + _ERF_D[i]) * y
    return _exp_neg_sq(y) * ((xnum + _ERF_C[7]) / (xden + _ERF_D[7]))


def _erfc_large(y: np.ndarray) -> np.ndarray:
    """erfc(y) for y > 4 (including +inf)."""
    y = np.minimum(y, _ERFC_CLAMP)
    ysq = 1.0 / (y * y)
    xnum = _ERF_P[5] * ysq
    xden = ysq
    for i in range(4):
        xnum = (xnum + _ERF_P[i]) * ysq
        xden = (xden + _ERF_Q[i]) * ysq
    res = ysq * (xnum + _ERF_P[4]) / (xden + _ERF_Q[4])
    res = (_ONE_OVER_SQRT_PI - res) / y
    return _exp_neg_sq(y) * res


def _erf_erfc_f64(x: np.ndarray, want_erfc: bool) -> np.ndarray:
    """erf(x) or erfc(x) of a float64 array, accurate to a few ulp everywhere."""
    x = np.asarray(x, dtype=np.float64)
    y = np.abs(x)
    out = np.full(x.shape, np.nan, dtype=np.float64)
    small = y <= _ERF_THRESH
    mid = (y > _ERF_THRESH) & (y <= 4.0)
    large = y > 4.0  # NaN is in no region and stays NaN
    with np.errstate(under="ignore"):
        if small.any():
            e = _erf_small(x[small])
            out[small] = 1.0 - e if want_erfc else e
        for mask, fn in ((mid, _erfc_mid), (large, _erfc_large)):
            if not mask.any():
                continue
            ec = fn(y[mask])  # erfc(|x|)
            neg = x[mask] < 0.0
            if want_erfc:
                out[mask] = np.where(neg, 2.0 - ec, ec)
            else:
                e = 1.0 - ec
                out[mask] = np.where(neg, -e, e)
    return out


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, evaluated in float64 (Cody's CALERF) and cast back."""
    x = np.asarray(x)
    return _finish(_erf_erfc_f64(x, want_erfc=False), _float_dtype(x.dtype))


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function 1 - erf(x), accurate for large x too."""
    x = np.asarray(x)
    return _finish(_erf_erfc_f64(x, want_erfc=True), _float_dtype(x.dtype))


# --------------------------------------------------------------------------
# element-wise activations
# --------------------------------------------------------------------------


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0); NaN propagates."""
    x = np.asarray(x)
    return np.maximum(x, np.zeros((), dtype=x.dtype))


def _sigmoid_acc(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function (in the dtype of ``x``)."""
    with np.errstate(under="ignore"):
        e = np.exp(-np.abs(x))  # in (0, 1], never overflows
    pos = 1.0 / (1.0 + e)
    return np.where(x >= 0, pos, e * pos)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), numerically stable for large |x| (no overflow)."""
    xa, out_dt = _unary_float(x)
    return _finish(_sigmoid_acc(xa), out_dt)


def tanh(x: np.ndarray) -> np.ndarray:
    """Hyperbolic tangent."""
    xa, out_dt = _unary_float(x)
    return _finish(np.tanh(xa), out_dt)


def exp(x: np.ndarray) -> np.ndarray:
    """e**x (overflows to inf like numpy)."""
    xa, out_dt = _unary_float(x)
    return _finish(np.exp(xa), out_dt)


def sqrt(x: np.ndarray) -> np.ndarray:
    """Square root (NaN for negative inputs, like numpy)."""
    xa, out_dt = _unary_float(x)
    with np.errstate(invalid="ignore"):
        return _finish(np.sqrt(xa), out_dt)


def _fix_neg_inf(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x * f(x) activations tend to -0 at x = -inf (instead of -inf * 0 = NaN)."""
    return np.where(np.isneginf(x), -0.0, y).astype(y.dtype, copy=False)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x) (a.k.a. swish)."""
    xa, out_dt = _unary_float(x)
    with np.errstate(invalid="ignore"):
        y = xa * _sigmoid_acc(xa)
    return _finish(_fix_neg_inf(xa, y), out_dt)


_SQRT1_2 = 0.70710678118654752440  # 1/sqrt(2)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """Gaussian error linear unit.

    ``approximate="none"``: 0.5*x*(1 + erf(x/sqrt(2))), evaluated in float64 as
    0.5*x*erfc(-x/sqrt(2)) (no cancellation for negative x), then cast back.

    ``approximate="tanh"``: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3))),
    evaluated in the compute dtype through the identity
    0.5*(1 + tanh(u)) = sigmoid(2u), which is exact and avoids cancellation.
    """
    x = np.asarray(x)
    out_dt = _float_dtype(x.dtype)
    if approximate == "none":
        xd = x.astype(np.float64, copy=False)
        with np.errstate(invalid="ignore"):
            y = 0.5 * xd * _erf_erfc_f64(-xd * _SQRT1_2, want_erfc=True)
        return _finish(_fix_neg_inf(xd, y), out_dt)
    if approximate == "tanh":
        xa = x.astype(_compute_dtype(out_dt), copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            u = _SQRT_2_OVER_PI * (xa + 0.044715 * (xa * xa * xa))
            y = xa * _sigmoid_acc(2.0 * u)
        return _finish(_fix_neg_inf(xa, y), out_dt)
    raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")


# --------------------------------------------------------------------------
# more activations and unary maths (ONNX's float operators)
# --------------------------------------------------------------------------


def unary_math(x: np.ndarray, function: np.ufunc) -> np.ndarray:
    """A numpy ufunc (``np.log``, ``np.sin``, ``np.rint``, ...) in the compute dtype:
    outside its domain the result is NaN or inf, as in C's math library."""
    xa, out_dt = _unary_float(x)
    with np.errstate(all="ignore"):
        return _finish(function(xa), out_dt)


def sign(x: np.ndarray) -> np.ndarray:
    """-1, 0 or 1 (0.0 for both zeros, NaN for NaN), as ``numpy.sign``."""
    return unary_math(x, np.sign)


def reciprocal(x: np.ndarray) -> np.ndarray:
    """1 / x."""
    xa, out_dt = _unary_float(x)
    with np.errstate(all="ignore"):
        return _finish(np.float32(1.0).astype(xa.dtype) / xa, out_dt)


def hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """max(0, min(1, alpha * x + beta)); NaN propagates."""
    xa, out_dt = _unary_float(x)
    with np.errstate(all="ignore"):
        y = xa * xa.dtype.type(alpha) + xa.dtype.type(beta)
    return _finish(np.clip(y, 0.0, 1.0).astype(y.dtype, copy=False), out_dt)


def hard_swish(x: np.ndarray) -> np.ndarray:
    """x * hard_sigmoid(x, 1/6, 1/2) (-0.0 at -inf, the limit, as ``silu``)."""
    xa, out_dt = _unary_float(x)
    gate = hard_sigmoid(xa, 1.0 / 6.0, 0.5)
    with np.errstate(all="ignore"):
        return _finish(_fix_neg_inf(xa, xa * gate), out_dt)


def leaky_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    """x where x >= 0, else alpha * x (NaN and -0.0 pass through)."""
    xa, out_dt = _unary_float(x)
    with np.errstate(all="ignore"):
        return _finish(np.where(xa < 0, xa * xa.dtype.type(alpha), xa), out_dt)


def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """x where x >= 0, else slope * x (numpy broadcasting)."""
    x, slope = np.asarray(x), np.asarray(slope)
    with np.errstate(all="ignore"):
        y = np.where(x < 0, x * slope, x)
    return y.astype(_result_dtype(x, slope), copy=False)


def elu(x: np.ndarray, alpha: float, gamma: float = 1.0, scale_input: bool = False) -> np.ndarray:
    """x where x > 0, else alpha * (exp(x) - 1), all times ``gamma`` (SELU); with
    ``scale_input`` the exponential is of x / alpha (CELU). ``expm1``: no cancellation."""
    xa, out_dt = _unary_float(x)
    a = xa.dtype.type(alpha)
    with np.errstate(all="ignore"):
        y = np.where(xa > 0, xa, a * np.expm1(xa / a if scale_input else xa))
        if gamma != 1.0:
            y = xa.dtype.type(gamma) * y
    return _finish(y, out_dt)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow, no cancellation."""
    xa, out_dt = _unary_float(x)
    return _finish(_softplus(xa), out_dt)


def _softplus(xa: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.maximum(xa, 0) + np.log1p(np.exp(-np.abs(xa)))


def softsign(x: np.ndarray) -> np.ndarray:
    """x / (1 + |x|) (NaN at +-inf, as the formula and ONNX give)."""
    xa, out_dt = _unary_float(x)
    with np.errstate(all="ignore"):
        return _finish(xa / (1 + np.abs(xa)), out_dt)


def mish(x: np.ndarray) -> np.ndarray:
    """x * tanh(softplus(x)) (-0.0 at -inf, the limit, as ``silu``)."""
    xa, out_dt = _unary_float(x)
    with np.errstate(all="ignore"):
        return _finish(_fix_neg_inf(xa, xa * np.tanh(_softplus(xa))), out_dt)


def thresholded_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    """x where x > alpha, else 0; NaN propagates (as PyTorch's threshold and ``relu``)."""
    xa, out_dt = _unary_float(x)
    keep = (xa > xa.dtype.type(alpha)) | np.isnan(xa)
    return _finish(np.where(keep, xa, xa.dtype.type(0)), out_dt)


# --------------------------------------------------------------------------
# binary element-wise ops (numpy broadcasting)
# --------------------------------------------------------------------------


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b."""
    return np.asarray(np.add(a, b))


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b."""
    return np.asarray(np.subtract(a, b))


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b."""
    return np.asarray(np.multiply(a, b))


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b (true division)."""
    return np.asarray(np.true_divide(a, b))


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise maximum; NaN propagates."""
    return np.asarray(np.maximum(a, b))


# --------------------------------------------------------------------------
# reductions / contractions
# --------------------------------------------------------------------------


def matmul(
    a: np.ndarray,
    b: np.ndarray,
    transpose_a: bool = False,
    transpose_b: bool = False,
) -> np.ndarray:
    """Matrix product, 2-D or batched with broadcast leading dims.

    ``transpose_a``/``transpose_b`` swap the last two axes of the operand first.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if transpose_a:
        if a.ndim < 2:
            raise ValueError("transpose_a needs an operand with at least 2 dims")
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        if b.ndim < 2:
            raise ValueError("transpose_b needs an operand with at least 2 dims")
        b = np.swapaxes(b, -1, -2)
    out_dt = _result_dtype(a, b)
    acc = _compute_dtype(out_dt)
    y = np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))
    return _finish(y, out_dt)


def batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """Inference batch normalisation over dim 1: (x - mean) / sqrt(var + eps) * scale + bias."""
    xa, out_dt = _unary_float(x)
    shape = (1, -1) + (1,) * (xa.ndim - 2)

    def per_channel(v: np.ndarray) -> np.ndarray:
        return np.asarray(v).astype(xa.dtype, copy=False).reshape(shape)

    y = (xa - per_channel(mean)) / np.sqrt(per_channel(var) + epsilon)
    return _finish(y * per_channel(scale) + per_channel(bias), out_dt)


def layernorm(
    x: np.ndarray,
    gamma: np.ndarray | None,
    beta: np.ndarray | None,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """Layer normalisation over the last axis (biased variance, like PyTorch).

    y = (x - mean) / sqrt(var + epsilon) * gamma + beta; ``gamma``/``beta``
    broadcast against the last axis and may be ``None`` (identity).
    """
    xa, out_dt = _unary_float(x)
    # the statistics in float64, as the ground truth should be: in float32 the rounding
    # of the mean of a constant row (e.g. 48 x 1000.1), times rstd = 1/sqrt(epsilon),
    # moved its outputs by 2% away from the exact beta
    xa = xa.astype(np.float64)
    acc = xa.dtype
    mean = np.mean(xa, axis=-1, keepdims=True)
    centred = xa - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    y = centred / np.sqrt(var + epsilon)
    if gamma is not None:
        y = y * np.asarray(gamma).astype(acc, copy=False)
    if beta is not None:
        y = y + np.asarray(beta).astype(acc, copy=False)
    return _finish(y, out_dt)


def rms_norm(x: np.ndarray, gamma: np.ndarray | None, epsilon: float = 1e-6) -> np.ndarray:
    """RMS normalisation over the last axis: x / sqrt(mean(x^2) + epsilon) * gamma, in
    float64 (``gamma`` may be ``None``: identity)."""
    xa, out_dt = _unary_float(x)
    xa = xa.astype(np.float64)
    with np.errstate(over="ignore"):
        y = xa / np.sqrt(np.mean(xa * xa, axis=-1, keepdims=True) + epsilon)
    if gamma is not None:
        y = y * np.asarray(gamma).astype(np.float64, copy=False)
    return _finish(y, out_dt)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along ``axis``."""
    xa, out_dt = _unary_float(x)
    m = np.max(xa, axis=axis, keepdims=True)
    with np.errstate(under="ignore"):
        e = np.exp(xa - m)
    return _finish(e / np.sum(e, axis=axis, keepdims=True), out_dt)


def attention(
    q: np.ndarray,
    key: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    scale: float = 1.0,
    nan_to_zero: bool = False,
    softcap: float = 0.0,
) -> np.ndarray:
    """softmax(q @ key^T * scale + mask) @ v over the last axis, key (..., T, D) (float32
    accumulation for 16-bit inputs); with ``softcap`` > 0 the scores are ``softcap *
    tanh(q @ key^T * scale / softcap)`` before the mask (in the accumulation type, in
    the order Gemma-2 and ONNX's Attention write it); with ``nan_to_zero`` a
    probability that is NaN (a row masked out entirely) is 0, as PyTorch's decomposed
    scaled_dot_product_attention writes it."""
    out_dt = _result_dtype(q, key, v)
    acc = _compute_dtype(out_dt)
    q, key, v, mask = (np.asarray(a).astype(acc, copy=False) for a in (q, key, v, mask))
    with np.errstate(invalid="ignore", over="ignore"):
        scores = np.matmul(q, np.swapaxes(key, -1, -2)) * acc.type(scale)
        if softcap > 0:
            cap = acc.type(softcap)
            scores = np.tanh(scores / cap) * cap
        scores = scores + mask
        p = softmax(scores, axis=-1)
        if nan_to_zero:
            p = np.where(np.isnan(p), acc.type(0), p)
        return _finish(np.matmul(p, v), out_dt)


def moe_experts(
    x: np.ndarray,
    weights: np.ndarray,
    experts: np.ndarray,
    gate_up: np.ndarray,
    down: np.ndarray,
) -> np.ndarray:
    """The experts of a mixture-of-experts layer, routing given: token t's output is
    ``sum_j weights[t, j] * down[e] @ (silu(g) * u)`` over its k experts ``e =
    experts[t, j]`` (negative: from the end), ``g, u`` the two halves of
    ``gate_up[e] @ x[t]`` (Mixtral's SwiGLU experts). Float32 accumulation for 16-bit
    inputs; ``silu(g) * u`` is rounded to x's type (the tensor between the two
    projections), the weighted sum over the k experts is float32.

    An expert index outside [-E, E) is an error (a ``FusecError``), as ``ai.take``'s."""
    from fusec.errors import FusecError

    out_dt = _result_dtype(x, gate_up, down)
    acc = _compute_dtype(out_dt)
    count = gate_up.shape[0]
    experts = np.asarray(experts, dtype=np.int64)
    bad = (experts < -count) | (experts >= count)
    if bad.any():
        raise FusecError(
            f"ai.moe_experts: expert index {int(experts[bad].flat[0])} is out of range for "
            f"{count} experts"
        )
    experts = np.where(experts < 0, experts + count, experts)
    xs = np.asarray(x).astype(acc, copy=False)
    width = gate_up.shape[1] // 2
    out = np.zeros(xs.shape, dtype=np.promote_types(acc, np.float32))
    with np.errstate(invalid="ignore", over="ignore"):
        for expert in np.unique(experts):
            tokens, slots = np.nonzero(experts == expert)
            projected = xs[tokens] @ np.asarray(gate_up[expert]).astype(acc, copy=False).T
            gate, up = projected[:, :width], projected[:, width:]
            silu = _fix_neg_inf(gate, gate * _sigmoid_acc(gate))
            hidden = _finish(silu * up, out_dt).astype(acc, copy=False)
            y = hidden @ np.asarray(down[expert]).astype(acc, copy=False).T
            scale = np.asarray(weights[tokens, slots]).astype(out.dtype, copy=False)
            np.add.at(out, tokens, y.astype(out.dtype, copy=False) * scale[:, None])
    return _finish(out, out_dt)


# --------------------------------------------------------------------------
# reductions over axes, pooling
# --------------------------------------------------------------------------


def reduce(x: np.ndarray, kind: str, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    """Mean, sum or max over ``axes`` (all when empty); NaN propagates through max."""
    xa, out_dt = _unary_float(x)
    axis = tuple(axes) if axes else None
    if kind == "max":
        y = np.max(xa, axis=axis, keepdims=keepdims)
    elif kind == "sum":
        y = np.sum(xa, axis=axis, keepdims=keepdims)
    elif kind == "mean":
        y = np.mean(xa, axis=axis, keepdims=keepdims)
    else:
        raise ValueError(f"unknown reduction {kind!r}")
    return _finish(y, out_dt)


def pool2d(
    x: np.ndarray,
    kind: str,
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[int],
    dilations: Sequence[int],
    out_size: Sequence[int],
    count_include_pad: bool = False,
) -> np.ndarray:
    """Max or average pooling of an NCHW ``x`` to ``out_size`` (OH, OW).

    Padding is -inf (max) or 0 (average). An average divides by the window's
    elements inside the input, or with ``count_include_pad`` inside the padded
    input; a ``ceil_mode`` window that overhangs even the padding counts only
    what it covers (ONNX Runtime's and PyTorch's rule).
    """
    xa, out_dt = _unary_float(x)
    pads = _conv_padding(padding)
    _, _, h, w = xa.shape
    reach = [(out_size[d] - 1) * strides[d] + dilations[d] * (kernel[d] - 1) + 1 for d in (0, 1)]
    extra = [max(0, reach[0] - (h + pads[0] + pads[2])), max(0, reach[1] - (w + pads[1] + pads[3]))]
    widths = ((0, 0), (0, 0), (pads[0], pads[2] + extra[0]), (pads[1], pads[3] + extra[1]))
    fill = -np.inf if kind == "max" else 0.0
    padded = np.pad(xa, widths, constant_values=fill)
    # which padded positions count for an average: the input, or the input and its padding
    inside = np.zeros(padded.shape[2:], dtype=xa.dtype)
    if count_include_pad:
        inside[: h + pads[0] + pads[2], : w + pads[1] + pads[3]] = 1
    else:
        inside[pads[0] : pads[0] + h, pads[1] : pads[1] + w] = 1
    acc = None
    count = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            rows = slice(i * dilations[0], i * dilations[0] + (out_size[0] - 1) * strides[0] + 1,
                         strides[0])  # fmt: skip
            cols = slice(j * dilations[1], j * dilations[1] + (out_size[1] - 1) * strides[1] + 1,
                         strides[1])  # fmt: skip
            window = padded[:, :, rows, cols]
            if kind == "max":
                acc = window if acc is None else np.where(
                    (window > acc) | np.isnan(window), window, acc
                )  # fmt: skip
            else:
                acc = window if acc is None else acc + window
                count = inside[rows, cols] if count is None else count + inside[rows, cols]
    assert acc is not None  # a kernel has at least one element
    if kind == "avg":
        assert count is not None
        acc = acc / count
    return _finish(acc, out_dt)


# --------------------------------------------------------------------------
# casts
# --------------------------------------------------------------------------


def _resolve_dtype(dtype: object) -> np.dtype:
    try:
        return np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        if isinstance(dtype, str):
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, dtype))
        raise


def cast(x: np.ndarray, dtype: object) -> np.ndarray:
    """Convert ``x`` to ``dtype`` (float16/float32/float64/ml_dtypes.bfloat16, ...).

    Rounds to nearest-even (values beyond the target range become +-inf,
    silently, as in IEEE conversion); always returns a new array.
    """
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(_resolve_dtype(dtype), copy=True)


# --------------------------------------------------------------------------
# integers and run-time indices
# --------------------------------------------------------------------------


def int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer a / b truncated toward zero (C, ONNX); 0 where b is 0."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    q = q + ((q < 0) & (q * safe != a))  # floor -> toward zero where the signs differ
    return np.asarray(np.where(b == 0, 0, q).astype(a.dtype))


def int_remainder(a: np.ndarray, b: np.ndarray, *, floored: bool) -> np.ndarray:
    """Integer remainder with the sign of b (``floored``) or of a; 0 where b is 0."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    safe = np.where(b == 0, 1, b)
    r = np.mod(a, safe) if floored else np.fmod(a, safe)
    return np.asarray(np.where(b == 0, 0, r).astype(a.dtype))


def take(table: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """The slices of ``table`` along ``axis`` at ``indices`` (negative: from the end).

    An index outside [-n, n) is an error (a ``FusecError``), as in onnxruntime.
    """
    from fusec.errors import FusecError

    axis = axis % table.ndim
    n = table.shape[axis]
    indices = np.asarray(indices, dtype=np.int64)
    bad = (indices < -n) | (indices >= n)
    if bad.any():
        raise FusecError(
            f"ai.take: index {int(indices[bad].flat[0])} is out of range for dim {axis} of size {n}"
        )
    return np.take(table, np.where(indices < 0, indices + n, indices), axis=axis)


def cumsum(x: np.ndarray, *, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """Running sums along ``axis`` (ONNX CumSum), in the dtype of ``x``."""
    x = np.asarray(x)
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        out = out - x
    if reverse:
        out = np.flip(out, axis)
    return np.ascontiguousarray(out)


def arg_reduce(
    x: np.ndarray, kind: str, *, axis: int, keepdims: bool, select_last_index: bool
) -> np.ndarray:
    """int64 index of the maximum (``kind`` "max") or minimum along ``axis``: the first of
    equal ones, or the last with ``select_last_index`` (ONNX ArgMax/ArgMin)."""
    x = np.asarray(x)
    axis = axis % x.ndim
    pick = np.argmax if kind == "max" else np.argmin
    if select_last_index:
        flipped = np.flip(x, axis)
        index = x.shape[axis] - 1 - pick(flipped, axis=axis)
    else:
        index = pick(x, axis=axis)
    index = np.asarray(index, dtype=np.int64)
    return np.expand_dims(index, axis) if keepdims else index


# --------------------------------------------------------------------------
# quantization (ONNX QuantizeLinear / DequantizeLinear, opset 21)
# --------------------------------------------------------------------------


def quantization_broadcast(
    scale: np.ndarray, ndim: int, *, axis: int, block_size: int, extent: int
) -> np.ndarray:
    """A per-tensor, per-axis or per-block ``scale`` (or zero point) shaped to broadcast
    against an input of rank ``ndim`` whose ``axis`` has ``extent`` elements: a block's
    value repeated over its ``block_size`` indices (the last block may be shorter)."""
    scale = np.asarray(scale)
    if block_size == 0 and scale.size == 1:
        return scale.reshape(())
    axis = axis % ndim
    if block_size == 0:
        return scale.reshape([extent if d == axis else 1 for d in range(ndim)])
    repeated = np.repeat(scale, block_size, axis=axis)
    return np.take(repeated, np.arange(extent), axis=axis)


def quantize_linear(
    x: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    *,
    saturate: bool,
) -> np.ndarray:
    """``x / scale`` quantized to ``zero_point``'s dtype, as ONNX QuantizeLinear.

    ``scale`` and ``zero_point`` broadcast against ``x``. The quotient is taken in
    float32, as ONNX's reference and onnxruntime take it. Integers (8 or 4 bits): rounded
    half to even, plus the zero point, saturated to the type's range. float8: the
    quotient plus the zero point (0 in practice), converted with round to nearest
    even as ml_dtypes does; ``saturate`` clamps values beyond the largest finite
    value (infinities included) to it, else they become NaN (e4m3fn) or inf (e5m2)
    as ml_dtypes converts them. NaN stays NaN in float8.
    """
    target = np.asarray(zero_point).dtype
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q = np.asarray(x, np.float32) / np.asarray(scale, np.float32)
        if target.kind in "iu" or target.name in ("int4", "uint4"):
            import ml_dtypes

            info = np.iinfo(target) if target.kind in "iu" else ml_dtypes.iinfo(target)
            y = np.rint(q) + np.asarray(zero_point, np.float32)
            return np.clip(np.nan_to_num(y), info.min, info.max).astype(target)
        y = q + np.asarray(zero_point, np.float32)
        if saturate:
            import ml_dtypes

            largest = float(ml_dtypes.finfo(target).max)
            y = np.clip(y, -largest, largest)
        return y.astype(target)


def dequantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """``(x - zero_point) * scale`` in ``scale``'s dtype, as ONNX DequantizeLinear: in
    float64 when the scale is (the float64 reference), else in float32, rounded once."""
    scale = np.asarray(scale)
    work = np.float64 if scale.dtype == np.float64 else np.float32
    y = (np.asarray(x).astype(work) - np.asarray(zero_point).astype(work)) * scale.astype(work)
    return y.astype(scale.dtype)
