"""fusec on the cpu target vs hand-written numpy, op by op (a benchmark, not a test).

For each graph: fusec's generated Numba kernels (``target="cpu"``) and the
baseline a user without fusec writes: the same graph as plain numpy
expressions, one numpy call per op (``HAND``: no interpreter in the way; the
conv through ``sliding_window_view`` + ``einsum`` (BLAS), exact GELU through
``scipy.special.erf`` when scipy is installed, else through a numpy
Abramowitz-Stegun 7.1.26 erf (max error 1.5e-7), as the JSON records). Every
fusec result is checked first as ``fusec run --check`` does, and the baseline
against fusec's float64 reference.

For the memory-bound graphs (pointwise, row reductions) the table also gives
the floor: the fewest bytes the graph must move (each input read once, each
output written once) over the rate of a plain copy of as many bytes, measured
in the same run by a Numba ``prange`` copy on all threads (so cache effects
are alike: a 16 MiB tensor is half of this machine's L3).

Prints a markdown table and writes ``benchmarks/results/cpu.md`` and
``.json`` (date, machine, versions, numbers).

    python benchmarks/cpu_bench.py [--repeats 10] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import time
from collections.abc import Callable

from fusec.targets.cpu.threads import configure

configure()  # before numpy loads OpenBLAS: applies to fusec and the numpy baselines alike

import numpy as np  # noqa: E402
from bench_common import RESULTS, cpu_name, write_results  # noqa: E402  (beside this script)

import fusec  # noqa: E402
from fusec.api import parse  # noqa: E402
from fusec.ir.module import entry_function  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402
from fusec.tools.runner import check as runner_check  # noqa: E402
from fusec.tools.runner import random_inputs  # noqa: E402


def t(shape, dtype="f32") -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def pointwise_graph(n: int) -> str:
    v = t((n,))
    return f"""
func.func @pointwise(%x: {v}, %a: {v}, %b: {v}, %c: {v}) -> {v} {{
  %0 = ai.mul %x, %a : {v} * {v}
  %1 = ai.add %0, %b : {v} * {v}
  %2 = ai.relu %1 : {v}
  %3 = ai.mul %2, %c : {v} * {v}
  return %3 : {v}
}}"""


def layernorm_graph(m: int, n: int) -> str:
    x, v = t((m, n)), t((n,))
    return f"""
func.func @layernorm(%x: {x}, %g: {v}, %b: {v}) -> {x} {{
  %0 = ai.layernorm %x, %g, %b : {x} * {v} * {v}
  return %0 : {x}
}}"""


def softmax_graph(m: int, n: int) -> str:
    x = t((m, n))
    return f"""
func.func @softmax(%x: {x}) -> {x} {{
  %0 = ai.softmax %x : {x}
  return %0 : {x}
}}"""


def mlp_graph(b: int, s: int, d: int, h: int) -> str:
    x, v, w1, hb, w2, hv, hh = (
        t((b, s, d)),
        t((d,)),
        t((d, h)),
        t((b, s, h)),
        t((h, d)),
        t((h,)),
        t((b, s, d)),
    )
    return f"""
func.func @mlp(%x: {x}, %g: {v}, %be: {v}, %w1: {w1}, %b1: {hv}, %w2: {w2}, %b2: {v}) -> {x} {{
  %n = ai.layernorm %x, %g, %be : {x} * {v} * {v}
  %h = ai.matmul %n, %w1 : {x} * {w1}
  %hb = ai.bias_add %h, %b1 {{axis = 2}} : {hb} * {hv}
  %a = ai.gelu %hb : {hb}
  %o = ai.matmul %a, %w2 : {hb} * {w2}
  %ob = ai.bias_add %o, %b2 {{axis = 2}} : {hh} * {v}
  %y = ai.add %ob, %x : {hh} * {x}
  return %y : {x}
}}"""


def conv_graph(n: int, c: int, hw: int, k: int) -> str:
    x, w, b, y = t((n, c, hw, hw)), t((k, c, 3, 3)), t((k,)), t((n, k, hw, hw))
    return f"""
