"""CUDA template for "pool" groups: 2-D max or average pooling with its epilogue.

One thread per output element, grid-stride, the input's innermost dimension fastest
across the threads (OW of an NCHW input, C of a channels-last one), so each window
row's loads (about nine per store) are coalesced, and the stores too when the result
is laid out alike. The input and the results may be transposed views
(``conv-layout``'s NHWC tensors: an ``ai.transpose`` of the group input, one before
the ``ai.yield``): the kernel reads and writes them in their storage order through
per-dimension strides, no copy. The window is walked in
the reference's order (rows, then columns), skipping the taps outside the input, in
float32 (16-bit inputs converted on load; an average of float32 or bfloat16 values in
float64, as the cpu target's: a window of values near float32's largest, 3e38, overflows
a float32 sum where its mean is finite, and the few float64 adds a window are free in a
kernel bound by its loads):

* max starts at -inf (the padding's value) and keeps a NaN once it sees one
  (``v > m or v != v``), exactly as ``numpy_ops.pool2d``; the result is one of the
  inputs, so it is exact in every element type;
* average divides the window's sum by the taps inside the input, or with
  ``count_include_pad`` inside the padded input; a ``ceil_mode`` window overhanging
  even the padding counts only what it covers (a window covering nothing is 0 / 0).

The elementwise epilogue runs on the pooled value before the one store
(``fusec.targets.cuda.anchored``). Global pooling is a ``reduce`` group (the ONNX
importer makes GlobalAveragePool a ``reduce_mean``), served by the reduce kernel.
"""

from __future__ import annotations

import math

from fusec.codegen.expr import literal, shape_of
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cuda.anchored import (
    AnchorEmitter,
    permuted_strides,
    planned_template,
    stored_views,
)
from fusec.targets.cuda.common import (
    Source,
    grid_stride_launch,
    kernel_def,
)

TO_CHANNELS_LAST = (0, 2, 3, 1)
THREADS = 256
#: Blocks per multiprocessor at most; the grid-stride loop covers the rest.
BLOCKS_PER_SM = 16


def _pool_problem(fused_op: ai.FusedOp, pool: ai.Pool2DOp) -> str | None:
    """What the pool kernel needs of an anchored group (``planned_template``): None when
    it serves ``fused_op``, else why it cannot."""
    if spec_of(pool.input.type).rank != 4:
        return "not a 4-D (NCHW) input"
    perms = {perm or (0, 1, 2, 3) for _, perm in stored_views(fused_op)}
    if len(perms) > 1:
        return "results stored in different layouts"
    return None


