"""Every opt-in variant of fusec's Hopper GEMM vs PyTorch eager and torch.compile.

    python benchmarks/gemm_variants_bench.py --out $OUT [--budget 120]

Cases (fp16), most important first: the small-row LN(8192x256) -> matmul 256x256 ->
softmax chain (``LN_VARIANTS``: staged LayerNorm vectors, ``vectors=smem``), the MLP's two
GEMMs separately (8192x1024x4096 + bias + tanh GELU; 8192x4096x1024 + bias + residual,
also with the residual's L2 prefetch, ``prefetch=tile``), 4096^3 + bias + relu, plain
4096^3 and 8192^3. Variants (``tile-gemm`` pass options, ``fusec.targets.cuda.gemm.config``):
the heuristic's choice, the direct epilogue with IEEE or fast maths, the smem epilogue
(TMA stores) with either, the pingpong schedule (64x256 per consumer warpgroup, and
128x128); plain matmuls skip the fast-maths variants (no epilogue maths). A variant that
gives the heuristic's own tile is reported as such, not timed twice.

Every result is checked against torch in float32 first (gemm_bench.check: elementwise,
NaN fails); a variant that fails is reported, not timed. Time = one call captured as a
CUDA graph and replayed back to back on torch's current stream (the caller's stream,
which fusec launches on), CUDA events around 20 replays, median of 7, each checked
against the wall clock (gemm_bench.time_gpu). Baselines in the same run.

Robust for one unattended device run: each row is written to ``<out>/gemm-variants.json``
(and the markdown table) as soon as it is measured; the row being measured is noted in
``<out>/variants-state.json`` first, so a process killed by a hung kernel (a watchdog
thread exits after ``--row-limit`` seconds) is restarted by the shell script and skips
that row (reported as hung) and the rows already done; ``--budget`` seconds after start,
the remaining rows are skipped (reported as such).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import threading
import time

MATMUL = """func.func @f(%a: tensor<{m}x{k}xf16>, %b: tensor<{k}x{n}xf16>) -> tensor<{m}x{n}xf16> {{
  %c = ai.matmul %a, %b : tensor<{m}x{k}xf16> * tensor<{k}x{n}xf16>
  return %c : tensor<{m}x{n}xf16>
}}"""
EPILOGUE = """func.func @f(%a: tensor<{m}x{k}xf16>, %b: tensor<{k}x{n}xf16>, %bias: tensor<{n}xf16>{extra}) -> tensor<{m}x{n}xf16> {{
  %c = ai.matmul %a, %b : tensor<{m}x{k}xf16> * tensor<{k}x{n}xf16>
  %d = ai.bias_add %c, %bias {{axis = 1 : i64}} : tensor<{m}x{n}xf16> * tensor<{n}xf16>
  {tail}
}}"""  # noqa: E501
RELU = "%e = ai.relu %d : tensor<{m}x{n}xf16>\n  return %e : tensor<{m}x{n}xf16>"
GELU = (
    '%e = ai.gelu %d {{approximate = "tanh"}} : tensor<{m}x{n}xf16>\n'
    "  return %e : tensor<{m}x{n}xf16>"
)
RESIDUAL = (
    "%e = ai.add %d, %r : tensor<{m}x{n}xf16> * tensor<{m}x{n}xf16>\n"
    "  return %e : tensor<{m}x{n}xf16>"
)

#: (label, tile-gemm options), in order of interest (rows past the time budget are skipped);
#: "" is the heuristic's choice, a variant giving the same tile as it is reported, not timed
VARIANTS = [
    ("default", ""),
    ("direct+ieee", "epilogue=direct math=ieee"),
    ("smem+fast", "schedule=cooperative epilogue=smem math=fast"),
    ("pingpong+smem+fast", "schedule=pingpong epilogue=smem math=fast"),
    ("pingpong128+smem+fast", 'tile="128x128x64 s6 c2 g8 sched=pingpong epi=smem math=fast"'),
    ("direct+fast", "epilogue=direct math=fast"),
    ("smem+ieee", "epilogue=smem math=ieee"),
]
#: MLP down has a residual: its L2 prefetch a few K steps ahead of the epilogue, too
DOWN_VARIANTS = [
    *VARIANTS[:3],
    ("smem+fast+prefetch", "schedule=cooperative epilogue=smem math=fast prefetch=tile"),
    ("pingpong+smem+fast+prefetch", "schedule=pingpong epilogue=smem math=fast prefetch=tile"),
    *VARIANTS[3:],
]
PLAIN_VARIANTS = [
    ("default", ""),
    ("direct", "epilogue=direct math=ieee"),
    ("smem", "schedule=cooperative epilogue=smem math=ieee"),
    ("pingpong+smem", "schedule=pingpong epilogue=smem"),
    ("pingpong128+smem", 'tile="128x128x64 s6 c2 g8 sched=pingpong epi=smem"'),
]


#: The small-row LN(8192x256) -> matmul 256x256 -> softmax group (one GEMM launch after the
#: LayerNorm pre-pass): the staged LayerNorm vectors (vectors=smem) against the element-wise
#: loads, on the heuristic's 64x256 tile and on 128x256 with two consumers; and ln=tile (the
#: GEMM alone, normalising its resident A tiles: no pre-pass, no memset).
LN_VARIANTS = [
    ("default", ""),
    ("vec", "vectors=smem"),
    ("smem", "epilogue=smem"),
    ("smem+vec", "epilogue=smem vectors=smem"),
    ("c2", 'tile="128x256x64 s4 c2 g8"'),
    ("c2+vec", 'tile="128x256x64 s4 c2 g8 vec=smem"'),
    # ln=tile: the LayerNorm applied to the resident A tiles, one launch (no pre-pass, memset)
    ("ln-tile", "ln=tile"),
    ("ln-tile+smem", "epilogue=smem ln=tile"),
    ("ln-tile+fast", "math=fast ln=tile"),
    ("ln-tile+c2", 'tile="128x256x64 s4 c2 g8 ln=tile"'),
]


def _lms_small(torch):
    """(name, IR, inputs, reference, flops, variants, with compile) of the small-row chain."""
    from gpu_bench import fallback_cases

    label, ir, fn, inputs, _ = fallback_cases(torch, "cuda", quick=False)[2]
    assert label.startswith("layernorm(8192x256)"), label
    return (label, ir, inputs, fn, 2.0 * 8192 * 256 * 256, LN_VARIANTS, True)


def cases(torch):
    """(name, IR text, inputs, reference, flops, variants, with torch.compile)."""
    import torch.nn.functional as F

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, device="cuda", dtype=torch.float16) * scale

    out = []
    m, k, n = 8192, 1024, 4096
    text = EPILOGUE.format(m=m, k=k, n=n, extra="", tail=GELU.format(m=m, n=n))
    inputs = (randn(m, k), randn(k, n, scale=0.03), randn(n))

    def up(a, b, bias):
        return F.gelu(a @ b + bias, approximate="tanh")

    out.append(("MLP up 8192x1024x4096 + bias + gelu", text, inputs, up, 2.0 * m * k * n))
    m, k, n = 8192, 4096, 1024
    extra = f", %r: tensor<{m}x{n}xf16>"
    text = EPILOGUE.format(m=m, k=k, n=n, extra=extra, tail=RESIDUAL.format(m=m, n=n))
    inputs = (randn(m, k), randn(k, n, scale=0.03), randn(n), randn(m, n))

    def down(a, b, bias, r):
        return a @ b + bias + r

    out.append(("MLP down 8192x4096x1024 + bias + residual", text, inputs, down, 2.0 * m * k * n))
    s = 4096
    text = EPILOGUE.format(m=s, k=s, n=s, extra="", tail=RELU.format(m=s, n=s))

    def bias_relu(a, b, bias):
        return torch.relu(a @ b + bias)

    inputs = (randn(s, s), randn(s, s), randn(s))
    out.append(("matmul 4096^3 + bias + relu", text, inputs, bias_relu, 2.0 * s**3))

    def matmul(a, b):
        return a @ b

    for s in (4096, 8192):
        text = MATMUL.format(m=s, k=s, n=s)
        out.append((f"matmul {s}^3", text, (randn(s, s), randn(s, s)), matmul, 2.0 * s**3))

    def variants(fn) -> list:
        return PLAIN_VARIANTS if fn is matmul else DOWN_VARIANTS if fn is down else VARIANTS

    return [_lms_small(torch)] + [(*case, variants(case[3]), case[3] is not matmul) for case in out]


def pipeline(options: str) -> str:
    return "fusec-cuda" if not options else f"fusec-default,tile-gemm{{{options}}}"


class State:
    """The rows measured so far and the one being measured (a restart skips it)."""

    def __init__(self, out: str) -> None:
        self.path = os.path.join(out, "variants-state.json")
        self.out = out
        try:
            with open(self.path) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            data = {"rows": [], "current": None}
        self.rows: list[dict] = data["rows"]
        if data.get("current"):  # the previous process died measuring this one
            case, impl = data["current"]
            self.rows.append({"case": case, "impl": impl, "error": "hung or crashed"})
        self.save(None)

    def done(self, case: str, impl: str) -> bool:
        return any(r["case"] == case and r["impl"] == impl for r in self.rows)

    def save(self, current) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump({"rows": self.rows, "current": current}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self.save(None)
        write(self.rows, self.out)
        print(json.dumps(row), flush=True)


def main() -> int:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gemm_bench as gb

    import fusec

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds for all rows")
    parser.add_argument("--row-limit", type=float, default=40.0, help="watchdog per row (s)")
    parser.add_argument("--only", default="", help="cases whose name contains this")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    state = State(args.out)
    torch.manual_seed(0)
    for name, text, inputs, reference, flops, variants, with_compile in cases(torch):
        if args.only and args.only not in name:
            continue
        ref = reference(*(t.float() for t in inputs))
        impls = [("torch eager", None)] + [("torch.compile", None)] * with_compile
        impls += [(f"fusec {label}", options) for label, options in variants]
        for impl, options in impls:
            if state.done(name, impl):
                continue
            if time.perf_counter() - start > args.budget:
                state.add({"case": name, "impl": impl, "error": "skipped: time budget spent"})
                continue
            state.save([name, impl])
            limit = args.row_limit * (2 if impl == "torch.compile" else 1)  # a cold Inductor
            watchdog = threading.Timer(limit, lambda: os._exit(75))
            watchdog.daemon = True
            watchdog.start()
            row = {"case": name, "impl": impl, "flops": flops}
            try:
                row.update(measure(torch, gb, fusec, impl, options, text, inputs, reference, ref))
            except Exception as err:  # a failing variant does not stop the others
                row["error"] = f"{type(err).__name__}: {err}"[:400]
                try:
                    torch.cuda.synchronize()
                except Exception:  # the context is lost: a fresh process goes on
                    state.add(row)
                    os._exit(76)
            finally:
                watchdog.cancel()
            state.add(row)
    write(state.rows, args.out, final=True)
    return 0


defaults: dict[str, str] = {}  # IR text -> the heuristic's tile


def measure(torch, gb, fusec, impl, options, text, inputs, reference, ref) -> dict:
    """Build, check against ``ref``, then time one implementation (gpu ms per call)."""
    t0 = time.perf_counter()
    if impl == "torch eager":
        fn = lambda: reference(*inputs)  # noqa: E731
        replay = gb.torch_graph(fn)
    elif impl == "torch.compile":
        compiled = torch.compile(reference)
        fn = lambda: compiled(*inputs)  # noqa: E731
        fn()
        replay = gb.torch_graph(fn)
    else:
        module = fusec.compile(text, target="cuda", pipeline=pipeline(options))
        tiles = [
            line.split("tile ", 1)[1].rstrip(";")
            for k in module.kernels
            for line in k.source.splitlines()
            if "Tensor Core GEMM" in line and "tile " in line
        ]
        if options and tiles and tiles[0] == defaults.get(text):
            return {"same_as_default": tiles[0]}
        if not options and tiles:
            defaults[text] = tiles[0]
        fn = lambda: module(*inputs)  # noqa: E731
        fn()
        replay = gb.fusec_graph(module, inputs)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    rel = gb.check(fn(), ref)
    torch.cuda.synchronize()
    if replay is None:
        raise RuntimeError("graph capture failed")
    row = {"gpu_ms": gb.time_gpu(replay), "rel_l2": rel, "build_s": round(build_s, 2)}
    if impl.startswith("fusec"):
        row["tile"] = tiles[0] if tiles else "?"
    return row


def write(rows: list[dict], out: str, final: bool = False) -> None:
    import torch
    from bench_common import commit as tree_commit
    from bench_common import write_results

    commit = tree_commit()
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "commit": commit,
        "torch": torch.__version__,
        "rows": rows,
    }
    lines = [
        f"# fusec GEMM variants vs PyTorch ({meta['device']}, {meta['date']}, commit {commit})",
        "",
        "gpu ms per call (CUDA-graph replay, events on the caller's stream, median of 7 x 20);",
        "ratios against the same run's torch.compile and eager (> 1: fusec faster).",
        "",
        "| case | implementation | tile | gpu ms | TFLOP/s | vs compile | vs eager | rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = {(r["case"], r["impl"]): r.get("gpu_ms") for r in rows}
    for r in rows:
        if "same_as_default" in r:
            lines.append(f"| {r['case']} | {r['impl']} | {r['same_as_default']} | = default |||||")
            continue
        if "error" in r:
            lines.append(f"| {r['case']} | {r['impl']} | | {r['error'][:120]} | | | | |")
            continue
        gpu = r["gpu_ms"]
        comp, eager = base.get((r["case"], "torch.compile")), base.get((r["case"], "torch eager"))
        lines.append(
            f"| {r['case']} | {r['impl']} | {r.get('tile', '')} | {gpu:.4f} | "
            f"{r['flops'] / gpu / 1e9:.0f} | {_ratio(comp, gpu)} | {_ratio(eager, gpu)} | "
            f"{r['rel_l2']:.5f} |"
        )
    write_results(os.path.join(out, "gemm-variants"), meta, "\n".join(lines) + "\n", indent=1)
    if final:
        print("\n".join(lines), flush=True)


def _ratio(baseline, gpu) -> str:
    return f"{baseline / gpu:.3f}" if baseline and gpu else "-"


if __name__ == "__main__":
    sys.exit(main())
