"""Bulk copies from global into shared memory, completed on mbarriers (Hopper's
``cp.async.bulk``), for Numba kernels that stream a contiguous operand through a ring of
shared-memory stages (the codes of the W4A16 Tensor Core kernel's ring variant,
``gemm/w4_mma.py``: ``FUSEC_W4_KERNEL=ring``).

One thread issues a stage's copy with one instruction, whatever its size; the copy engine
(TMA) moves the bytes and completes the transaction count of the stage's mbarrier; every
thread that reads the stage waits on that mbarrier's phase first. Against per-thread
loads into registers, a block keeps as many bytes in flight as its ring holds at no cost
in issued instructions (the kernels that need this are issue- and latency-bound at once).

* ``align16(arr)``: the index of ``arr``'s first element at a 16-byte-aligned address (a
  static shared array is aligned to its element's size only; bulk copies need 16);
* ``mbar_init(bars, i, count)``: mbarrier ``bars[i]`` (an ``int64`` shared array) expects
  ``count`` arrivals a phase (one thread calls it, then the block's barrier);
* ``mbar_arrive(bars, i)``: the calling thread arrives on ``bars[i]`` (release: its earlier
  reads of a stage are done before a thread that waits on the phase reuses it);
* ``bulk_load(dst, de, src, se, nbytes, bars, i)``: one thread arrives on ``bars[i]``
  expecting ``nbytes`` and copies ``nbytes`` from element ``se`` of global ``src`` to
  element ``de`` of shared ``dst`` (both 16-byte aligned, ``nbytes`` a multiple of 16),
  after a ``fence.proxy.async.shared::cta``: the stage's earlier reads (generic
  ``ld.shared``, which the caller's barrier ordered before this thread) are done before
  the copy engine writes it (a write after read across proxies: PTX asks the fence);
* ``mbar_wait(bars, i, parity)``: waits until the phase of ``bars[i]`` with ``parity``
  (0 for its first phase, 1 for its second, ...) has completed; a memory clobber, so no
  read of the stage moves above it;
* ``lds_words4(arr, e, dst, d)``: ``dst[d:d + 4] = arr[e:e + 4]`` of a 32-bit shared
  array with one ``ld.shared.v4`` (``e`` a multiple of 4 from a 16-byte-aligned start);
* ``cp_async16(dst, de, src, se)``: one thread's asynchronous copy of the 16 bytes at
  element ``se`` of global ``src`` (any element type) to element ``de`` of a 32-bit shared
  ``dst`` (``cp.async.cg``; both 16-byte aligned);
* ``cp_async_arrive(bars, i)``: the thread arrives on ``bars[i]`` once its earlier
  ``cp_async16`` copies have landed (``cp.async.mbarrier.arrive.noinc``: the barrier's
  count includes this arrival).

The caller orders reuse: a stage is copied into again only after every thread finished
reading it (the W4A16 kernel's block barrier at the end of a step, or, with a producer
warp, the stage's second mbarrier that every reader arrives on).

Under Numba's CUDA simulator the copy happens when issued (in the issuing thread), an
mbarrier holds its expected arrivals, the arrivals of its current phase and its completed
phases (a waiting thread yields until its phase completes: the simulator's threads are
Python threads), ``align16`` is 0, and the helpers check alignment and ranges.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

import numpy as np

from fusec.targets.cuda.env import numba_cuda, simulator_enabled
from fusec.targets.cuda.rawmove import as_i32, pointer, word_loader


class _Helpers(NamedTuple):
    """The module's helpers (the module notes), as the simulator or the GPU implements them."""

    align16: Any
    mbar_init: Any
    mbar_arrive: Any
    bulk_load: Any
    mbar_wait: Any
    lds_words4: Any
    cp_async16: Any
    cp_async_arrive: Any


#: A simulated mbarrier's ``int64``: its completed phases in the low ``_FIELD`` bits, the
#: current phase's arrivals above them, the arrivals a phase expects above those.
_FIELD = 20
_MASK = (1 << _FIELD) - 1


def _sim_fields(value: int) -> tuple[int, int, int]:
    """(completed phases, arrivals of the current phase, expected arrivals)."""
    value = int(value)
    return value & _MASK, (value >> _FIELD) & _MASK, value >> (2 * _FIELD)


def helper_names() -> list[str]:
    """The names this module gives generated kernels (through ``fusec.targets.cuda.abi``)."""
    return list(_Helpers._fields)


