"""ONNX ``GridSample`` (2-D and volumetric 3-D; nearest, linear and cubic; zeros, border
and reflection padding; align_corners) as ai ops at run-time grid positions.

The grid's coordinates (x, y[, z] for W, H[, D]) are denormalised, rounded half to even
for nearest, and, where they fall outside the borders, clipped (border) or reflected
(reflection), as ONNX's reference does it. Each spatial dim then has its taps: one
(nearest: the coordinate truncated), two (linear: floor and floor + 1, weights 1 - t
and t) or four (cubic: floor - 1 .. floor + 2, Keys' coefficients with a = -0.75), each
tap mapped into the input by the padding mode (zeros: masked outside; border: clamped;
reflection: reflected and truncated). Every combination of taps is one ``ai.take`` of
the input viewed as ``[N * spatial, C]`` rows at the flat positions (int64, computed
with ai ops), times the product of its weights; the terms are summed (the separable
interpolation, so 1, 4 or 16 takes in 2-D and 1, 8 or 64 in 3-D) and put back as
``[N, C, out...]``.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _reshape_to, converter
from fusec.frontend.onnx_layout import _slice_of
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node

_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
          "nearest": "nearest"}  # fmt: skip
_CUBIC_A = -0.75


@converter("GridSample", attrs=("align_corners", "mode", "padding_mode"))
def _grid_sample(imp: Importer, node: Node) -> list[SSAValue]:
    x, grid = imp.input(node, 0), imp.input(node, 1)
    xs, gs = shape_of(x), shape_of(grid)
    dims = len(xs) - 2
    if dims not in (2, 3) or len(gs) != dims + 2 or gs[-1] != dims or gs[0] != xs[0]:
        raise imp.error(
            f"X {x.type} and grid {grid.type}: a 4-D or 5-D X and a grid [N, out..., "
            "spatial rank] expected"
        )
    mode = _MODES.get(str(node.attrs.get("mode", "linear")))
    padding = str(node.attrs.get("padding_mode", "zeros"))
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise imp.error(f"mode '{node.attrs.get('mode')}' / padding_mode '{padding}'")
    align = bool(node.attrs.get("align_corners", 0))
    if dtype_of(grid) != "f32":
        grid = imp.emit(ai.CastOp, grid, "f32")
    sampler = _Sampler(imp, xs[0], gs[1:-1], padding)
    per_dim = []
    for d, size in enumerate(xs[2:]):
        comp = _slice_of(imp, grid, [dims - 1 - d], [dims - d], [len(gs) - 1], [1])
        coordinate = sampler.coordinate(_reshape_to(imp, comp, gs[:-1]), size, align, mode)
        per_dim.append([(sampler.fetch_index(p, size, align), w)
                        for p, w in sampler.taps(coordinate, mode)])  # fmt: skip
    table = imp.emit(ai.TransposeOp, x, perm=(0, *range(2, dims + 2), 1))
    table = _reshape_to(imp, table, (math.prod(xs[:1] + xs[2:]), xs[1]))
    total = None
    for combination in itertools.product(*per_dim):
        term = sampler.gather(table, xs, combination)
        total = term if total is None else imp.emit(ai.AddOp, total, term)
    assert total is not None
    y = imp.emit(ai.TransposeOp, total, perm=(0, dims + 1, *range(1, dims + 1)))
    return [y if dtype_of(y) == dtype_of(x) else imp.emit(ai.CastOp, y, dtype_of(x))]


class _Sampler:
    """The ai ops of one GridSample node: coordinates, taps, the fetch of a tap."""

    def __init__(self, imp: Importer, batch: int, out: tuple[int, ...], padding: str):
        self.imp, self.batch, self.out, self.padding = imp, batch, tuple(out), padding

    def scalar(self, value: float) -> SSAValue:
        return self.imp.constant(np.asarray(value), "f32")

    def op(self, op_type: type, *args: SSAValue | str, **attrs: float) -> SSAValue:
        """``op_type(*args, **attrs)`` at the node (a str argument: ai.cast's type)."""
        return self.imp.emit(op_type, *args, **attrs)

    def affine(self, v: SSAValue, scale: float, shift: float) -> SSAValue:
        return self.op(ai.AddOp, self.op(ai.MulOp, v, self.scalar(scale)), self.scalar(shift))

    def coordinate(self, g: SSAValue, size: int, align: bool, mode: str) -> SSAValue:
        """The denormalised coordinate, rounded (nearest), clipped or reflected outside
        the borders (border, reflection)."""
        if align:  # (g + 1) / 2 * (size - 1)
            v = self.affine(g, (size - 1) / 2.0, (size - 1) / 2.0)
        else:  # ((g + 1) * size - 1) / 2
            v = self.affine(g, size / 2.0, (size - 1) / 2.0)
        if mode == "nearest":
            v = self.op(ai.RoundOp, v)
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if self.padding == "border":
            outside = self.outside(v, low, high)
            return self.op(ai.WhereOp, outside, self.op(ai.ClipOp, v, min=0.0, max=size - 1.0), v)
        if self.padding == "reflection":
            return self.reflect(v, low, high)
        return v

    def outside(self, v: SSAValue, low: float, high: float) -> SSAValue:
        below = self.op(ai.LessOp, v, self.scalar(low))
        return self.op(ai.OrOp, below, self.op(ai.GreaterOp, v, self.scalar(high)))

    def reflect(self, v: SSAValue, low: float, high: float) -> SSAValue:
        """``v`` reflected by the near border until it lies within [low, high]."""
        span = high - low
        if span <= 0:
            return self.op(ai.ClipOp, v, min=low, max=high)
        below = self.op(ai.LessOp, v, self.scalar(low))
        above = self.op(ai.GreaterOp, v, self.scalar(high))
        distance = self.op(ai.WhereOp, below, self.affine(v, -1.0, low), self.affine(v, 1.0, -high))
        turns = self.op(ai.FloorOp, self.op(ai.MulOp, distance, self.scalar(1.0 / span)))
        rest = self.op(ai.SubOp, distance, self.op(ai.MulOp, turns, self.scalar(span)))
        half = self.op(ai.FloorOp, self.op(ai.MulOp, turns, self.scalar(0.5)))
        even = self.op(ai.EqualOp, self.op(ai.MulOp, half, self.scalar(2.0)), turns)
        from_low = self.affine(rest, 1.0, low)
        from_high = self.affine(rest, -1.0, high)
        low_side = self.op(ai.WhereOp, even, from_low, from_high)
        high_side = self.op(ai.WhereOp, even, from_high, from_low)
        inside = self.op(ai.WhereOp, above, high_side, v)
        return self.op(ai.WhereOp, below, low_side, inside)

    def taps(self, v: SSAValue, mode: str) -> list[tuple[SSAValue, SSAValue | None]]:
        """(integer-valued position, weight or None) per tap of one dim."""
        if mode == "nearest":  # truncated toward zero, as the reference's astype(int32)
            return [(self.op(ai.CastOp, self.op(ai.CastOp, v, "i64"), "f32"), None)]
        floor = self.op(ai.FloorOp, v)
        t = self.op(ai.SubOp, v, floor)
        if mode == "linear":
            return [(floor, self.affine(t, -1.0, 1.0)), (self.affine(floor, 1.0, 1.0), t)]
        near, far = self.cubic_near, self.cubic_far  # Keys' kernel: |s| <= 1, 1 < |s| < 2
        coefficients = [far(self.affine(t, 1.0, 1.0)), near(t), near(self.affine(t, -1.0, 1.0)),
                        far(self.affine(t, -1.0, 2.0))]  # fmt: skip
        return [(self.affine(floor, 1.0, k - 1.0), c) for k, c in enumerate(coefficients)]

    def cubic_near(self, s: SSAValue) -> SSAValue:
        """((a + 2) s - (a + 3)) s^2 + 1."""
        a = _CUBIC_A
        square = self.op(ai.MulOp, s, s)
        return self.affine(self.op(ai.MulOp, self.affine(s, a + 2.0, -(a + 3.0)), square), 1, 1)

    def cubic_far(self, s: SSAValue) -> SSAValue:
        """((a s - 5 a) s + 8 a) s - 4 a."""
        a = _CUBIC_A
        v = self.op(ai.MulOp, self.affine(s, a, -5.0 * a), s)
        return self.affine(self.op(ai.MulOp, self.affine(v, 1.0, 8.0 * a), s), 1.0, -4.0 * a)

    def fetch_index(self, p: SSAValue, size: int, align: bool) -> tuple[SSAValue, SSAValue | None]:
        """(the int64 index the tap at ``p`` reads, a bool that it is inside: zeros
        padding only)."""
        valid = None
        if self.padding == "reflection":
            low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
            p = self.op(ai.CastOp, self.op(ai.CastOp, self.reflect(p, low, high), "i64"), "f32")
        elif self.padding == "zeros":
            valid = self.op(ai.NotOp, self.outside(p, 0.0, size - 1.0))
        clamped = self.op(ai.ClipOp, p, min=0.0, max=size - 1.0)
        return self.op(ai.CastOp, clamped, "i64"), valid

    def gather(self, table: SSAValue, xs: tuple[int, ...], combination) -> SSAValue:
        """One tap combination's rows of ``table`` times its weight, zero where outside."""
        sizes = xs[2:]
        strides = [math.prod(sizes[d + 1 :]) for d in range(len(sizes))]
        flat = self.imp.constant(
            (np.arange(self.batch) * math.prod(sizes)).reshape((-1,) + (1,) * len(self.out)),
            "i64",
        )
        weight, valid = None, None
        for ((index, inside), w), stride in zip(combination, strides, strict=True):
            step = index if stride == 1 else self.op(
                ai.MulOp, index, self.imp.constant(np.asarray(stride), "i64")
            )  # fmt: skip
            flat = self.op(ai.AddOp, flat, step)
            if w is not None:
                weight = w if weight is None else self.op(ai.MulOp, weight, w)
            if inside is not None:
                valid = inside if valid is None else self.op(ai.AndOp, valid, inside)
        rows = self.op(ai.TakeOp, table, flat, axis=0)
        column = (self.batch, *self.out, 1)
        if dtype_of(rows) != "f32":
            rows = self.op(ai.CastOp, rows, "f32")
        if valid is not None:
            rows = self.op(ai.WhereOp, _reshape_to(self.imp, valid, column), rows, self.scalar(0.0))
        if weight is None:
            return rows
        return self.op(ai.MulOp, rows, _reshape_to(self.imp, weight, column))
