"""``reduce_rows``: the reduction of short rows a cpu "reduce" kernel calls (compiled once).

The "reduce" template (``fusec.targets.cpu.reduce``) calls it instead of numpy where
rows are short, as numpy's per-row cost dominates them; it lives apart from the
template so that generating a kernel does not start Numba.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from fusec.runtime.numba_cache import sealed_njit
from fusec.targets.cpu import intrinsics

#: float32 elements a step of ``_sum_f64``: 4 accumulators of 8 doubles.
_SUM_STEP = 32


@intrinsic
def _sum_f64(typingctx, x, off, n):
    """The float64 sum of ``x[off : off + n - n % 32]`` (a float32 array): the elements
    widened to double and added into 4 vectors of 8 partial sums (element ``i`` into lane
    ``i % 32``), the lanes then added pairwise. Explicit vectors, as ``microkernel``'s:
    LLVM vectorises no strict floating-point reduction, and a scalar float64 chain ran
    at one add per 4 cycles (a 96 x 4096 global pool: 143-212 us, numpy's float32
    pairwise ``np.mean`` 74). Only the order of the float64 additions differs from a
    sequential sum; NaN and Inf come out alike."""
    intrinsics.check_f32_arrays("_sum_f64", {"x": x})
    sig = types.float64(x, off, n)
    f64, i64 = ir.DoubleType(), ir.IntType(64)
    vin, vacc = ir.VectorType(ir.FloatType(), 8), ir.VectorType(f64, 8)

    def codegen(context, builder, signature, args):
        arg = intrinsics.Arguments(context, builder, signature, args)
        data, start, count = arg.data(0), arg.integer(1), arg.integer(2)
        steps = builder.sdiv(count, ir.Constant(i64, _SUM_STEP))
        zero = ir.Constant(vacc, [0.0] * 8)
        entry, loop, done = intrinsics.open_loop(
            builder, "sum", builder.icmp_signed(">", steps, ir.Constant(i64, 0))
        )
        k = builder.phi(i64)
        acc = [builder.phi(vacc) for _ in range(4)]
        base = builder.add(start, builder.mul(k, ir.Constant(i64, _SUM_STEP)))
        new = []
        for v in range(4):
            at = builder.gep(data, [builder.add(base, ir.Constant(i64, 8 * v))])
            chunk = builder.load(builder.bitcast(at, vin.as_pointer()), align=4)
            new.append(builder.fadd(acc[v], builder.fpext(chunk, vacc)))
        step = builder.add(k, ir.Constant(i64, 1))
        body_end = builder.block
        k.add_incoming(ir.Constant(i64, 0), entry)
        k.add_incoming(step, body_end)
        intrinsics.carry(acc, [zero] * 4, new, entry, body_end)
        intrinsics.close_loop(builder, builder.icmp_signed("<", step, steps), loop, done)
        final = intrinsics.exit_values(builder, vacc, [zero] * 4, new, entry, body_end)
        pair = [builder.fadd(final[0], final[1]), builder.fadd(final[2], final[3])]
        vec = builder.fadd(pair[0], pair[1])
        lanes = [builder.extract_element(vec, ir.Constant(ir.IntType(32), j)) for j in range(8)]
        while len(lanes) > 1:
            lanes = [builder.fadd(lanes[j], lanes[j + 1]) for j in range(0, len(lanes), 2)]
        return lanes[0]

    return sig, codegen


@sealed_njit
def _long_sum(x, off, n):
    """The float64 sum of ``x[off : off + n]``: ``_sum_f64``, then the last ``n % 32``
    elements in order."""
    total = _sum_f64(x, off, n)
    for j in range(off + n - n % _SUM_STEP, off + n):
        total += np.float64(x[j])
    return total


@sealed_njit
def reduce_rows(x, out, rows, inner, kind):
    """``out[i]`` = the sum (kind 0), mean (1) or max (2) of ``x[i * inner:][:inner]``:
    sums in float64 (rows of 32 or more: ``_long_sum``) rounded once;
    a max is NaN when the row holds one, and of equal values (-0.0 and 0.0) the later,
    as numpy's."""
    for i in range(rows):  # sequential: the helper is not a parallel kernel
        row = x[i * inner : (i + 1) * inner]
        if kind == 2:
            m = row[0]
            for j in range(1, inner):
                v = row[j]
                m = v if (v >= m or v != v) and m == m else m  # ties: the later, as numpy
            out[i] = m
        else:
            if inner >= _SUM_STEP:
                total = _long_sum(x, i * inner, inner)
            else:
                total = 0.0
                for j in range(inner):
                    total += np.float64(row[j])
            out[i] = np.float32(total / inner if kind == 1 else total)
