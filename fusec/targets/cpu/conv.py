"""cpu template for "conv" groups: im2col (njit) + BLAS, then the fused epilogue.

The core lowers ``ai.conv2d`` (NCHW input, KCRS weight, any strides, padding,
dilations and groups) to one batched ``np.matmul``:
``weight (G, K/G, C/G*R*S) @ cols (N, G, C/G*R*S, OH*OW) -> (N, G, K/G, OH*OW)``,
which is already the NCHW output layout. ``cols`` is written by a parallel
njit im2col stage (zeros where the window hangs over the padding); a 1x1,
stride-1, unpadded convolution uses the input itself. The epilogue (bias,
residual, activations, casts) is one pointwise stage, via ``cpu_matmul``'s
prologue/core/epilogue split.
"""

from __future__ import annotations

from xdsl.ir import Operation

from fusec.codegen import KernelSource
from fusec.codegen.expr import shape_of
from fusec.dialect import ops as ai
from fusec.dialect.shapes import conv2d_padding
from fusec.targets.cpu.common import PARALLEL_MIN_ELEMENTS, Buffers, Stage
from fusec.targets.cpu.matmul import generate_core_group


def generate(fused_op, name: str) -> KernelSource:
    return generate_core_group(fused_op, name, "conv", ai.Conv2DOp, conv_core)


def conv_core(
    op: Operation, out: str, buffers: Buffers, name: str
) -> tuple[list[Stage], list[str]]:
    """The im2col stage (unless 1x1) and the batched matmul into ``out``."""
    assert isinstance(op, ai.Conv2DOp)
    x, w = (buffers.reads[v] for v in op.operands)
    n, c, h, wd = shape_of(op.operands[0])
    k, cg, r, s = shape_of(op.operands[1])
    _, _, oh, ow = shape_of(op.results[0])
    sh, sw = op.attr("strides")
    dh, dw = op.attr("dilations")
    pt, pl, pb, pr = conv2d_padding(op.attr("padding"))
    groups = op.attr("groups")
    kg, crs, p = k // groups, cg * r * s, oh * ow
    weight = f"{w}.reshape(({groups}, {kg}, {crs}))"
    result = f"{out}.reshape(({n}, {groups}, {kg}, {p}))"
    pointwise = r == s == sh == sw == 1 and not any((pt, pl, pb, pr))
    if pointwise:  # 1x1 stride 1: the input already is the column matrix
        return [], [f"np.matmul({weight}, {x}.reshape(({n}, {groups}, {crs}, {p})), out={result})"]
    cols = f"{name}_cols"
    stage = Stage(
        f"{name}_im2col",
        ["x", "cols"],
        _im2col_body(n, c, h, wd, r, s, oh, ow, sh, sw, dh, dw, pt, pl),
        comment=f"im2col: cols[n, c*{r * s} + r*{s} + s, oh*{ow} + ow] = padded input window",
        args=[x, cols],
        parallel=n * c * r * s * p >= PARALLEL_MIN_ELEMENTS,
    )
    return [stage], [
        f"{cols} = np.empty({n * c * r * s * p}, dtype=np.float32)",
        stage.call(),
        f"np.matmul({weight}, {cols}.reshape(({n}, {groups}, {crs}, {p})), out={result})",
    ]


def _im2col_body(n, c, h, wd, r, s, oh, ow, sh, sw, dh, dw, pt, pl) -> list[str]:
    return [
        f"for task in numba.prange({n * c}):",
        f"    base_in = task * {h * wd}",
        f"    for r in range({r}):",
        f"        for s in range({s}):",
        f"            base = ((task * {r} + r) * {s} + s) * {oh * ow}",
        f"            for oh in range({oh}):",
        f"                ih = oh * {sh} + r * {dh} - {pt}",
        f"                inside = ih >= 0 and ih < {h}",
        f"                for ow in range({ow}):",
        f"                    iw = ow * {sw} + s * {dw} - {pl}",
        f"                    if inside and iw >= 0 and iw < {wd}:",
        f"                        cols[base + oh * {ow} + ow] = x[base_in + ih * {wd} + iw]",
        "                    else:",
        f"                        cols[base + oh * {ow} + ow] = f32(0.0)",
    ]
