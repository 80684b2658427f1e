# fusec kernel for one ai.fused "pointwise" group of 6 op(s):
#   ai.abs -> ai.pow -> ai.isnan -> ai.where -> ai.clip -> ai.minimum
#   inputs : tensor<3x10xf32>, tensor<10xf32>
#   outputs: tensor<3x10xf32>
# target: cuda (Numba CUDA), template: pointwise
# layout: 2 elements per thread and loop step (accesses of up to 8 bytes), grid-stride loop over 15 vectors
# broadcasting by index arithmetic over the collapsed space (3, 10)

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    load_f32x2,
    store_f32x2,
)


SIGNATURE = 'void(float32[::1], float32[::1], float32[::1])'
VEC = 2
SPAN = 2  # elements per thread and loop step
N = 30
NVEC = 15
THREADS = 256


@cuda.jit
def kernel(out0, in0, in1):
    """Grid-stride loop over vectors of VEC elements of the output space."""
    v_in0 = cuda.local.array(SPAN, f32)
    v_in1 = cuda.local.array(SPAN, f32)
    v_out0 = cuda.local.array(SPAN, f32)
    step = cuda.gridsize(1)
    vec = cuda.grid(1)
    while vec < NVEC:
        e = vec * VEC
        r = e
        i1 = r % 10
        r = r // 10
        i0 = r
        load_f32x2(in0, e, v_in0, 0)
        b_in1 = i1
        load_f32x2(in1, b_in1, v_in1, 0)
        for j in range(SPAN):
            l0 = v_in0[j]
            t0 = math.fabs(l0)
            l1 = v_in1[j]
            t1 = math.pow(t0, l1)
            t2 = (f32(1.0) if (l0 != l0) else f32(0.0))
            t3 = (l1 if (t2 != f32(0.0)) else t1)
            t4 = (f32(-1.5) if (t3 < f32(-1.5)) else (f32(2.0) if (t3 > f32(2.0)) else t3))
            t5 = (t4 if ((t4 <= l1) or (t4 != t4)) else l1)
            v_out0[j] = t5
        store_f32x2(out0, e, v_out0, 0)
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
