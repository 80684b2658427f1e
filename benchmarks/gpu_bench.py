"""GPU benchmark of the cuda target: fusec vs PyTorch eager vs torch.compile.

Cases (fp16): relu(x*a+b)*c on 2^28 elements with scalar a, b, c and with
tensor a, b, c; layernorm and softmax on 8192x4096. For each: the median time
(``triton.testing.do_bench``: CUDA events, L2 flushed before every run) of
fusec called with torch tensors, fusec replayed as a CUDA graph, PyTorch eager
and torch.compile; the bytes each case must move; and the percentage of the
measured device-to-device copy bandwidth. Every fusec result is checked against
PyTorch eager first (relative error in float32).

    python benchmarks/gpu_bench.py --out benchmarks/results

writes ``gpu-<date>.md`` and ``gpu-<date>.json`` there and prints the table.
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
    import triton.testing

    import fusec

    torch.manual_seed(0)
    dev = torch.device("cuda")
    n = (1 << 22) if args.quick else N_POINTWISE
    rows = 512 if args.quick else ROWS

    def bench(fn) -> float:
        return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))

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
        "timing": "triton.testing.do_bench median (CUDA events, L2 flushed), "
        "warmup 25 ms, rep 200 ms",
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"gpu-{meta['date']}" + ("-quick" if args.quick else "")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": rows_out}, indent=2))
    (out / f"{stem}.md").write_text(md)
    bad = [
        r
        for r in rows_out
        if not math.isfinite(r["rel_err_vs_eager"]) or r["rel_err_vs_eager"] > 1e-2
    ]
    return 1 if bad else 0


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
    graph = compiled.capture(*inputs)
    fusec_ms = bench(lambda: compiled(*inputs))
    graph_ms = bench(graph.replay)
    eager_ms = bench(lambda: torch_fn(*inputs))
    t0 = time.perf_counter()
    compiled_torch = torch.compile(torch_fn)
    compiled_torch(*inputs)
    torch.cuda.synchronize()
    tc_compile_s = time.perf_counter() - t0
    tc_ms = bench(lambda: compiled_torch(*inputs))
    best = min(fusec_ms, graph_ms)
    return {
        "case": label,
        "bytes": nbytes,
        "fusec_ms": fusec_ms,
        "fusec_graph_ms": graph_ms,
        "torch_eager_ms": eager_ms,
        "torch_compile_ms": tc_ms,
        "fusec_pct_of_copy": 100 * nbytes / best / 1e6 / copy_gbs,
        "torch_compile_pct_of_copy": 100 * nbytes / tc_ms / 1e6 / copy_gbs,
        "fusec_vs_torch_compile": tc_ms / best,
        "rel_err_vs_eager": err,
        "fusec_compile_s": compile_s,
        "torch_compile_s": tc_compile_s,
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
        "included); `fusec graph` replays the same call captured as a CUDA graph. "
        "`% copy` uses the faster of the two.",
        "",
        "| case | fusec ms | fusec graph ms | torch eager ms | torch.compile ms | fusec % copy "
        "| torch.compile % copy | torch.compile / fusec | rel err |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['fusec_ms']:.3f} | {r['fusec_graph_ms']:.3f} | "
            f"{r['torch_eager_ms']:.3f} | {r['torch_compile_ms']:.3f} | "
            f"{r['fusec_pct_of_copy']:.1f}% | {r['torch_compile_pct_of_copy']:.1f}% | "
            f"{r['fusec_vs_torch_compile']:.2f}x | {r['rel_err_vs_eager']:.1e} |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