func.func @conv_bias_relu(%x: {x}, %w: {w}, %b: {b}) -> {y} {{
  %c = ai.conv2d %x, %w {{padding = array<i64: 1, 1>}} : {x} * {w}
  %a = ai.bias_add %c, %b : {y} * {b}
  %r = ai.relu %a : {y}
  return %r : {y}
}}"""


def _layernorm_np(x, g, b):
    mean = x.mean(-1, keepdims=True)
    c = x - mean
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b


def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _erf_np(x):
    """erf in plain numpy (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7): when no scipy."""
    sign = np.sign(x)
    a = np.abs(x)
    t = np.float32(1) / (np.float32(1) + np.float32(0.3275911) * a)
    poly = t * (
        np.float32(0.254829592)
        + t
        * (
            np.float32(-0.284496736)
            + t * (np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * 1.061405429))
        )
    )
    return sign * (np.float32(1) - poly.astype(np.float32) * np.exp(-a * a))


def _erf():
    try:
        from scipy.special import erf  # float32 in, float32 out

        return erf, "scipy.special.erf"
    except ImportError:
        return _erf_np, "numpy Abramowitz-Stegun 7.1.26"


ERF, ERF_SOURCE = _erf()


def _mlp_np(x, g, be, w1, b1, w2, b2):
    h = _layernorm_np(x, g, be) @ w1 + b1
    a = np.float32(0.5) * h * (np.float32(1) + ERF(h * np.float32(0.7071067811865476)))
    return a @ w2 + b2 + x


def _conv_bias_relu_np(x, w, b):
    """3x3 conv, padding 1, as a user writes it in numpy: windows + einsum (BLAS)."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,kcij->nkhw", windows, w, optimize=True)
    return np.maximum(conv + b[None, :, None, None], np.float32(0))


#: The baseline of every graph: numpy, one call per op.
HAND = {
    "pointwise": lambda x, a, b, c: np.maximum(x * a + b, 0) * c,
    "layernorm": _layernorm_np,
    "softmax": _softmax_np,
    "mlp_block": _mlp_np,
    "conv_bias_relu": _conv_bias_relu_np,
}


def bench(fn: Callable[[], object], repeats: int, budget_s: float = 20.0) -> float:
    """Median milliseconds of ``fn`` after two warm-up calls (fewer repeats if slow).

    The fastest run is kept too (``MINIMA``): on a shared machine it shows how
    much of a median is noise from neighbours.
    """
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    repeats = max(3, min(repeats, int(budget_s / max(once, 1e-9))))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    MINIMA.append(min(times))
    return statistics.median(times)


MINIMA: list[float] = []


def run_case(name: str, text: str, repeats: int) -> dict:
    module = parse(text)
    fn = entry_function(module)
    args = random_inputs(fn, seed=0)
    start = time.perf_counter()
    compiled = fusec.compile(text, target="cpu")
    out = compiled(*args)  # the first call compiles the kernels (or loads them from the cache)
    compile_s = time.perf_counter() - start
    (check,) = runner_check(module, compiled, args, [out])
    if not check.passed:
        raise SystemExit(f"{name}: fusec result is wrong: {check.format()}")
    (exact,) = run_reference(module, args, precision="float64")
    hand = HAND[name](*args)
    baseline_err = float(np.linalg.norm(hand - exact) / np.linalg.norm(exact))
    if not baseline_err < 1e-4:
        raise SystemExit(f"{name}: the numpy baseline is wrong (rel err {baseline_err:.2e})")
    row = {
        "graph": name,
        "shape": ", ".join(str(a.shape) for a in args[:1]),
        "kernels": [k.kind for k in compiled.kernels],
        "compile_s": compile_s,
        "rel_err": check.errors[0][3],
        "numpy_rel_err": baseline_err,
        "fusec_ms": bench(lambda: compiled(*args), repeats),
        "fusec_min_ms": MINIMA[-1],
        "numpy_ms": bench(lambda: HAND[name](*args), repeats),
        "numpy_min_ms": MINIMA[-1],
    }
    row["speedup_vs_numpy"] = row["numpy_ms"] / row["fusec_ms"]
    if name in MEMORY_BOUND:
        read = sum(a.nbytes for a in args)
        write = sum(np.asarray(o).nbytes for o in (out if isinstance(out, tuple) else (out,)))
        row["min_bytes"] = read + write
        row["copy_floor_ms"] = copy_floor_ms(read, write, repeats)
        row["percent_of_copy"] = 100 * row["copy_floor_ms"] / row["fusec_ms"]
    return row


