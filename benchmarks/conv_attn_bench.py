"""fusec's cuda conv and attention kernels vs PyTorch (eager, torch.compile, cuDNN NHWC, SDPA).

    python benchmarks/conv_attn_bench.py --out benchmarks/results

Cases (fp16): conv N32 C64 56x56 K64 3x3 pad 1 + bias + relu (and, last, its 1x1
twin, ``pointwise``, run only when ``--only`` names it: the shape that
``FUSEC_CONV_INPUT=nchw`` reads in place); a ResNet basic
block (conv-bn-relu-conv-bn-add-relu, BatchNorm folded to a per-channel scale
and shift, N32 C64 56x56); attention softmax(Q K^T / 8) V at 32 x 1024 x 64
and 16 x 4096 x 128 (batch x heads flattened); and, run only when ``--only`` names it,
``rope``: Llama-8B's attention after its q/k/v projection (32 heads, 8 KV heads, head
128, batch 1, RoPE on q and k) at 128 to 4096 positions, the default plan (a RoPE kernel,
then the flash kernel) against ``fusec-cuda-rope-prologue`` (the flash kernel rotating q
and k itself), written to rope-prologue.md/.json. Baselines in the same run:
PyTorch eager (NCHW), torch.compile (default mode), eager channels_last
(cuDNN NHWC) for the convs, ``scaled_dot_product_attention`` for attention.

Every fusec result is first checked against torch in float32 (fresh randn
inputs). fusec is timed twice: plain calls through ``fusec.compile(...)(...)`` and the
replay of a captured CUDA graph. Timing (``time_it``, the same for every
implementation): per run a 256 MiB memset (cold L2) and a GPU sleep longer than
twice the call's host time are queued first on the current stream, then CUDA
events around the call, so the events measure GPU time while the host's
dispatch hides behind the sleep; median of 30 after 5 warm-ups. Each
implementation is then checked against the wall clock over 20 back-to-back
calls to a device-wide synchronize (work not ordered on the caller's stream
makes the wall clock exceed the events). ``--max-autotune`` adds
torch.compile(mode="max-autotune") for the conv and ResNet rows, compiled and
timed in a child process killed after ``--max-autotune-budget`` seconds (the
row then says so). Writes conv-attn.md and .json (date, device, commit).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "targets" / "cuda"))

from attention_cases import attention_graph  # noqa: E402
from rope_cases import rope_attention_graph, rope_tables  # noqa: E402
from stream_timing import checked_loop  # noqa: E402  (beside this script)

CONV = """func.func @f(%x: tensor<32x64x56x56xf16>, %w: tensor<64x64x3x3xf16>, %b: tensor<64xf16>) -> tensor<32x64x56x56xf16> {
  %c = ai.conv2d %x, %w {padding = array<i64: 1, 1>} : tensor<32x64x56x56xf16> * tensor<64x64x3x3xf16>
  %y = ai.bias_add %c, %b : tensor<32x64x56x56xf16> * tensor<64xf16>
  %r = ai.relu %y : tensor<32x64x56x56xf16>
  return %r : tensor<32x64x56x56xf16>
}"""  # noqa: E501
POINTWISE = CONV.replace("64x64x3x3xf16", "64x64x1x1xf16").replace(
    "{padding = array<i64: 1, 1>} ", ""
)
T = "tensor<32x64x56x56xf16>"
W = "tensor<64x64x3x3xf16>"
C = "tensor<64x1x1xf16>"
SCALE = 0.125  # attention_graph's constant
RESNET = f"""func.func @block(%x: {T}, %w1: {W}, %s1: {C}, %t1: {C}, %w2: {W}, %s2: {C}, %t2: {C}) -> {T} {{
  %c1 = ai.conv2d %x, %w1 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %m1 = ai.mul %c1, %s1 : {T} * {C}
  %a1 = ai.add %m1, %t1 : {T} * {C}
  %r1 = ai.relu %a1 : {T}
  %c2 = ai.conv2d %r1, %w2 {{padding = array<i64: 1, 1>}} : {T} * {W}
  %m2 = ai.mul %c2, %s2 : {T} * {C}
  %a2 = ai.add %m2, %t2 : {T} * {C}
  %res = ai.add %a2, %x : {T} * {T}
  %out = ai.relu %res : {T}
  return %out : {T}
}}"""  # noqa: E501


TIMING = (
    "GPU time by CUDA events around each call on the current stream, queued behind a "
    "256 MiB memset (cold L2) and a GPU sleep longer than twice the call's host time (host "
    "dispatch hidden, the same for every implementation), median of 30 after 5 warm-ups; "
    "each checked against the wall clock over 20 back-to-back calls"
)
_FLUSH_BYTES = 256 << 20  # larger than the H200's 50 MiB L2
_LOOP_CALLS = 20


@functools.cache
def _flush_buffer():
    import torch

    return torch.empty(_FLUSH_BYTES, dtype=torch.int8, device="cuda")


@functools.cache
def _sleep_cycles_per_ms() -> float:
    """GPU clock cycles per ms of ``torch.cuda._sleep`` (measured once with events)."""
    import torch

    cycles = 1 << 22
    torch.cuda._sleep(cycles)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def time_it(fn, warmup: int = 5, reps: int = 30) -> float:
    """Median GPU ms of ``fn`` on the current stream, the same way for every implementation.

    Per run: a 256 MiB memset (cold L2), then ``torch.cuda._sleep`` for longer than
    twice the host time of one call (measured in the warm-ups), then the start event,
    the call, the end event, all on the current stream. The launches are queued while
    the GPU still sleeps, so the events time the GPU work, not the host dispatch
    (a host-bound wrapper such as torch.compile's is not charged for its Python).
    Then ``stream_check``: events vs the wall clock over back-to-back calls."""
    import torch

    host = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    host_ms = max(host[1:] or host) * 1e3
    cycles = int(_sleep_cycles_per_ms() * max(2 * host_ms + 0.05, 0.1))
    flush = _flush_buffer()
    stream = torch.cuda.current_stream()
    pairs = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda._sleep(cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        pairs.append((start, end))
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in pairs)
    stream_check(fn)
    return times[len(times) // 2]


def stream_check(fn, calls: int = _LOOP_CALLS) -> None:
    """Events on the caller's stream vs the wall clock to a device-wide synchronize over
    ``calls`` back-to-back calls: work queued on another stream (not ordered after the
    caller's) ends after the end event, so the wall clock exceeds the event span by the
    GPU time not covered; work ordered on the caller's stream makes them agree. Raises
    when they differ by more than 10% + 0.1 ms in each of ``checked_loop``'s loops."""
    events, wall, ok = checked_loop(fn, calls)
    if not ok:
        raise RuntimeError(
            f"{calls} calls: events {events:.3f} ms on the caller's stream vs wall clock "
            f"{wall:.3f} ms: work not ordered on the caller's stream?"
        )


def check(got, ref) -> float:
    """Elementwise (rtol 1e-2, atol 1e-2 x max|ref|) and relative L2 < 1e-2; NaN fails."""
    import torch

    got, ref = got.float(), ref.float()
    tol = 1e-2 * max(float(ref.abs().max()), 1.0)
    bad = int((~torch.isclose(got, ref, rtol=1e-2, atol=tol) | torch.isnan(got)).sum())
    rel = float((got - ref).norm() / ref.norm())
    if bad or rel > 1e-2:
        raise AssertionError(f"{bad} elements off, rel L2 {rel:.2e}")
    return rel


def graph_ms(compiled, inputs) -> float | None:
    """Median ms of replaying ``compiled`` on ``inputs`` as a CUDA graph on the current
    stream (None, with the reason printed, when the capture fails)."""
    import torch

    try:
        graph = compiled.capture(*inputs)
        return time_it(lambda: graph.replay(torch.cuda.current_stream()))
    except Exception as err:  # keep the plain-call numbers of this case
        print(f"graph capture/replay failed: {type(err).__name__}: {err}", flush=True)
        return None


def conv_case():
    """The conv row's inputs (seeded) and its PyTorch function."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    h = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(32, 64, 56, 56, **h)
    w = torch.randn(64, 64, 3, 3, **h) * 0.05
    b = torch.randn(64, **h)

    def conv(x, w, b):
        return torch.relu(F.conv2d(x, w, padding=1) + b.view(1, -1, 1, 1))

    return (x, w, b), conv


def resnet_case():
    """The ResNet row's inputs (seeded) and its PyTorch function."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(1)
    h = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(32, 64, 56, 56, **h)
    w1, w2 = (torch.randn(64, 64, 3, 3, **h) * 0.05 for _ in range(2))
    s1, t1, s2, t2 = (torch.rand(64, 1, 1, **h) + 0.5 for _ in range(4))

    def block(x, w1, s1, t1, w2, s2, t2):
        r1 = torch.relu(F.conv2d(x, w1, padding=1) * s1 + t1)
        return torch.relu(F.conv2d(r1, w2, padding=1) * s2 + t2 + x)

    return (x, w1, s1, t1, w2, s2, t2), block


def pointwise_case():
    """The 1x1 conv row (the conv row's shape with a 1x1 kernel: the shape
    ``$FUSEC_CONV_INPUT=nchw`` can read in place) and its PyTorch function."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(2)
    h = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(32, 64, 56, 56, **h)
    w = torch.randn(64, 64, 1, 1, **h) * 0.1
    b = torch.randn(64, **h)

    def conv(x, w, b):
        return torch.relu(F.conv2d(x, w) + b.view(1, -1, 1, 1))

    return (x, w, b), conv


def strided_text(n, c, h, w, k, r, stride, pad) -> str:
    """conv2d (r x r, ``stride`` both ways, ``pad`` all round) + bias + relu in f16."""
    p = (h + 2 * pad - r) // stride + 1
    x, wt, o, b = (
        f"tensor<{n}x{c}x{h}x{w}xf16>",
        f"tensor<{k}x{c}x{r}x{r}xf16>",
        f"tensor<{n}x{k}x{p}x{p}xf16>",
        f"tensor<{k}xf16>",
    )
    attrs = f"strides = array<i64: {stride}, {stride}>, padding = array<i64: {pad}, {pad}>"
    return f"""func.func @f(%x: {x}, %w: {wt}, %b: {b}) -> {o} {{
  %c = ai.conv2d %x, %w {{{attrs}}} : {x} * {wt}
  %y = ai.bias_add %c, %b : {o} * {b}
  %r = ai.relu %y : {o}
  return %r : {o}
}}"""


#: strided convs of ResNet-50 at batch 32 (--only stem/strided): (n, c, h, w, k, r, stride, pad)
STRIDED = {
    "stem N32 C3 224x224 K64 7x7/2 + bias + relu": (32, 3, 224, 224, 64, 7, 2, 3),
    "strided N32 C128 56x56 K128 3x3/2 + bias + relu": (32, 128, 56, 56, 128, 3, 2, 1),
    "strided N32 C256 56x56 K512 1x1/2 + bias + relu": (32, 256, 56, 56, 512, 1, 2, 0),
}


def strided_case(n, c, h, w, k, r, stride, pad):
    """A strided row's inputs (seeded) and its PyTorch function."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(3)
    hw = dict(device="cuda", dtype=torch.float16)
    x = torch.randn(n, c, h, w, **hw)
    wt = torch.randn(k, c, r, r, **hw) * (1.0 / (c * r * r)) ** 0.5
    b = torch.randn(k, **hw)

    def conv(x, w, b):
        return torch.relu(F.conv2d(x, w, stride=stride, padding=pad) + b.view(1, -1, 1, 1))

    return (x, wt, b), conv


CASES = {"conv": conv_case, "resnet": resnet_case, "pointwise": pointwise_case}
_WORKER_TAG = "MAX_AUTOTUNE_RESULT "


def max_autotune_worker(case: str) -> None:
    """Child process: compile the case with mode="max-autotune", check it, time it."""
    import torch

    inputs, fn = CASES[case]()
    t0 = time.perf_counter()
    comp = torch.compile(fn, mode="max-autotune")
    got = comp(*inputs)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    check(got, fn(*(t.float() for t in inputs)))
    ms = time_it(functools.partial(comp, *inputs))
    print(_WORKER_TAG + json.dumps({"ms": ms, "compile_s": compile_s}), flush=True)


def max_autotune_ms(case: str, budget_s: float) -> tuple[float | None, str]:
    """torch.compile(mode="max-autotune") of ``case`` timed in a child process (its own
    process group, killed with its autotuning workers when over ``budget_s``)."""
    import signal

    cmd = [sys.executable, __file__, "--max-autotune-worker", case]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, _ = child.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return None, f"max-autotune skipped: not done within {budget_s:.0f} s"
    for line in stdout.splitlines():
        if line.startswith(_WORKER_TAG):
            result = json.loads(line[len(_WORKER_TAG) :])
            return result["ms"], f"max-autotune compiled in {result['compile_s']:.0f} s"
    return None, f"max-autotune failed (exit {child.returncode}, see the log)"


def main() -> None:
    import torch
    import torch.nn.functional as F

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", default="", help="comma-separated case prefixes")
    parser.add_argument(
        "--max-autotune",
        action="store_true",
        help='add torch.compile(mode="max-autotune") for the conv and ResNet rows',
    )
    parser.add_argument("--max-autotune-budget", type=float, default=240.0, metavar="SECONDS")
    parser.add_argument(
        "--fusec-only", action="store_true", help="time fusec alone (tile A/B runs)"
    )
    parser.add_argument("--max-autotune-worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.max_autotune_worker:
        max_autotune_worker(args.max_autotune_worker)
        return

    import fusec

    only = [s for s in args.only.split(",") if s]
    rows = []

    def wanted(case: str) -> bool:
        return not only or any(case.startswith(p) for p in only)

    def record(case: str, flops: float, min_bytes: float, rel: float, compiled, **ms) -> None:
        # a kernel on the PyTorch fallback is named: the row then does not time fusec's own
        fallback = [k.kind for k in compiled.kernels if k.runs_op_by_op]
        kernels = str(len(compiled.kernels))
        if fallback:
            kernels += f" ({', '.join(fallback)} on PyTorch)"
        row = {"case": case, "rel_l2": rel, "fusec_kernels": kernels, **ms}
        best = ms["fusec_graph_ms"] or ms["fusec_ms"]  # the kernels alone when captured
        row["fusec_tflops"] = flops / best / 1e9
        row["fusec_gbps"] = min_bytes / best / 1e6
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(args.out, rows)  # a later case that fails or hangs keeps this one

    def baseline(fn, *inputs) -> float | None:
        return None if args.fusec_only else time_it(functools.partial(fn, *inputs))

    def compiled_torch(fn):
        return fn if args.fusec_only else torch.compile(fn)

    def autotuned(case: str) -> dict:
        if not args.max_autotune or args.fusec_only:
            return {}
        ms, note = max_autotune_ms(case, args.max_autotune_budget)
        print(note, flush=True)
        return {"max_autotune_ms": ms, "max_autotune_note": note}

    h = dict(device="cuda", dtype=torch.float16)

    def conv_row(case, text, inputs, fn, flops, min_bytes, tuned_case=None) -> None:
        """A conv row: fusec (call, graph) vs eager NCHW, torch.compile, eager channels_last
        (every 4-D input), and max-autotune when ``tuned_case`` names its case."""
        f = fusec.compile(text, target="cuda")
        rel = check(f(*inputs), fn(*(t.float() for t in inputs)))
        comp = compiled_torch(fn)
        comp(*inputs)
        last = [t.to(memory_format=torch.channels_last) if t.dim() == 4 else t for t in inputs]
        record(
            case,
            flops,
            min_bytes,
            rel,
            f,
            fusec_ms=time_it(functools.partial(f, *inputs)),
            fusec_graph_ms=graph_ms(f, inputs),
            eager_ms=baseline(fn, *inputs),
            compile_ms=baseline(comp, *inputs),
            channels_last_ms=baseline(fn, *last),
            **(autotuned(tuned_case) if tuned_case else {}),
        )

    if wanted("conv"):
        (x, w, b), conv = conv_case()
        conv_row(
            "conv N32 C64 56x56 K64 3x3 + bias + relu",
            CONV,
            (x, w, b),
            conv,
            2.0 * 32 * 64 * 56 * 56 * 64 * 9,
            2.0 * (2 * x.numel() + w.numel() + b.numel()),
            "conv",
        )
    if wanted("resnet"):
        inputs, block = resnet_case()
        x, w1 = inputs[0], inputs[1]
        conv_row(
            "ResNet basic block N32 C64 56x56 (BN folded)",
            RESNET,
            inputs,
            block,
            2 * 2.0 * 32 * 64 * 56 * 56 * 64 * 9,
            2.0 * (2 * x.numel() + 2 * w1.numel()),
            "resnet",
        )
    torch.manual_seed(2)
    for bh, s, d in ((32, 1024, 64), (16, 4096, 128)):
        case = f"attention {bh}x{s}x{d}"
        if not wanted("attention"):
            continue
        q, k, v = (torch.randn(bh, s, d, **h) for _ in range(3))
        f = fusec.compile(attention_graph((bh,), s, s, d, d, scale="mul"), target="cuda")

        def attention(q, k, v):
            return torch.softmax((q @ k.transpose(-1, -2)) * SCALE, dim=-1) @ v

        def sdpa(q, k, v):  # (1, heads, S, D): the layout its flash kernel takes
            out = F.scaled_dot_product_attention(q[None], k[None], v[None], scale=SCALE)
            return out[0]

        rel = check(f(q, k, v), sdpa(q.float(), k.float(), v.float()))
        comp = compiled_torch(attention)
        comp(q, k, v)
        record(
            case,
            4.0 * bh * s * s * d,
            2.0 * 4 * bh * s * d,
            rel,
            f,
            fusec_ms=time_it(functools.partial(f, q, k, v)),
            fusec_graph_ms=graph_ms(f, (q, k, v)),
            eager_ms=baseline(attention, q, k, v),
            compile_ms=baseline(comp, q, k, v),
            sdpa_ms=baseline(sdpa, q, k, v),
        )
        del q, k, v
    for case, shape in STRIDED.items():
        if not (only and wanted(case)):  # asked for by name only: --only stem,strided
            continue
        n, c, hh, ww, k, r, stride, pad = shape
        inputs, conv = strided_case(*shape)
        p = (hh + 2 * pad - r) // stride + 1
        flops = 2.0 * n * k * p * p * c * r * r
        min_bytes = 2.0 * (inputs[0].numel() + n * k * p * p + inputs[1].numel())
        text = strided_text(*shape)
        conv_row(case, text, inputs, conv, flops, min_bytes)
        if c < 16:  # the stem: the implicit GEMM (zero-filled channel chunks) vs direct
            os.environ["FUSEC_CONV_FEW_CHANNELS"] = "direct"
            try:
                conv_row(case + " (direct kernel)", text, inputs, conv, flops, min_bytes)
            finally:
                del os.environ["FUSEC_CONV_FEW_CHANNELS"]
    if only and wanted("rope"):  # asked for by name only (the prologue's A/B)
        rope_prologue_ab(args.out)
    if only and wanted("pointwise"):  # asked for by name only (the input A/B)
        (x, w, b), conv = pointwise_case()
        conv_row(
            "conv N32 C64 56x56 K64 1x1 + bias + relu",
            POINTWISE,
            (x, w, b),
            conv,
            2.0 * 32 * 64 * 56 * 56 * 64,
            2.0 * (2 * x.numel() + w.numel() + b.numel()),
        )
    if rows:  # (--only rope writes its own table)
        write(args.out, rows, final=True)


#: (positions, causal) of the RoPE rows: the zero mask (every query block reads every K
#: tile: the prologue's most repeated rotation) at 128 to 4096, and the causal mask at 512
ROPE_CASES = [(128, False), (512, False), (1024, False), (2048, False), (4096, False), (512, True)]


def rope_graph(seq: int, causal: bool, heads: int = 32, kv_heads: int = 8, d: int = 128) -> str:
    """``rope_cases.rope_attention_graph`` at batch 1, with its causal mask or a zero one."""
    return rope_attention_graph(1, seq, heads, kv_heads, d, causal=causal)


def rope_prologue_ab(out: str) -> None:
    """The RoPE rows: each plan's call and graph-replay time on the same inputs (Llama's
    cos and sin tables), the prologue's output against the default's (the same roundings:
    rel L2 0 expected), its time over the default's."""
    import torch
    from bench_common import commit, write_results

    import fusec

    rows = []
    for seq, causal in ROPE_CASES:
        text = rope_graph(seq, causal)
        g = torch.Generator(device="cuda").manual_seed(0)
        qkv = torch.randn(1, seq, 48 * 128, device="cuda", dtype=torch.float16, generator=g)
        tables = [torch.from_numpy(t).half().cuda() for t in rope_tables(seq, 128)]
        inputs = (qkv, *tables)
        row: dict = {
            "case": f"RoPE attention 1x{seq} 32/8 heads d128, {'causal' if causal else 'zero'} mask"
        }
        outs = {}
        for name, pipeline in (("default", None), ("prologue", "fusec-cuda-rope-prologue")):
            f = fusec.compile(text, target="cuda", pipeline=pipeline)
            row[f"{name}_kernels"] = ", ".join(k.kind for k in f.kernels)
            outs[name] = f(*inputs).float()
            row[f"{name}_ms"] = time_it(functools.partial(f, *inputs))
            row[f"{name}_graph_ms"] = graph_ms(f, inputs)
        a, b = outs["prologue"], outs["default"]
        row["rel_l2"] = float((a - b).norm() / b.norm())
        row["nan"] = int(torch.isnan(a).sum())
        best = {n: row[f"{n}_graph_ms"] or row[f"{n}_ms"] for n in ("default", "prologue")}
        row["prologue_over_default"] = best["prologue"] / best["default"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "commit": commit(),
        "torch": torch.__version__,
        "timing": TIMING,
        "rows": rows,
    }
    lines = [
        f"# RoPE: its own kernel (the default) vs the flash kernel's prologue ({meta['device']}, "
        f"{meta['date']}, commit {meta['commit']})",
        "",
        f"Timing: {TIMING}. ms of the CUDA-graph replay (the kernels alone).",
        "",
        "| case | default kernels | default ms | prologue ms | prologue / default | rel L2 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ms = [r[f"{n}_graph_ms"] or r[f"{n}_ms"] for n in ("default", "prologue")]
        lines.append(
            f"| {r['case']} | {r['default_kernels']} | {ms[0]:.4f} | {ms[1]:.4f} | "
            f"{r['prologue_over_default']:.3f} | {r['rel_l2']:.1e} |"
        )
    write_results(Path(out) / "rope-prologue", meta, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines))


def write(out: str, rows: list[dict], final: bool = False) -> None:
    """conv-attn.md and .json with what has been measured so far."""
    import torch
    from bench_common import commit, write_results

    meta = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "commit": commit(),
        "torch": torch.__version__,
        "conv_tile": os.environ.get("FUSEC_CONV_TILE") or "choose_tile",
        "timing": TIMING + "; "
        "fusec TFLOP/s and GB/s from the CUDA-graph replay (the kernels alone) when captured",
        "rows": rows,
    }
    cols = [
        "fusec_ms",
        "fusec_graph_ms",
        "eager_ms",
        "compile_ms",
        "max_autotune_ms",
        "channels_last_ms",
        "sdpa_ms",
    ]
    lines = [
        f"# fusec cuda conv / attention vs PyTorch ({meta['device']}, {meta['date']}, "
        f"commit {meta['commit']})",
        "",
        f"Timing: {TIMING}. Conv tile: {meta['conv_tile']}.",
        "",
        "| case | fusec kernels | fusec ms (call) | fusec ms (graph) | eager ms | torch.compile ms "
        "| max-autotune ms | channels_last ms | SDPA ms | fusec TFLOP/s | fusec GB/s (min bytes) "
        "| rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = [f"{r[c]:.4f}" if r.get(c) is not None else "-" for c in cols]
        lines.append(
            f"| {r['case']} | {r['fusec_kernels']} | {' | '.join(cells)} | "
            f"{r['fusec_tflops']:.0f} | {r['fusec_gbps']:.0f} | {r['rel_l2']:.1e} |"
        )
    notes = [f"- {r['case']}: {r['max_autotune_note']}" for r in rows if "max_autotune_note" in r]
    lines += ["", *notes] if notes else []
    write_results(Path(out) / "conv-attn", meta, "\n".join(lines) + "\n", indent=1)
    if final:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
