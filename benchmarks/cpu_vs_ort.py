"""fusec's cpu target vs onnxruntime vs numpy op by op, on the same ONNX graphs (a benchmark).

Each graph is built here as an ONNX model (weights as initialisers) and run
three ways in one process:

* fusec: ``fusec.from_onnx`` + ``fusec.compile(target="cpu")``;
* onnxruntime: CPU provider, all graph optimisations, intra-op threads = the
  cores Numba uses, sequential execution;
* numpy op by op: the same maths written by hand with one numpy call per op
  (what a user without either tool would write).

Every result is checked against fusec's float64 reference executor (relative
L2 error, f32). Timing: warm-up calls, then rounds in which each of the three
runs once in turn (interleaved, so load from other processes hits all three
alike); medians and minima over the rounds. Prints a markdown table and, unless
``--quick``, writes ``benchmarks/results/cpu-vs-ort<suffix>.md`` and ``.json``
(date, machine, commit, thread counts, BLAS in use, load average).

    python benchmarks/cpu_vs_ort.py [--rounds 30] [--only conv,mlp] [--quick]
                                    [--threads 1] [--suffix b]

This machine may set ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` (see the
results' notes): the table records them; to measure against an unrestricted
numpy, unset both in the benchmark's command only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fusec.targets.cpu.threads import configure

configure()  # before numpy loads OpenBLAS: applies to fusec and the numpy baseline alike

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from bench_common import RESULTS, commit, cpu_name, write_results  # noqa: E402  (beside this script)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fusec  # noqa: E402
from fusec.runtime.reference import run_reference  # noqa: E402

#: Pause before each timed call: onnxruntime's pool spins for a while after a run, which
#: would take the cores from (and add CPU time to) whichever call comes next.
SETTLE_S = 0.02
F32 = TensorProto.FLOAT


@dataclass
class Case:
    """One graph: its ONNX model, random inputs and the numpy op-by-op version."""

    name: str
    what: str
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    numpy_fn: Callable[..., np.ndarray]
    weights: list[np.ndarray] = field(default_factory=list)
    #: Memory-bound: the table times the streaming floor too (``streaming_floor``).
    memory_bound: bool = False


# ----------------------------------------------------------------- graph builders


def _model(nodes, inputs, output, initializers, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F32, a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(output[0], F32, output[1])],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _rand(rng, *shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def pointwise_case(rng, n: int) -> Case:
    x, a, b, c = (_rand(rng, n) for _ in range(4))
    nodes = [
        helper.make_node("Mul", ["x", "a"], ["t0"]),
        helper.make_node("Add", ["t0", "b"], ["t1"]),
        helper.make_node("Relu", ["t1"], ["t2"]),
        helper.make_node("Mul", ["t2", "c"], ["y"]),
    ]
    model = _model(nodes, [("x", x), ("a", a), ("b", b), ("c", c)], ("y", (n,)), [])

    def numpy_fn(x, a, b, c):
        return np.maximum(x * a + b, np.float32(0)) * c

    what = f"relu(x*a+b)*c, {n}"
    return Case("pointwise", what, model, [x, a, b, c], numpy_fn, memory_bound=True)


EPS = np.float32(1e-5)


def _layernorm_np(x, g, b, eps=EPS):
    mean = x.mean(-1, keepdims=True)
    c = x - mean
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + eps) * g + b


def _softmax_np(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layernorm_case(rng, m: int, n: int) -> Case:
    x, g, b = _rand(rng, m, n), _rand(rng, n), _rand(rng, n)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)]
    model = _model(nodes, [("x", x)], ("y", (m, n)), [("g", g), ("b", b)])
    return Case(
        "layernorm",
        f"layernorm {m}x{n}",
        model,
        [x],
        lambda x: _layernorm_np(x, g, b),
        [g, b],
        memory_bound=True,
    )


def softmax_case(rng, m: int, n: int) -> Case:
    x = _rand(rng, m, n)
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=-1)]
    model = _model(nodes, [("x", x)], ("y", (m, n)), [])
    return Case("softmax", f"softmax {m}x{n}", model, [x], _softmax_np, memory_bound=True)


def _conv_np(x, w, b, pad=1):
    """NCHW conv (stride 1, 'same' padding) as im2col + one matmul, then the bias."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))  # N C H W R S
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * r * s)
    y = cols @ w.reshape(k, c * r * s).T  # (N*H*W, K)
    return y.reshape(n, h, wd, k).transpose(0, 3, 1, 2) + b[:, None, None]