class _Emitter(AnchorEmitter):
    """The source of one pool kernel module."""

    def __init__(self, fused_op: ai.FusedOp, pool: ai.Pool2DOp, name: str) -> None:
        super().__init__(fused_op, pool, name)
        self.pool = pool
        self.is_max = pool.KIND == "max"
        _, _, self.h, self.w = shape_of(pool.input)
        self.out_shape = shape_of(pool.output)
        n, self.c, self.oh, self.ow = self.out_shape
        self.count = n * self.c * self.oh * self.ow
        # the input's strides per NCHW dim (a channels-last input: a transposed view)
        self.in_strides = permuted_strides(shape_of(pool.input), self.in_perm)
        self.out_perm = self.epilogue.stored[0][1] or (0, 1, 2, 3)
        # threads walk the input's storage order (nine or so reads per store): the NCHW
        # dims from the outermost stored to the innermost
        given = self.in_perm or (0, 1, 2, 3)
        self.walk = tuple(given.index(j) for j in range(4))

    def constants(self) -> list[tuple[str, object]]:
        kh, kw = self.pool.attr("kernel")
        sh, sw = self.pool.attr("strides")
        dh, dw = self.pool.attr("dilations")
        pt, pl, pb, pr = conv2d_padding(self.pool.attr("padding"))
        include_pad = not self.is_max and bool(self.pool.attr("count_include_pad"))
        # the region an average counts: the input, or the input and its padding
        lo_h, hi_h = (-pt, self.h + pb) if include_pad else (0, self.h)
        lo_w, hi_w = (-pl, self.w + pr) if include_pad else (0, self.w)
        return [
            ("N", self.count),
            ("H", self.h),
            ("W", self.w),
            ("OH", self.oh),
            ("OW", self.ow),
            ("KH", kh),
            ("KW", kw),
            ("SH", sh),
            ("SW", sw),
            ("DH", dh),
            ("DW", dw),
            ("PT", pt),
            ("PL", pl),
            ("LO_H", lo_h),
            ("HI_H", hi_h),
            ("LO_W", lo_w),
            ("HI_W", hi_w),
            *zip(("XN", "XC", "XH", "XW"), self.in_strides, strict=True),
            ("THREADS", THREADS),
        ]

    @property
    def wide(self) -> bool:
        """An average of values that reach float32's largest (f32, bf16): summed in
        float64, where a float32 sum of finite values may overflow."""
        return not self.is_max and self.dtype in ("f32", "bf16")

    @property
    def zero(self) -> str:
        return "f64(0.0)" if self.wide else literal(0.0)

    def emit(self) -> str:
        code = Source([])
        params = self.epilogue.params()
        ld = f"ld_{self.dtype}"
        kernel_def(
            code, self.name, params, "Grid-stride loop over the output elements, one window each."
        )
        code.add(1, "e = cuda.grid(1)", "while e < N:")
        self.decode(code)
        code.add(2, "h0 = oh * SH - PT", "w0 = ow * SW - PL")
        code.add(2, f"acc = {literal(-math.inf) if self.is_max else self.zero}")
        _taps(code, 2, "H", "0", "H")
        _taps(code, 4, "W", "0", "W")
        code.add(6, f"v = {ld}({self.array}, base + ih * XH + iw * XW)")
        if self.is_max:
            code.add(6, "acc = v if (v > acc or v != v) else acc")
            code.add(2, "val = acc")
        else:
            code.add(6, "acc += v")
            for dim, count in (("H", "ch"), ("W", "cw")):  # the taps the average counts
                code.add(2, f"{count} = 0")
                _taps(code, 2, dim, f"LO_{dim}", f"HI_{dim}")
                code.add(4, f"{count} += 1")
            if self.wide:
                code.add(2, "val = f32(acc / f64(ch * cw))")
            else:
                code.add(2, "val = acc / f32(ch * cw)")
        # ``e`` is the NCHW flat index when the threads walk NCHW; else every load and
        # store goes by the multi-index
        flat = "e" if self.walk == (0, 1, 2, 3) else None
        self.epilogue.emit(code, 2, "val", flat, index=["n", "c", "oh", "ow"])
        code.add(2, "e += cuda.gridsize(1)")
        return self.module(code, params)

    def decode(self, code: Source) -> None:
        """(n, c, oh, ow) of element ``e`` of the output, counted in the order the
        input is stored in (``walk``)."""
        names = ("n", "c", "oh", "ow")
        code.add(2, "r = e")
        for j in range(3, 0, -1):
            d = self.walk[j]
            code.add(2, f"{names[d]} = r % {self.out_shape[d]}", f"r = r // {self.out_shape[d]}")
        code.add(2, f"{names[self.walk[0]]} = r", "base = n * XN + c * XC")

    def module(self, code: Source, params: list[str]) -> str:
        attrs = ", ".join(
            f"{key} {list(self.pool.attr(key))}"
            for key in ("kernel", "strides", "padding", "dilations")
        )
        notes = [
            f"target: cuda (Numba CUDA), template: pool ({self.pool.KIND} pooling, {attrs})",
            f"layout: one output element per thread and loop step over {self.count} elements "
            f"({'OW' if self.walk[-1] == 3 else 'C'} fastest), "
            f"{'float64' if self.wide else 'float32'} window "
            "accumulation",
        ]
        if self.in_perm or self.out_perm != (0, 1, 2, 3):
            given = _layout_name(self.in_perm, (0, 3, 1, 2))  # the NHWC input viewed NCHW
            stored = _layout_name(self.out_perm, TO_CHANNELS_LAST)
            notes.append(f"input {given}, output {stored} (the transposes as addressing)")
        ins, outs = self.io_names()
        return self.kernel_module(
            notes,
            self.constants(),
            code,
            grid_stride_launch(self.name, "N", BLOCKS_PER_SM, ins + outs, params),
            imports=["from numpy import float64 as f64", ""] if self.wide else (),
        )


#: The tap index and the input index of each window axis (H: rows, W: columns).
_TAP_NAMES = {"H": ("kr", "ih"), "W": ("ks", "iw")}


def _taps(code: Source, indent: int, dim: str, lo: str, hi: str) -> None:
    """The loop over the taps of window axis ``dim`` ("H" or "W") and the test that the
    input index lies in ``[lo, hi)``, the body to come at ``indent + 2``: one definition of
    a tap's input index for the window walk (``lo``, ``hi``: the input) and the taps an
    average counts (the input, or the padded input)."""
    tap, at = _TAP_NAMES[dim]
    code.add(indent, f"for {tap} in range(K{dim}):")
    code.add(
        indent + 1, f"{at} = {dim.lower()}0 + {tap} * D{dim}", f"if {at} >= {lo} and {at} < {hi}:"
    )


def _layout_name(perm: tuple, channels_last: tuple) -> str:
    """How a transpose ``perm`` lays out an NCHW tensor: NCHW, channels-last or other."""
    if not perm or perm == (0, 1, 2, 3):
        return "NCHW"
    return "channels-last" if perm == channels_last else f"transposed {list(perm)}"


#: The pool template's one plan, what fusion asks of a group, and its kernel module (or
#: PyTorch's, with the reason, where ``plan_problem`` refuses the group).
plan_problem, accepts, generate = planned_template("pool", ai.Pool2DOp, _pool_problem, _Emitter)
