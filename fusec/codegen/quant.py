"""Scalar code of ``ai.quantize`` and ``ai.dequantize`` (issue 31): the Numba helpers.

A quantized element travels through a generated chain as an integer: an i8 or ui8
element as its value, a float8 (f8E4M3FN, f8E5M2) element as its code, the byte that
holds it (the cpu kernels hold float8 tensors in uint8 arrays: ``targets/cpu``). So a
load or a store of a quantized element is a plain array access, and only the two ops
convert:

* ``quantize_<type>[_sat](q, zp)``: ``q = x / scale`` (float32) to the code of the
  type, exactly as ``numpy_ops.quantize_linear`` does: integers ``rint(q) + zp``
  rounded half to even, NaN to 0, saturated to the type's range; float8 ``q +
  value(zp)`` converted with round to nearest even as ml_dtypes does, from the float32
  bits (integer arithmetic only: the loop vectorises), NaN keeping its sign, values
  beyond the largest finite one clamped to it (``_sat``, ONNX's default) or else NaN
  (e4m3fn, which has no infinity) or infinity (e5m2);
* ``f8e4m3fn_value(code)`` / ``f8e5m2_value(code)``: the float32 value of a code
  (every float8 value is a float32), built from its bits.

The helpers are straight-line selects on float32 and uint32 values (no branch, no
table): LLVM vectorises the loop that calls them. ``tests/targets/cpu/test_quantization_cpu.py``
checks them bit for bit against ml_dtypes on millions of float32 values, every
boundary of the two types among them, and every code.
"""

from __future__ import annotations

from fusec.ir.dtypes import FLOAT8_TYPES

#: The float8 types: (bits of the mantissa, exponent bias, largest finite value, the
#: smallest normal value, the code of NaN (+), of the largest finite value, of +inf or
#: None, the float32 bits of the rounding boundary above which a value is no longer
#: finite (the midpoint between the largest finite value and the next power of the
#: grid), the float32 bits of the largest finite value).
_FLOAT8 = {
    # e4m3fn: 448 = 1.75 * 2**8; 464 rounds to 448 (ties to even), beyond is NaN.
    "f8E4M3FN": (3, 7, 448.0, 2.0**-6, 0x7F, 0x7E, None, 0x43E80000, 0x43E00000),
    # e5m2: 57344 = 1.75 * 2**15; 61440 rounds to the next power (ties to even): inf.
    "f8E5M2": (2, 15, 57344.0, 2.0**-14, 0x7E, 0x7B, 0x7C, 0x476FFFFF, 0x47600000),
}


def _float8_encoder(dtype: str, saturate: bool) -> str:
    mant, bias, _largest, smallest, nan, top, inf, boundary, top_bits = _FLOAT8[dtype]
    name = f"quantize_{dtype.lower()}{'_sat' if saturate else ''}"
    shift = 23 - mant
    half = (1 << (shift - 1)) - 1
    rebias = (127 - bias) << mant
    quantum = 2.0 ** (1 - bias - mant)  # the subnormals' spacing
    if saturate:
        beyond = f"np.uint32({top_bits})"
        overflow = f"a >= {beyond}"
        big = top
    else:
        overflow = f"a > np.uint32({boundary})"
        big = nan if inf is None else inf
    smallest_bits = {2.0**-6: 0x3C800000, 2.0**-14: 0x38800000}[smallest]
    clamp = "saturated to the largest finite value" if saturate else "not saturated"
    return f'''
{{decorator}}
def {name}(q, zp):
    """The {dtype} code of q + value(zp) (q = x / scale in float32), rounded to nearest
    even as ml_dtypes converts float32; {clamp}."""
    y = q + {dtype.lower()}_value(zp)
    bits = f32(y).view(np.uint32)
    sign = (bits >> np.uint32(24)) & np.uint32(0x80)
    a = bits & np.uint32(0x7FFFFFFF)
    # normal: round the mantissa to {mant} bits (ties to even) and rebias the exponent
    r = a + np.uint32({half}) + ((a >> np.uint32({shift})) & np.uint32(1))
    normal = (r >> np.uint32({shift})) - np.uint32({rebias})
    # subnormal: a multiple of {quantum!r}, rounded to nearest even (1.5 * 2**23 trick)
    m = abs(y) * f32({1.0 / quantum!r})
    sub = np.uint32(f32((m + f32(12582912.0)) - f32(12582912.0)))
    code = sub if a < np.uint32({smallest_bits}) else normal
    code = np.uint32({big}) if {overflow} else code
    code = np.uint32({nan}) if a > np.uint32(0x7F800000) else code
    return np.uint8(code | sign)
'''


