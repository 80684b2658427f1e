# fusec kernel for one ai.fused "row_reduce" group of 3 op(s):
#   ai.mul -> ai.add -> ai.softmax
#   inputs : tensor<3x48xf16>, tensor<f16>, tensor<48xf16>
#   outputs: tensor<3x48xf16>
# target: cuda (Numba CUDA), template: row_reduce (softmax over the last axis)
# layout: one warp per row, 4 rows per block; each thread keeps 1 vector(s) of 8 elements in registers; float32 statistics

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_f16,
    load_f16x8,
    store_f16x8,
    warp_max,
    warp_sum,
)


SIGNATURE = 'void(int16[::1], int16[::1], int16[::1], int16[::1])'
ROWS = 3
L = 48
VEC = 8
PER_VECS = 1
CACHE = 8
INV_L = f32(0.020833333333333332)
THREADS_PER_ROW = 32
ROWS_PER_BLOCK = 4
THREADS = 128


@cuda.jit
def kernel(out0, in0, in1, in2):
    """ROWS_PER_BLOCK rows per block, THREADS_PER_ROW threads per row."""
    xr = cuda.local.array(CACHE, f32)  # this thread's part of the row
    o_out0 = cuda.local.array(VEC, f32)
    v_in0 = cuda.local.array(VEC, f32)
    v_in2 = cuda.local.array(VEC, f32)
    scratch = cuda.shared.array(THREADS, f32)
    lane = cuda.threadIdx.x % THREADS_PER_ROW
    rb = cuda.blockIdx.x * ROWS_PER_BLOCK
    while rb < ROWS:  # uniform across the block: every thread reaches each barrier
        row = rb + cuda.threadIdx.x // THREADS_PER_ROW
        live = row < ROWS
        rr = row
        r0 = rr
        # 1. prologue: the reduction's input, kept in registers
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                b_in0 = r0 * 48 + col
                load_f16x8(in0, b_in0, v_in0, 0)
                s_in1 = ld_f16(in1, 0)
                b_in2 = col
                load_f16x8(in2, b_in2, v_in2, 0)
                for j in range(VEC):
                    l0 = v_in0[j]
                    t0 = (l0 * s_in1)
                    l1 = v_in2[j]
                    t1 = (t0 + l1)
                    xr[c * VEC + j] = t1
            else:
                for j in range(VEC):
                    xr[c * VEC + j] = f32(-math.inf)
        # 2. row statistics in float32
        m = f32(-math.inf)
        for k in range(CACHE):
            m = xr[k] if xr[k] > m else m
        mx = warp_max(m, scratch)
        acc = f32(0.0)
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                for j in range(VEC):
                    ev = math.exp(xr[c * VEC + j] - mx)
                    xr[c * VEC + j] = ev
                    acc += ev
        inv = f32(1.0) / warp_sum(acc, scratch)
        # 3. the reduction's result and the epilogue, written once
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                for j in range(VEC):
                    y0 = xr[c * VEC + j] * inv
                    o_out0[j] = y0
                b_out0 = r0 * 48 + col
                store_f16x8(out0, b_out0, o_out0, 0)
        rb += cuda.gridDim.x * ROWS_PER_BLOCK


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    return max(1, min(-(-ROWS // ROWS_PER_BLOCK), sms * 32)), THREADS


def launch(in0, in1, in2, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0, in1, in2)


KERNELS = [(kernel, SIGNATURE)]
