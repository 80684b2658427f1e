"""The runtime ABI of generated cpu kernel modules: the only fusec module they import.

Generated source names everything it needs from here (``from
fusec.targets.cpu.abi import ...``), so the kernel layer's modules can move or be
renamed without breaking cached kernels or their text:

* ``cached_njit``: ``numba.njit(..., cache=True)`` with authenticated cache files
  (``fusec.runtime.numba_cache``), the decorator of every stage and helper;
* ``next_block``, ``num_threads``: a blocked kernel's shared block counter and its
  task count (``fusec.targets.cpu.tasks``);
* ``workspace``: a launch's per-task float32 workspace (``fusec.targets.cpu.buffers``);
* ``sgemm_lp64``, ``sgemm_ilp64``, ``sgemm_numba``, ``sgemm_acc_lp64``,
  ``sgemm_acc_ilp64``, ``sgemm_acc_numba``, ``threads_local``, ``threads_noop``: the
  BLAS intrinsics a block's GEMM calls, one set per BLAS interface
  (``fusec.targets.cpu.blas_calls``; ``blas.import_line`` picks them);
* ``blas_single_threaded``: the process-wide BLAS thread count held at 1 around a
  launch, when the BLAS has no per-thread setter (``blas.single_threaded``);
* ``gemm_nn``, ``gemm_nn_staged``, ``gemm_packed``: the register-tiled GEMMs
  (``fusec.targets.cpu.microkernel``), and ``gemm_nn_call``, ``gemm_nn_staged_call``,
  ``gemm_packed_call`` the same called through a symbol, not compiled into the calling
  module (``fusec.targets.cpu.helper_calls``: what kernels use); ``gemm_q8_packed``,
  ``gemm_q8_packed_amx``: the uint8 x int8 ones, VNNI and AMX (``fusec.targets.cpu.gemm_int8``), and
  ``gemm_q8_bytes``, ``gemm_q8_bytes_amx`` the same on A's codes gathered as bytes,
  ``gemm_q8_rows`` a weight's rows by such codes (a quantized conv's channel rows);
* ``depthwise_taps_row``, ``depthwise_taps_rows``, ``depthwise_taps_plane``: a depthwise
  convolution's tap sums in register tiles, channels in lanes (a row, or a plane's rows
  in one call) or one channel plane (``..._call``: through a symbol, ``helper_calls``), and
  ``depthwise_deinterleave``: a stride-2 input row split into its column phases, and
  ``depthwise_transpose``: a square tile of channels x pixels transposed
  (``fusec.targets.cpu.depthwise_tiles``);
* ``winograd_filters``, ``redo_nonfinite_tiles``, ``redo_nonfinite_tiles_m``: the
  Winograd conv's filter transform and its exact redo of non-finite tiles (2x2, m x m)
  (``fusec.targets.cpu.winograd``), the redos also as ``redo_nonfinite_tiles_call``,
  ``redo_nonfinite_tiles_m_call`` (through a symbol: ``helper_calls``);
* ``copy_floats``: a run of floats copied by one ``memcpy`` (a row into a padded
  workspace row; ``fusec.targets.cpu.row_copy``);
* ``reduce_rows``: short-row reductions (``fusec.targets.cpu.reduce_helpers``);
* ``numpy_ops``: the numpy forms of the layout and data ops a copy kernel runs
  (``fusec.dialect.numpy_ops``, a module);
* ``FusecError``: the error a kernel raises for bad data it finds at run time (an
  expert index out of range: ``fusec.targets.cpu.experts``);
* ``call_entry``, ``flat_view``: a compiled program's call of a kernel entry by its
  address and its flat views of the arenas (``fusec.targets.cpu.entry_call``; the
  program modules of ``fusec.targets.cpu.program``).

Names resolve on first use, so a module that needs only ``cached_njit`` never
imports the BLAS intrinsics or the micro-kernels. Removing or changing the meaning
of a name here is a break of every cached kernel: add names, do not repurpose them.
"""

from __future__ import annotations

import importlib
from typing import Any

