"""The elementwise tail a Tensor Core template applies to each accumulator: ``Epilogue``,
the generated C++ and the inputs it reads, shared by the GEMM and conv templates (each
writes it into its own functor: ``gemm/cpp.py``, ``conv/cpp.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Epilogue:
    """The elementwise code applied to each accumulator before the store.

    ``body`` is C++ statements that read ``float acc`` (the f32 dot product),
    ``int row``, ``int col`` (the output element), ``int bat`` (the flat batch
    index) and the extra input pointers ``e0``, ``e1``... (``const void*``,
    element types ``extras``; load them with ``fs_ld_<dtype>(e0, index)``), and
    assign ``float y``. It must come from a generator (never user text).
    ``name`` documents it in the kernel header.
    """

    body: str = "y = acc;"
    extras: tuple[str, ...] = ()
    name: str = "identity"
    helpers: str = ""  # C++ helper definitions the body calls (generated)
    #: "" (store ``y``), "row" (softmax over each output row, which one block tile holds:
    #: N <= BN; ``post_body`` maps ``float s``, the softmax value, to ``y``) or "partials"
    #: (store ``y`` and write each row's per-tile (max, sum of exp) to the last extra,
    #: an f32 buffer of batches x M x tiles_n pairs, for a finalise pass)
    softmax: str = ""
    post_body: str = "y = s;"
    #: The LayerNorm rewrite (FlashNorm) applied to ``acc`` before ``body``: the extra slots
    #: of the row statistics (float2 mean, rstd per row) and of the fold's column vectors
    #: (``c`` at 0, ``d`` at ``ln_stride``, f32), or () without a LayerNorm prologue.
    ln_slots: tuple[int, ...] = ()
    ln_stride: int = 0
    #: With ``ln_slots``: the extra slots of x and of the folded weight W' (the operand type)
    #: and (K, N), from which an element the rewrite cannot be trusted with (a row of large
    #: mean against its spread; bf16, a row whose x . W' overflows) is taken again exactly
    #: (``gemm.cuh``: ``gemm_ln_exact``); () for the rewrite alone.
    ln_exact: tuple[int, ...] = ()
    ln_kn: tuple[int, int] = (0, 0)
    #: ``ln="tile"``: the extra slots of the LayerNorm's gamma and beta (K values each), which
    #: the consumers apply to the resident A tiles before the main loop, and its epsilon;
    #: () otherwise (then ``ln_eps`` is unused)
    ln_affine: tuple[int, ...] = ()
    ln_eps: float = 1e-5
    #: Extra slots read at (row, col) of the output, row-major M x N (a residual): what the
    #: ``prefetch="tile"`` variant brings into L2 before the epilogue.
    tile_inputs: tuple[int, ...] = ()
    #: The conv template's arguments: extra slots the kernel loads itself and passes to the
    #: body as ``float ev<slot>`` (``fs_epilogue``'s parameters): one value per output
    #: channel (index ``k``, e.g. a folded BatchNorm's scale) or one at the output element
    #: (an NCHW tensor of the output's shape: a residual).
    channel_args: tuple[int, ...] = ()
    pixel_args: tuple[int, ...] = ()
    #: The ``pixel_args`` stored channels-last (``[N][P][Q][K]``, a residual the conv's
    #: producer stores NHWC): the kernel reads them at the element's NHWC index.
    pixel_nhwc: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.softmax not in ("", "row", "partials"):
            raise ValueError(f"epilogue softmax mode {self.softmax!r}")
        if self.softmax == "partials" and (not self.extras or self.extras[-1] != "f32"):
            raise ValueError("the partials epilogue writes to its last extra (f32)")
        if self.ln_slots and (len(self.ln_slots) != 2 or self.ln_stride % 4):
            raise ValueError("ln_slots is (stats, cd); ln_stride a multiple of 4")
        if self.ln_exact and (len(self.ln_exact) != 2 or not self.ln_slots or 0 in self.ln_kn):
            raise ValueError("ln_exact is (x, w) beside ln_slots, with ln_kn (K, N)")
        if self.ln_affine and (len(self.ln_affine) != 2 or self.ln_slots):
            raise ValueError("ln_affine is (gamma, beta), and excludes the rewrite's ln_slots")
        if not (math.isfinite(self.ln_eps) and self.ln_eps >= 0.0):
            raise ValueError(f"LayerNorm epsilon {self.ln_eps!r}")
        if not set(self.pixel_nhwc) <= set(self.pixel_args):
            raise ValueError("pixel_nhwc names slots of pixel_args only")