#: Graphs whose floor is moving bytes (no matmul/conv arithmetic to dominate).
MEMORY_BOUND = {"pointwise", "layernorm", "softmax"}


def copy_floor_ms(read_bytes: int, write_bytes: int, repeats: int) -> float:
    """Milliseconds a copy moving ``read + write`` bytes takes on this machine (median).

    The copy reads and writes ``write_bytes`` (a float32 array of that size);
    the time is scaled to the graph's ``read + write`` bytes.
    """
    from floor import parallel_copy  # imports numba: only when measuring

    src = np.random.default_rng(0).standard_normal(write_bytes // 4).astype(np.float32)
    dst = np.full_like(src, np.nan)
    ms = bench(lambda: parallel_copy(src, dst), repeats)
    if not np.array_equal(src, dst):
        raise SystemExit("the reference copy is wrong")
    return ms * (read_bytes + write_bytes) / (2 * write_bytes)


def machine() -> dict:
    import numba

    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "fusec": fusec.__version__,
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| graph | input | fusec kernels | fusec ms | numpy op by op ms | speedup vs numpy "
        "| copy floor ms (% reached) | rel err |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        floor = "-"
        if "copy_floor_ms" in r:
            floor = f"{r['copy_floor_ms']:.2f} ({r['percent_of_copy']:.0f}%)"
        lines.append(
            f"| {r['graph']} | {r['shape']} | {' + '.join(r['kernels'])} | {r['fusec_ms']:.2f} "
            f"| {r['numpy_ms']:.2f} | {r['speedup_vs_numpy']:.2f}x "
            f"| {floor} | {r['rel_err']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def cases(quick: bool = False, smoke: bool = False) -> list[tuple[str, str]]:
    """(name, IR) of every graph: the benchmark's sizes, ``quick``'s (a 16th), or the
    runner's smoke sizes (a few elements: ``benchmarks/cpu.py smoke ops``)."""
    if smoke:
        return [
            ("pointwise", pointwise_graph(64)),
            ("layernorm", layernorm_graph(4, 32)),
            ("softmax", softmax_graph(4, 32)),
            ("mlp_block", mlp_graph(1, 4, 16, 32)),
            ("conv_bias_relu", conv_graph(1, 4, 6, 8)),
        ]
    scale = 16 if quick else 1
    return [
        ("pointwise", pointwise_graph((1 << 24) // scale)),
        ("layernorm", layernorm_graph(4096 // scale, 1024)),
        ("softmax", softmax_graph(4096 // scale, 1024)),
        ("mlp_block", mlp_graph(4, 256 // scale, 512, 2048)),
        ("conv_bias_relu", conv_graph(8 // (8 if quick else 1), 64, 56, 64)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    rows = []
    for name, text in cases(args.quick):
        rows.append(run_case(name, text, args.repeats))
        print(f"{name}: fusec {rows[-1]['fusec_ms']:.2f} ms", flush=True)
    info = machine()
    now = dt.datetime.now(dt.UTC)
    md = (
        f"# fusec cpu benchmark, {now:%Y-%m-%d %H:%M} UTC\n\n"
        f"Machine: {info['cpu']}, {info['cores']} cores ({info['numba_threads']} Numba threads), "
        f"Python {info['python']}, numpy {info['numpy']}, Numba {info['numba']}, "
        f"fusec {info['fusec']}; load average {info['load_average'][0]:.2f}. All graphs "
        "float32; medians after warm-up (the JSON has the minima too). "
        '"numpy op by op" is the same graph hand-written as plain numpy, one call per op '
        "(benchmarks/cpu_bench.py HAND; the conv as sliding_window_view + einsum, GELU's erf "
        f'from {ERF_SOURCE}); "copy floor" is the time a parallel copy takes '
        "to move the graph's fewest bytes (inputs read once, outputs written once), and the "
        "percentage how close fusec gets to it.\n\n" + table(rows)
    )
    print()
    print(md)
    if not args.quick:
        stem = RESULTS / "cpu"
        payload = {"date": now.isoformat(), "machine": info, "erf": ERF_SOURCE, "results": rows}
        write_results(stem, payload, md)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
