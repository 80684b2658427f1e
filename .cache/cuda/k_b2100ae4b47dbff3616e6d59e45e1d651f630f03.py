# fusec kernel for one ai.fused "pointwise" group of 14 op(s):
#   ai.abs -> ai.relu -> ai.sigmoid -> ai.tanh -> ai.exp -> ai.sqrt -> ai.neg -> ai.abs -> ai.silu -> ai.gelu -> ai.erf -> ai.isnan -> ai.clip -> ai.gelu
#   inputs : tensor<21xf32>
#   outputs: tensor<21xf32>
# target: cuda (Numba CUDA), template: pointwise
# layout: 4 elements per thread and loop step (accesses of up to 16 bytes), grid-stride loop over 5 vectors, two vectors a grid stride apart per step

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_f32,
    load_f32x4,
    st_f32,
    store_f32x4,
)


SIGNATURE = 'void(float32[::1], float32[::1])'
VEC = 4
SPAN = 8  # elements per thread and loop step
N = 21
NVEC = 5
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
            t0 = math.fabs(l0)
            t1 = (t0 if (not (t0 < f32(0.0))) else f32(0.0))
            t2 = (f32(1.0) / (f32(1.0) + math.exp((-t1))))
            t3 = math.tanh(t2)
            t4 = math.exp(t3)
            t5 = math.sqrt(t4)
            t6 = (-t5)
            t7 = math.fabs(t6)
            t8 = (f32(-0.0) if (t7 == f32(-math.inf)) else (t7 / (f32(1.0) + math.exp((-t7)))))
            t9 = (f32(-0.0) if (t8 == f32(-math.inf)) else ((f32(0.5) * t8) * math.erfc(((-t8) * f32(0.7071067811865476)))))
            t10 = math.erf(t9)
            t11 = (f32(1.0) if (t10 != t10) else f32(0.0))
            t12 = t11
            t13 = (f32(-0.0) if (t12 == f32(-math.inf)) else (t12 / (f32(1.0) + math.exp((-(f32(1.5957691216057308) * (t12 + (((f32(0.044715) * t12) * t12) * t12))))))))
            v_out0[j] = t13
        store_f32x4(out0, e, v_out0, 0)
        if more:
            store_f32x4(out0, e2, v_out0, 4)
        vec += 2 * step
    # the last N % VEC elements, one per thread (all operands full or size 1)
    k = NVEC * VEC + cuda.grid(1)
    if k < N:
        l1 = ld_f32(in0, k)
        t14 = math.fabs(l1)
        t15 = (t14 if (not (t14 < f32(0.0))) else f32(0.0))
        t16 = (f32(1.0) / (f32(1.0) + math.exp((-t15))))
        t17 = math.tanh(t16)
        t18 = math.exp(t17)
        t19 = math.sqrt(t18)
        t20 = (-t19)
        t21 = math.fabs(t20)
        t22 = (f32(-0.0) if (t21 == f32(-math.inf)) else (t21 / (f32(1.0) + math.exp((-t21)))))
        t23 = (f32(-0.0) if (t22 == f32(-math.inf)) else ((f32(0.5) * t22) * math.erfc(((-t22) * f32(0.7071067811865476)))))
        t24 = math.erf(t23)
        t25 = (f32(1.0) if (t24 != t24) else f32(0.0))
        t26 = t25
        t27 = (f32(-0.0) if (t26 == f32(-math.inf)) else (t26 / (f32(1.0) + math.exp((-(f32(1.5957691216057308) * (t26 + (((f32(0.044715) * t26) * t26) * t26))))))))
        st_f32(out0, k, t27)


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    work = max(NVEC, N - NVEC * VEC, 1)
    return max(1, min(-(-work // THREADS), sms * 16)), THREADS


def launch(in0, out0, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, in0)


KERNELS = [(kernel, SIGNATURE)]