def conv_case(rng, n: int, c: int, hw: int, k: int) -> Case:
    x = _rand(rng, n, c, hw, hw)
    w = _rand(rng, k, c, 3, 3, scale=(2.0 / (9 * c)) ** 0.5)
    b = _rand(rng, k)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = _model(nodes, [("x", x)], ("y", (n, k, hw, hw)), [("w", w), ("b", b)])

    def numpy_fn(x):
        return np.maximum(_conv_np(x, w, b), np.float32(0))

    what = f"conv N{n} C{c} {hw}x{hw} K{k} 3x3 pad 1 + bias + relu"
    return Case("conv_bias_relu", what, model, [x], numpy_fn, [w, b])


def ln_matmul_softmax_case(rng, m: int, k: int, n: int) -> Case:
    x, g, be = _rand(rng, m, k), _rand(rng, k), _rand(rng, k)
    w = _rand(rng, k, n, scale=k**-0.5)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "be"], ["h"], axis=-1),
        helper.make_node("MatMul", ["h", "w"], ["s"]),
        helper.make_node("Softmax", ["s"], ["y"], axis=-1),
    ]
    model = _model(nodes, [("x", x)], ("y", (m, n)), [("g", g), ("be", be), ("w", w)])

    def numpy_fn(x):
        return _softmax_np(_layernorm_np(x, g, be) @ w)

    what = f"layernorm -> matmul ({m}x{k}x{n}) -> softmax"
    return Case("ln_matmul_softmax", what, model, [x], numpy_fn, [g, be, w])


def mlp_case(rng, m: int, d: int, h: int) -> Case:
    x = _rand(rng, m, d)
    w1, b1 = _rand(rng, d, h, scale=d**-0.5), _rand(rng, h)
    w2, b2 = _rand(rng, h, d, scale=h**-0.5), _rand(rng, d)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["t0"]),
        helper.make_node("Add", ["t0", "b1"], ["t1"]),
        helper.make_node("Relu", ["t1"], ["t2"]),
        helper.make_node("MatMul", ["t2", "w2"], ["t3"]),
        helper.make_node("Add", ["t3", "b2"], ["t4"]),
        helper.make_node("Add", ["t4", "x"], ["y"]),
    ]
    inits = [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)]
    model = _model(nodes, [("x", x)], ("y", (m, d)), inits)

    def numpy_fn(x):
        return np.maximum(x @ w1 + b1, np.float32(0)) @ w2 + b2 + x

    what = f"MLP: matmul {m}x{d}x{h} + bias + relu, matmul + bias + residual"
    return Case("mlp", what, model, [x], numpy_fn, [w1, b1, w2, b2])


