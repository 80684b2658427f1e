"""The transformer test models on the cpu target against onnxruntime, calls alternated.

``tests/frontend/onnx/models``' BERT and GPT-2 (dynamo exports, hidden 64, 64 tokens) and, when
it imports, the Llama ``ids`` export, at batch 1 and a throughput batch, in one process
per thread count (Numba's, OpenBLAS's and onnxruntime's intra-op pool all N threads;
onnxruntime with all graph optimisations and no spinning, as ``models_bench.py``).
fusec's result is checked against onnxruntime's first (``tests/numerics.py``), then
the two are called alternately, ``--pairs`` times after warm-up: medians and minima
of the wall clock, the load average before and after. ``models_bench.py`` times each
runtime in a block of its own; alternating keeps a load change from favouring one.

    python benchmarks/transformers_cpu_ab.py --threads 1,2 --pairs 200 [--out DIR]

With ``--out`` the rows also go to ``<out>/cpu-transformers.md`` and ``.json``
(``runner.Table``; a model that fails to compile is a row with its error).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "frontend" / "onnx" / "models"

#: (file, input name, shape at batch 1, throughput batch, input dtype)
CASES = {
    "bert": ("bert.dynamo.onnx", "inputs_embeds", (1, 64, 64), 16, "float32"),
    "gpt2": ("gpt2.dynamo.onnx", "inputs_embeds", (1, 64, 64), 16, "float32"),
    "llama": ("llama.ids.dynamo.onnx", "input_ids", (1, 64), 16, "int64"),
}


def _child(models: list[str], pairs: int, threads: int) -> None:
    """Time every case in this process (its thread pools sized by the environment)."""
    import statistics
    import time

    import numpy as np
    import onnxruntime

    sys.path.insert(0, str(ROOT / "tests"))
    from numerics import compare

    import fusec
    from fusec.api import import_onnx

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for name in models:
        file, input_name, one, batch, dtype = CASES[name]
        path = MODELS / file
        session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        for shape in (one, (batch, *one[1:])):
            rng = np.random.default_rng(0)
            if dtype == "int64":  # ids below the vocabulary and a mask of ones (no padding)
                feeds = {input_name: rng.integers(0, 500, shape).astype(np.int64)}
                feeds.update({i.name: np.ones(shape, np.int64) for i in session.get_inputs()[1:]})
            else:
                feeds = {input_name: rng.standard_normal(shape).astype(np.float32)}
            args = [feeds[i.name] for i in session.get_inputs()]
            dims = {k: v.shape for k, v in feeds.items()}
            try:
                compiled = fusec.compile(import_onnx(path, input_shapes=dims).module, target="cpu")
            except fusec.FusecError as e:
                error = str(e).splitlines()[0]
                print(json.dumps({"model": name, "input": list(shape), "error": error}))
                continue
            got = compiled(*args)
            got = got if isinstance(got, tuple) else (got,)
            want = session.run(None, feeds)
            checks = [compare(g, w) for g, w in zip(got, want, strict=True)]
            for _ in range(5):
                compiled(*args)
                session.run(None, feeds)
            load0 = os.getloadavg()[0]
            f_ms, o_ms = [], []
            for _ in range(pairs):
                t0 = time.perf_counter()
                compiled(*args)
                t1 = time.perf_counter()
                session.run(None, feeds)
                t2 = time.perf_counter()
                f_ms.append((t1 - t0) * 1e3)
                o_ms.append((t2 - t1) * 1e3)
            row = {
                "model": name,
                "input": list(shape),
                "threads": threads,
                "kernels": len(compiled.kernels),
                "fusec_ms": statistics.median(f_ms),
                "fusec_min_ms": min(f_ms),
                "ort_ms": statistics.median(o_ms),
                "ort_min_ms": min(o_ms),
                "ort_over_fusec": statistics.median(o_ms) / statistics.median(f_ms),
                "passed": all(c.passed for c in checks),
                "rel_l2": max(c.rel_l2 for c in checks),
                "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
            }
            print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--models", default="bert,gpt2,llama")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="also write cpu-transformers.md/.json here")
    args = parser.parse_args()
    rows: list[dict] = []
    models = args.models.split(",")
    if args.child:
        _child(models, args.pairs, args.child)
        return
    print(
        "| model | input | threads | fusec ms (min) | onnxruntime ms (min) | ort / fusec ", end=""
    )
    print("| check | load |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    for n in (int(t) for t in args.threads.split(",")):
        env = dict(
            os.environ,
            NUMBA_NUM_THREADS=str(n),
            OPENBLAS_NUM_THREADS=str(n),
            OMP_NUM_THREADS=str(n),
        )
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--models",
            args.models,
            "--pairs",
            str(args.pairs),
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            r = json.loads(line)
            shape = "x".join(map(str, r["input"]))
            rows.append({"threads": n, **r, "input": shape})
            if "error" in r:
                print(f"| {r['model']} | {shape} | {n} | error: {r['error']} | | | | |")
                continue
            print(
                f"| {r['model']} | {shape} | {n} | {r['fusec_ms']:.3f} ({r['fusec_min_ms']:.3f}) | "
                f"{r['ort_ms']:.3f} ({r['ort_min_ms']:.3f}) | {r['ort_over_fusec']:.2f}x | "
                f"{'PASS' if r['passed'] else 'FAIL'} {r['rel_l2']:.1e} | "
                f"{r['load'][0]}-{r['load'][1]} |"
            )
        if out.returncode:
            print(out.stderr[-2000:], file=sys.stderr)
    if args.out and rows:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from runner import write_table

        columns = ["model", "input", "threads", "kernels", "fusec_ms", "fusec_min_ms", "ort_ms"]
        columns += ["ort_min_ms", "ort_over_fusec", "passed", "rel_l2", "load", "error"]
        title = (
            f"Transformer test models on the cpu target vs onnxruntime, {args.pairs} alternated "
            "calls (median and min ms)"
        )
        stem = write_table(args.out, "cpu-transformers", "cpu", columns, rows, title)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
