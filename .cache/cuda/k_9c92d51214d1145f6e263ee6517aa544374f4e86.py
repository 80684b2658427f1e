# fusec kernel for one ai.fused "pointwise" group of 4 op(s):
#   ai.add -> ai.cast -> ai.cast -> ai.add
#   inputs : tensor<3x40xf32>
#   outputs: tensor<3x40xf32>
# target: cuda (Numba CUDA), template: pointwise
# layout: 4 elements per thread and loop step (accesses of up to 16 bytes), grid-stride loop over 30 vectors, two vectors a grid stride apart per step

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    load_f32x4,
    round_f16,
    store_f32x4,
)


SIGNATURE = 'void(float32[::1], float32[::1])'
VEC = 4
SPAN = 8  # elements per thread and loop step
N = 120
NVEC = 30
THREADS = 256


@cuda.jit
def kernel(out0, in0):
    """Grid-stride loop over vectors of VEC elements of the output space."""
    v_in0 = cuda.local.array(SPAN, f32)
    v_out0 = cuda.local.array(SPAN, f32)
    step = cuda.gridsize(1)
    vec = cuda.grid(1)
    while vec < NVEC:
        e = vec * VEC
        e2 = e + step * VEC  # this step's second vector, if there is one
        more = vec + step < NVEC
        load_f32x4(in0, e, v_in0, 0)
        if more:
            load_f32x4(in0, e2, v_in0, 4)
        for j in range(SPAN):
            l0 = v_in0[j]
            t0 = (l0 + l0)
            t1 = round_f16(t0)
            t2 = t1
            t3 = (t2 + l0)
            v_out0[j] = t3
        store_f32x4(out0, e, v_out0, 0)
        if more:
            store_f32x4(out0, e2, v_out0, 4)
        vec += 2 * step


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    work = max(NVEC, N - NVEC * VEC, 1)
    return max(1, min(-(-work // THREADS), sms * 16)), THREADS


def launch(in0, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0)


KERNELS = [(kernel, SIGNATURE)]