def _make_sim() -> dict[str, Any]:
    def align16(arr: Any) -> int:
        return 0

    lock = threading.Lock()  # (the simulated block's threads arrive concurrently)

    def mbar_init(bars: Any, i: int, count: int) -> None:
        if not 0 <= i < len(bars) or not 0 < count <= _MASK:
            raise AssertionError(f"mbar_init: barrier {i} of {len(bars)}, count {count}")
        bars[i] = count << (2 * _FIELD)

    def mbar_arrive(bars: Any, i: int) -> None:
        if not 0 <= i < len(bars):
            raise AssertionError(f"mbar_arrive: barrier {i} of {len(bars)}")
        with lock:
            phases, arrivals, count = _sim_fields(bars[i])
            arrivals += 1
            if arrivals == count:  # the phase completes
                phases, arrivals = (phases + 1) & _MASK, 0
            bars[i] = phases | (arrivals << _FIELD) | (count << (2 * _FIELD))

    def bulk_load(dst: Any, de: int, src: Any, se: int, nbytes: int, bars: Any, i: int) -> None:
        size = dst.dtype.itemsize
        if nbytes % 16 or (de * size) % 16 or (se * src.dtype.itemsize) % 16:
            raise AssertionError(f"bulk_load: {nbytes} bytes {se} -> {de}: not 16-byte aligned")
        count = nbytes // size
        if de < 0 or de + count > len(dst) or se < 0 or se + count > len(src):
            raise AssertionError(f"bulk_load: {count} elements {se} -> {de} out of range")
        if not 0 <= i < len(bars):
            raise AssertionError(f"bulk_load: barrier {i} of {len(bars)}")
        dst[de : de + count] = src[se : se + count]
        mbar_arrive(bars, i)  # its arrival, its bytes landed

    def mbar_wait(bars: Any, i: int, parity: int) -> None:
        if not 0 <= i < len(bars) or parity not in (0, 1):
            raise AssertionError(f"mbar_wait: barrier {i} of {len(bars)}, parity {parity}")
        deadline = time.monotonic() + 60
        while _sim_fields(bars[i])[0] % 2 == parity:  # that parity's phase has not completed
            if time.monotonic() > deadline:
                raise AssertionError(f"mbar_wait: barrier {i}'s phase {parity} never completed")
            time.sleep(0)

    def lds_words4(arr: Any, e: int, dst: Any, d: int) -> None:
        if e % 4 or not 0 <= e <= len(arr) - 4:
            raise AssertionError(f"lds_words4: element {e} of {len(arr)}")
        for k in range(4):
            dst[d + k] = arr[e + k]

    def cp_async16(dst: Any, de: int, src: Any, se: int) -> None:
        source = np.asarray(getattr(src, "_ary", src)).reshape(-1).view(np.uint8)
        start = se * src.dtype.itemsize
        if de % 4 or start % 16 or not 0 <= de <= len(dst) - 4 or start + 16 > len(source):
            raise AssertionError(f"cp_async16: element {se} -> {de}: not 16-byte aligned or out")
        dst.view(np.uint8)[4 * de : 4 * de + 16] = source[start : start + 16]

    def cp_async_arrive(bars: Any, i: int) -> None:
        mbar_arrive(bars, i)  # (the simulated copies landed when issued)

    return _Helpers(
        align16, mbar_init, mbar_arrive, bulk_load, mbar_wait, lds_words4, cp_async16,
        cp_async_arrive,
    )._asdict()  # fmt: skip


