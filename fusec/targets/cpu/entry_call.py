"""``call_entry``: a compiled program's call of a kernel's njit entry through its address.

A generated segment (``fusec.targets.cpu.program``) that called the kernels' entries as
Numba functions would link every kernel's machine code into its own library, and Numba
optimises and compiles a library whole: the segment of ResNet-18 took longer to compile
than its 23 kernels together (184 s against 334 s on a loaded 2-core machine). So a
segment takes the entries' addresses as data (an int64 array the program fills when it
loads the kernels) and calls each through this intrinsic, in Numba's own calling
convention (status and exception propagated as for any call): its library holds only
the slicing of the arena and the calls.

A kernel's entry calls its stages the same way (``fusec.targets.cpu.entry``), for the
same reason. The function at the address must have been compiled for exactly the
argument types of the call (a stage's read-only arrays excepted: the same data model).
The program compiles each entry for flat, C-contiguous, writable arrays of the element
types its plan gives (``entry_signature``), and this intrinsic refuses, at typing, any
argument of another type.
"""

from __future__ import annotations

from typing import Any

from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic


def flat_array(dtype: Any) -> types.Array:
    """The one array type an entry takes: 1-D, C-contiguous, writable, of ``dtype``."""
    return types.Array(dtype, 1, "C")


def entry_signature(dtypes: list[Any]) -> tuple[types.Array, ...]:
    """An entry's argument types for arrays of numpy ``dtypes``, then scratch, counter
    and its stages' addresses (``fusec.targets.cpu.entry``)."""
    from numba.np.numpy_support import from_dtype

    arrays = [flat_array(from_dtype(d)) for d in dtypes]
    return (*arrays, flat_array(types.float32), flat_array(types.int64), flat_array(types.int64))


def stage_address(dispatcher: Any) -> int:
    """The address of a stage's one compiled signature (stages are compiled eagerly, from
    the explicit signature their decorator names). An entry calls it with mutable arrays
    where the stage declares read-only ones: the same data model, so the same ABI."""
    (result,) = dispatcher.overloads.values()
    return overload_address(result)


def overload_address(compiled: Any) -> int:
    """The address of one compiled overload of a dispatcher (Numba's calling convention)."""
    return int(compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name))


def call_compiled(context: Any, builder: Any, fn: Any, argtys: tuple, values: list) -> None:
    """Call ``fn``, a function of Numba's calling convention taking ``argtys`` and returning
    nothing, on ``values``; an exception it raises propagates to the caller."""
    status, _ = context.call_conv.call_function(builder, fn, types.none, argtys, values)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)


@intrinsic
def call_entry(typingctx: Any, address: Any, *args: Any) -> Any:
    """``entry(*args)`` for the compiled entry at ``address`` (an int64)."""
    argtys = tuple(args[0]) if len(args) == 1 and isinstance(args[0], types.BaseTuple) else args
    if not isinstance(address, types.Integer):
        raise TypingError("call_entry: the address must be an integer")
    for ty in argtys:
        if not isinstance(ty, types.Array) or ty.copy(readonly=False) != flat_array(ty.dtype):
            raise TypingError(f"call_entry: {ty} is not a flat C-contiguous writable array")
    sig = types.none(address, types.StarArgTuple.from_types(argtys))

    def codegen(context: Any, builder: Any, signature: Any, llargs: Any) -> Any:
        values = cgutils.unpack_tuple(builder, llargs[1], len(argtys))
        fnty = context.call_conv.get_function_type(types.none, argtys)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        call_compiled(context, builder, fn, argtys, values)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def flat_view(typingctx: Any, array: Any, offset: Any, count: Any, dtype: Any) -> Any:
    """``array``'s bytes from ``offset`` as a flat array of ``count`` elements of ``dtype``
    (a numpy dtype class), sharing ``array``'s memory, with no checks: a segment's
    offsets and counts come from its buffer plan, within arenas it sized. Numba's
    ``array[a:b].view(dtype)`` is the same array after slice normalisation and view
    checks, as much LLVM code again each: compiling ResNet-18's segment took ~20 s of CPU."""
    # any rank: only the data pointer is read (a 0-d result, such as a bool verdict, too)
    if not (isinstance(array, types.Array) and array.layout == "C"):
        raise TypingError("flat_view: the array must be C-contiguous")
    if not isinstance(dtype, (types.DType, types.NumberClass)):
        raise TypingError("flat_view: dtype must be a numpy dtype")
    element = dtype.dtype
    result = flat_array(element)
    sig = result(array, offset, count, dtype)

    def codegen(context: Any, builder: Any, signature: Any, llargs: Any) -> Any:
        from numba.core.imputils import impl_ret_borrowed
        from numba.np.arrayobj import make_array, populate_array

        source = make_array(array)(context, builder, llargs[0])
        byte = context.get_value_type(types.uint8).as_pointer()
        start = builder.gep(builder.bitcast(source.data, byte), [llargs[1]])
        view = make_array(result)(context, builder)
        itemsize = context.get_constant(
            types.intp, context.get_abi_sizeof(context.get_data_type(element))
        )
        populate_array(
            view,
            data=builder.bitcast(start, view.data.type),
            shape=cgutils.pack_array(builder, [llargs[2]]),
            strides=cgutils.pack_array(builder, [itemsize]),
            itemsize=itemsize,
            meminfo=source.meminfo,
            parent=source.parent,
        )
        return impl_ret_borrowed(context, builder, result, view._getvalue())

    return sig, codegen
