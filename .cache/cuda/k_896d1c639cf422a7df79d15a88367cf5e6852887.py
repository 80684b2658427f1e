# fusec kernel for one ai.fused "row_reduce" group of 3 op(s):
#   ai.mul -> ai.add -> ai.softmax
#   inputs : tensor<2x600xf32>, tensor<f32>, tensor<600xf32>
#   outputs: tensor<2x600xf32>
# target: cuda (Numba CUDA), template: row_reduce (softmax over the last axis)
# layout: one block of 128 threads per row; each thread keeps 2 vector(s) of 4 elements in registers; float32 statistics

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    block_max,
    block_sum,
    cuda,
    ld_f32,
    load_f32x4,
    store_f32x4,
)


SIGNATURE = 'void(float32[::1], float32[::1], float32[::1], float32[::1])'
ROWS = 2
L = 600
VEC = 4
PER_VECS = 2
CACHE = 8
INV_L = f32(0.0016666666666666668)
THREADS_PER_ROW = 128
ROWS_PER_BLOCK = 1
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
                b_in0 = r0 * 600 + col
                load_f32x4(in0, b_in0, v_in0, 0)
                s_in1 = ld_f32(in1, 0)
                b_in2 = col
                load_f32x4(in2, b_in2, v_in2, 0)
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
        mx = block_max(m, scratch)
        acc = f32(0.0)
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                for j in range(VEC):
                    ev = math.exp(xr[c * VEC + j] - mx)
                    xr[c * VEC + j] = ev
                    acc += ev
        inv = f32(1.0) / block_sum(acc, scratch)
        # 3. the reduction's result and the epilogue, written once
        for c in range(PER_VECS):
            col = (c * THREADS_PER_ROW + lane) * VEC
            if live and col < L:
                for j in range(VEC):
                    y0 = xr[c * VEC + j] * inv
                    o_out0[j] = y0
                b_out0 = r0 * 600 + col
                store_f32x4(out0, b_out0, o_out0, 0)
        rb += cuda.gridDim.x * ROWS_PER_BLOCK


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    return max(1, min(-(-ROWS // ROWS_PER_BLOCK), sms * 32)), THREADS


def launch(in0, in1, in2, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0, in1, in2)


KERNELS = [(kernel, SIGNATURE)]
