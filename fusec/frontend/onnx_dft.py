"""ONNX ``DFT`` (opsets 17 and 20) as one ``ai.matmul`` with a constant matrix.

A discrete Fourier transform along one axis is linear in the real and imaginary parts
of its input, so the whole transform (forward or inverse, two-sided or one-sided, the
signal truncated or zero-padded to ``dft_length``) is a real matrix from the ``n * c_in``
input components of one signal to the ``m * c_out`` output components (``c`` = 2 for
complex values as [real, imaginary], 1 for real ones), built at import in float64 from
the definition:

* forward: ``X[k] = sum_j x[j] exp(-2 pi i j k / L)``, the first ``L // 2 + 1`` bins with
  ``onesided``;
* inverse: ``x[j] = 1/L sum_k X[k] exp(2 pi i j k / L)``; with ``onesided`` the input is
  the first ``L // 2 + 1`` bins of a Hermitian spectrum and the output real (numpy's
  ``irfft``: the imaginary parts of the first bin, and of the middle one for an even
  ``L``, do not count).

The signal axis is moved next to the components by a transpose and the rows of every
other position multiplied at once (float32 for 16-bit data). ``dft_length`` and ``axis``
must be constants. The two-sided inverse is computed by ``_matrix`` (and tested) but
refused at import for now: the node suite's expected outputs for it carry complex64
rounding noise above the suite's absolute tolerance where the exact result is 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from fusec.dialect import ops as ai
from fusec.frontend.onnx_core import _constant_ints, _reshape_to, converter
from fusec.ir.tensors import dtype_of, shape_of

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from fusec.frontend.onnx_core import Importer, Node


@converter("DFT", attrs=("axis", "inverse", "onesided"))
def _dft(imp: Importer, node: Node) -> list[SSAValue]:
    x = imp.input(node, 0)
    shape = shape_of(x)
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise imp.error(f"the input must end in 1 (real) or 2 (complex) components, got {x.type}")
    axis = _axis(imp, node, rank)
    inverse, onesided = bool(node.attrs.get("inverse", 0)), bool(node.attrs.get("onesided", 0))
    if inverse and onesided and shape[-1] != 2:
        raise imp.error("a one-sided inverse DFT takes complex input")
    if inverse and not onesided:
        raise imp.error(
            "the two-sided inverse DFT is not enabled: ONNX's node tests expect float32 FFT "
            "noise (2e-7) where the exact values, and fusec's, are 0 (see "
            "benchmarks/results/conformance-all.md)",
            "attribute",
        )
    length = _constant_ints(imp, node, 1, "input 'dft_length'")
    if length is None:
        length = [2 * (shape[axis] - 1) if inverse and onesided else shape[axis]]
    if len(length) != 1 or length[0] < 1:
        raise imp.error(f"dft_length must be one positive integer, got {length}")
    matrix = _matrix(shape[axis], shape[-1], length[0], inverse, onesided)
    return [_apply(imp, x, axis, matrix, 1 if inverse and onesided else 2)]


def _axis(imp: Importer, node: Node, rank: int) -> int:
    """The signal axis: an attribute before opset 20, a constant input after."""
    if imp.opset >= 20:
        given = _constant_ints(imp, node, 2, "input 'axis'")
        axis = given[0] if given else -2
    else:
        axis = int(node.attrs.get("axis", 1))
    if not -rank <= axis < rank or axis % rank == rank - 1:
        raise imp.error(f"axis {axis} is not a signal axis of a rank-{rank} input")
    return axis % rank


def _matrix(n: int, c_in: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The real (m * c_out) x (n * c_in) matrix of the transform."""
    if inverse and onesided:
        return _irfft_matrix(n, length)
    m = length // 2 + 1 if onesided and not inverse else length
    j = np.arange(min(n, length))
    k = np.arange(m)
    angle = 2 * math.pi * np.outer(k, j) / length  # [m, used input samples]
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    cos, sin = np.cos(angle) * scale, sign * np.sin(angle) * scale
    # (a + ib)(cos + i sin) = (a cos - b sin) + i(a sin + b cos)
    blocks = {("re", 0): cos, ("re", 1): -sin, ("im", 0): sin, ("im", 1): cos}
    out = np.zeros((m, 2, n, c_in))
    for (part, component), block in blocks.items():
        if component < c_in:
            out[:, 0 if part == "re" else 1, : len(j), component] = block
    return out.reshape(m * 2, n * c_in)


def _irfft_matrix(n: int, length: int) -> np.ndarray:
    """numpy's irfft of ``length`` points from the first ``length // 2 + 1`` of ``n``
    bins ([real, imaginary] each) as a ``length x 2n`` matrix."""
    bins = min(n, length // 2 + 1)
    j = np.arange(length)
    out = np.zeros((length, n, 2))
    for k in range(bins):
        angle = 2 * math.pi * k * j / length
        edge = k == 0 or (length % 2 == 0 and k == length // 2)
        weight = (1.0 if edge else 2.0) / length
        out[:, k, 0] = weight * np.cos(angle)
        out[:, k, 1] = 0.0 if edge else -weight * np.sin(angle)
    return out.reshape(length, n * 2)


def _apply(imp: Importer, x: SSAValue, axis: int, matrix: np.ndarray, c_out: int) -> SSAValue:
    """``matrix`` applied to every signal along ``axis`` (with the last dim's components)."""
    dtype = dtype_of(x)
    wide = x if dtype == "f32" else imp.emit(ai.CastOp, x, "f32")
    shape = shape_of(x)
    n, c_in = shape[axis], shape[-1]
    before, between = math.prod(shape[:axis]), math.prod(shape[axis + 1 : -1])
    grid = _reshape_to(imp, wide, (before, n, between, c_in))
    rows = imp.emit(ai.TransposeOp, grid, perm=(0, 2, 1, 3)) if between > 1 else grid
    flat = _reshape_to(imp, rows, (before, between, n * c_in))
    product = imp.emit(ai.MatmulOp, flat, imp.constant(matrix.T, "f32"))
    m = matrix.shape[0] // c_out
    spread = _reshape_to(imp, product, (before, between, m, c_out))
    back = imp.emit(ai.TransposeOp, spread, perm=(0, 2, 1, 3)) if between > 1 else spread
    y = _reshape_to(imp, back, (*shape[:axis], m, *shape[axis + 1 : -1], c_out))
    return y if dtype == "f32" else imp.emit(ai.CastOp, y, dtype)
