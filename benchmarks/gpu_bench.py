"""GPU benchmark of the cuda target: fusec vs PyTorch eager vs torch.compile.

Cases (fp16): relu(x*a+b)*c on 2^28 elements with scalar a, b, c and with
tensor a, b, c; layernorm and softmax on 8192x4096; and the conv/matmul groups
of the issue's fallback report (conv N32 C64 56x56 K64 3x3 + bias + relu;
matmul 4096^3 + bias + relu; layernorm(8192x256) -> matmul 256x256 -> softmax
as one group), each an explicit ai.fused group; the table says which run
through the PyTorch fallback (those must not be slower than the same ops in
PyTorch eager) and which through the Tensor Core GEMM. For each: the median
time of fusec called with torch tensors, fusec replayed as a CUDA graph (not
for fallback groups), PyTorch eager and torch.compile;
the bytes each memory-bound case must move and the percentage of the measured
device-to-device copy bandwidth. Every fusec result is checked against PyTorch
eager first (relative error in float32).

Timing: CUDA events recorded on the caller's stream (torch's current stream)
around each call, L2 flushed before each, median of the runs. Events time only
the work queued on that stream, so a call that put its work on another stream
would look fast; every case therefore also times a loop of back-to-back calls
both with events and with the wall clock up to a device-wide synchronisation,
and the run fails (exit 1, "stream check FAILED" in the table) when the two
disagree by more than 10% + 0.1 ms.

    python benchmarks/gpu_bench.py --out benchmarks/results

writes ``gpu.md`` and ``gpu.json`` there and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

from bench_common import write_results  # beside this script
from stream_timing import checked_loop  # beside this script

N_POINTWISE = 1 << 28
ROWS, COLS = 8192, 4096


def pointwise_ir(n: int, scalar: bool) -> str:
    x = f"tensor<{n}xf16>"
    s = "tensor<f16>" if scalar else x
    return f"""
func.func @chain(%x: {x}, %a: {s}, %b: {s}, %c: {s}) -> {x} {{
  %r = ai.fused "pointwise" (%x, %a, %b, %c) : ({x}, {s}, {s}, {s}) -> {x} {{
  ^bb0(%x1: {x}, %a1: {s}, %b1: {s}, %c1: {s}):
    %m = ai.mul %x1, %a1 : {x} * {s}
    %p = ai.add %m, %b1 : {x} * {s}
    %q = ai.relu %p : {x}
    %o = ai.mul %q, %c1 : {x} * {s}
    ai.yield %o : {x}
  }}
  return %r : {x}
}}
"""


def layernorm_ir(rows: int, cols: int) -> str:
    x, v = f"tensor<{rows}x{cols}xf16>", f"tensor<{cols}xf16>"
    return f"""
func.func @ln(%x: {x}, %g: {v}, %b: {v}) -> {x} {{
  %r = ai.fused "row_reduce" (%x, %g, %b) : ({x}, {v}, {v}) -> {x} {{
  ^bb0(%x1: {x}, %g1: {v}, %b1: {v}):
    %y = ai.layernorm %x1, %g1, %b1 : {x} * {v} * {v}
    ai.yield %y : {x}
  }}
  return %r : {x}
}}
"""


def softmax_ir(rows: int, cols: int) -> str:
    x = f"tensor<{rows}x{cols}xf16>"
    return f"""
