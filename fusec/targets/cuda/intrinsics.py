"""Numba intrinsics the GEMM kernel needs to hand raw addresses to its linked C++."""

from __future__ import annotations

from numba import types
from numba.core.extending import intrinsic


@intrinsic
def shared_address(typingctx, array):
    """The generic address of a (shared) array's data as a uint64."""
    sig = types.uint64(array)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, value=args[0]).data
        return builder.ptrtoint(data, context.get_value_type(types.uint64))

    return sig, codegen