def attention_case(rng, b: int, heads: int, s: int, d: int) -> Case:
    """softmax(q k^T / sqrt(d)) v; k comes transposed (B, H, D, S), as a cache would hold it."""
    q, kt, v = _rand(rng, b, heads, s, d), _rand(rng, b, heads, d, s), _rand(rng, b, heads, s, d)
    scale = np.array(d**-0.5, dtype=np.float32)
    nodes = [
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    inputs = [("q", q), ("kt", kt), ("v", v)]
    model = _model(nodes, inputs, ("y", (b, heads, s, d)), [("scale", scale)])

    def numpy_fn(q, kt, v):
        return _softmax_np((q @ kt) * scale) @ v

    what = f"attention B{b} H{heads} S{s} D{d} (k given transposed)"
    return Case("attention", what, model, [q, kt, v], numpy_fn)


def _bn_params(rng, k: int) -> list[np.ndarray]:
    gamma, beta = _rand(rng, k, scale=0.2) + 1, _rand(rng, k, scale=0.1)
    mean, var = _rand(rng, k, scale=0.1), np.abs(_rand(rng, k)) + 0.5
    return [gamma, beta, mean, var]


def _bn_np(x, gamma, beta, mean, var, eps=EPS):
    scale = gamma / np.sqrt(var + eps)
    return x * scale[:, None, None] + (beta - mean * scale)[:, None, None]


def resnet_block_case(rng, n: int, c: int, hw: int) -> Case:
    """ResNet basic block (inference): conv-BN-relu, conv-BN, + x, relu (BN as exported)."""
    x = _rand(rng, n, c, hw, hw)
    w1, w2 = (_rand(rng, c, c, 3, 3, scale=(2.0 / (9 * c)) ** 0.5) for _ in range(2))
    bn1, bn2 = _bn_params(rng, c), _bn_params(rng, c)
    conv = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], **conv),
        helper.make_node("BatchNormalization", ["c1", "g1", "b1", "m1", "v1"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], **conv),
        helper.make_node("BatchNormalization", ["c2", "g2", "b2", "m2", "v2"], ["n2"]),
        helper.make_node("Add", ["n2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = [("w1", w1), ("w2", w2)]
    inits += [(f"{p}1", a) for p, a in zip("gbmv", bn1, strict=True)]
    inits += [(f"{p}2", a) for p, a in zip("gbmv", bn2, strict=True)]
    model = _model(nodes, [("x", x)], ("y", (n, c, hw, hw)), inits)
    zero = np.zeros(c, np.float32)

    def numpy_fn(x):
        r1 = np.maximum(_bn_np(_conv_np(x, w1, zero), *bn1), np.float32(0))
        return np.maximum(_bn_np(_conv_np(r1, w2, zero), *bn2) + x, np.float32(0))

    what = f"ResNet basic block N{n} C{c} {hw}x{hw} (conv-BN-relu-conv-BN-add-relu)"
    return Case("resnet_block", what, model, [x], numpy_fn, [w1, w2, *bn1, *bn2])


def cases(quick: bool, smoke: bool = False) -> list[Case]:
    """Every graph at the benchmark's sizes, ``quick``'s (an 8th), or the runner's smoke
    sizes (a few elements: ``benchmarks/cpu.py smoke vs-ort``)."""
    rng = np.random.default_rng(0)
    if smoke:
        return [
            pointwise_case(rng, 64),
            layernorm_case(rng, 4, 32),
            softmax_case(rng, 4, 32),
            conv_case(rng, 1, 4, 6, 8),
            ln_matmul_softmax_case(rng, 4, 16, 16),
            mlp_case(rng, 4, 16, 32),
            attention_case(rng, 1, 2, 8, 8),
            resnet_block_case(rng, 1, 4, 6),
        ]
    q = 8 if quick else 1
    return [
        pointwise_case(rng, (1 << 24) // q),
        layernorm_case(rng, 4096 // q, 1024),
        softmax_case(rng, 4096 // q, 1024),
        conv_case(rng, 8 // q, 64, 56, 64),
        ln_matmul_softmax_case(rng, 2048 // q, 1024, 1024),
        mlp_case(rng, 1024 // q, 512, 2048),
        attention_case(rng, 1, 12, 512 // q, 64),
        resnet_block_case(rng, 8 // q, 64, 56),
    ]


# ----------------------------------------------------------------- running


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out64, ref64 = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(out64)):
        return float("inf")
    return float(np.linalg.norm(out64 - ref64) / np.linalg.norm(ref64))


def run_case(case: Case, rounds: int, threads: int) -> dict:
    module = fusec.from_onnx(case.model)
    start = time.perf_counter()
    compiled = fusec.compile(module, target="cpu")
    out = compiled(*case.inputs)  # the first call compiles (or loads from the kernel cache)
    compile_s = time.perf_counter() - start
    ref = run_reference(module, case.inputs, precision="float64")[0]
    session = ort_session(case.model, threads)
    feed = {i.name: a for i, a in zip(session.get_inputs(), case.inputs, strict=True)}
    runs: dict[str, Callable[[], object]] = {
        "fusec": lambda: compiled(*case.inputs),
        "onnxruntime": lambda: session.run(None, feed)[0],
    }
    primers = {}
    if case.memory_bound:  # after a numpy run of its own, as fusec's call follows numpy's
        runs["floor"] = streaming_floor(case.inputs, out.size)
        primers["floor"] = lambda: case.numpy_fn(*case.inputs)
    runs["numpy"] = lambda: case.numpy_fn(*case.inputs)
    errors = {"fusec": rel_err(out, ref)}
    for name in ("onnxruntime", "numpy"):
        errors[name] = rel_err(runs[name](), ref)
    for name, err in errors.items():
        if not err < 1e-4:
            raise SystemExit(f"{case.name}: {name} is wrong (relative L2 error {err:.2e})")
    load_start = os.getloadavg()[0]
    times, cpu, faults, after = interleaved(runs, rounds, primers)
    row = {
        "graph": case.name,
        "what": case.what,
        "kernels": [k.kind for k in compiled.kernels],
        "compile_s": round(compile_s, 3),
        "rel_err": errors,
    }
    for name, ts in times.items():
        row[f"{name}_ms"] = statistics.median(ts)
        row[f"{name}_min_ms"] = min(ts)
        row[f"{name}_spread"] = _spread(ts)
        row[f"{name}_cpu_ms"] = statistics.median(cpu[name])
        row[f"{name}_cpu_min_ms"] = min(cpu[name])
        row[f"{name}_minor_faults"] = statistics.median(faults[name])
        row[f"{name}_cpu_after_ms"] = statistics.median(after[name])
    row["rounds"] = len(times["fusec"])
    row["load_average"] = (load_start, os.getloadavg()[0])
    return row


def interleaved(
    runs: dict[str, Callable[[], object]],
    rounds: int,
    primers: dict[str, Callable[[], object]] | None = None,
) -> tuple[
    dict[str, list[float]], dict[str, list[float]], dict[str, list[int]], dict[str, list[float]]
]:
    """Wall and process-CPU milliseconds and minor page faults per call of each run, and the
    process-CPU milliseconds spent in the ``SETTLE_S`` pause after each call (a thread pool
    that spins while it waits for the next job, as onnxruntime's does by default, burns
    them), in rounds that call each once in turn.

    Two warm-up calls each; fewer rounds when one round takes long (at most ~40 s a graph).
    CPU time counts every thread of the process (onnxruntime's spinning workers too): on
    a loaded machine it shows the work done when the wall clock mostly shows waiting.
    Each call starts ``SETTLE_S`` after the previous one ended; a run with a primer has it
    called, untimed, before that pause (so that the run meets the caches and threads that
    the primer leaves, as the run after it in a round meets the run's).
    """
    once = 0.0
    for fn in runs.values():
        fn()
        start = time.perf_counter()
        fn()
        once += time.perf_counter() - start
    rounds = max(5, min(rounds, int(40.0 / max(once, 1e-9))))
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    faults: dict[str, list[int]] = {name: [] for name in runs}
    after: dict[str, list[float]] = {name: [] for name in runs}
    time.sleep(SETTLE_S)
    for _ in range(rounds):
        for name, fn in runs.items():
            if primers and name in primers:
                primers[name]()
                time.sleep(SETTLE_S)
            start_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[name].append((time.perf_counter() - start) * 1e3)
            cpu[name].append((time.process_time() - start_cpu) * 1e3)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start_faults)
            start_cpu = time.process_time()
            time.sleep(SETTLE_S)
            after[name].append((time.process_time() - start_cpu) * 1e3)
    return wall, cpu, faults, after


def streaming_floor(inputs: list[np.ndarray], size: int) -> Callable[[], object]:
    """The least a memory-bound graph can take here: its full-size inputs read once and an
    output of ``size`` float32s written once (x + 1 for one input, the elementwise sum for
    four), by the same Numba threads fusec uses, placed the same way (``affinity.run``),
    in 16 chunks."""
    from fusec.targets.cpu import affinity

    flat = [a.reshape(-1) for a in inputs if a.size == size]
    kernel = _floor_kernels().get(len(flat))
    if kernel is None:
        raise ValueError(f"no streaming floor for {len(flat)} full-size inputs (1 or 4)")
    args = [*flat, np.empty(size, np.float32)]
    affinity.run(kernel, args)  # compiles
    return lambda: affinity.run(kernel, args)


@functools.cache
def _floor_kernels() -> dict[int, Callable[..., None]]:
    import numba

    @numba.njit(parallel=True)
    def copy(x, out):
        chunk = (out.size + 15) // 16
        for t in numba.prange(16):
            o, a = out[t * chunk : (t + 1) * chunk], x[t * chunk : (t + 1) * chunk]
            for k in range(o.size):
                o[k] = a[k] + np.float32(1.0)

    @numba.njit(parallel=True)
    def sum4(x, y, z, w, out):
        chunk = (out.size + 15) // 16
        for t in numba.prange(16):
            lo, hi = t * chunk, (t + 1) * chunk
            o, a, b, c, d = out[lo:hi], x[lo:hi], y[lo:hi], z[lo:hi], w[lo:hi]
            for k in range(o.size):
                o[k] = a[k] + b[k] + c[k] + d[k]

    return {1: copy, 4: sum4}


def _spread(ts: list[float]) -> float:
    """(p75 - p25) / median: how noisy the runs were."""
    q = statistics.quantiles(ts, n=4)
    return (q[2] - q[0]) / statistics.median(ts)


# ----------------------------------------------------------------- reporting


def environment(threads: int) -> dict:
    import numba
    import onnxruntime as ort
    from threadpoolctl import threadpool_info

    blas = [
        {k: lib.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
        | {"library": Path(lib["filepath"]).name}
        for lib in threadpool_info()
        if lib.get("user_api") == "blas"
    ]
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "commit": commit(dirty=" (with uncommitted changes)", missing="unknown"),
        "numba_threads": numba.get_num_threads(),
        "onnxruntime_intra_op_threads": threads,
        "blas": blas,
        "env": {
            k: os.environ.get(k)
            for k in (
                "OPENBLAS_CORETYPE",
                "OPENBLAS_L2_SIZE",
                "OPENBLAS_THREAD_TIMEOUT",
                "OMP_WAIT_POLICY",
                "GOMP_SPINCOUNT",
                "FUSEC_CPU_PIN",
            )
        },
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "fusec": fusec.__version__,
        "numba_workers": _workers(),
    }


def _workers() -> str:
    """Where this thread's Numba workers ran (``fusec.targets.cpu.affinity``)."""
    from fusec.targets.cpu import affinity

    placement = affinity.current()
    if placement is None:
        return "no launch yet"
    if placement.reason is not None:
        return f"not pinned ({placement.reason})"
    cpus, caller = list(placement.worker_cpus), sorted(placement.caller_cpus or ())
    return f"pinned to CPUs {cpus}, the caller on {caller} during a kernel"


def table(rows: list[dict]) -> str:
    lines = [
        "| graph | fusec kernels | fusec ms | onnxruntime ms | numpy op by op ms "
        "| ort / fusec | numpy / fusec | streaming floor ms | floor / fusec "
        "| CPU ms fusec / ort / numpy "
        "| CPU ms in the pause after f/o/n | spread f/o/n "
        "| page faults / call f/o/n | load | fusec rel err |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | --- | --- | ---: |",
    ]
    for r in rows:
        f, o, n = r["fusec_ms"], r["onnxruntime_ms"], r["numpy_ms"]
        fm, om, nm = r["fusec_min_ms"], r["onnxruntime_min_ms"], r["numpy_min_ms"]
        spread = "/".join(f"{r[f'{k}_spread']:.0%}" for k in ("fusec", "onnxruntime", "numpy"))
        cpu = " / ".join(f"{r[f'{k}_cpu_min_ms']:.1f}" for k in ("fusec", "onnxruntime", "numpy"))
        idle = " / ".join(
            f"{r[f'{k}_cpu_after_ms']:.1f}" for k in ("fusec", "onnxruntime", "numpy")
        )
        faults = "/".join(
            f"{r[f'{k}_minor_faults']:.0f}" for k in ("fusec", "onnxruntime", "numpy")
        )
        load = "{:.1f}-{:.1f}".format(*r["load_average"])
        floor = "— | —"
        if "floor_ms" in r:
            b, bm = r["floor_ms"], r["floor_min_ms"]
            floor = f"{b:.2f} ({bm:.2f}) | {b / f:.2f}x ({bm / fm:.2f}x)"
        lines.append(
            f"| {r['what']} | {' + '.join(r['kernels'])} | {f:.2f} ({fm:.2f}) | {o:.2f} ({om:.2f})"
            f" | {n:.2f} ({nm:.2f}) | {o / f:.2f}x ({om / fm:.2f}x) | {n / f:.2f}x ({nm / fm:.2f}x)"
            f" | {floor} | {cpu} | {idle} | {spread} | {faults} | {load}"
            f" | {r['rel_err']['fusec']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--only", help="comma-separated graph names")
    parser.add_argument("--quick", action="store_true", help="small sizes, nothing written")
    parser.add_argument(
        "--threads",
        type=int,
        help="threads for fusec (Numba) and onnxruntime (intra-op); default: Numba's count. "
        "1 compares the kernels' single-threaded speed, apart from thread scheduling",
    )
    parser.add_argument(
        "--suffix",
        default="",
        help="appended to the result files' name (one side of an A/B, e.g. -b)",
    )
    args = parser.parse_args()
    import numba

    if args.threads:
        numba.set_num_threads(args.threads)
    threads = numba.get_num_threads()
    chosen = cases(args.quick)
    if args.only:
        chosen = [c for c in chosen if c.name in args.only.split(",")]
    load_before = os.getloadavg()
    rows = []
    for case in chosen:
        rows.append(run_case(case, args.rounds, threads))
        r = rows[-1]
        print(
            f"{case.name}: fusec {r['fusec_ms']:.2f} ms, onnxruntime {r['onnxruntime_ms']:.2f} "
            f"ms, numpy {r['numpy_ms']:.2f} ms",
            flush=True,
        )
    info = environment(threads)
    info["load_average_before"], info["load_average_after"] = load_before, os.getloadavg()
    now = dt.datetime.now(dt.UTC)
    blas = ", ".join(
        f"{b['library']} {b['version']} ({b['architecture']} kernels, {b['num_threads']} threads)"
        for b in info["blas"]
    )
    md = (
        f"# fusec cpu vs onnxruntime, {now:%Y-%m-%d %H:%M} UTC, commit {info['commit']}\n\n"
        f"Machine: {info['cpu']}, {info['cores']} cores; fusec {info['numba_threads']} Numba "
        f"threads, onnxruntime {threads} intra-op threads (all graph optimisations); BLAS: "
        f"{blas}. Python {info['python']}, numpy {info['numpy']}, Numba {info['numba']}, "
        f"onnxruntime {info['onnxruntime']}. Numba workers: {info['numba_workers']}. "
        "Environment: "
        + ", ".join(f"{k}={v}" for k, v in info["env"].items())
        + ". Load average (1/5/15 min) "
        + "/".join(f"{v:.2f}" for v in load_before)
        + " before, "
        + "/".join(f"{v:.2f}" for v in info["load_average_after"])
        + " after (other processes share the cores). All graphs float32, the same ONNX model for "
        "fusec and onnxruntime; wall-clock medians over interleaved rounds, (minima) in "
        "brackets; CPU ms = the least process CPU time of one call (all threads; "
        "onnxruntime's workers spin while waiting, which counts); CPU ms in the pause after "
        f"= the median process CPU time in the {SETTLE_S * 1e3:.0f} ms pause after a call "
        "(a pool spinning for its next job: time neither the call nor its CPU ms column "
        "counts; a spin longer than the pause lands in the next run's columns too, numpy "
        "follows onnxruntime); spread = interquartile "
        "range / median of fusec/onnxruntime/numpy; page faults = median minor faults of a "
        "call; load = the 1-minute load average when the row started and ended; streaming "
        "floor (memory-bound graphs) = the same Numba threads reading the graph's full-size "
        "inputs once and writing its output once (x + 1, or the sum of the four inputs), in "
        "the same rounds, after an untimed numpy run and the pause (fusec's call follows "
        "numpy's too); floor / fusec = the share of that speed fusec "
        "reaches (1.00x: at the floor).\n\n" + table(rows)
    )
    print()
    print(md)
    if not args.quick and not args.only:
        stem = RESULTS / f"cpu-vs-ort{args.suffix}"
        payload = {"date": now.isoformat(), "machine": info, "results": rows}
        write_results(stem, payload, md)
        print(f"wrote {stem}.md and {stem}.json")


if __name__ == "__main__":
    main()
