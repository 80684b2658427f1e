"""ResNet-50's dense convolutions one by one: fusec's cpu target vs onnxruntime (issue 30).

Each distinct conv of ResNet-50 at 128x128 (torchvision's v1.5: the stride on the 3x3)
plus the issue's held-out chain (C64 56x56 K64 3x3), as an ONNX graph Conv (weights and
bias as initialisers) + Relu at the chosen batch, run by ``fusec.from_onnx`` +
``fusec.compile(target="cpu")`` and by onnxruntime's CPU provider (all graph
optimisations, no spinning) with the same thread count (Numba's, read at start:
``NUMBA_NUM_THREADS``). fusec's output is checked against onnxruntime's (f32 rel L2 <
1e-4, NaN fails). Timing: two warm-up calls each, then ``--rounds`` rounds calling the
two in a new random order each round; median (min) ms of the wall clock and the ratio
ort / fusec (above 1: fusec is faster).

    NUMBA_NUM_THREADS=2 python benchmarks/cpu_conv_layers.py [--batch 1] [--rounds 21] [--out DIR]
                                                             [--only 8x8,4x4]

``--only`` keeps the rows whose label contains one of the comma-separated strings.
``--model efficientnet_b0``: EfficientNet-B0's convolutions at 128x128 instead (issue 30),
each as in the model: a 1x1 expansion + bias + SiLU (``Sigmoid``, ``Mul``), a 1x1
projection + bias of its input scaled per channel by squeeze-excite (a second input
``s`` and a ``Mul`` before the conv: in fusec a pointwise group of its own), a depthwise
conv + bias + SiLU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from fusec.targets.cpu.threads import configure

configure()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from bench_common import alternate as shared_alternate  # noqa: E402  (beside this script)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fusec  # noqa: E402

#: (channels, plane, kernels, kernel size, stride) of ResNet-50's convs at 128x128 that
#: differ in shape (padding: kernel size // 2), how often each occurs, and the held-out
#: conv chain of issue 30 last.
LAYERS = [
    (3, 128, 64, 7, 2, 1),
    (64, 32, 64, 1, 1, 1),
    (64, 32, 64, 3, 1, 3),
    (64, 32, 256, 1, 1, 4),
    (256, 32, 64, 1, 1, 2),
    (256, 32, 128, 1, 1, 1),
    (128, 32, 128, 3, 2, 1),
    (256, 32, 512, 1, 2, 1),
    (128, 16, 512, 1, 1, 4),
    (512, 16, 128, 1, 1, 3),
    (128, 16, 128, 3, 1, 3),
    (512, 16, 256, 1, 1, 1),
    (256, 16, 256, 3, 2, 1),
    (512, 16, 1024, 1, 2, 1),
    (256, 8, 1024, 1, 1, 6),
    (1024, 8, 256, 1, 1, 5),
    (256, 8, 256, 3, 1, 5),
    (1024, 8, 512, 1, 1, 1),
    (512, 8, 512, 3, 2, 1),
    (1024, 8, 2048, 1, 2, 1),
    (512, 4, 2048, 1, 1, 3),
    (2048, 4, 512, 1, 1, 2),
    (512, 4, 512, 3, 1, 2),
    (64, 56, 64, 3, 1, 0),
]


#: EfficientNet-B0's convolutions at 128x128 but the stem and the squeeze-excite
#: one-pixel ones: (channels, plane, kernels, kernel size, stride, count, form), form
#: "silu" (conv + bias + SiLU), "se" (the input times a per-channel scale, conv + bias)
#: or "dw" (depthwise conv + bias + SiLU).
EFFICIENTNET_B0 = [
    (32, 64, 32, 3, 1, 1, "dw"),
    (32, 64, 16, 1, 1, 1, "se"),
    (16, 64, 96, 1, 1, 1, "silu"),
    (96, 64, 96, 3, 2, 1, "dw"),
    (96, 32, 24, 1, 1, 1, "se"),
    (24, 32, 144, 1, 1, 2, "silu"),
    (144, 32, 144, 3, 1, 1, "dw"),
    (144, 32, 24, 1, 1, 1, "se"),
    (144, 32, 144, 5, 2, 1, "dw"),
    (144, 16, 40, 1, 1, 1, "se"),
    (40, 16, 240, 1, 1, 2, "silu"),
    (240, 16, 240, 5, 1, 1, "dw"),
    (240, 16, 40, 1, 1, 1, "se"),
    (240, 16, 240, 3, 2, 1, "dw"),
    (240, 8, 80, 1, 1, 1, "se"),
    (80, 8, 480, 1, 1, 3, "silu"),
    (480, 8, 80, 1, 1, 2, "se"),
    (480, 8, 112, 1, 1, 1, "se"),
    (112, 8, 672, 1, 1, 3, "silu"),
    (672, 8, 112, 1, 1, 2, "se"),
    (672, 8, 672, 5, 2, 1, "dw"),
    (672, 4, 192, 1, 1, 1, "se"),
    (192, 4, 1152, 1, 1, 4, "silu"),
    (1152, 4, 192, 1, 1, 3, "se"),
    (1152, 4, 320, 1, 1, 1, "se"),
    (320, 4, 1280, 1, 1, 1, "silu"),
]


def label(c: int, hw: int, k: int, r: int, stride: int) -> str:
    return f"C{c} {hw}x{hw} K{k} {r}x{r}" + (f"/{stride}" if stride > 1 else "")


def conv_model(
    n: int, c: int, hw: int, k: int, r: int, stride: int, seed: int, form: str = "relu"
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv + bias + Relu at batch ``n`` (or an ``EFFICIENTNET_B0`` ``form``): the model
    and its inputs by name."""
    rng = np.random.default_rng(seed)
    pad = r // 2
    groups = c if form == "dw" else 1
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    fan = c // groups * r * r
    w = (rng.standard_normal((k, c // groups, r, r)) * (2.0 / fan) ** 0.5).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    oh = (hw + 2 * pad - r) // stride + 1
    f32 = TensorProto.FLOAT
    feeds, inputs, source = {"x": x}, [helper.make_tensor_value_info("x", f32, x.shape)], "x"
    nodes = []
    if form == "se":  # the input scaled per channel (squeeze-excite's sigmoid: 0..1)
        feeds["s"] = rng.uniform(0.0, 1.0, (n, c, 1, 1)).astype(np.float32)
        inputs.append(helper.make_tensor_value_info("s", f32, feeds["s"].shape))
        nodes.append(helper.make_node("Mul", ["x", "s"], ["xs"]))
        source = "xs"
    conv_out = "y" if form == "se" else "c"
    nodes.append(
        helper.make_node(
            "Conv",
            [source, "w", "b"],
            [conv_out],
            pads=[pad] * 4,
            kernel_shape=[r, r],
            strides=[stride, stride],
            group=groups,
        )
    )
    if form == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif form in ("silu", "dw"):
        nodes.append(helper.make_node("Sigmoid", ["c"], ["g"]))
        nodes.append(helper.make_node("Mul", ["c", "g"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", f32, (n, k, oh, oh))],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, feeds


def alternate(calls: dict, rounds: int) -> dict[str, list[float]]:
    """Wall ms of each call, in a new random order each round, after two warm-ups each
    (``bench_common.alternate``, the runners' shared same-run timer)."""
    return shared_alternate(calls, rounds, warmup=2, shuffle=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--only", help="comma-separated substrings of the labels to keep")
    parser.add_argument(
        "--out", help="also write cpu-conv-layers[-efficientnet].md/.json here (runner.Table)"
    )
    parser.add_argument("--model", choices=("resnet50", "efficientnet_b0"), default="resnet50")
    args = parser.parse_args(argv)
    model_name = "ResNet-50" if args.model == "resnet50" else "EfficientNet-B0"
    rows = []
    import numba

    threads = numba.config.NUMBA_NUM_THREADS
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    keep = args.only.split(",") if args.only else None
    print(f"batch {args.batch}, {threads} thread(s), load {os.getloadavg()[0]:.2f}")
    what = "conv + bias + relu" if args.model == "resnet50" else "conv (form)"
    print(f"| {what} | x | fusec ms | ort ms | ort / fusec (median, min) | rel L2 |")
    print("| --- | --- | --- | --- | --- | --- |")
    total = {"fusec": 0.0, "ort": 0.0}
    layers = [(*layer, "relu") for layer in LAYERS]
    if args.model == "efficientnet_b0":
        layers = list(EFFICIENTNET_B0)
    for i, (c, hw, k, r, stride, count, form) in enumerate(layers):
        name = label(c, hw, k, r, stride) + ("" if form == "relu" else f" ({form})")
        if keep and not any(s in name for s in keep):
            continue
        model, feeds = conv_model(args.batch, c, hw, k, r, stride, seed=i, form=form)
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        compiled = fusec.compile(fusec.from_onnx(model), target="cpu")
        arrays = list(feeds.values())
        want = session.run(None, feeds)[0]
        got = np.asarray(compiled(*arrays))
        err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        if not err < 1e-4:
            print(f"| {name} | FAIL rel L2 {err:.2e} |")
            continue
        calls = {
            "fusec": lambda compiled=compiled, arrays=arrays: compiled(*arrays),
            "ort": lambda session=session, feeds=feeds: session.run(None, feeds),
        }
        times = alternate(calls, args.rounds)
        med = {key: statistics.median(v) for key, v in times.items()}
        low = {key: min(v) for key, v in times.items()}
        for key in total:
            total[key] += low[key] * count
        print(
            f"| {name} | {count} | {med['fusec']:.3f} ({low['fusec']:.3f}) | "
            f"{med['ort']:.3f} ({low['ort']:.3f}) | {med['ort'] / med['fusec']:.2f}x "
            f"({low['ort'] / low['fusec']:.2f}x) | {err:.1e} |",
            flush=True,
        )
        rows.append(
            {
                "conv": name,
                "count": count,
                "fusec_ms": med["fusec"],
                "fusec_min_ms": low["fusec"],
                "ort_ms": med["ort"],
                "ort_min_ms": low["ort"],
                "rel_l2": err,
            }
        )
    print(
        f"{model_name} convs (minima x count, the held-out chain not counted): fusec "
        f"{total['fusec']:.2f} ms, ort {total['ort']:.2f} ms"
    )
    if args.out and rows:
        from runner import write_table

        title = (
            f"{model_name}'s convs ({what}), batch {args.batch}, {threads} thread(s): fusec cpu "
            f"vs onnxruntime, {args.rounds} alternated rounds (median and min ms)"
        )
        name = "cpu-conv-layers" + ("" if args.model == "resnet50" else "-efficientnet")
        stem = write_table(args.out, name, "cpu", list(rows[0]), rows, title)
        print(f"wrote {stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