def _make_gpu() -> dict[str, Any]:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    i32, i64 = ir.IntType(32), ir.IntType(64)

    def asm(ret: Any, args: list[Any], text: str, constraints: str) -> Any:
        return ir.InlineAsm(ir.FunctionType(ret, args), text, constraints, side_effect=True)

    def shared_address(builder: Any, generic: Any) -> Any:
        """The 32-bit shared-window address of a generic pointer into shared memory."""
        to_shared = asm(
            i32, [generic.type], "{ .reg .u64 a; cvta.to.shared.u64 a, $1; cvt.u32.u64 $0, a; }",
            "=r,l",
        )  # fmt: skip
        return builder.call(to_shared, [generic])

    def window_address(builder: Any, generic: Any) -> Any:
        """The same 32-bit address as ``shared_address``, by an address-space cast that the
        compiler folds into the shared array's own address (no special-register reads of
        the shared window a call; used by the producer warp's helpers, ``mbar_arrive`` and
        the ``cp_async`` ones)."""
        shared = builder.addrspacecast(generic, ir.PointerType(generic.type.pointee, 3))
        return builder.ptrtoint(shared, i32)

    def at(context: Any, builder: Any, arrty: Any, arr: Any, index: Any) -> Any:
        return shared_address(builder, pointer(context, builder, arrty, arr, index))

    def window_at(context: Any, builder: Any, arrty: Any, arr: Any, index: Any) -> Any:
        return window_address(builder, pointer(context, builder, arrty, arr, index))

    @intrinsic
    def align16(typingctx: Any, arr: Any) -> Any:
        sig = types.int64(arr)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            address = builder.ptrtoint(data, i64)
            pad = builder.and_(builder.neg(address), ir.Constant(i64, 15))
            return builder.udiv(pad, ir.Constant(i64, sig.args[0].dtype.bitwidth // 8))

        return sig, codegen

    init = asm(
        ir.VoidType(), [i32, i32],
        "mbarrier.init.shared::cta.b64 [$0], $1; fence.mbarrier_init.release.cluster;",
        "r,r,~{memory}",
    )  # fmt: skip

    def on_barrier(emit: Any) -> Any:
        """An intrinsic ``(bars, i, value)`` that runs ``emit(builder, bar, value)`` with
        mbarrier ``bars[i]``'s shared address and ``value`` as 32 bits."""

        def typer(typingctx: Any, bars: Any, i: Any, value: Any) -> Any:
            sig = types.void(bars, i, value)

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                bar = at(context, builder, sig.args[0], args[0], args[1])
                emit(builder, bar, as_i32(builder, args[2]))
                return context.get_dummy_value()

            return sig, codegen

        return intrinsic(typer)

    mbar_init = on_barrier(lambda builder, bar, count: builder.call(init, [bar, count]))

    def on_barrier_only(text: str) -> Any:
        """An intrinsic ``(bars, i)`` that runs the PTX ``text`` with mbarrier ``bars[i]``'s
        shared address as ``$0``."""
        statement = asm(ir.VoidType(), [i32], text, "r,~{memory}")

        def typer(typingctx: Any, bars: Any, i: Any) -> Any:
            sig = types.void(bars, i)

            def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
                bar = window_at(context, builder, sig.args[0], args[0], args[1])
                builder.call(statement, [bar])
                return context.get_dummy_value()

            return sig, codegen

        return intrinsic(typer)

    mbar_arrive = on_barrier_only("mbarrier.arrive.shared::cta.b64 _, [$0];")

    copy = asm(
        ir.VoidType(), [i32, i64, i32, i32],
        "{ .reg .u64 g; cvta.to.global.u64 g, $1; fence.proxy.async.shared::cta; "
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$3], $2; "
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [g], $2, [$3]; }",
        "r,l,r,r,~{memory}",
    )  # fmt: skip

    @intrinsic
    def bulk_load(typingctx, dst, de, src, se, nbytes, bars, i):
        sig = types.void(dst, de, src, se, nbytes, bars, i)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            dst_t, _, src_t, _, _, bars_t, _ = sig.args
            dst_v, de_v, src_v, se_v, n_v, bars_v, i_v = args
            target = at(context, builder, dst_t, dst_v, de_v)
            source = builder.ptrtoint(pointer(context, builder, src_t, src_v, se_v), i64)
            bar = at(context, builder, bars_t, bars_v, i_v)
            builder.call(copy, [target, source, as_i32(builder, n_v), bar])
            return context.get_dummy_value()

        return sig, codegen

    try_wait = asm(
        i32, [i32, i32],
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; "
        "selp.u32 $0, 1, 0, p; }",
        "=r,r,r,~{memory}",
    )  # fmt: skip

    def wait(builder: Any, bar: Any, parity: Any) -> None:
        loop = builder.append_basic_block("mbar_wait")
        done = builder.append_basic_block("mbar_done")
        builder.branch(loop)
        builder.position_at_end(loop)
        ready = builder.call(try_wait, [bar, parity])
        builder.cbranch(builder.icmp_unsigned("!=", ready, ir.Constant(i32, 0)), done, loop)
        builder.position_at_end(done)

    mbar_wait = on_barrier(wait)
    lds_words4 = word_loader(4, "shared")

    async_copy = asm(
        ir.VoidType(), [i32, i64],
        "{ .reg .u64 g; cvta.to.global.u64 g, $1; cp.async.cg.shared.global [$0], [g], 16; }",
        "r,l,~{memory}",
    )  # fmt: skip

    @intrinsic
    def cp_async16(typingctx: Any, dst: Any, de: Any, src: Any, se: Any) -> Any:
        sig = types.void(dst, de, src, se)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            target = window_at(context, builder, sig.args[0], args[0], args[1])
            source = builder.ptrtoint(pointer(context, builder, sig.args[2], args[2], args[3]), i64)
            builder.call(async_copy, [target, source])
            return context.get_dummy_value()

        return sig, codegen

    cp_async_arrive = on_barrier_only("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$0];")
    return _Helpers(
        align16, mbar_init, mbar_arrive, bulk_load, mbar_wait, lds_words4, cp_async16,
        cp_async_arrive,
    )._asdict()  # fmt: skip


numba_cuda()  # prepared before numba.cuda's extending API is touched
globals().update(_make_sim() if simulator_enabled() else _make_gpu())
__all__ = helper_names()