func.func @sm(%x: {x}) -> {x} {{
  %r = ai.fused "row_reduce" (%x) : ({x}) -> {x} {{
  ^bb0(%x1: {x}):
    %y = ai.softmax %x1 : {x}
    ai.yield %y : {x}
  }}
  return %r : {x}
}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results", help="folder for .md and .json")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    args = parser.parse_args()

    import torch

    import fusec

    torch.manual_seed(0)
    dev = torch.device("cuda")
    n = (1 << 22) if args.quick else N_POINTWISE
    rows = 512 if args.quick else ROWS

    def bench(fn) -> float:
        return event_ms(torch, fn)

    # copy bandwidth: a large device-to-device copy, bytes read + written
    copy_ms, copy_gbs = measure_copy(torch, bench, dev)

    cases = []
    x = torch.randn(n, device=dev, dtype=torch.float16)
    sa, sb, sc = (torch.tensor(v, device=dev, dtype=torch.float16) for v in (1.5, -0.25, 0.75))
    ta, tb, tc = (torch.randn(n, device=dev, dtype=torch.float16) for _ in range(3))

    def chain(x, a, b, c):
        return torch.relu(x * a + b) * c

    size = "2^28" if n == N_POINTWISE else f"{n}"
    cases.append(
        (
            f"relu(x*a+b)*c, {size} fp16, scalar a,b,c",
            pointwise_ir(n, True),
            chain,
            (x, sa, sb, sc),
            2 * n * 2,
        )
    )
    cases.append(
        (
            f"relu(x*a+b)*c, {size} fp16, tensor a,b,c",
            pointwise_ir(n, False),
            chain,
            (x, ta, tb, tc),
            5 * n * 2,
        )
    )
    lx = torch.randn(rows, COLS, device=dev, dtype=torch.float16)
    g = torch.randn(COLS, device=dev, dtype=torch.float16)
    b = torch.randn(COLS, device=dev, dtype=torch.float16)

    def layer_norm(x, g, b):
        return torch.nn.functional.layer_norm(x, (COLS,), g, b, 1e-5)

    def softmax(x):
        return torch.softmax(x, dim=-1)

    cases.append(
        (
            f"layernorm {rows}x{COLS} fp16",
            layernorm_ir(rows, COLS),
            layer_norm,
            (lx, g, b),
            2 * rows * COLS * 2,
        )
    )
    cases.append(
        (f"softmax {rows}x{COLS} fp16", softmax_ir(rows, COLS), softmax, (lx,), 2 * rows * COLS * 2)
    )
    cases.extend(fallback_cases(torch, dev, args.quick))

    rows_out = []
    for label, ir, torch_fn, inputs, nbytes in cases:
        row = measure_case(torch, fusec, bench, label, ir, torch_fn, inputs, nbytes, copy_gbs)
        rows_out.append(row)
        print(json.dumps(row), flush=True)

    props = torch.cuda.get_device_properties(0)
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": props.name,
        "sms": props.multi_processor_count,
        "copy_bandwidth_gbs": copy_gbs,
        "copy_ms_1gib_fp16": copy_ms,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "fusec": fusec.__version__,
        "timing": "median of CUDA events on the caller's stream around each call "
        f"(L2 flushed, {REPS} runs after {WARMUP} warm-up calls), checked against the "
        "wall clock of a loop of calls",
        "command": "python benchmarks/gpu_bench.py" + (" --quick" if args.quick else ""),
    }
    import numba

    meta["numba"] = numba.__version__
    try:
        import numba_cuda

        meta["numba_cuda"] = getattr(numba_cuda, "__version__", "?")
    except ImportError:
        pass
    md = render(meta, rows_out)
    print(md)
    stem = "gpu" + ("-quick" if args.quick else "")
    write_results(Path(args.out) / stem, {"meta": meta, "results": rows_out}, md)
    bad = [
        r
        for r in rows_out
        if not math.isfinite(r["rel_err_vs_eager"])
        or r["rel_err_vs_eager"] > 1e-2
        or not r["stream_check_ok"]
    ]
    return 1 if bad else 0


WARMUP, REPS = 10, 50
_FLUSH_BYTES = 256 << 20  # larger than the H200's 50 MiB L2


