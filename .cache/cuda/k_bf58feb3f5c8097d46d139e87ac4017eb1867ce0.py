# fusec kernel for one ai.fused "row_reduce" group of 3 op(s):
#   ai.softmax -> ai.exp -> ai.mul
#   inputs : tensor<4x6xbf16>
#   outputs: tensor<4x6xbf16>
# target: cuda (Numba CUDA), template: row_reduce (softmax over a non-last axis)
# layout: one thread per (outer, inner) column, grid-stride; coalesced along the inner dim; float32 max and sum

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_bf16,
    st_bf16,
)


SIGNATURE = 'void(int16[::1], int16[::1])'
OUTER = 1
A = 4
INNER = 6
THREADS = 256


@cuda.jit
def kernel(out0, in0):
    """One thread per (outer, inner) column; three passes along the axis."""
    t = cuda.grid(1)
    while t < OUTER * INNER:
        o = t // INNER
        i = t % INNER
        mx = f32(-math.inf)
        for a in range(A):
            rr = (o * A + a) * INNER + i
            i1 = rr % 6
            rr = rr // 6
            i0 = rr
            xv = ld_bf16(in0, i0 * 6 + i1)
            mx = xv if xv > mx else mx
        acc = f32(0.0)
        for a in range(A):
            rr = (o * A + a) * INNER + i
            i1 = rr % 6
            rr = rr // 6
            i0 = rr
            acc += math.exp(ld_bf16(in0, i0 * 6 + i1) - mx)
        inv = f32(1.0) / acc
        for a in range(A):
            rr = (o * A + a) * INNER + i
            i1 = rr % 6
            rr = rr // 6
            i0 = rr
            y = math.exp(ld_bf16(in0, i0 * 6 + i1) - mx) * inv
            l0 = ld_bf16(in0, i0 * 6 + i1)
            t0 = math.exp(l0)
            t1 = (y * t0)
            e = (o * A + a) * INNER + i
            st_bf16(out0, e, t1)
        t += cuda.gridsize(1)


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    return max(1, min(-(-(OUTER * INNER) // THREADS), sms * 16)), THREADS


def launch(in0, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0)


KERNELS = [(kernel, SIGNATURE)]
