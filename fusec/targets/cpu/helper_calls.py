"""Generated kernels' calls of the GEMM helpers through a symbol, not a linked copy.

A kernel module that calls a helper dispatcher (``microkernel.gemm_packed``, ...) makes
Numba link the helper's machine code into the kernel's library, and Numba optimises and
compiles a library whole: every module calling ``gemm_packed`` compiled it again (a
128 x 768 @ 768 x 768 + bias kernel: 3.0 CPU s to compile linked, 0.5 through the
symbol; its run unchanged). So the kernels call these helpers through the intrinsics
here (ABI names ``gemm_nn_call``, ``gemm_nn_staged_call``, ``gemm_packed_call``, the
Winograd redos' and the depthwise tap tiles' ``..._call``):

* when a kernel module first imports a helper's call, the helper is compiled once for
  one signature (int64 scalars, flat C-contiguous writable float32 arrays; from its
  sealed disk cache after the first process) and the address of that compiled function
  is entered in LLVM's symbol table under a name spelling its signature
  (``llvmlite.binding.add_symbol``);
* a call in a kernel declares that symbol and calls it in Numba's calling convention
  (status and exception propagated, as ``entry_call.call_entry`` does), read-only
  arrays passed as writable ones (the same data model) and scalars widened to int64:
  the kernel's library holds only the call.

A cached kernel finds the symbol when Numba loads it because the kernel module imports
its intrinsic (from ``abi``) before its ``cached_njit`` decorator loads the code. A
helper's edit recompiles the kernels anyway (``source_digest``: this module and
``microkernel`` are in the ABI's import closure); a change of a helper's parameters
must change its ``_HELPERS`` entry, hence its symbol's name.
"""

from __future__ import annotations

from typing import Any

import llvmlite.binding as llvm
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from fusec.targets.cpu import depthwise_tiles, microkernel, winograd
from fusec.targets.cpu.entry_call import call_compiled, overload_address

_ARRAY = types.Array(types.float32, 1, "C")
#: Each helper's module and parameters: ``a`` a flat float32 array, ``i`` an int64.
_HELPERS = {
    "gemm_nn": (microkernel, "iiiaiiaiiaii"),
    "gemm_nn_staged": (microkernel, "iiiaiiaiiaiia"),
    "gemm_packed": (microkernel, "iiiaiiaiaii"),
    "redo_nonfinite_tiles": (winograd, "aiiiaiiiiai"),
    "redo_nonfinite_tiles_m": (winograd, "aiiiaiiiiaii"),
    "taps_row": (depthwise_tiles, "aiiiiiiaaii"),
    "taps_rows": (depthwise_tiles, "aiiiiiiaaiiiii"),
    "taps_plane": (depthwise_tiles, "aiiiiiiaiaiii"),
}


def symbol(name: str) -> str:
    """The symbol a helper's compiled function is registered under."""
    return f"fusec_cpu_{name}__{_HELPERS[name][1]}"


def _argument_types(kinds: str) -> tuple[Any, ...]:
    return tuple(_ARRAY if kind == "a" else types.int64 for kind in kinds)


def _register(name: str) -> None:
    """Compile helper ``name`` for its signature and enter its address as ``symbol``."""
    module, kinds = _HELPERS[name]
    dispatcher = getattr(module, name)
    signature = _argument_types(kinds)
    dispatcher.compile(signature)
    llvm.add_symbol(symbol(name), overload_address(dispatcher.overloads[signature]))


def _check(name: str, given: tuple[Any, ...], wanted: tuple[Any, ...]) -> None:
    if len(given) != len(wanted):
        raise TypingError(f"{name}: {len(given)} arguments, expected {len(wanted)}")
    for k, (ty, want) in enumerate(zip(given, wanted, strict=True)):
        if want == types.int64 and not isinstance(ty, types.Integer):
            raise TypingError(f"{name}: argument {k} is {ty}, expected an integer")
        if want != types.int64 and (
            not isinstance(ty, types.Array) or ty.copy(readonly=False) != _ARRAY
        ):
            raise TypingError(f"{name}: argument {k} is {ty}, expected a flat float32 array")


def _caller(name: str) -> Any:
    """The intrinsic calling helper ``name`` through its symbol."""
    wanted = _argument_types(_HELPERS[name][1])

    def call(typingctx: Any, *args: Any) -> Any:
        given = tuple(args[0]) if len(args) == 1 and isinstance(args[0], types.BaseTuple) else args
        _check(f"{name}_call", given, wanted)

        def codegen(context: Any, builder: Any, signature: Any, llargs: Any) -> Any:
            values = cgutils.unpack_tuple(builder, llargs[0], len(given))
            cast = [
                v if ty == want else context.cast(builder, v, ty, want)
                for v, ty, want in zip(values, given, wanted, strict=True)
            ]
            fnty = context.call_conv.get_function_type(types.none, wanted)
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol(name))
            call_compiled(context, builder, fn, wanted, cast)
            return context.get_dummy_value()

        return types.none(types.StarArgTuple.from_types(given)), codegen

    call.__name__ = f"{name}_call"
    module = _HELPERS[name][0].__name__
    call.__doc__ = f"``{module}.{name}(...)`` through its symbol ``{symbol(name)}``."
    return intrinsic(call)


_CALLERS: dict[str, Any] = {}


def __getattr__(attribute: str) -> Any:
    """``<helper>_call``: the helper registered (compiled once a process) on first use, so
    that a kernel importing one helper's call compiles no other helper."""
    name = attribute.removesuffix("_call")
    if attribute == name or name not in _HELPERS:
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    if name not in _CALLERS:
        _register(name)
        _CALLERS[name] = _caller(name)
    return _CALLERS[name]
