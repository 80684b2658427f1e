"""The steps from the old cpu softmax/layernorm kernels to the current ones, timed in one run.

Hand-written copies of the generated 4096x1024 float32 kernels, one change at
a time (benchmarks/results/cpu-notes.md has the predictions and outcomes),
plus the alternatives that lost. The helpers (``exp_f32``, ``row_max``,
``row_sum``...) are fusec's own sources, except where a variant says otherwise.
Every variant is checked against a float64 reference on a NaN-poisoned output;
the timing interleaves all variants round by round.

    python benchmarks/cpu_row_reduce_variants.py [--rounds 7] [--reps 10] [NAME ...]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

from fusec.targets.cpu.threads import configure

configure()

import numba  # noqa: E402
import numpy as np  # noqa: E402
from floor import parallel_copy  # noqa: E402
from numpy import float32 as f32  # noqa: E402

from fusec.codegen.expr import helper_source  # noqa: E402
from fusec.targets.cpu.common import HELPER_DECORATOR  # noqa: E402
from fusec.targets.cpu.row_helpers import ROW_HELPERS  # noqa: E402

M, N = 4096, 1024
NJ = {"parallel": True, "fastmath": False, "error_model": "numpy"}
H = {"fastmath": False, "error_model": "numpy"}


def _fusec_helpers() -> None:
    """Bind fusec's helper functions (exp_f32, fma32, row_*) as globals of this module."""
    ns = {"math": math, "numba": numba, "np": np, "f32": f32}
    sources = [helper_source(["exp_f32"], HELPER_DECORATOR)]
    sources += [f"{HELPER_DECORATOR}\n{src}" for src in ROW_HELPERS.values()]
    for src in sources:
        exec(src.replace("cache=True", "cache=False"), ns)  # noqa: S102 - fusec's own source
    globals().update({k: v for k, v in ns.items() if k.startswith(("exp_", "fma", "row_"))})


_fusec_helpers()
exp_f32 = globals()["exp_f32"]
row_max, row_sum, row_sq_dev = (globals()[k] for k in ("row_max", "row_sum", "row_sq_dev"))


# ------------------------------------------------- the old helpers (commit 366ed22)
@numba.njit(**H)
def old_row_max(buf):
    n8 = buf.size - buf.size % 8
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = f32(-math.inf)
    for k in range(0, n8, 8):
        x0 = buf[k + 0]
        m0 = x0 if x0 > m0 or x0 != x0 else m0
        x1 = buf[k + 1]
        m1 = x1 if x1 > m1 or x1 != x1 else m1
        x2 = buf[k + 2]
        m2 = x2 if x2 > m2 or x2 != x2 else m2
        x3 = buf[k + 3]
        m3 = x3 if x3 > m3 or x3 != x3 else m3
        x4 = buf[k + 4]
        m4 = x4 if x4 > m4 or x4 != x4 else m4
        x5 = buf[k + 5]
        m5 = x5 if x5 > m5 or x5 != x5 else m5
        x6 = buf[k + 6]
        m6 = x6 if x6 > m6 or x6 != x6 else m6
        x7 = buf[k + 7]
        m7 = x7 if x7 > m7 or x7 != x7 else m7
    m = m0
    for c in (m1, m2, m3, m4, m5, m6, m7):
        m = c if c > m or c != c else m
    for k in range(n8, buf.size):
        x = buf[k]
        m = x if x > m or x != x else m
    return m


@numba.njit(**H)
def old_row_sum(buf):
    n8 = buf.size - buf.size % 8
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for k in range(0, n8, 8):
        s0 += buf[k + 0]
        s1 += buf[k + 1]
        s2 += buf[k + 2]
        s3 += buf[k + 3]
        s4 += buf[k + 4]
        s5 += buf[k + 5]
        s6 += buf[k + 6]
        s7 += buf[k + 7]
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    for k in range(n8, buf.size):
        s += buf[k]
    return s