def event_ms(torch, fn) -> float:
    """Median ms of ``fn`` by CUDA events on the current stream, L2 flushed before each run
    (the events around ``fn`` alone); their sum checked against the wall clock."""
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    for _ in range(WARMUP):
        fn()
    stream = torch.cuda.current_stream()
    pairs = []
    torch.cuda.synchronize()
    wall0 = time.perf_counter()
    for _ in range(REPS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        pairs.append((start, end))
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in pairs)
    wall = (time.perf_counter() - wall0) * 1e3
    if sum(times) > wall * 1.05:
        raise RuntimeError(f"events: {sum(times):.4f} ms > wall clock {wall:.4f} ms")
    return float(times[len(times) // 2])


def stream_check(torch, fn, calls: int = 20) -> dict:
    """Events on the caller's stream vs wall clock to a device-wide sync, over ``calls``
    back-to-back calls (``stream_timing.checked_loop``): work queued on another stream ends
    after the end event, so the wall clock exceeds the event time."""
    events, wall_ms, ok = checked_loop(fn, calls, warmup=3)
    return {"loop_event_ms": events, "loop_wall_ms": wall_ms, "stream_check_ok": ok}


def fallback_cases(torch, dev, quick: bool) -> list:
    """The conv/matmul groups that run through the PyTorch fallback, vs the same ops eager."""
    f = torch.nn.functional
    n, c, hw = (4, 64, 56) if quick else (32, 64, 56)
    x = torch.randn(n, c, hw, hw, device=dev, dtype=torch.float16)
    w = torch.randn(c, c, 3, 3, device=dev, dtype=torch.float16) * 0.05
    b = torch.randn(c, device=dev, dtype=torch.float16)
    t = f"tensor<{n}x{c}x{hw}x{hw}xf16>"
    conv_ir = f"""
func.func @conv(%x: {t}, %w: tensor<{c}x{c}x3x3xf16>, %b: tensor<{c}xf16>) -> {t} {{
  %r = ai.fused "conv" (%x, %w, %b) : ({t}, tensor<{c}x{c}x3x3xf16>, tensor<{c}xf16>) -> {t} {{
  ^bb0(%x1: {t}, %w1: tensor<{c}x{c}x3x3xf16>, %b1: tensor<{c}xf16>):
    %y = ai.conv2d %x1, %w1 {{padding = array<i64: 1, 1>}} : {t} * tensor<{c}x{c}x3x3xf16>
    %z = ai.bias_add %y, %b1 : {t} * tensor<{c}xf16>
    %o = ai.relu %z : {t}
    ai.yield %o : {t}
  }}
  return %r : {t}
}}
"""

    def conv(x, w, b):
        return torch.relu(f.conv2d(x, w, padding=1) + b.view(1, -1, 1, 1))

    m = 1024 if quick else 4096
    a = torch.randn(m, m, device=dev, dtype=torch.float16)
    mw = torch.randn(m, m, device=dev, dtype=torch.float16) * m**-0.5
    mb = torch.randn(m, device=dev, dtype=torch.float16)
    s, v = f"tensor<{m}x{m}xf16>", f"tensor<{m}xf16>"
    matmul_ir = f"""
func.func @mm(%a: {s}, %w: {s}, %b: {v}) -> {s} {{
  %r = ai.fused "matmul" (%a, %w, %b) : ({s}, {s}, {v}) -> {s} {{
  ^bb0(%a1: {s}, %w1: {s}, %b1: {v}):
    %y = ai.matmul %a1, %w1 : {s} * {s}
    %z = ai.bias_add %y, %b1 {{axis = 1 : i64}} : {s} * {v}
    %o = ai.relu %z : {s}
    ai.yield %o : {s}
  }}
  return %r : {s}
}}
"""

    def matmul(a, w, b):
        return torch.relu(a @ w + b)

    rows, k = (1024 if quick else 8192), 256
    lx = torch.randn(rows, k, device=dev, dtype=torch.float16)
    g, be = torch.randn(k, device=dev, dtype=torch.float16), torch.randn(k, device=dev).half()
    lw = torch.randn(k, k, device=dev, dtype=torch.float16) * k**-0.5
    r, kv, kk = f"tensor<{rows}x{k}xf16>", f"tensor<{k}xf16>", f"tensor<{k}x{k}xf16>"
    lms_ir = f"""
func.func @lms(%x: {r}, %g: {kv}, %b: {kv}, %w: {kk}) -> {r} {{
  %o = ai.fused "matmul" (%x, %g, %b, %w) : ({r}, {kv}, {kv}, {kk}) -> {r} {{
  ^bb0(%x1: {r}, %g1: {kv}, %b1: {kv}, %w1: {kk}):
    %n = ai.layernorm %x1, %g1, %b1 : {r} * {kv} * {kv}
    %y = ai.matmul %n, %w1 : {r} * {kk}
    %s = ai.softmax %y : {r}
    ai.yield %s : {r}
  }}
  return %o : {r}
}}
"""

    def lms(x, g, b, w):
        return torch.softmax(f.layer_norm(x, (k,), g, b, 1e-5) @ w, dim=-1)

    return [
        (
            f"conv N{n} C{c} {hw}x{hw} K{c} 3x3 + bias + relu fp16",
            conv_ir,
            conv,
            (x, w, b),
            0,
        ),
        (f"matmul {m}^3 + bias + relu fp16", matmul_ir, matmul, (a, mw, mb), 0),
        (
            f"layernorm({rows}x{k}) -> matmul {k}x{k} -> softmax fp16, one group",
            lms_ir,
            lms,
            (lx, g, be, lw),
            0,
        ),
    ]


def measure_copy(torch, bench, dev) -> tuple[float, float]:
    """(ms, GB/s) of a 1 GiB device-to-device copy, counting bytes read and written."""
    src = torch.randn(1 << 29, device=dev, dtype=torch.float16)
    dst = torch.empty_like(src)
    copy_ms = bench(lambda: dst.copy_(src))
    return copy_ms, 2 * src.numel() * 2 / copy_ms / 1e6


def measure_case(torch, fusec, bench, label, ir, torch_fn, inputs, nbytes, copy_gbs) -> dict:
    """Check fusec against PyTorch eager, then time fusec, its graph replay, eager, compile."""
    t0 = time.perf_counter()
    compiled = fusec.compile(ir, target="cuda", pipeline="infer-shapes")
    compile_s = time.perf_counter() - t0
    ours = compiled(*inputs)
    torch.cuda.synchronize()
    ref = torch_fn(*inputs)
    err = float(
        torch.linalg.norm((ours.float() - ref.float()).flatten())
        / torch.linalg.norm(ref.float().flatten())
    )
    from fusec.targets.cuda.torch_fallback import runs_op_by_op

    fallback = any(runs_op_by_op(k.source) for k in compiled.kernels)
    runs_as = " + ".join(
        "PyTorch fallback" if runs_op_by_op(k.source) else k.kind for k in compiled.kernels
    )
    fusec_ms = bench(lambda: compiled(*inputs))
    graph_ms = float("nan")
    if not fallback:
        try:
            graph_ms = bench(compiled.capture(*inputs).replay)
        except Exception as err:  # a group that cannot be captured: say so, time the rest
            print(f"{label}: no CUDA graph ({type(err).__name__}: {err})", flush=True)
    check = stream_check(torch, lambda: compiled(*inputs))
    eager_ms = bench(lambda: torch_fn(*inputs))
    t0 = time.perf_counter()
    compiled_torch = torch.compile(torch_fn)
    compiled_torch(*inputs)
    torch.cuda.synchronize()
    tc_compile_s = time.perf_counter() - t0
    tc_ms = bench(lambda: compiled_torch(*inputs))
    best = fusec_ms if math.isnan(graph_ms) else min(fusec_ms, graph_ms)
    return {
        "case": label,
        "runs_as": runs_as,
        "bytes": nbytes,
        "fusec_ms": fusec_ms,
        "fusec_graph_ms": graph_ms,
        "torch_eager_ms": eager_ms,
        "torch_compile_ms": tc_ms,
        "fusec_pct_of_copy": 100 * nbytes / best / 1e6 / copy_gbs if nbytes else float("nan"),
        "torch_compile_pct_of_copy": 100 * nbytes / tc_ms / 1e6 / copy_gbs
        if nbytes
        else float("nan"),
        "fusec_vs_torch_compile": tc_ms / best,
        "fusec_vs_torch_eager": eager_ms / best,
        "rel_err_vs_eager": err,
        "fusec_compile_s": compile_s,
        "torch_compile_s": tc_compile_s,
        **check,
    }


def render(meta: dict, rows: list[dict]) -> str:
    lines = [
        f"# fusec GPU benchmark, {meta['date']}, {meta['device']}",
        "",
        f"Copy bandwidth (device-to-device, read + write): {meta['copy_bandwidth_gbs']:.0f} GB/s. "
        f"Timing: {meta['timing']}. torch {meta['torch']}, numba {meta.get('numba')}, "
        f"numba-cuda {meta.get('numba_cuda')}. Command: `{meta['command']}`.",
        "",
        "`fusec` is a plain call with torch tensors (per-call Python and launch overhead "
        "included); `fusec graph` replays the same call captured as a CUDA graph (not for "
        "fallback groups). `% copy` uses the faster of the two. `stream check`: events on "
        "the caller's stream vs wall clock over 20 back-to-back calls (ms).",
        "",
        "| case | fusec ms | fusec graph ms | torch eager ms | torch.compile ms | fusec % copy "
        "| torch.compile % copy | eager / fusec | torch.compile / fusec | rel err "
        "| stream check |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        verdict = "ok" if r["stream_check_ok"] else "FAILED"
        lines.append(
            f"| {r['case']} ({r['runs_as']}) | {r['fusec_ms']:.3f} | {r['fusec_graph_ms']:.3f} | "
            f"{r['torch_eager_ms']:.3f} | {r['torch_compile_ms']:.3f} | "
            f"{r['fusec_pct_of_copy']:.1f}% | {r['torch_compile_pct_of_copy']:.1f}% | "
            f"{r['fusec_vs_torch_eager']:.2f}x | "
            f"{r['fusec_vs_torch_compile']:.2f}x | {r['rel_err_vs_eager']:.1e} | "
            f"{verdict} ({r['loop_event_ms']:.2f} events, {r['loop_wall_ms']:.2f} wall) |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
