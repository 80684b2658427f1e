# fusec kernel for one ai.fused "pointwise" group of 6 op(s):
#   ai.mul -> ai.add -> ai.gelu -> ai.mul -> ai.cast -> ai.silu
#   inputs : tensor<2x16xbf16>, tensor<bf16>, tensor<16xbf16>, tensor<2x1xbf16>
#   outputs: tensor<2x16xbf16>, tensor<2x16xf32>
# target: cuda (Numba CUDA), template: pointwise
# layout: 8 elements per thread and loop step (accesses of up to 16 bytes), grid-stride loop over 4 vectors
# broadcasting by index arithmetic over the collapsed space (2, 16)

import math

from numpy import float32 as f32

from fusec.targets.cuda.abi import (
    cuda,
    ld_bf16,
    load_bf16x8,
    store_bf16x8,
    store_f32x4,
)


SIGNATURE = 'void(int16[::1], float32[::1], int16[::1], int16[::1], int16[::1], int16[::1])'
VEC = 8
SPAN = 8  # elements per thread and loop step
N = 32
NVEC = 4
THREADS = 256


@cuda.jit
def kernel(out0, out1, in0, in1, in2, in3):
    """Grid-stride loop over vectors of VEC elements of the output space."""
    v_in0 = cuda.local.array(SPAN, f32)
    v_in2 = cuda.local.array(SPAN, f32)
    v_out0 = cuda.local.array(SPAN, f32)
    v_out1 = cuda.local.array(SPAN, f32)
    s_in1 = ld_bf16(in1, 0)
    step = cuda.gridsize(1)
    vec = cuda.grid(1)
    while vec < NVEC:
        e = vec * VEC
        r = e
        i1 = r % 16
        r = r // 16
        i0 = r
        load_bf16x8(in0, e, v_in0, 0)
        b_in2 = i1
        load_bf16x8(in2, b_in2, v_in2, 0)
        s_in3 = ld_bf16(in3, i0)
        for j in range(SPAN):
            l0 = v_in0[j]
            t0 = (l0 * s_in1)
            l1 = v_in2[j]
            t1 = (t0 + l1)
            t2 = (f32(-0.0) if (t1 == f32(-math.inf)) else ((f32(0.5) * t1) * math.erfc(((-t1) * f32(0.7071067811865476)))))
            t3 = (t2 * s_in3)
            t4 = t3
            t5 = (f32(-0.0) if (t4 == f32(-math.inf)) else (t4 / (f32(1.0) + math.exp((-t4)))))
            v_out0[j] = t3
            v_out1[j] = t5
        store_bf16x8(out0, e, v_out0, 0)
        store_f32x4(out1, e, v_out1, 0)
        store_f32x4(out1, e + 4, v_out1, 4)
        vec += step


def config(sms):
    """(blocks, threads per block) on a GPU with ``sms`` multiprocessors."""
    work = max(NVEC, N - NVEC * VEC, 1)
    return max(1, min(-(-work // THREADS), sms * 16)), THREADS


def launch(in0, in1, in2, in3, out0, out1, stream=0, sms=132):
    """Launch kernel on ``stream`` (no synchronisation)."""
    blocks, threads = config(sms)
    kernel[blocks, threads, stream](out0, out1, in0, in1, in2, in3)


KERNELS = [(kernel, SIGNATURE)]