@numba.njit(**H)
def old_row_sq_dev(buf, mean):
    n8 = buf.size - buf.size % 8
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for k in range(0, n8, 8):
        s0 += (buf[k + 0] - mean) * (buf[k + 0] - mean)
        s1 += (buf[k + 1] - mean) * (buf[k + 1] - mean)
        s2 += (buf[k + 2] - mean) * (buf[k + 2] - mean)
        s3 += (buf[k + 3] - mean) * (buf[k + 3] - mean)
        s4 += (buf[k + 4] - mean) * (buf[k + 4] - mean)
        s5 += (buf[k + 5] - mean) * (buf[k + 5] - mean)
        s6 += (buf[k + 6] - mean) * (buf[k + 6] - mean)
        s7 += (buf[k + 7] - mean) * (buf[k + 7] - mean)
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    for k in range(n8, buf.size):
        s += (buf[k] - mean) * (buf[k] - mean)
    return s


# --------------------------------------------------- alternatives that lost
@numba.njit(**H)
def lanes_row_sum(buf, acc):
    """A float64 sum without any fast-math flag: 64 lanes in a small array."""
    nw = buf.size - buf.size % 64
    s = 0.0
    if nw:
        for j in range(64):
            acc[j] = buf[j]
        for c in range(64, nw, 64):
            for j in range(64):
                acc[j] += buf[c + j]
        for j in range(64):
            s += acc[j]
    for k in range(nw, buf.size):
        s += buf[k]
    return s


@numba.njit(**H)
def lanes_row_sq_dev(buf, mean, acc):
    """lanes_row_sum for the squared deviations."""
    nw = buf.size - buf.size % 64
    s = 0.0
    if nw:
        for j in range(64):
            acc[j] = (buf[j] - mean) * (buf[j] - mean)
        for c in range(64, nw, 64):
            for j in range(64):
                acc[j] += (buf[c + j] - mean) * (buf[c + j] - mean)
        for j in range(64):
            s += acc[j]
    for k in range(nw, buf.size):
        s += (buf[k] - mean) * (buf[k] - mean)
    return s


