"""Device helpers that the generated Numba CUDA kernels import.

Element storage: f32 tensors are ``float32`` arrays; f16 and bf16 tensors are
passed as ``int16`` arrays holding the raw bits (CUDA array interfaces of torch
and numpy cannot name bf16), and every helper converts to and from float32,
which is what the kernels compute in.

Vector access: ``load_<fmt>x<n>(arr, e, dst, d)`` reads ``n`` elements starting
at element ``e`` with one 2/4/8/16-byte ``ld.global`` (inline PTX, so the
optimiser cannot split it) into ``dst[d:d+n]`` as float32;
``store_<fmt>x<n>(arr, e, src, d)`` is the reverse (round to nearest even).
The caller guarantees ``e * itemsize`` is a multiple of the access width and
the array's base address is 16-byte aligned (the runtime ensures that). The loads'
inline PTX has no side effects, so LLVM takes each for a pure function of its address
(it may hoist it out of a loop or merge two of one address): right for a kernel's
inputs, which no kernel writes, wrong for memory the kernel itself writes (a W4A16 kernel
with such a load of shared memory, staged again each chunk, summed stale values: 69cbe6f).

Reductions: ``block_sum``/``block_max`` reduce one value per thread over the
whole block and ``warp_sum``/``warp_max`` over each warp; every thread gets the
result. They take a shared ``scratch`` array of at least blockDim floats.

Quantized elements (issue 31): ``f8e4m3fn_value`` / ``f8e5m2_value`` and the
``quantize_<type>[_sat]`` encoders of ``fusec.codegen.quant`` (the cpu kernels' helpers,
the same source), which ``ai.quantize`` and ``ai.dequantize`` call; float8 tensors are held
as their codes (``uint8`` arrays), integers as themselves.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) inline PTX and warp
shuffles cannot run, so the same names are plain Python with the same meaning.
"""

from __future__ import annotations

import math
import re

import numpy as np

from fusec.codegen import quant
from fusec.ir.dtypes import ELEMENT_TYPES
from fusec.targets.cuda.env import numba_cuda, simulator_enabled

cuda = numba_cuda()

FORMATS = ("f16", "bf16", "f32")
ITEMSIZE = {name: t.itemsize for name, t in ELEMENT_TYPES.items()}
VECTOR_COUNTS = {"f16": (1, 2, 4, 8), "bf16": (1, 2, 4, 8), "f32": (1, 2, 4)}
FULL_MASK = 0xFFFFFFFF


def helper_names() -> list[str]:
    """Every name this module exports to generated kernels."""
    names = ["block_sum", "block_max", "warp_sum", "warp_max", "round_f16", "round_bf16"]
    names += list(quant.HELPERS)
    for fmt in FORMATS:
        names += [f"ld_{fmt}", f"st_{fmt}"]
        names += [f"{op}_{fmt}x{n}" for op in ("load", "store") for n in VECTOR_COUNTS[fmt]]
    return names


# ------------------------------------------------------------------ simulator


def _sim_to_f32(fmt: str, raw) -> np.float32:
    if fmt == "f32":
        return np.float32(raw)
    bits = np.array([raw], dtype=np.int16)
    if fmt == "f16":
        return np.float32(bits.view(np.float16)[0])
    return np.float32((bits.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)[0])


def _sim_from_f32(fmt: str, value):
    if fmt == "f32":
        return np.float32(value)
    if fmt == "f16":
        return np.array([value], dtype=np.float32).astype(np.float16).view(np.int16)[0]
    import ml_dtypes

    return np.array([value], dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.int16)[0]


