# fusec kernel for one ai.fused "pointwise" group of 2 op(s):
#   ai.bias_add -> ai.relu
#   inputs : tensor<2x3x2x4xf16>, tensor<3xf16>
#   outputs: tensor<2x3x2x4xf16>
# target: cuda (Numba CUDA), template: pointwise
# layout: 8 elements per thread and loop step (accesses of up to 16 bytes), grid-stride loop over 6 vectors
# broadcasting by index arithmetic over the collapsed space (2, 3, 8)

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_f16,
    load_f16x8,
    store_f16x8,
)


SIGNATURE = 'void(int16[::1], int16[::1], int16[::1])'
VEC = 8
SPAN = 8  # elements per thread and loop step
N = 48
NVEC = 6
THREADS = 256


@cuda.jit
def kernel(out0, in0, in1):
    """Grid-stride loop over vectors of VEC elements of the output space."""
    v_in0 = cuda.local.array(SPAN, f32)
    v_out0 = cuda.local.array(SPAN, f32)
    step = cuda.gridsize(1)
    vec = cuda.grid(1)
    while vec < NVEC:
        e = vec * VEC
        r = e
        i2 = r % 8
        r = r // 8
        i1 = r % 3
        r = r // 3
        i0 = r
        load_f16x8(in0, e, v_in0, 0)
        s_in1 = ld_f16(in1, i1)
        for j in range(SPAN):
            l0 = v_in0[j]
            t0 = (l0 + s_in1)
            t1 = (t0 if (not (t0 < f32(0.0))) else f32(0.0))
            v_out0[j] = t1
        store_f16x8(out0, e, v_out0, 0)
        vec += step


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    work = max(NVEC, N - NVEC * VEC, 1)
    return max(1, min(-(-work // THREADS), sms * 16)), THREADS


def launch(in0, in1, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0, in1)


KERNELS = [(kernel, SIGNATURE)]
