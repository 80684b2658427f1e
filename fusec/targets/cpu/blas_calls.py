"""The BLAS calls of the cpu kernels, as Numba intrinsics: ``sgemm`` of a block, and the
calling thread's BLAS thread count.

``fusec.targets.cpu.blas`` finds the BLAS (without Numba: code generation only needs
its interface width and threading mode, ``blas.import_line``); this module, imported
by the generated kernels (through ``fusec.targets.cpu.abi``) when they run,
registers its entry points with LLVM under fixed names
(``llvmlite.binding.add_symbol``) and defines the intrinsics that call those names,
so kernels compiled against them stay valid in Numba's on-disk cache (the address
itself is never baked in). Without a usable BLAS the kernels call
``sgemm_numba``, a plain Numba loop nest: correct, several times slower.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
from llvmlite import binding, ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu.blas import FOUND, BlasLibrary

_SGEMM = {False: "fusec_cblas_sgemm_lp64", True: "fusec_cblas_sgemm_ilp64"}
_THREADS_LOCAL = "fusec_blas_threads_local"
_ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _address(lib: ctypes.CDLL, name: str) -> int:
    address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    if address is None:
        raise OSError(f"{name} has no address in {lib._name}")
    return address


def _register(found: BlasLibrary | None, lib: ctypes.CDLL | None) -> None:
    """Give the BLAS's entry points the names the intrinsics call."""
    if found is None or lib is None:
        return
    binding.add_symbol(_SGEMM[found.ilp64], _address(lib, found.sgemm))
    if found.threads_local:
        binding.add_symbol(_THREADS_LOCAL, _address(lib, found.threads_local))


_register(*FOUND)


# ------------------------------------------------------------------ intrinsics

_I32, _I64, _F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()


def _sgemm_intrinsic(ilp64: bool, beta: float = 0.0):
    """The sgemm intrinsic for an interface width; ``beta`` 0 writes C, 1 adds to it."""
    symbol = _SGEMM[ilp64]
    index = _I64 if ilp64 else _I32

    def sgemm(typingctx, ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
        for name, arr in (("a", a), ("b", b), ("c", c)):
            if not (isinstance(arr, types.Array) and arr.dtype == types.float32):
                raise numba.core.errors.TypingError(f"sgemm: {name} must be a float32 array")
        ints = (ta, tb, m, n, k, a_off, lda, b_off, ldb, c_off, ldc)
        if not all(isinstance(t, (types.Integer, types.Boolean)) for t in ints):
            raise numba.core.errors.TypingError("sgemm: sizes and offsets must be integers")
        sig = types.void(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(
                ir.VoidType(),
                [_I32, _I32, _I32, index, index, index, _F32, _F32.as_pointer(), index]
                + [_F32.as_pointer(), index, _F32, _F32.as_pointer(), index],
            )
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
            argtys = signature.args

            def integer(i: int, ty) -> ir.Value:
                return context.cast(builder, args[i], argtys[i], ty)

            def pointer(i: int, off: int) -> ir.Value:
                data = context.make_array(argtys[i])(context, builder, args[i]).data
                return builder.gep(data, [integer(off, types.int64)])

            def trans(i: int) -> ir.Value:
                flag = integer(i, types.int32)
                return builder.select(
                    builder.icmp_signed("!=", flag, ir.Constant(_I32, 0)),
                    ir.Constant(_I32, TRANS),
                    ir.Constant(_I32, NO_TRANS),
                )

            width = types.int64 if ilp64 else types.int32
            builder.call(
                fn,
                [
                    ir.Constant(_I32, _ROW_MAJOR),
                    trans(0),
                    trans(1),
                    integer(2, width),
                    integer(3, width),
                    integer(4, width),
                    ir.Constant(_F32, 1.0),
                    pointer(5, 6),
                    integer(7, width),
                    pointer(8, 9),
                    integer(10, width),
                    ir.Constant(_F32, beta),
                    pointer(11, 12),
                    integer(13, width),
                ],
            )
            return context.get_dummy_value()

        return sig, codegen

    accumulate = "_acc" if beta else ""
    sgemm.__name__ = f"sgemm{accumulate}_{'ilp64' if ilp64 else 'lp64'}"
    sgemm.__doc__ = (
        f"C[c_off:] {'+=' if beta else '='} op(A[a_off:]) @ op(B[b_off:]), row-major, float32; "
        "op transposes when ta/tb is true. m x n result from m x k and k x n, leading "
        "dimensions lda, ldb, ldc."
    )
    return intrinsic(sgemm)


sgemm_lp64 = _sgemm_intrinsic(False)
sgemm_ilp64 = _sgemm_intrinsic(True)
sgemm_acc_lp64 = _sgemm_intrinsic(False, 1.0)
sgemm_acc_ilp64 = _sgemm_intrinsic(True, 1.0)


@intrinsic
def _threads_local(typingctx, n):
    sig = types.int32(types.int32)

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I32, [_I32]), _THREADS_LOCAL
        )
        return builder.call(fn, args)

    return sig, codegen


@sealed_njit
def threads_local(n):
    """Set the calling thread's BLAS thread count (0: the global count); return the old one."""
    return _threads_local(np.int32(n))


@sealed_njit
def threads_noop(n):
    """The stand-in for ``threads_local`` where the BLAS has none (or there is no BLAS)."""
    return np.int32(0)


@sealed_njit
def sgemm_numba(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """``sgemm_lp64``'s contract as plain loops (float32 accumulation, rows of C vectorise)."""
    for i in range(m):
        row = c[c_off + i * ldc : c_off + i * ldc + n]
        for j in range(n):
            row[j] = np.float32(0.0)
    sgemm_acc_numba(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)


@sealed_njit
def sgemm_acc_numba(ta, tb, m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """``sgemm_acc_lp64``'s contract (C += op(A) @ op(B)) as plain loops."""
    for i in range(m):
        row = c[c_off + i * ldc : c_off + i * ldc + n]
        for p in range(k):
            aip = a[a_off + p * lda + i] if ta else a[a_off + i * lda + p]
            if tb:
                for j in range(n):
                    row[j] += aip * b[b_off + j * ldb + p]
            else:
                brow = b[b_off + p * ldb : b_off + p * ldb + n]
                for j in range(n):
                    row[j] += aip * brow[j]
