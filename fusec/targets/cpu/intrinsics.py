"""What the cpu target's LLVM IR intrinsics share (the register tiles of ``microkernel`` and
``depthwise_tiles``, ``reduce_helpers``' float64 sum): the typing check of their float32
arrays, their arguments as IR values in ``codegen``, the accumulators a counted loop
carries (phis at the loop's top, and at its exit where the loop may not have run), and
``retiled``: one row dispatch compiled over tiles of another width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import FunctionType
from typing import Any

from llvmlite import ir
from numba import types
from numba.core.errors import TypingError


def check_f32_arrays(what: str, arrays: dict[str, Any]) -> None:
    """Typing: each of ``arrays`` (name: Numba type) is a float32 array, else a TypingError
    naming ``what`` and the argument."""
    for name, arr in arrays.items():
        if not (isinstance(arr, types.Array) and arr.dtype == types.float32):
            raise TypingError(f"{what}: {name} must be a float32 array")


class Arguments:
    """An intrinsic's arguments in its ``codegen(context, builder, signature, args)``."""

    def __init__(self, context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> None:
        self.context, self.builder = context, builder
        self.types, self.values = signature.args, args

    def integer(self, i: int, ty: Any = types.int64) -> ir.Value:
        """Argument ``i`` (an integer) as an i64 (or as the Numba integer type ``ty``)."""
        return self.context.cast(self.builder, self.values[i], self.types[i], ty)

    def data(self, i: int) -> ir.Value:
        """The data pointer of argument ``i`` (an array)."""
        array = self.context.make_array(self.types[i])
        return array(self.context, self.builder, self.values[i]).data


def open_loop(builder: ir.IRBuilder, name: str, run: ir.Value) -> tuple[ir.Block, ...]:
    """From the current block (``entry``) to a new block ``<name>.loop`` when ``run``
    holds, else to ``<name>.done``; the builder goes on in the loop. (entry, loop, done)."""
    entry = builder.block
    loop = builder.append_basic_block(f"{name}.loop")
    done = builder.append_basic_block(f"{name}.done")
    builder.cbranch(run, loop, done)
    builder.position_at_end(loop)
    return entry, loop, done


def close_loop(builder: ir.IRBuilder, again: ir.Value, loop: ir.Block, done: ir.Block) -> None:
    """The loop body's end: back to ``loop`` while ``again`` holds, else on in ``done``
    (where the builder goes on)."""
    builder.cbranch(again, loop, done)
    builder.position_at_end(done)


def carry(
    phis: Sequence[ir.PhiInstr],
    firsts: Sequence[ir.Value],
    laters: Sequence[ir.Value],
    entry: ir.Block,
    body_end: ir.Block,
) -> None:
    """Each loop phi takes its ``first`` value from ``entry`` and its ``later`` one from the
    end of the loop body (``body_end``)."""
    for phi, first, later in zip(phis, firsts, laters, strict=True):
        phi.add_incoming(first, entry)
        phi.add_incoming(later, body_end)


def close_accumulator_loop(
    builder: ir.IRBuilder,
    counter: ir.PhiInstr,
    trips: ir.Value,
    accumulators: Sequence[Sequence[ir.PhiInstr]],
    updates: Sequence[Sequence[ir.Value]],
    zero: ir.Constant,
    blocks: tuple[ir.Block, ir.Block, ir.Block],
) -> list[ir.Value]:
    """The end of a micro-kernel's K loop (``open_loop``'s ``(entry, loop, done)``): the
    counter steps by one while below ``trips``, each accumulator phi (rows x vectors) starts
    at ``zero`` and takes its update, and their values after the loop come back flat
    (``zero`` where the loop did not run)."""
    entry, loop, done = blocks
    step = builder.add(counter, ir.Constant(counter.type, 1))
    body_end = builder.block
    counter.add_incoming(ir.Constant(counter.type, 0), entry)
    counter.add_incoming(step, body_end)
    phis = [phi for row in accumulators for phi in row]
    zeros = [zero] * len(phis)
    news = [value for row in updates for value in row]
    carry(phis, zeros, news, entry, body_end)
    close_loop(builder, builder.icmp_signed("<", step, trips), loop, done)
    return exit_values(builder, zero.type, zeros, news, entry, body_end)


def exit_values(
    builder: ir.IRBuilder,
    ty: ir.Type,
    firsts: Sequence[ir.Value],
    laters: Sequence[ir.Value],
    entry: ir.Block,
    body_end: ir.Block,
) -> list[ir.Value]:
    """At the loop's exit block (``builder`` at its top: LLVM wants the phis first), each
    accumulator's value: its ``first`` when the loop did not run (from ``entry``), else its
    ``later`` (from ``body_end``)."""
    values = []
    for first, later in zip(firsts, laters, strict=True):
        value = builder.phi(ty)
        value.add_incoming(first, entry)
        value.add_incoming(later, body_end)
        values.append(value)
    return values


def retiled(dispatcher: Any, name: str, doc: str, **tiles: Any) -> Any:
    """A second compiled function with the body of the Numba ``dispatcher`` (a
    ``sealed_njit`` row dispatch: the 6-row tile down the rows, then the tile of the rows
    left) in which the global names ``tiles`` stand for other intrinsics (the same row
    counts over another number of vectors): one body, each copy naming its tiles
    statically, as Numba wants (it resolves a function's globals when it compiles; a tile
    chosen at run time would compile every tile into both). ``name`` is the copy's name and
    qualified name, which keeps its disk cache apart from the original's."""
    from fusec.runtime.numba_cache import sealed_njit

    original: Callable[..., Any] = dispatcher.py_func
    unknown = set(tiles) - set(original.__code__.co_names)
    if unknown:
        raise ValueError(f"retiled: {original.__name__} does not name {sorted(unknown)}")
    func = FunctionType(original.__code__, {**original.__globals__, **tiles}, name)
    func.__qualname__, func.__doc__, func.__module__ = name, doc, original.__module__
    return sealed_njit(func)
