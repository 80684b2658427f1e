"""How to split the MLP block's two GEMMs over the cores: an A/B of hand-written kernels.

The MLP row of ``cpu_vs_ort.py`` (x 1024x512 @ w1 512x2048 + b1, relu, @ w2
2048x512 + b2 + x) with the fused epilogues, run by schemes that differ only in
how the GEMMs are split (issue 13):

* ``rows<mb>``: blocks of ``mb`` rows from an atomic counter, one single-threaded
  sgemm per block, the epilogue per block while it is in cache (fusec's kernel;
  OpenBLAS packs all of B again in every block);
* ``cols``: the result split by columns, one tile of all rows x N/tasks per task
  (each task packs only its part of B, once), the epilogue per tile;
* ``threaded``: one sgemm of the whole matrix on OpenBLAS's own threads, then a
  parallel epilogue pass (OpenBLAS shares the packed B between its threads).

Every scheme's output is checked against numpy (fresh random inputs, output
poisoned with NaN first). Timing: interleaved rounds, in a new random order each
round (onnxruntime's spinning pool slows whatever runs next, even after a pause);
wall and process-CPU medians and minima.

    python benchmarks/cpu_mlp_split_ab.py [--threads 1] [--rounds 15] [--pin]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from fusec.targets.cpu.threads import configure

configure()

import numba  # noqa: E402
import numpy as np  # noqa: E402

from fusec.targets.cpu.blas_calls import (  # noqa: E402
    next_block,
    sgemm_ilp64,
    threads_local,
)

M, D, H = 1024, 512, 2048


@numba.njit(parallel=True, cache=False)
def rows_kernel(a, b, bias, resid, relu, c, m, k, n, mb, tasks, counter):
    """C = epilogue(A @ B) by blocks of mb rows (fusec's scheme)."""
    nblk = (m + mb - 1) // mb
    for _task in numba.prange(tasks):
        blk = next_block(counter)
        while blk < nblk:
            r0 = blk * mb
            r1 = min(r0 + mb, m)
            prev = threads_local(1)
            sgemm_ilp64(0, 0, r1 - r0, n, k, a, r0 * k, k, b, 0, n, c, r0 * n, n)
            threads_local(prev)
            for i in range(r0, r1):
                row = c[i * n : (i + 1) * n]
                if relu:
                    for j in range(n):
                        row[j] = max(row[j] + bias[j], np.float32(0))
                else:
                    rr = resid[i * n : (i + 1) * n]
                    for j in range(n):
                        row[j] = row[j] + bias[j] + rr[j]
            blk = next_block(counter)


@numba.njit(parallel=True, cache=False)
def cols_kernel(a, b, bias, resid, relu, c, m, k, n, ncols, tasks, counter):
    """C = epilogue(A @ B) by tiles of all rows x ncols columns, the epilogue over the
    tile after its sgemm (one sgemm per tile: its part of B packed once)."""
    ntile = (n + ncols - 1) // ncols
    for _task in numba.prange(tasks):
        blk = next_block(counter)
        while blk < ntile:
            c0 = blk * ncols
            c1 = min(c0 + ncols, n)
            prev = threads_local(1)
            sgemm_ilp64(0, 0, m, c1 - c0, k, a, 0, k, b, c0, n, c, c0, n)
            threads_local(prev)
            for i in range(m):
                row = c[i * n + c0 : i * n + c1]
                bb = bias[c0:c1]
                if relu:
                    for j in range(c1 - c0):
                        row[j] = max(row[j] + bb[j], np.float32(0))
                else:
                    rr = resid[i * n + c0 : i * n + c1]
                    for j in range(c1 - c0):
                        row[j] = row[j] + bb[j] + rr[j]
            blk = next_block(counter)


@numba.njit(cache=False)
def sgemm_threaded(a, b, c, m, k, n, threads):
    prev = threads_local(threads)
    sgemm_ilp64(0, 0, m, n, k, a, 0, k, b, 0, n, c, 0, n)
    threads_local(prev)


@numba.njit(parallel=True, cache=False)
def epilogue_pass(c, bias, resid, relu, m, n):
    for i in numba.prange(m):
        row = c[i * n : (i + 1) * n]
        if relu:
            for j in range(n):
                row[j] = max(row[j] + bias[j], np.float32(0))
        else:
            rr = resid[i * n : (i + 1) * n]
            for j in range(n):
                row[j] = row[j] + bias[j] + rr[j]


def mlp(scheme: str, x, w1, b1, w2, b2, h, y, tasks: int) -> None:
    def counter():
        return np.zeros(1, np.int64)

    run = LAUNCH[0]
    if scheme.startswith("rows"):
        mb = int(scheme[4:])
        run(rows_kernel, [x, w1, b1, x, True, h, M, D, H, mb, tasks, counter()])
        run(rows_kernel, [h, w2, b2, x, False, y, M, H, D, mb, tasks, counter()])
    elif scheme.startswith("cols"):
        run(cols_kernel, [x, w1, b1, x, True, h, M, D, H, H // tasks, tasks, counter()])
        run(cols_kernel, [h, w2, b2, x, False, y, M, H, D, D // tasks, tasks, counter()])
    elif scheme == "threaded":  # OpenBLAS's own threads: not placed by fusec
        sgemm_threaded(x, w1, h, M, D, H, tasks)
        run(epilogue_pass, [h, b1, x, True, M, H])
        sgemm_threaded(h, w2, y, M, H, D, tasks)
        run(epilogue_pass, [y, b2, x, False, M, D])
    elif scheme == "ort":
        y[:] = ORT[0].run(None, {"x": x.reshape(M, D)})[0].reshape(-1)
    else:
        raise ValueError(scheme)


#: The onnxruntime session of the same MLP (set by main), a baseline in the same rounds.
ORT: list = []
#: How a Numba kernel is called: directly, or (``--pin``) as fusec's cpu backend does,
#: with the workers on CPUs of their own (``fusec.targets.cpu.affinity``).
LAUNCH: list = [lambda fn, args: fn(*args)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--schemes", default="rows256,rows512,cols,threaded,ort")
    parser.add_argument("--pin", action="store_true", help="launch as fusec does (pinned)")
    args = parser.parse_args()
    if args.pin:
        from fusec.targets.cpu import affinity

        LAUNCH[0] = affinity.run
    numba.set_num_threads(args.threads)
    tasks = args.threads
    rng = np.random.default_rng()
    x = rng.standard_normal(M * D).astype(np.float32)
    w1 = (rng.standard_normal(D * H) * D**-0.5).astype(np.float32)
    w2 = (rng.standard_normal(H * D) * H**-0.5).astype(np.float32)
    b1, b2 = rng.standard_normal(H).astype(np.float32), rng.standard_normal(D).astype(np.float32)
    x2 = x.reshape(M, D)
    schemes = args.schemes.split(",")
    if "ort" in schemes:
        from cpu_vs_ort import mlp_case, ort_session

        case = mlp_case(np.random.default_rng(), M, D, H)
        w1[:], b1[:] = case.weights[0].reshape(-1), case.weights[1]
        w2[:], b2[:] = case.weights[2].reshape(-1), case.weights[3]
        ORT.append(ort_session(case.model, args.threads))
    ref = np.maximum(x2 @ w1.reshape(D, H) + b1, 0) @ w2.reshape(H, D) + b2 + x2
    h, y = np.empty(M * H, np.float32), np.empty(M * D, np.float32)
    for s in schemes:
        h[:], y[:] = np.nan, np.nan
        mlp(s, x, w1, b1, w2, b2, h, y, tasks)
        err = np.linalg.norm(y.reshape(M, D) - ref) / np.linalg.norm(ref)
        assert np.isfinite(y).all() and err < 1e-4, (s, err)
        print(f"{s}: rel err {err:.1e}")
    wall = {s: [] for s in schemes}
    cpu = {s: [] for s in schemes}
    order = np.random.default_rng(1)
    for _ in range(args.rounds):
        for s in order.permutation(schemes):
            time.sleep(0.02)
            t0, c0 = time.perf_counter(), time.process_time()
            mlp(s, x, w1, b1, w2, b2, h, y, tasks)
            wall[s].append((time.perf_counter() - t0) * 1e3)
            cpu[s].append((time.process_time() - c0) * 1e3)
    print(f"threads {args.threads}, pinned {args.pin}, load {os.getloadavg()}")
    for s in schemes:
        print(
            f"{s:10s} wall med {statistics.median(wall[s]):6.2f} min {min(wall[s]):6.2f}   "
            f"cpu med {statistics.median(cpu[s]):6.2f} min {min(cpu[s]):6.2f}"
        )


if __name__ == "__main__":
    main()
