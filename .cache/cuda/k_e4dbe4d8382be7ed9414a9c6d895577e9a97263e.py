# fusec kernel for one ai.fused "row_reduce" group of 5 op(s):
#   ai.add -> ai.layernorm -> ai.gelu -> ai.mul -> ai.add
#   inputs : tensor<3x40xbf16>, tensor<3x40xbf16>, tensor<40xbf16>, tensor<40xbf16>, tensor<3x1xbf16>
#   outputs: tensor<3x40xbf16>, tensor<3x40xbf16>
# target: cuda (Numba CUDA), template: row_reduce (layernorm over the last axis)
# layout: one warp per row, 4 rows per block; each thread keeps 1 vector(s) of 8 elements in registers; float32 statistics

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_bf16,
    load_bf16x8,
    store_bf16x8,
    warp_sum,
)


SIGNATURE = 'void(int16[::1], int16[::1], int16[::1], int16[::1], int16[::1], int16[::1], int16[::1])'
ROWS = 3
L = 40
VEC = 8
PER_VECS = 1
CACHE = 8
INV_L = f32(0.025)
THREADS_PER_ROW = 32
ROWS_PER_BLOCK = 4
THREADS = 128
EPS = f32(9.999999747378752e-06)


@cuda.jit
def kernel(out0, out1, in0, in1, in2, in3, in4):
    """ROWS_PER_BLOCK rows per block, THREADS_PER_ROW threads per row."""
    xr = cuda.local.array(CACHE, f32)  # this thread's part of the row
    o_out0 = cuda.local.array(VEC, f32)
    o_out1 = cuda.local.array(VEC, f32)
    v_in0 = cuda.local.array(VEC, f32)
    v_in1 = cuda.local.array(VEC, f32)
    v_in2 = cuda.local.array(VEC, f32)
    v_in3 = cuda.local.array(VEC, f32)
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
                b_in0 = r0 * 40 + col
                load_bf16x8(in0, b_in0, v_in0, 0)
                b_in1 = r0 * 40 + col
                load_bf16x8(in1, b_in1, v_in1, 0)
                for j in range(VEC):
                    l0 = v_in0[j]
                    l1 = v_in1[j]
                    t0 = (l0 + l1)
                    xr[c * VEC + j] = t0
                    o_out0[j] = t0
                b_out0 = r0 * 40 + col
                store_bf16x8(out0, b_out0, o_out0, 0)
            else:
                for j in range(VEC):
                    xr[c * VEC + j] = f32(0.0)
        # 2. row statistics in float32
        acc = f32(0.0)
        for k in range(CACHE):
            acc += xr[k]
        mean = warp_sum(acc, scratch) * INV_L
        acc = f32(0.0)
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                for j in range(VEC):
                    d = xr[c * VEC + j] - mean
                    acc += d * d
        var = warp_sum(acc, scratch) * INV_L
        rstd = f32(1.0) / math.sqrt(var + EPS)
        # 3. the reduction's result and the epilogue, written once
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                s_in4 = ld_bf16(in4, r0)
                b_in2 = col
                load_bf16x8(in2, b_in2, v_in2, 0)
                b_in3 = col
                load_bf16x8(in3, b_in3, v_in3, 0)
                for j in range(VEC):
                    y0 = (xr[c * VEC + j] - mean) * rstd * v_in2[j] + v_in3[j]
                    t1 = (f32(-0.0) if (y0 == f32(-math.inf)) else (y0 / (f32(1.0) + math.exp((-(f32(1.5957691216057308) * (y0 + (((f32(0.044715) * y0) * y0) * y0))))))))
                    t2 = (t1 * s_in4)
                    l2 = xr[c * VEC + j]
                    t3 = (t2 + l2)
                    o_out1[j] = t3
                b_out1 = r0 * 40 + col
                store_bf16x8(out1, b_out1, o_out1, 0)
        rb += cuda.gridDim.x * ROWS_PER_BLOCK


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    return max(1, min(-(-ROWS // ROWS_PER_BLOCK), sms * 32)), THREADS


def launch(in0, in1, in2, in3, in4, out0, out1, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, out1, in0, in1, in2, in3, in4)


KERNELS = [(kernel, SIGNATURE)]