def _make_sim_helpers() -> dict[str, object]:
    helpers: dict[str, object] = {}
    for fmt in FORMATS:

        def ld(arr, i, fmt=fmt):
            return _sim_to_f32(fmt, arr[i])

        def st(arr, i, value, fmt=fmt):
            arr[i] = _sim_from_f32(fmt, value)

        helpers[f"ld_{fmt}"], helpers[f"st_{fmt}"] = ld, st
        for n in VECTOR_COUNTS[fmt]:

            def load(arr, e, dst, d, fmt=fmt, n=n):
                for k in range(n):
                    dst[d + k] = _sim_to_f32(fmt, arr[e + k])

            def store(arr, e, src, d, fmt=fmt, n=n):
                for k in range(n):
                    arr[e + k] = _sim_from_f32(fmt, src[d + k])

            helpers[f"load_{fmt}x{n}"], helpers[f"store_{fmt}x{n}"] = load, store

    helpers["round_f16"] = lambda x: _sim_to_f32("f16", _sim_from_f32("f16", x))
    helpers["round_bf16"] = lambda x: _sim_to_f32("bf16", _sim_from_f32("bf16", x))

    def _reduce(v, scratch, combine, width):
        t = cuda.threadIdx.x
        scratch[t] = v
        cuda.syncthreads()
        start = (t // width) * width if width else 0
        stop = start + width if width else cuda.blockDim.x
        total = scratch[start]
        for k in range(start + 1, stop):
            total = combine(total, scratch[k])
        cuda.syncthreads()
        return np.float32(total)

    def block_sum(v, scratch):
        return _reduce(v, scratch, lambda a, b: a + b, 0)

    def block_max(v, scratch):
        return _reduce(v, scratch, max, 0)

    def warp_sum(v, scratch):
        return _reduce(v, scratch, lambda a, b: a + b, 32)

    def warp_max(v, scratch):
        return _reduce(v, scratch, max, 32)

    # as simulator device functions, so that ``cuda.threadIdx`` and barriers
    # inside them see the simulated thread that calls them
    for fn in (block_sum, block_max, warp_sum, warp_max):
        helpers[fn.__name__] = cuda.jit(device=True)(fn)
    return helpers


# ------------------------------------------------------------------------ GPU


def _make_gpu_helpers() -> dict[str, object]:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i16, i32, f32 = ir.IntType(16), ir.IntType(32), ir.FloatType()

    def to_f32(builder, raw, fmt):
        """raw i16 (f16/bf16 bits) or i32 (f32 bits) -> float."""
        if fmt == "f32":
            return builder.bitcast(raw, f32)
        if fmt == "f16":
            return builder.fpext(builder.bitcast(raw, ir.HalfType()), f32)
        return builder.bitcast(builder.shl(builder.zext(raw, i32), ir.Constant(i32, 16)), f32)

    def from_f32(builder, value, fmt):
        """float -> raw i16/i32 bits, rounding to nearest even."""
        if fmt == "f32":
            return builder.bitcast(value, i32)
        if fmt == "f16":
            return builder.bitcast(builder.fptrunc(value, ir.HalfType()), i16)
        cvt = ir.InlineAsm(ir.FunctionType(i16, [f32]), "cvt.rn.bf16.f32 $0, $1;", "=h,f")
        return builder.call(cvt, [value])

    def element_ptr(context, builder, arrty, arr, index):
        data = context.make_array(arrty)(context, builder, value=arr).data
        return builder.gep(data, [index])

    def access(nbytes):
        """(PTX vector suffix, register constraint, word type, words) of one access."""
        if nbytes == 2:
            return "u16", "h", i16, 1
        nwords = nbytes // 4
        return ("u32" if nwords == 1 else f"v{nwords}.u32"), "r", i32, nwords

    def split(builder, words, fmt, n):
        """Words read from memory -> n raw element values (i16 or i32)."""
        if fmt == "f32" or n == 1:
            return list(words)
        out = []
        for w in words:
            out.append(builder.trunc(w, i16))
            out.append(builder.trunc(builder.lshr(w, ir.Constant(i32, 16)), i16))
        return out

    def join(builder, raws, fmt, n):
        """n raw element values -> the words to write."""
        if fmt == "f32" or n == 1:
            return list(raws)
        words = []
        for k in range(0, n, 2):
            lo = builder.zext(raws[k], i32)
            hi = builder.shl(builder.zext(raws[k + 1], i32), ir.Constant(i32, 16))
            words.append(builder.or_(lo, hi))
        return words

    def vector_access(emit):
        """The intrinsic ``f(arr, e, buf, d)`` (``load_<fmt>x<n>``, ``store_<fmt>x<n>``): its
        code is ``emit(builder, target, slot)``: ``target()`` gives the address of ``arr[e]``,
        ``slot(k)`` that of ``buf[d + k]`` (emitted where ``emit`` asks for them)."""

        @intrinsic
        def access_vector(typingctx, arr, e, buf, d):
            sig = types.void(arr, e, buf, d)

            def codegen(context, builder, sig, args):
                arr_t, _, buf_t, _ = sig.args
                arr_v, e_v, buf_v, d_v = args

                def slot(k):
                    index = builder.add(d_v, ir.Constant(d_v.type, k))
                    return element_ptr(context, builder, buf_t, buf_v, index)

                def target():
                    return element_ptr(context, builder, arr_t, arr_v, e_v)

                emit(builder, target, slot)
                return context.get_dummy_value()

            return sig, codegen

        return access_vector

    def make_load(fmt, n):
        suffix, reg, word_t, nwords = access(n * ITEMSIZE[fmt])

        def emit(builder, target, slot):
            ptr = target()
            outs = ", ".join(f"${k}" for k in range(nwords))
            regs = "{" + outs + "}" if nwords > 1 else outs
            text = (
                "{ .reg .u64 g; cvta.to.global.u64 g, $" + str(nwords) + "; "
                f"ld.global.{suffix} {regs}, [g]; }}"
            )
            ret_t = ir.LiteralStructType([word_t] * nwords) if nwords > 1 else word_t
            constraints = ",".join([f"={reg}"] * nwords + ["l"])
            asm = ir.InlineAsm(ir.FunctionType(ret_t, [ptr.type]), text, constraints)
            result = builder.call(asm, [ptr])
            words = [result]
            if nwords > 1:
                words = [builder.extract_value(result, k) for k in range(nwords)]
            for k, raw in enumerate(split(builder, words, fmt, n)):
                builder.store(to_f32(builder, raw, fmt), slot(k))

        return vector_access(emit)

    def make_store(fmt, n):
        suffix, reg, word_t, nwords = access(n * ITEMSIZE[fmt])
        suffix = suffix.replace("u32", "b32").replace("u16", "b16")

        def emit(builder, target, slot):
            raws = [from_f32(builder, builder.load(slot(k)), fmt) for k in range(n)]
            words = join(builder, raws, fmt, n)
            ptr = target()
            ins = ", ".join(f"${k + 1}" for k in range(nwords))
            regs = "{" + ins + "}" if nwords > 1 else ins
            text = f"{{ .reg .u64 g; cvta.to.global.u64 g, $0; st.global.{suffix} [g], {regs}; }}"
            constraints = ",".join(["l"] + [reg] * nwords + ["~{memory}"])
            fn_t = ir.FunctionType(ir.VoidType(), [ptr.type] + [word_t] * nwords)
            asm = ir.InlineAsm(fn_t, text, constraints, side_effect=True)
            builder.call(asm, [ptr, *words])

        return vector_access(emit)

    def make_convert(fmt):
        @intrinsic
        def raw_to_f32(typingctx, raw):
            sig = types.float32(raw)

            def codegen(context, builder, sig, args):
                return to_f32(builder, args[0], fmt)

            return sig, codegen

        @intrinsic
        def f32_to_raw(typingctx, value):
            sig = types.int16(types.float32)

            def codegen(context, builder, sig, args):
                return from_f32(builder, args[0], fmt)

            return sig, codegen

        return raw_to_f32, f32_to_raw

    def make_round(fmt):
        """float32 -> nearest fmt value (ties to even), back in float32: hardware cvt."""

        @intrinsic
        def round_to(typingctx, value):
            sig = types.float32(types.float32)

            def codegen(context, builder, sig, args):
                return to_f32(builder, from_f32(builder, args[0], fmt), fmt)

            return sig, codegen

        return round_to

    def jitted(sig_of, impl):
        """An intrinsic that compiles ``impl`` inline at its call site.

        Numba CUDA device functions (``cuda.jit(device=True)``) ask the current
        GPU for its compute capability, so kernels calling them cannot be
        compiled to PTX on a machine without a GPU; intrinsics can.
        """

        def codegen(context, builder, sig, llargs):
            return context.compile_internal(builder, impl, sig, llargs)

        if impl.__code__.co_argcount == 2:

            @intrinsic
            def helper2(typingctx, a, b):
                return sig_of(a, b), codegen

            return helper2

        @intrinsic
        def helper3(typingctx, a, b, c):
            return sig_of(a, b, c), codegen

        return helper3

    helpers: dict[str, object] = {}
    for fmt in FORMATS:
        for n in VECTOR_COUNTS[fmt]:
            helpers[f"load_{fmt}x{n}"] = make_load(fmt, n)
            helpers[f"store_{fmt}x{n}"] = make_store(fmt, n)

    def ld_f32(arr, i):
        return arr[i]

    def st_f32(arr, i, value):
        arr[i] = value

    helpers["ld_f32"] = jitted(lambda a, i: types.float32(a, i), ld_f32)
    helpers["st_f32"] = jitted(lambda a, i, v: types.void(a, i, types.float32), st_f32)
    for fmt in ("f16", "bf16"):
        raw_to_f32, f32_to_raw = make_convert(fmt)

        load_one, store_one = _scalar_access(raw_to_f32, f32_to_raw)
        helpers[f"ld_{fmt}"] = jitted(lambda a, i: types.float32(a, i), load_one)
        helpers[f"st_{fmt}"] = jitted(lambda a, i, v: types.void(a, i, types.float32), store_one)
        helpers[f"round_{fmt}"] = make_round(fmt)

    helpers.update(_make_gpu_reductions(jitted))
    return helpers


def _scalar_access(raw_to_f32, f32_to_raw):
    """Python bodies of ld_<fmt>/st_<fmt> for a 16-bit format's converters."""

    def load_one(arr, i):
        return raw_to_f32(arr[i])

    def store_one(arr, i, value):
        arr[i] = f32_to_raw(value)

    return load_one, store_one


def _make_gpu_reductions(jitted) -> dict[str, object]:
    from numba import float32
    from numba.cuda import types

    neg_inf = float32(-math.inf)

    def sig(v, scratch):
        return types.float32(types.float32, scratch)

    def warp_sum_impl(v, scratch):
        off = 16
        while off > 0:
            v += cuda.shfl_xor_sync(FULL_MASK, v, off)
            off >>= 1
        return v

    def warp_max_impl(v, scratch):
        off = 16
        while off > 0:
            v = max(v, cuda.shfl_xor_sync(FULL_MASK, v, off))
            off >>= 1
        return v

    warp_sum = jitted(sig, warp_sum_impl)
    warp_max = jitted(sig, warp_max_impl)

    def block_impl(warp, identity):
        """A block reduction over ``warp``'s: each warp reduces, lane 0 parks its total,
        then every warp reduces the parked totals itself (no broadcast step; lanes past
        the warp count read ``identity``); the last barrier keeps scratch intact until
        every warp has read it."""

        def impl(v, scratch):
            lane = cuda.threadIdx.x & 31
            v = warp(v, scratch)
            if lane == 0:
                scratch[cuda.threadIdx.x >> 5] = v
            cuda.syncthreads()
            t = scratch[lane] if lane < (cuda.blockDim.x >> 5) else identity
            t = warp(t, scratch)
            cuda.syncthreads()
            return t

        return impl

    return {
        "warp_sum": warp_sum,
        "warp_max": warp_max,
        "block_sum": jitted(sig, block_impl(warp_sum, float32(0.0))),
        "block_max": jitted(sig, block_impl(warp_max, neg_inf)),
    }


#: ``CALL(...).view(np.uint32 | np.float32)``: a scalar's bit cast in the quantization
#: helpers' source. Numba CUDA compiles a scalar ``view`` as a device function, which asks
#: the current GPU for its compute capability (no PTX without a GPU): on the GPU the cuda
#: helpers cast through intrinsics instead (``_bit_casts``).
_SCALAR_VIEW = re.compile(r"([\w.]+\([^()]*\))\.view\(np\.(uint32|float32)\)")


def _quant_namespace(bit_casts: dict[str, object] | None = None) -> dict[str, object]:
    """The namespace holding the quantization helpers (``quant.HELPERS``) as plain Python
    functions, which call each other by name in it; with ``bit_casts``, their scalar views
    call those (``_SCALAR_VIEW``)."""
    namespace: dict[str, object] = {"np": np, "f32": np.float32, **(bit_casts or {})}
    for name, source in quant.HELPERS.items():
        text = source.format(decorator="")
        if bit_casts is not None:
            text = _SCALAR_VIEW.sub(r"_as_\2(\1)", text)
        exec(compile(text, f"<fusec quant {name}>", "exec"), namespace)
    return namespace


def _bit_casts() -> dict[str, object]:
    """``_as_uint32(float32)`` and ``_as_float32(uint32)``: the same 32 bits, another type."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def _as_uint32(typingctx, value):
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(32))

        return types.uint32(types.float32), codegen

    @intrinsic
    def _as_float32(typingctx, value):
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(types.uint32), codegen

    return {"_as_uint32": _as_uint32, "_as_float32": _as_float32}


def _make_quant_helpers() -> dict[str, object]:
    """The quantization helpers for kernels: plain Python under the simulator; on the GPU
    intrinsics compiled inline at their call sites (no device function: those ask the
    current GPU for its compute capability, so no PTX without a GPU)."""
    if simulator_enabled():
        namespace = _quant_namespace()
        return {name: namespace[name] for name in quant.HELPERS}
    namespace = _quant_namespace(_bit_casts())
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def inline(impl, result):
        def codegen(context, builder, sig, llargs):
            return context.compile_internal(builder, impl, sig, llargs)

        if impl.__code__.co_argcount == 1:

            @intrinsic
            def helper1(typingctx, code):
                return result(code), codegen

            return helper1

        @intrinsic
        def helper2(typingctx, q, zero_point):
            return result(q, zero_point), codegen

        return helper2

    bound: dict[str, object] = {}
    for name in quant.HELPERS:
        fn = namespace[name]
        if name.endswith("_value"):
            result = types.float32
        elif name.startswith("quantize_f8"):
            result = types.uint8
        else:
            result = types.int32
        bound[name] = inline(fn, result)
    namespace.update(bound)  # the encoders call the value helpers by name: as intrinsics
    return bound


globals().update(_make_sim_helpers() if simulator_enabled() else _make_gpu_helpers())
globals().update(_make_quant_helpers())
__all__ = helper_names()
