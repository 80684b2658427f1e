# fusec kernel for one ai.fused "pointwise" group of 5 op(s):
#   ai.tanh -> ai.maximum -> ai.exp -> ai.div -> ai.sub
#   inputs : tensor<37xf16>, tensor<37xf16>
#   outputs: tensor<37xf16>
# target: cuda (Numba CUDA), template: pointwise
# layout: 8 elements per thread and loop step (accesses of up to 16 bytes), grid-stride loop over 4 vectors, two vectors a grid stride apart per step

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_f16,
    load_f16x8,
    st_f16,
    store_f16x8,
)


SIGNATURE = 'void(int16[::1], int16[::1], int16[::1])'
VEC = 8
SPAN = 16  # elements per thread and loop step
N = 37
NVEC = 4
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
        e2 = e + step * VEC  # this step's second vector, if there is one
        more = vec + step < NVEC
        load_f16x8(in0, e, v_in0, 0)
        if more:
            load_f16x8(in0, e2, v_in0, 8)
        load_f16x8(in1, e, v_in1, 0)
        if more:
            load_f16x8(in1, e2, v_in1, 8)
        for j in range(SPAN):
            l0 = v_in0[j]
            t0 = math.tanh(l0)
            l1 = v_in1[j]
            t1 = (t0 if ((t0 >= l1) or (t0 != t0)) else l1)
            t2 = math.exp(l1)
            t3 = (t2 / l0)
            t4 = (t1 - t3)
            v_out0[j] = t4
        store_f16x8(out0, e, v_out0, 0)
        if more:
            store_f16x8(out0, e2, v_out0, 8)
        vec += 2 * step
    # the last N % VEC elements, one per thread (all operands full or size 1)
    k = NVEC * VEC + cuda.grid(1)
    if k < N:
        l2 = ld_f16(in0, k)
        t5 = math.tanh(l2)
        l3 = ld_f16(in1, k)
        t6 = (t5 if ((t5 >= l3) or (t5 != t5)) else l3)
        t7 = math.exp(l3)
        t8 = (t7 / l2)
        t9 = (t6 - t8)
        st_f16(out0, k, t9)


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    work = max(NVEC, N - NVEC * VEC, 1)
    return max(1, min(-(-work // THREADS), sms * 16)), THREADS


def launch(in0, in1, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0, in1)


KERNELS = [(kernel, SIGNATURE)]
