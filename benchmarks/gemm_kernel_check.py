"""Device check of the Hopper GEMM kernel itself (no fusec graph): build, verify, time.

Run on the H200 (one call does everything; each variant runs in its own
process with a timeout, so a hang or a crash of one variant costs only that
variant):

    python benchmarks/gemm_kernel_check.py --out DIR

Correctness: fresh random inputs (randn), the output poisoned with NaN first,
compared elementwise with torch in float32 (atol = rtol = 1e-2 scaled to the
output's magnitude; NaN fails), relative L2 error reported. Timing: CUDA
events on torch's current stream, median of 20 after 5 warm-ups, checked
against the wall clock; cuBLAS (torch.matmul) measured in the same process.
Writes ``DIR/gemm_check.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

CASES = [
    # name, config, dtype, out, a_major, b_major, epilogue,
    # shapes [(batch, m, n, k, batch_a, batch_b)]
    (
        "c128x128 f16 kk",
        "128x128x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "k",
        "id",
        [(1, 256, 256, 64, 0, 0), (1, 1000, 1000, 1000, 0, 0), (1, 4097, 511, 77, 0, 0)],
    ),
    (
        "c128x256 f16 kk",
        "128x256x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "k",
        "id",
        [(1, 1000, 1000, 1000, 0, 0), (1, 4097, 511, 77, 0, 0), (1, 4096, 4096, 4096, 0, 0)],
    ),
    (
        "c128x256 f16 kn",
        "128x256x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "n",
        "id",
        [(1, 1000, 1000, 1000, 0, 0), (1, 4097, 512, 80, 0, 0), (1, 4096, 4096, 4096, 0, 0)],
    ),
    (
        "c128x256 bf16 mk",
        "128x256x64 s4 c2 g8",
        "bf16",
        "bf16",
        "m",
        "k",
        "id",
        [(1, 1000, 1000, 1000, 0, 0), (1, 4096, 4096, 4096, 0, 0)],
    ),
    (
        "c128x256 bf16 mn f32",
        "128x256x64 s4 c2 g8",
        "bf16",
        "f32",
        "m",
        "n",
        "id",
        [(1, 1000, 1000, 1000, 0, 0), (1, 1024, 512, 300, 0, 0)],
    ),
    (
        "c128x256 f16 kk bias_relu",
        "128x256x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "k",
        "bias_relu",
        [(1, 1000, 1000, 1000, 0, 0), (1, 4096, 4096, 4096, 0, 0)],
    ),
    (
        "c128x256 f16 kn batched",
        "128x256x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "n",
        "id",
        [(3, 300, 200, 136, 1, 1), (4, 256, 512, 128, 1, 0)],
    ),
    (
        "c256x128 f16 kk",
        "256x128x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "k",
        "id",
        [(1, 1000, 1000, 1000, 0, 0), (1, 4096, 4096, 4096, 0, 0)],
    ),
    (
        "c128x256 s3 f16 kk",
        "128x256x64 s3 c2 g8",
        "f16",
        "f16",
        "k",
        "k",
        "id",
        [(1, 4096, 4096, 4096, 0, 0)],
    ),
    # the MN-major descriptor with LBO and SBO swapped: which of the two reads KxN B right
    (
        "c128x256 f16 kn SWAP",
        "128x256x64 s4 c2 g8",
        "f16",
        "f16",
        "k",
        "n",
        "id",
        [(1, 1000, 1000, 1000, 0, 0)],
    ),
    (
        "c128x256 f16 mk SWAP",
        "128x256x64 s4 c2 g8",
        "f16",
        "f16",
        "m",
        "k",
        "id",
        [(1, 1000, 1000, 1000, 0, 0)],
    ),
]
TIMED = [  # (case name, m, n, k)
    ("c128x128 f16 kk", 4096, 4096, 4096),
    ("c128x256 f16 kk", 4096, 4096, 4096),
    ("c128x256 f16 kk", 8192, 8192, 8192),
    ("c128x256 f16 kn", 4096, 4096, 4096),
    ("c128x256 f16 kn", 8192, 8192, 8192),
    ("c128x256 bf16 mk", 4096, 4096, 4096),
    ("c256x128 f16 kk", 4096, 4096, 4096),
    ("c256x128 f16 kk", 8192, 8192, 8192),
    ("c128x256 s3 f16 kk", 8192, 8192, 8192),
    ("c128x256 f16 kk bias_relu", 4096, 4096, 4096),
]


def run_case(index: int) -> dict:
    import torch

    from fusec.targets.cuda import build
    from fusec.targets.cuda.gemm import cpp, host
    from fusec.targets.cuda.gemm.config import TileConfig

    name, text, dtype, out, a_major, b_major, epi, shapes = CASES[index]
    if "SWAP" in name:
        generate = cpp.generate
        cpp.generate = lambda spec: generate(spec).replace("8192u, 1024u", "1024u, 8192u")
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    result: dict = {"case": name, "checks": [], "timings": []}
    t0 = time.perf_counter()
    config = TileConfig.parse(text)
    epilogue = cpp.bias_relu(dtype) if epi == "bias_relu" else cpp.Epilogue()
    kernels = {}

    def kernel_for(batch_a: bool, batch_b: bool):
        key = (batch_a, batch_b)
        if key not in kernels:
            spec = cpp.GemmSpec(config, dtype, out, a_major, b_major, batch_a, batch_b, epilogue)
            built = build.build(spec)
            result.setdefault("ptxas", built.log[-400:])
            kernels[key] = host.GemmKernel(spec, built.cubin)
        return kernels[key]

    kernel_for(False, False)
    result["build_s"] = time.perf_counter() - t0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(index)

    def make(batch, m, n, k, batch_a, batch_b):
        a_shape = (
            (batch if batch_a else 1, m, k) if a_major == "k" else (batch if batch_a else 1, k, m)
        )
        b_shape = (
            (batch if batch_b else 1, n, k) if b_major == "k" else (batch if batch_b else 1, k, n)
        )
        a = torch.randn(a_shape, device="cuda", dtype=tdt[dtype], generator=gen)
        b = torch.randn(b_shape, device="cuda", dtype=tdt[dtype], generator=gen)
        bias = torch.randn(n, device="cuda", dtype=tdt[dtype], generator=gen)
        c = torch.full((batch, m, n), float("nan"), device="cuda", dtype=tdt[out])
        return a, b, bias, c

    def launch(kernel, a, b, bias, c, batch, m, n, k):
        op_a = host.Operand(a.data_ptr(), a.shape[1], a.shape[2], a.shape[0])
        op_b = host.Operand(b.data_ptr(), b.shape[1], b.shape[2], b.shape[0])
        extras = (bias.data_ptr(),) if epi == "bias_relu" else ()
        stream = torch.cuda.current_stream().cuda_stream
        kernel(op_a, op_b, c.data_ptr(), extras, m, n, k, batch, stream, sms)

    def reference(a, b, bias):
        la = a.float() if a_major == "k" else a.float().transpose(-1, -2)
        lb = b.float().transpose(-1, -2) if b_major == "k" else b.float()
        ref = torch.matmul(la, lb)
        if epi == "bias_relu":
            ref = torch.relu(ref + bias.float())
        return ref

    for batch, m, n, k, batch_a, batch_b in shapes:
        kernel = kernel_for(bool(batch_a), bool(batch_b))
        a, b, bias, c = make(batch, m, n, k, batch_a, batch_b)
        launch(kernel, a, b, bias, c, batch, m, n, k)
        torch.cuda.synchronize()
        ref = reference(a, b, bias).expand(batch, m, n)
        got = c.float()
        scale = float(ref.abs().max())
        tol = 1e-2 * max(scale, 1.0) if out != "f32" else 2e-3 * max(scale, 1.0)
        bad = ~torch.isclose(got, ref, rtol=1e-2, atol=tol) | torch.isnan(got)
        rel = float((got - ref).norm() / ref.norm())
        result["checks"].append(
            {
                "shape": [batch, m, n, k, batch_a, batch_b],
                "ok": int(bad.sum()) == 0 and rel < 1e-2,
                "bad": int(bad.sum()),
                "nan": int(torch.isnan(got).sum()),
                "rel_l2": rel,
            }
        )
        # a second run on fresh inputs: a moving error is a race
        a, b, bias, c = make(batch, m, n, k, batch_a, batch_b)
        launch(kernel, a, b, bias, c, batch, m, n, k)
        torch.cuda.synchronize()
        ref = reference(a, b, bias).expand(batch, m, n)
        got = c.float()
        bad2 = ~torch.isclose(got, ref, rtol=1e-2, atol=tol) | torch.isnan(got)
        result["checks"][-1]["bad_second_run"] = int(bad2.sum())
        result["checks"][-1]["ok"] &= int(bad2.sum()) == 0

    for tname, m, n, k in TIMED:
        if tname != name:
            continue
        kernel = kernel_for(False, False)
        a, b, bias, c = make(1, m, n, k, 0, 0)
        la = a[0] if a_major == "k" else a[0].t()
        lb = b[0].t() if b_major == "k" else b[0]
        ms = time_it(functools.partial(launch, kernel, a, b, bias, c, 1, m, n, k))
        cublas = time_it(functools.partial(torch.matmul, la, lb))
        if epi == "bias_relu":

            def biased(x, y, z):
                return torch.relu(torch.matmul(x, y) + z)

            eager = time_it(functools.partial(biased, la, lb, bias))
            compiled = torch.compile(biased)
            compiled(la, lb, bias)
            comp = time_it(functools.partial(compiled, la, lb, bias))
            result["timings"].append(
                {
                    "m": m,
                    "n": n,
                    "k": k,
                    "ms": ms,
                    "eager_ms": eager,
                    "compile_ms": comp,
                    "cublas_ms": cublas,
                }
            )
        else:
            flops = 2.0 * m * n * k
            result["timings"].append(
                {
                    "m": m,
                    "n": n,
                    "k": k,
                    "ms": ms,
                    "cublas_ms": cublas,
                    "tflops": flops / ms / 1e9,
                    "cublas_tflops": flops / cublas / 1e9,
                    "pct_cublas": 100.0 * cublas / ms,
                }
            )
    return result


def time_it(fn, warmup: int = 5, reps: int = 20) -> float:
    """Median ms of ``fn`` with CUDA events on the current stream, checked against wall clock."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    times = []
    wall0 = time.perf_counter()
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    wall = (time.perf_counter() - wall0) * 1e3 / reps
    times.sort()
    median = times[len(times) // 2]
    if median > wall * 1.05:
        raise RuntimeError(f"event time {median:.3f} ms exceeds wall clock {wall:.3f} ms")
    return median


def profile() -> None:
    """Three launches of the 128x256 kernel at 4096^3 fp16 (ncu profiles the third)."""
    import torch

    from fusec.targets.cuda import build
    from fusec.targets.cuda.gemm import cpp, host
    from fusec.targets.cuda.gemm.config import TileConfig

    spec = cpp.GemmSpec(TileConfig.parse("128x256x64 s4 c2 g8"), "f16", "f16", "k", "k")
    kernel = host.GemmKernel(spec, build.build(spec).cubin)
    m = n = k = 4096
    a = torch.randn(1, m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(1, n, k, device="cuda", dtype=torch.float16)
    c = torch.empty(1, m, n, device="cuda", dtype=torch.float16)
    for _ in range(3):
        kernel(
            host.Operand(a.data_ptr(), m, k),
            host.Operand(b.data_ptr(), n, k),
            c.data_ptr(),
            (),
            m,
            n,
            k,
            1,
            torch.cuda.current_stream().cuda_stream,
            132,
        )
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--case", type=int, default=None)
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--budget", type=int, default=330, help="seconds for all cases")
    parser.add_argument("--profile", action="store_true", help="one 4096^3 launch for ncu")
    args = parser.parse_args()
    if args.profile:
        profile()
        return
    if args.case is not None:
        print("RESULT " + json.dumps(run_case(args.case)), flush=True)
        return
    results = []
    start = time.perf_counter()
    for index, case in enumerate(CASES):
        t0 = time.perf_counter()
        if t0 - start > args.budget:
            results.append({"case": case[0], "error": "skipped: time budget spent"})
            continue
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--case", str(index)],
                capture_output=True,
                text=True,
                timeout=args.timeout,
                env=os.environ,
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line:
                results.append(json.loads(line[7:]))
            else:
                results.append({"case": case[0], "error": (proc.stdout + proc.stderr)[-3000:]})
        except subprocess.TimeoutExpired as err:
            results.append(
                {
                    "case": case[0],
                    "error": f"TIMEOUT after {args.timeout}s (hang?)",
                    "partial": str(err.stdout)[-1500:],
                }
            )
        print(
            f"[{time.perf_counter() - t0:6.1f}s] {case[0]}: "
            f"{'ERROR' if 'error' in results[-1] else 'ran'}",
            flush=True,
        )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemm_check.json"), "w") as handle:
        json.dump(results, handle, indent=1)
    print("\n| case | shape (b,m,n,k,ba,bb) | ok | bad | rel L2 |")
    print("| --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['case']} | ERROR | | | {r['error'][-300:]!r} |")
            continue
        for c in r["checks"]:
            print(
                f"| {r['case']} | {c['shape']} | {c['ok']} | {c['bad']}/{c['bad_second_run']} "
                f"nan {c['nan']} | {c['rel_l2']:.2e} |"
            )
    print("\n| case | m,n,k | ms | cuBLAS ms | TFLOP/s | % cuBLAS | eager | compile |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        for t in r.get("timings", []):
            print(
                f"| {r['case']} | {t['m']},{t['n']},{t['k']} | {t['ms']:.4f} | "
                f"{t['cublas_ms']:.4f} | {t.get('tflops', 0):.0f} | {t.get('pct_cublas', 0):.1f} | "
                f"{t.get('eager_ms', 0):.4f} | {t.get('compile_ms', 0):.4f} |"
            )


if __name__ == "__main__":
    main()