#: name -> (providing module, its attribute; None: the module itself).
_PROVIDERS: dict[str, tuple[str, str | None]] = {
    "cached_njit": ("fusec.runtime.numba_cache", "cached_njit"),
    "next_block": ("fusec.targets.cpu.tasks", "next_block"),
    "num_threads": ("fusec.targets.cpu.tasks", "num_threads"),
    "workspace": ("fusec.targets.cpu.buffers", "workspace"),
    "sgemm_lp64": ("fusec.targets.cpu.blas_calls", "sgemm_lp64"),
    "sgemm_ilp64": ("fusec.targets.cpu.blas_calls", "sgemm_ilp64"),
    "sgemm_numba": ("fusec.targets.cpu.blas_calls", "sgemm_numba"),
    "sgemm_acc_lp64": ("fusec.targets.cpu.blas_calls", "sgemm_acc_lp64"),
    "sgemm_acc_ilp64": ("fusec.targets.cpu.blas_calls", "sgemm_acc_ilp64"),
    "sgemm_acc_numba": ("fusec.targets.cpu.blas_calls", "sgemm_acc_numba"),
    "threads_local": ("fusec.targets.cpu.blas_calls", "threads_local"),
    "threads_noop": ("fusec.targets.cpu.blas_calls", "threads_noop"),
    "blas_single_threaded": ("fusec.targets.cpu.blas", "single_threaded"),
    "gemm_nn": ("fusec.targets.cpu.microkernel", "gemm_nn"),
    "gemm_nn_staged": ("fusec.targets.cpu.microkernel", "gemm_nn_staged"),
    "gemm_packed": ("fusec.targets.cpu.microkernel", "gemm_packed"),
    "gemm_nn_call": ("fusec.targets.cpu.helper_calls", "gemm_nn_call"),
    "gemm_nn_staged_call": ("fusec.targets.cpu.helper_calls", "gemm_nn_staged_call"),
    "gemm_packed_call": ("fusec.targets.cpu.helper_calls", "gemm_packed_call"),
    "gemm_q8_packed": ("fusec.targets.cpu.gemm_int8", "gemm_q8_packed"),
    "gemm_q8_packed_amx": ("fusec.targets.cpu.gemm_int8", "gemm_q8_packed_amx"),
    "gemm_q8_bytes": ("fusec.targets.cpu.gemm_int8", "gemm_q8_bytes"),
    "gemm_q8_bytes_amx": ("fusec.targets.cpu.gemm_int8", "gemm_q8_bytes_amx"),
    "gemm_q8_rows": ("fusec.targets.cpu.gemm_int8", "gemm_q8_rows"),
    "depthwise_taps_row": ("fusec.targets.cpu.depthwise_tiles", "taps_row"),
    "depthwise_taps_plane": ("fusec.targets.cpu.depthwise_tiles", "taps_plane"),
    "depthwise_taps_row_call": ("fusec.targets.cpu.helper_calls", "taps_row_call"),
    "depthwise_taps_rows": ("fusec.targets.cpu.depthwise_tiles", "taps_rows"),
    "depthwise_taps_rows_call": ("fusec.targets.cpu.helper_calls", "taps_rows_call"),
    "depthwise_taps_plane_call": ("fusec.targets.cpu.helper_calls", "taps_plane_call"),
    "depthwise_deinterleave": ("fusec.targets.cpu.depthwise_tiles", "deinterleave"),
    "depthwise_transpose": ("fusec.targets.cpu.depthwise_tiles", "transpose"),
    "winograd_filters": ("fusec.targets.cpu.winograd", "winograd_filters"),
    "redo_nonfinite_tiles": ("fusec.targets.cpu.winograd", "redo_nonfinite_tiles"),
    "redo_nonfinite_tiles_m": ("fusec.targets.cpu.winograd", "redo_nonfinite_tiles_m"),
    "redo_nonfinite_tiles_call": ("fusec.targets.cpu.helper_calls", "redo_nonfinite_tiles_call"),
    "redo_nonfinite_tiles_m_call": (
        "fusec.targets.cpu.helper_calls",
        "redo_nonfinite_tiles_m_call",
    ),
    "reduce_rows": ("fusec.targets.cpu.reduce_helpers", "reduce_rows"),
    "copy_floats": ("fusec.targets.cpu.row_copy", "copy_floats"),
    "numpy_ops": ("fusec.dialect.numpy_ops", None),
    "FusecError": ("fusec.errors", "FusecError"),
    "call_entry": ("fusec.targets.cpu.entry_call", "call_entry"),
    "flat_view": ("fusec.targets.cpu.entry_call", "flat_view"),
}

#: The module generated cpu kernels import from (templates spell it with ``import_line``).
MODULE = __name__


def names() -> tuple[str, ...]:
    """Every name of the ABI, sorted."""
    return tuple(sorted(_PROVIDERS))


def import_line(*imported: str) -> str:
    """``from fusec.targets.cpu.abi import a, b`` for a generated module; an entry may
    rename (``"sgemm_ilp64 as sgemm"``). Every name must be part of the ABI."""
    for entry in imported:
        name = entry.split(" as ")[0]
        if name not in _PROVIDERS:
            raise KeyError(f"'{name}' is not part of the cpu kernel ABI")
    return f"from {MODULE} import {', '.join(imported)}"


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name not in _PROVIDERS:
        raise AttributeError(f"'{name}' is not part of the cpu kernel ABI")
    module_name, attribute = _PROVIDERS[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)
