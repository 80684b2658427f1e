"""The cpu target's benchmark runner: its suites as data (``benchmarks/runner.py`` says how).

    python benchmarks/cpu.py list
    python benchmarks/cpu.py run ops vs-ort            # tables in benchmarks/results
    python benchmarks/cpu.py run threads:pin-off       # a suite's named variant (an A/B side)
    python benchmarks/cpu.py run vs-ort -- --only conv,mlp --rounds 10
    python benchmarks/cpu.py smoke                     # every suite, small, no timing claims

Each suite's smoke takes the cases its script builds (the same builders, a few elements
each) through fusec on the reference target and the suite's baselines (hand-written numpy,
onnxruntime), checked against each other on fresh random inputs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runner  # noqa: E402
from runner import REFERENCE_COLUMNS, Suite, reference_row  # noqa: E402

ONNX_MODELS = runner.ROOT / "tests" / "frontend" / "onnx" / "models"


def _ort(model: Any, threads: int = 1) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(
        model if isinstance(model, str) else model.SerializeToString(),
        options,
        providers=["CPUExecutionProvider"],
    )


def onnx_row(
    name: str, model: Any, inputs: list[Any], numpy_fn: Any = None, tol: float = 1e-4
) -> dict[str, Any]:
    """One smoke row of an ONNX case: fusec (imported, on the reference target) against
    onnxruntime (and the numpy version, when given) on the same inputs."""
    from bench_common import best_ms

    import fusec

    compiled = fusec.compile(fusec.from_onnx(model), target="reference")
    session = _ort(model)
    feed = {i.name: a for i, a in zip(session.get_inputs(), inputs, strict=True)}
    got = compiled(*inputs)
    got = got[0] if isinstance(got, tuple) else got
    want = session.run(None, feed)[0]
    err = runner.rel_l2(got, want)
    if numpy_fn is not None:
        err = max(err, runner.rel_l2(numpy_fn(*inputs), want))
    if not err < tol:
        raise AssertionError(f"{name}: fusec, onnxruntime and numpy differ (rel L2 {err:.3g})")
    return {
        "case": name,
        "fusec_ms": best_ms(lambda: compiled(*inputs), rounds=1),
        "baseline_ms": best_ms(lambda: session.run(None, feed), rounds=1),
        "rel_l2": err,
        "status": "ok",
    }


def model_row(file: str, input_name: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """One smoke row of a test model (tests/frontend/onnx/models): imported at ``shape``,
    on the reference target, against onnxruntime (token ids below the vocabulary and masks
    of ones, as transformers_cpu_ab.py feeds them)."""
    import numpy as np
    from bench_common import best_ms

    import fusec
    from fusec.api import import_onnx

    path = ONNX_MODELS / file
    session = _ort(str(path))
    rng = np.random.default_rng(0)
    if input_name == "input_ids":
        feed = {input_name: rng.integers(0, 500, shape).astype(np.int64)}
        feed |= {i.name: np.ones(shape, np.int64) for i in session.get_inputs()[1:]}
    else:
        feed = {input_name: rng.standard_normal(shape).astype(np.float32)}
    args = [feed[i.name] for i in session.get_inputs()]
    dims = {k: v.shape for k, v in feed.items()}
    compiled = fusec.compile(import_onnx(path, input_shapes=dims).module, target="reference")
    got = compiled(*args)
    got = got[0] if isinstance(got, tuple) else got
    err = runner.rel_l2(got, session.run(None, feed)[0])
    if not err < 1e-4:
        raise AssertionError(f"{file}: fusec and onnxruntime differ (rel L2 {err:.3g})")
    return {
        "case": f"{file} {'x'.join(map(str, shape))}",
        "fusec_ms": best_ms(lambda: compiled(*args), rounds=1),
        "baseline_ms": best_ms(lambda: session.run(None, feed), rounds=1),
        "rel_l2": err,
        "status": "ok",
    }


# -- the suites' smokes ---------------------------------------------------------------------


def smoke_ops() -> runner.SmokeResult:
    import cpu_bench as b

    rows = [reference_row(n, t, b.HAND[n]) for n, t in b.cases(smoke=True)]
    return REFERENCE_COLUMNS, rows


def _vs_ort_cases() -> list[Any]:
    import cpu_vs_ort as b

    return b.cases(quick=False, smoke=True)


def smoke_vs_ort() -> runner.SmokeResult:
    rows = [onnx_row(c.name, c.model, c.inputs, c.numpy_fn) for c in _vs_ort_cases()]
    return REFERENCE_COLUMNS, rows


def smoke_threads() -> runner.SmokeResult:
    # cpu_threads.cases: the attention, softmax and MLP rows of cpu_vs_ort, at 1 and 2
    # threads; here each once, small
    names = {"attention", "softmax", "mlp"}
    rows = [onnx_row(c.name, c.model, c.inputs, c.numpy_fn) for c in _vs_ort_cases()]
    return REFERENCE_COLUMNS, [r for r in rows if r["case"] in names]


def smoke_moe() -> runner.SmokeResult:
    import cpu_moe as b

    # the layer at a few tokens on the reference target against the numpy token loop
    text = b.MOE.format(t=6, k=2, n=4, d=16, f=8, f2=16)
    return REFERENCE_COLUMNS, [reference_row("moe experts 6 tokens, top-2 of 4", text, b.dense)]


def smoke_call_overhead() -> runner.SmokeResult:
    import cpu_call_overhead as b
    import numpy as np

    def add_relu(x: Any, y: Any) -> Any:
        return np.maximum(x + y, np.float32(0))

    rows = [reference_row(f"add + relu {n}", b.graph(n), add_relu) for n in (64, 1 << 10)]
    return REFERENCE_COLUMNS, rows


def smoke_conv_layers() -> runner.SmokeResult:
    import cpu_conv_layers as b

    # each form of conv the script times (ResNet-50's conv + bias + relu at a stride of 1
    # and 2, EfficientNet-B0's depthwise, squeeze-excite-scaled and SiLU ones), small
    rows = []
    shapes = [(8, 8, 16, 3, 1, "relu"), (8, 8, 16, 1, 2, "relu"), (4, 9, 8, 3, 2, "relu")]
    shapes += [(8, 8, 8, 3, 1, "dw"), (8, 8, 8, 5, 2, "dw"), (8, 8, 4, 1, 1, "se")]
    shapes += [(4, 8, 8, 1, 1, "silu")]
    for c, hw, k, r, stride, form in shapes:
        model, feeds = b.conv_model(1, c, hw, k, r, stride, seed=0, form=form)
        name = f"{b.label(c, hw, k, r, stride)} {form}"
        rows.append(onnx_row(name, model, list(feeds.values())))
    return REFERENCE_COLUMNS, rows


def smoke_conv_transpose() -> runner.SmokeResult:
    import conv_transpose_cost as b

    rows = []
    for cin, cout, hw, k, s, p in ((8, 4, 4, 4, 2, 1), (4, 4, 6, 3, 1, 1)):
        model, x = b.model(cin, cout, hw, k, s, p)
        rows.append(onnx_row(b.label(cin, cout, hw, k, s, p), model, [x]))
    return REFERENCE_COLUMNS, rows


def smoke_pool() -> runner.SmokeResult:
    import cpu_pool_bench as b
    import numpy as np

    rows = []
    for shape in ((1, 4, 8, 8), (1, 3, 7, 7)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        rows.append(onnx_row(f"maxpool 3x3/2 {shape}", b.pool_model(shape), [x]))
    return REFERENCE_COLUMNS, rows


def smoke_quant() -> runner.SmokeResult:
    import ml_dtypes
    import numpy as np
    from bench_common import best_ms

    import fusec
    from fusec.dialect import numpy_ops

    # cpu_quant_bench's element-wise cases (ai.quantize f32 -> f8E4M3FN per tensor,
    # ai.dequantize i8 -> f32 per row), small, on the reference target, bit for bit against
    # numpy_ops, the reference the script checks its kernels with
    n, rows, cols = 64, 4, 16
    q_text = f"""func.func @f(%x: tensor<{n}xf32>, %s: tensor<f32>, %z: tensor<f8E4M3FN>)
    -> tensor<{n}xf8E4M3FN> {{
  %q = ai.quantize %x, %s, %z : tensor<{n}xf32> * tensor<f32> * tensor<f8E4M3FN>
  return %q : tensor<{n}xf8E4M3FN>
}}"""
    d_text = f"""func.func @f(%q: tensor<{rows}x{cols}xi8>, %s: tensor<{rows}xf32>,
    %z: tensor<{rows}xi8>) -> tensor<{rows}x{cols}xf32> {{
  %d = ai.dequantize %q, %s, %z {{axis = 0 : i64}}
      : tensor<{rows}x{cols}xi8> * tensor<{rows}xf32> * tensor<{rows}xi8>
  return %d : tensor<{rows}x{cols}xf32>
}}"""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 300).astype(np.float32)
    s, z = np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fn)
    codes = rng.integers(-128, 128, (rows, cols)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, rows).astype(np.float32)
    zero = rng.integers(-5, 5, rows).astype(np.int8)
    cases = {
        "quantize f32 -> f8E4M3FN": (
            q_text,
            (x, s, z),
            lambda: numpy_ops.quantize_linear(x, s, z, saturate=True),
        ),
        "dequantize i8 -> f32 per row": (
            d_text,
            (codes, scale, zero),
            lambda: numpy_ops.dequantize_linear(codes, scale[:, None], zero[:, None]),
        ),
    }
    out = []
    for name, (text, args, baseline) in cases.items():
        compiled = fusec.compile(text, target="reference")
        got, want = np.asarray(compiled(*args)), np.asarray(baseline())
        if got.dtype != want.dtype or got.tobytes() != want.tobytes():
            raise AssertionError(f"{name}: fusec and numpy_ops differ")
        out.append(
            {
                "case": name,
                "fusec_ms": best_ms(lambda c=compiled, a=args: c(*a), rounds=1),
                "baseline_ms": best_ms(baseline, rounds=1),
                "rel_l2": 0.0,
                "status": "ok",
            }
        )
    return REFERENCE_COLUMNS, out


def smoke_launcher() -> runner.SmokeResult:
    import cpu_launcher_ab as b

    rows = [model_row(f"{n}.dynamo.onnx", *b.CASES[n]) for n in ("resnet18", "gpt2")]
    return REFERENCE_COLUMNS, rows


def smoke_transformers() -> runner.SmokeResult:
    import transformers_cpu_ab as b

    rows = []
    for name in ("bert", "llama"):
        file, input_name, one, _, _ = b.CASES[name]
        rows.append(model_row(file, input_name, one))
    return REFERENCE_COLUMNS, rows


def smoke_models_small() -> runner.SmokeResult:
    import models_bench as b

    rows = []
    for name in ("mobilenet_v2", "bert"):
        input_name, one, _ = b.CASES[name]
        rows.append(model_row(f"{name}.{b.EXPORT}.onnx", input_name, one))
    return REFERENCE_COLUMNS, rows


def smoke_zoo() -> runner.SmokeResult:
    import models_cpu as b

    # without torch the zoo cannot be built or exported: the smoke checks its plan (every
    # model of CPU_ZOO is one of the GPU zoo's, with its batches), as the full run reads it
    args = b.parse_args([])
    rows = []
    for name, model in b.CPU_ZOO.items():
        if name not in b.zoo.ZOO:
            raise AssertionError(f"{name} is not a model of models_gpu.ZOO")
        batches = b.batches_of(model, ["1", "throughput"])
        rows.append(
            {"case": name, "batches": batches, "size": model.size_text, "status": "planned"}
        )
    if not rows or args.threads != "1,2":
        raise AssertionError("models_cpu.py's plan changed: the smoke expects 1 and 2 threads")
    return ["case", "batches", "size", "status"], rows


def smoke_survey() -> runner.SmokeResult:
    import models_survey as b

    # without torch nothing is built: the smoke checks the survey's case table
    return b.smoke()


def smoke_trace_overhead() -> runner.SmokeResult:
    import numpy as np
    from bench_common import best_ms

    import fusec
    from fusec import ops

    @fusec.fuse(target="reference")
    def block(x: Any, b: Any) -> Any:
        return ops.relu(x * 2.0 + b)

    rng = np.random.default_rng(0)
    x, b = (rng.standard_normal(8).astype(np.float32) for _ in range(2))
    err = runner.rel_l2(block(x, b), np.maximum(x * 2 + b, 0))
    if not err < 1e-6:
        raise AssertionError(f"@fusec.fuse gives the wrong result (rel L2 {err:.3g})")
    compiled = block.compiled(x, b)
    row = {
        "case": "relu(x * 2 + b), 8 x f32",
        "fused_call_ms": best_ms(lambda: block(x, b), rounds=3, calls=10),
        "compiled_call_ms": best_ms(lambda: compiled(x, b), rounds=3, calls=10),
        "traces": block.trace_count,
        "status": "ok",
    }
    return list(row), [row]


def smoke_fusion_scaling() -> runner.SmokeResult:
    import time

    import fusion_scaling as b

    import fusec

    rows = []
    for n in (20, 40):
        start = time.perf_counter()
        compiled = fusec.compile(b.chain(n), target="reference")
        seconds = time.perf_counter() - start
        kernels = compiled.ir.count("ai.fused")  # the groups the planner made
        if not kernels:
            raise AssertionError(f"a chain of {n} ops planned no group")
        rows.append({"ops": n, "compile_s": seconds, "kernels": kernels})
    return ["ops", "compile_s", "kernels"], rows


SUITES: list[Suite] = [
    Suite(
        "ops",
        "cpu_bench.py",
        "fusec vs hand-written numpy op by op, with the copy floor of memory-bound graphs",
        smoke_ops,
        args=("--repeats", "10"),
        table="cpu",
        options={"quick": ("--quick",)},
    ),
    Suite(
        "vs-ort",
        "cpu_vs_ort.py",
        "fusec vs onnxruntime vs numpy on the same ONNX graphs, interleaved rounds",
        smoke_vs_ort,
        args=("--rounds", "30"),
        table="cpu-vs-ort",
        requires=("onnxruntime",),
    ),
    Suite(
        "threads",
        "cpu_threads.py",
        "vs-ort's rows that stay behind at 1 and 2 threads, fusec vs onnxruntime",
        smoke_threads,
        args=("--rounds", "30", "--pause", "0.02", "--out", "{out}"),
        table="cpu-threads",
        requires=("onnxruntime",),
        # the pinned-workers A/B (the deleted cpu_pin_ab.py): run both sides in turn
        options={
            "pin-off": ("--rounds", "30", "--pause", "0.02", "--out", "{out}"),
            "pin-on": ("--rounds", "30", "--pause", "0.02", "--out", "{out}"),
        },
        env={"pin-off": {"FUSEC_CPU_PIN": "0"}, "pin-on": {"FUSEC_CPU_PIN": "1"}},
    ),
    Suite(
        "moe",
        "cpu_moe.py",
        "ai.moe_experts (constant weights) vs transformers' loop over experts, decode and prefill",
        smoke_moe,
        args=("--out", "{out}"),
        table="cpu-moe",
        requires=("torch", "transformers"),
    ),
    Suite(
        "call-overhead",
        "cpu_call_overhead.py",
        "per-call cost of a compiled cpu function around its kernels",
        smoke_call_overhead,
        args=("--rounds", "15", "--calls", "2000", "--out", "{out}"),
        table="cpu-call-overhead",
    ),
    Suite(
        "conv-layers",
        "cpu_conv_layers.py",
        "ResNet-50's dense convs (or EfficientNet-B0's) one by one vs onnxruntime, alternated",
        smoke_conv_layers,
        args=("--rounds", "21", "--out", "{out}"),
        table="cpu-conv-layers",
        options={
            "efficientnet": ("--rounds", "21", "--out", "{out}", "--model", "efficientnet_b0")
        },
        requires=("onnxruntime",),
    ),
    Suite(
        "conv-transpose",
        "conv_transpose_cost.py",
        "ConvTranspose (a conv of the zero-inserted input) vs onnxruntime, 1 thread",
        smoke_conv_transpose,
        args=("--out", "{out}"),
        table="conv-transpose",
        requires=("onnxruntime",),
        env={"": {"NUMBA_NUM_THREADS": "1"}},
    ),
    Suite(
        "pool",
        "cpu_pool_bench.py",
        "ResNet's 3x3/2 max pool vs onnxruntime's MaxPool at 1 and 2 threads",
        smoke_pool,
        args=("--samples", "15", "--calls", "200", "--out", "{out}"),
        table="cpu-pool",
        requires=("onnxruntime",),
    ),
    Suite(
        "quant",
        "cpu_quant_bench.py",
        "quantize/dequantize kernels and QDQ MLP/CNN int8 vs onnxruntime (printed)",
        smoke_quant,
        requires=("onnxruntime",),
        options={"cnn": ("--model", "cnn"), "int8": ("--activation", "int8")},
    ),
    Suite(
        "launcher",
        "cpu_launcher_ab.py",
        "the compiled cpu launcher vs the Python launch loop on the test models",
        smoke_launcher,
        args=("--calls", "300", "--out", "{out}"),
        table="cpu-launcher",
        env={"": {"NUMBA_NUM_THREADS": "1"}},
    ),
    Suite(
        "transformers",
        "transformers_cpu_ab.py",
        "BERT, GPT-2, Llama test exports vs onnxruntime, calls alternated",
        smoke_transformers,
        args=("--threads", "1,2", "--pairs", "200", "--out", "{out}"),
        table="cpu-transformers",
        requires=("onnxruntime",),
    ),
    Suite(
        "models-small",
        "models_bench.py",
        "the ONNX test models end to end vs onnxruntime",
        smoke_models_small,
        args=("--target", "cpu", "--threads", "1", "--out", "{out}"),
        table="models-small-cpu",
        requires=("onnxruntime",),
    ),
    Suite(
        "zoo",
        "models_cpu.py",
        "the GPU zoo's architectures at cpu sizes vs onnxruntime, compile times",
        smoke_zoo,
        args=("--out", "{out}"),
        table="models-cpu",
        requires=("torch", "torchvision", "transformers", "onnxruntime"),
        options={"torch-backend": ("--out", "{out}", "--torch-backend")},
    ),
    Suite(
        "survey",
        "models_survey.py",
        "models outside the zoo: import, the cuda plan without a GPU, cpu numerics",
        smoke_survey,
        args=("--out", "{out}"),
        table="models-survey",
        requires=("torch", "torchvision", "transformers"),
    ),
    Suite(
        "trace-overhead",
        "trace_overhead.py",
        "what @fusec.fuse adds per call on a tiny graph",
        smoke_trace_overhead,
        args=("--target", "cpu", "--out", "{out}/trace-overhead.json"),
        table="trace-overhead",
    ),
    Suite(
        "fusion-scaling",
        "fusion_scaling.py",
        "fusec.compile time on long elementwise chains",
        smoke_fusion_scaling,
        args=("800", "1600", "3200", "--out", "{out}"),
        table="fusion-scaling",
    ),
]


if __name__ == "__main__":
    sys.exit(runner.main("cpu", SUITES))