@numba.njit(**H)
def exp_no_fma(x):
    """exp_f32 with separate multiply and add (what fastmath=False gives without fma32)."""
    xc = f32(89.0) if x > f32(89.0) else x
    xc = f32(-104.0) if xc < f32(-104.0) else xc
    t = xc * f32(1.4426950408889634) + f32(12582912.0)
    n = t - f32(12582912.0)
    r = xc - n * f32(0.693359375)
    r = r - n * f32(-2.12194440e-4)
    p = f32(1.9875691500e-4) * r + f32(1.3981999507e-3)
    p = p * r + f32(8.3334519073e-3)
    p = p * r + f32(4.1665795894e-2)
    p = p * r + f32(1.6666665459e-1)
    p = p * r + f32(5.0000001201e-1)
    p = p * (r * r) + r + f32(1.0)
    k = f32(t).view(np.int32) - np.int32(0x4B400000)
    k1 = k >> np.int32(1)
    s1 = np.int32((k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    s2 = np.int32((k - k1 + np.int32(127)) << np.int32(23)).view(np.float32)
    return p * s1 * s2


# ------------------------------------------------------------------ softmax
@numba.njit(**NJ)
def sm0_old(in0, out0):
    """The kernel fusec generated before (flat output index, libm exp, scalar helpers)."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            m = old_row_max(xrow)
            for k in range(1024):
                buf[k] = math.exp(xrow[k] - m)
            inv = f32(1.0 / old_row_sum(buf))
            for k in range(1024):
                out0[row * 1024 + k] = buf[k] * inv


@numba.njit(**NJ)
def sm1_row_view(in0, out0):
    """+ the output through a view of the row (no wraparound: no scatter)."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = old_row_max(xrow)
            for k in range(1024):
                buf[k] = math.exp(xrow[k] - m)
            inv = f32(1.0 / old_row_sum(buf))
            for k in range(1024):
                orow[k] = buf[k] * inv


@numba.njit(**NJ)
def sm2_exp_no_fma(in0, out0):
    """+ the polynomial exp (without fma)."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = old_row_max(xrow)
            for k in range(1024):
                buf[k] = exp_no_fma(xrow[k] - m)
            inv = f32(1.0 / old_row_sum(buf))
            for k in range(1024):
                orow[k] = buf[k] * inv


@numba.njit(**NJ)
def sm3_exp(in0, out0):
    """+ fma in the exp (exp_f32 as fusec has it)."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = old_row_max(xrow)
            for k in range(1024):
                buf[k] = exp_f32(xrow[k] - m)
            inv = f32(1.0 / old_row_sum(buf))
            for k in range(1024):
                orow[k] = buf[k] * inv


@numba.njit(**NJ)
def sm4_lanes_sum(in0, out0):
    """+ integer-image max, and a 64-lane array sum (no fast-math flag at all)."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        acc = np.empty(64, dtype=np.float64)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = row_max(xrow)
            for k in range(1024):
                buf[k] = exp_f32(xrow[k] - m)
            inv = f32(1.0 / lanes_row_sum(buf, acc))
            for k in range(1024):
                orow[k] = buf[k] * inv


@numba.njit(**NJ)
def sm5_current(in0, out0):
    """+ the reassoc float64 sum: what fusec generates now."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = row_max(xrow)
            for k in range(1024):
                buf[k] = exp_f32(xrow[k] - m)
            inv = f32(1.0 / row_sum(buf))
            for k in range(1024):
                orow[k] = buf[k] * inv


@numba.njit(**NJ)
def sm6_no_buffer(in0, out0):
    """sm5 writing exp into the output row, then scaling it in place (no buffer)."""
    for task in numba.prange(256):
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = row_max(xrow)
            for k in range(1024):
                orow[k] = exp_f32(xrow[k] - m)
            inv = f32(1.0 / row_sum(orow))
            for k in range(1024):
                orow[k] = orow[k] * inv


@numba.njit(**H)
def exp_and_next_max(buf, xrow, m, nrow):
    """buf = exp(xrow - m) while taking the max of the next row (memory under the exp)."""
    mi = np.int32(-2147483648)
    for k in range(buf.size):
        buf[k] = exp_f32(xrow[k] - m)
        i = f32(nrow[k]).view(np.int32)
        i = i ^ ((i >> np.int32(31)) & np.int32(0x7FFFFFFF))
        mi = i if i > mi else mi
    mi = mi ^ ((mi >> np.int32(31)) & np.int32(0x7FFFFFFF))
    return np.int32(mi).view(np.float32)


@numba.njit(**NJ)
def sm8_pipelined(in0, out0):
    """sm5, the next row's max taken in the exp loop of this row (software pipelining)."""
    for task in numba.prange(256):
        buf = np.empty(1024, dtype=np.float32)
        first = task * 16
        last = min(first + 16, 4096)
        m = row_max(in0[first * 1024 : first * 1024 + 1024])
        for row in range(first, last):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            nxt = min(row + 1, last - 1)
            m_next = exp_and_next_max(buf, xrow, m, in0[nxt * 1024 : nxt * 1024 + 1024])
            inv = f32(1.0 / row_sum(buf))
            for k in range(1024):
                orow[k] = buf[k] * inv
            m = m_next


@numba.njit(**NJ)
def sm7_online(in0, out0):
    """Online softmax: max and rescaled sum in one read (chunks of 64), exp again to write."""
    for task in numba.prange(256):
        chunk = np.empty(64, dtype=np.float32)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            m = f32(-math.inf)
            s = 0.0
            for c in range(0, 1024, 64):
                cm = row_max(xrow[c : c + 64])
                cm = cm if cm > m else m
                for j in range(64):
                    chunk[j] = exp_f32(xrow[c + j] - cm)
                s = s * exp_f32(m - cm) + row_sum(chunk) if m != -math.inf else row_sum(chunk)
                m = cm
            inv = f32(1.0 / s)
            for k in range(1024):
                orow[k] = exp_f32(xrow[k] - m) * inv


# ---------------------------------------------------------------- layernorm
@numba.njit(**NJ)
def ln0_old(in0, in1, in2, out0):
    """The kernel fusec generated before."""
    for task in numba.prange(256):
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            mean = old_row_sum(xrow) / 1024
            rstd = f32(1.0 / math.sqrt(old_row_sq_dev(xrow, mean) / 1024 + f32(1e-05)))
            mean32 = f32(mean)
            for k in range(1024):
                out0[row * 1024 + k] = (xrow[k] - mean32) * rstd * in1[k] + in2[k]


@numba.njit(**NJ)
def ln1_row_view(in0, in1, in2, out0):
    """+ the output through a view of the row."""
    for task in numba.prange(256):
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            mean = old_row_sum(xrow) / 1024
            rstd = f32(1.0 / math.sqrt(old_row_sq_dev(xrow, mean) / 1024 + f32(1e-05)))
            mean32 = f32(mean)
            for k in range(1024):
                orow[k] = (xrow[k] - mean32) * rstd * in1[k] + in2[k]


@numba.njit(**NJ)
def ln2_lanes_sums(in0, in1, in2, out0):
    """+ 64-lane array sums (no fast-math flag at all)."""
    for task in numba.prange(256):
        acc = np.empty(64, dtype=np.float64)
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            mean = lanes_row_sum(xrow, acc) / 1024
            rstd = f32(1.0 / math.sqrt(lanes_row_sq_dev(xrow, mean, acc) / 1024 + f32(1e-05)))
            mean32 = f32(mean)
            for k in range(1024):
                orow[k] = (xrow[k] - mean32) * rstd * in1[k] + in2[k]


@numba.njit(**NJ)
def ln3_current(in0, in1, in2, out0):
    """+ the reassoc float64 sums: what fusec generates now."""
    for task in numba.prange(256):
        for row in range(task * 16, min(task * 16 + 16, 4096)):
            xrow = in0[row * 1024 : row * 1024 + 1024]
            orow = out0[row * 1024 : row * 1024 + 1024]
            mean = row_sum(xrow) / 1024
            rstd = f32(1.0 / math.sqrt(row_sq_dev(xrow, mean) / 1024 + f32(1e-05)))
            mean32 = f32(mean)
            for k in range(1024):
                orow[k] = (xrow[k] - mean32) * rstd * in1[k] + in2[k]


# ---------------------------------------------------------------------- run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("names", nargs="*")
    opts = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(M * N).astype(np.float32)
    g, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    out = np.empty_like(x)
    x64 = x.reshape(M, N).astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    sm_ref = (e / e.sum(-1, keepdims=True)).ravel()
    c = x64 - x64.mean(-1, keepdims=True)
    ln_ref = (c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b).ravel()
    cases = {"copy (floor)": (lambda: parallel_copy(x, out), x.astype(np.float64))}
    for name, fn in globals().items():
        if not name.startswith(("sm", "ln")) or not callable(fn) or name[2] not in "0123456789":
            continue
        if opts.names and name not in opts.names:
            continue
        if name.startswith("sm"):
            cases[name] = ((lambda f=fn: f(x, out)), sm_ref)
        else:
            cases[name] = ((lambda f=fn: f(x, g, b, out)), ln_ref)
    for name, (fn, ref) in cases.items():
        out.fill(np.nan)
        fn()
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        if not err < 1e-6:
            raise SystemExit(f"{name}: rel err {err}")
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(opts.rounds):
        for name, (fn, _) in cases.items():
            for _ in range(opts.reps):
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1e3)
    print(f"{M}x{N} f32, {numba.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")
    print("| variant | median ms | min ms | what |")
    print("| --- | ---: | ---: | --- |")
    for name, ts in times.items():
        fn = globals().get(name)
        doc = (fn.py_func.__doc__ or "").strip() if fn is not None else "numba prange copy"
        print(f"| {name} | {statistics.median(ts):.2f} | {min(ts):.2f} | {doc} |")


if __name__ == "__main__":
    main()
