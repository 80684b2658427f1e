"""``copy_floats``: a run of float32s copied between two arrays by one ``memcpy``.

Why. The cpu kernels copy input rows into padded workspace rows (a depthwise or taps
convolution's ``xpad``, Winograd's tiles) one row at a time. Written as a Numba loop,
a row of 64 floats costs ~50 cycles on a Zen 4 core: LLVM cannot tell the two arrays
apart, so each row's loop checks them for overlap and peels its ends; a batch of 8
16x64x64 planes into 66-float rows took 144 us, against 39-43 by ``llvm.memcpy`` (and
47 for the same 2 MB copied as one flat run). The arrays here never overlap (an input
and a task's workspace).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from fusec.targets.cpu import intrinsics

_I1, _I8, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)


@intrinsic
def copy_floats(typingctx, dst, d_off, src, s_off, n):
    """``dst[d_off : d_off + n] = src[s_off : s_off + n]`` (float32 arrays that do not
    overlap; nothing when ``n <= 0``), unchecked like the kernels' ``U()`` indexing."""
    intrinsics.check_f32_arrays("copy_floats", {"dst": dst, "src": src})
    sig = types.void(dst, d_off, src, s_off, n)

    def codegen(context, builder, signature, args):
        arg = intrinsics.Arguments(context, builder, signature, args)
        byte_ptr = _I8.as_pointer()
        to = builder.bitcast(builder.gep(arg.data(0), [arg.integer(1)]), byte_ptr)
        start = builder.bitcast(builder.gep(arg.data(2), [arg.integer(3)]), byte_ptr)
        count = arg.integer(4)
        count = builder.select(builder.icmp_signed(">", count, _I64(0)), count, _I64(0))
        memcpy = builder.module.declare_intrinsic("llvm.memcpy", [byte_ptr, byte_ptr, _I64])
        builder.call(memcpy, [to, start, builder.mul(count, _I64(4)), _I1(0)])
        return context.get_dummy_value()

    return sig, codegen