def _float8_decoder(dtype: str) -> str:
    mant, bias, *_ = _FLOAT8[dtype]
    quantum = 2.0 ** (1 - bias - mant)
    shift = 23 - mant
    rebias = (127 - bias) << 23
    if dtype == "f8E4M3FN":
        special = "(c & np.uint32(0x7F)) == np.uint32(0x7F)"  # the only NaN codes
        special_bits = "np.uint32(0x7FC00000)"
    else:
        special = "(c & np.uint32(0x7C)) == np.uint32(0x7C)"  # exponent all ones
        # infinity, or a quiet NaN
        special_bits = "np.uint32(0x7F800000 if (c & np.uint32(3)) == np.uint32(0) else 0x7FC00000)"
    return f'''
{{decorator}}
def {dtype.lower()}_value(code):
    """The float32 value of the {dtype} code ``code`` (NaN keeps its sign)."""
    c = np.uint32(code)
    sign = (c & np.uint32(0x80)) << np.uint32(24)
    e = (c >> np.uint32({mant})) & np.uint32({(1 << (7 - mant)) - 1})
    normal = ((c & np.uint32(0x7F)) << np.uint32({shift})) + np.uint32({rebias})
    normal = ({special_bits}) if {special} else normal
    sub = f32(c & np.uint32({(1 << mant) - 1})) * f32({quantum!r})
    bits = f32(sub).view(np.uint32) if e == np.uint32(0) else normal
    return np.uint32(bits | sign).view(np.float32)
'''


#: The range of each integer quantized type.
INT_RANGES = {"i8": (-128, 127), "ui8": (0, 255), "i4": (-8, 7), "ui4": (0, 15)}


def _int_encoder(dtype: str) -> str:
    low, high = INT_RANGES[dtype]
    return f'''
{{decorator}}
def quantize_{dtype}(q, zp):
    """rint(q) + zp (q = x / scale in float32, rounded half to even) saturated to
    [{low}, {high}]; NaN becomes 0, as numpy_ops.quantize_linear (nan_to_num) does."""
    q = f32(4194304.0) if q > f32(4194304.0) else q  # beyond, every result saturates
    q = f32(-4194304.0) if q < f32(-4194304.0) else q
    y = ((q + f32(12582912.0)) - f32(12582912.0)) + f32(zp)
    y = f32(0.0) if y != y else y
    y = f32({high}.0) if y > f32({high}.0) else y
    y = f32({low}.0) if y < f32({low}.0) else y
    return np.int32(y)
'''


#: Helper name -> source (with a ``{decorator}`` placeholder), and what each calls.
HELPERS: dict[str, str] = {}
REQUIRES: dict[str, tuple[str, ...]] = {}
for _dtype in FLOAT8_TYPES:
    _value = f"{_dtype.lower()}_value"
    HELPERS[_value] = _float8_decoder(_dtype)
    for _saturate in (False, True):
        _name = f"quantize_{_dtype.lower()}{'_sat' if _saturate else ''}"
        HELPERS[_name] = _float8_encoder(_dtype, _saturate)
        REQUIRES[_name] = (_value,)
for _dtype in INT_RANGES:
    HELPERS[f"quantize_{_dtype}"] = _int_encoder(_dtype)


def quantize_helper(dtype: str, saturate: bool) -> str:
    """The helper computing a ``dtype`` code from ``x / scale`` and the zero point's code."""
    if dtype in FLOAT8_TYPES:
        return f"quantize_{dtype.lower()}{'_sat' if saturate else ''}"
    return f"quantize_{dtype}"


def value_helper(dtype: str) -> str | None:
    """The helper giving a float8 code's float32 value; None for the integers (their
    value is the element itself)."""
    return f"{dtype.lower()}_value" if dtype in FLOAT8_TYPES else None
