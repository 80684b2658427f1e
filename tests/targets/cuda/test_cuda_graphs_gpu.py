"""Whole-program CUDA graphs on the GPU (``fusec.targets.cuda.graphs``).

Programs of every kernel family (Tensor Core GEMM with LayerNorm prologue and softmax
epilogue, implicit-GEMM conv, flash attention, pointwise, a PyTorch fallback group) are
called repeatedly with fresh torch inputs: the first call runs launch by launch, the
second records, the rest replay. Every result must equal the float64 reference with the
kernels' rounding, stay what it was after later calls (results are copies), and the
graph must really be replayed; a program with a PyTorch fallback group is not graphed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cuda_cases import pointwise_broadcast, random_inputs
from numerics import assert_close

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
F32_CONV = """
func.func @f(%x: tensor<2x8x10x10xf32>, %w: tensor<16x8x3x3xf32>) -> tensor<2x16x8x8xf32> {
  %c = ai.conv2d %x, %w : tensor<2x8x10x10xf32> * tensor<16x8x3x3xf32>
  %r = ai.relu %c : tensor<2x16x8x8xf32>
  return %r : tensor<2x16x8x8xf32>
}
"""


def _torch_args(torch, arrays):
    """f16/f32 numpy arrays as CUDA tensors."""
    return [torch.from_numpy(a).cuda() for a in arrays]


def _f16(example: str) -> str:
    """An example graph with its f32 tensors made f16 (the Tensor Core templates' types)."""
    return (EXAMPLES / example).read_text().replace("f32>", "f16>")


def _cases():
    return {
        "ln_matmul_softmax": _f16("ln_matmul_softmax_small.mlir"),
        "conv_bias_relu": _f16("conv_bias_relu.mlir"),
        "attention": _f16("attention.mlir"),
        "resnet_block": _f16("resnet_block.mlir"),
        "pointwise": pointwise_broadcast(256, 512, "f16"),
        "torch_fallback_f32_conv": F32_CONV,
    }


@pytest.mark.parametrize("name", sorted(_cases()))
def test_replayed_calls_match_the_reference_and_keep_their_results(name: str) -> None:
    torch = pytest.importorskip("torch")
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(_cases()[name], target="cuda")
    program = compiled._runner
    kept = []
    for seed in range(5):
        arrays = random_inputs(compiled.module, 100 + seed)
        result = compiled(*_torch_args(torch, arrays))
        results = result if isinstance(result, tuple) else (result,)
        kept.append((arrays, [r.clone() for r in results], results))
    torch.cuda.synchronize()
    assert program.graphs is not None and not program.graphs.failed, program.graphs.failed
    recorded = list(program.graphs.recorded.values())
    if program._torch_groups:  # (the f32 conv; attention of head size 32 too)
        assert not recorded  # launch by launch: see graphs.py
    else:
        assert len(recorded) == 1 and recorded[0].replays == 4
    dtype = "f32" if name == "torch_fallback_f32_conv" else "f16"
    for arrays, snapshot, results in kept:
        refs = run_reference(compiled.module, arrays, rounding="groups")
        for got, same, ref in zip(results, snapshot, refs, strict=True):
            assert torch.equal(got, same)  # not overwritten by a later replay
            assert_close(got.float().cpu().numpy(), ref.astype(np.float32), dtype, what=name)


def test_graphs_follow_the_callers_streams() -> None:
    torch = pytest.importorskip("torch")
    import fusec
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(pointwise_broadcast(512, 512, "f16"), target="cuda")
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    pending = []
    for seed in range(6):
        arrays = random_inputs(compiled.module, 200 + seed)
        stream = streams[seed % 2]
        with torch.cuda.stream(stream):
            out = compiled(*_torch_args(torch, arrays))
            outs = out if isinstance(out, tuple) else (out,)
            hosts = [torch.empty_like(o, device="cpu").pin_memory() for o in outs]
            for host, o in zip(hosts, outs, strict=True):
                host.copy_(o, non_blocking=True)  # read on the caller's stream: no sync
        pending.append((arrays, hosts, stream))
    for arrays, hosts, stream in pending:
        stream.synchronize()
        refs = run_reference(compiled.module, arrays, rounding="groups")
        for host, ref in zip(hosts, refs, strict=True):
            assert_close(host.float().numpy(), ref.astype(np.float32), "f16")
    assert len(compiled._runner.graphs.recorded) == 2


def test_the_opt_out_runs_launch_by_launch(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    import fusec

    monkeypatch.setenv("FUSEC_CUDA_GRAPHS", "0")
    compiled = fusec.compile(pointwise_broadcast(64, 64, "f16"), target="cuda")
    for seed in range(3):
        compiled(*_torch_args(torch, random_inputs(compiled.module, seed)))
    assert not compiled._runner.graphs.recorded


def _node_types(graph) -> list:
    """The types of a recorded CUDA graph's nodes (``Recorded.graph`` is (graph, exec))."""
    from cuda.bindings import driver as drv

    from fusec.targets.cuda.adapters import _check

    _, count = _check(drv.cuGraphGetNodes(graph[0], 0))
    nodes, _ = _check(drv.cuGraphGetNodes(graph[0], count))
    return [_check(drv.cuGraphNodeGetType(node)) for node in nodes]


def _edge_types(graph) -> list[tuple[int, bool]]:
    """(dependency type: 0 default, 1 programmatic; whether both ends are kernel nodes) of
    each edge of a recorded CUDA graph."""
    from cuda.bindings import driver as drv

    from fusec.targets.cuda.adapters import _check

    kernel = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    *_, count = _check(drv.cuGraphGetEdges(graph[0], 0))
    sources, targets, data, count = _check(drv.cuGraphGetEdges(graph[0], count))
    ends = zip(sources[:count], targets[:count], strict=True)
    kernels = [all(_check(drv.cuGraphNodeGetType(n)) == kernel for n in pair) for pair in ends]
    return [(int(edge.type), k) for edge, k in zip(data[:count], kernels, strict=True)]


@pytest.mark.parametrize("pdl", ["1", "0"])
def test_kernels_of_a_graph_follow_each_other_by_programmatic_edges(monkeypatch, pdl) -> None:
    """A ResNet block's kernels (convs, pointwise) recorded with ``FUSEC_PDL`` on: every
    edge between two of them programmatic (``dependent.programmatic_edges``), and the
    replays right (``test_replayed_calls_...`` checks every family so); off: none is."""
    torch = pytest.importorskip("torch")
    import fusec
    from fusec.runtime.reference import run_reference

    monkeypatch.setenv("FUSEC_PDL", pdl)
    compiled = fusec.compile(_f16("resnet_block.mlir"), target="cuda")
    for seed in range(4):
        arrays = random_inputs(compiled.module, 300 + seed)
        out = compiled(*_torch_args(torch, arrays))
        (ref,) = run_reference(compiled.module, arrays, rounding="groups")
        assert_close(out.float().cpu().numpy(), ref.astype(np.float32), "f16")
    (recorded,) = compiled._runner.graphs.recorded.values()
    edges = _edge_types(recorded.graph)
    between_kernels = [kind for kind, kernels in edges if kernels]
    assert len(compiled.kernels) >= 3 and len(between_kernels) >= 2, (compiled.kernels, edges)
    want = len(between_kernels) if pdl == "1" else 0
    assert [kind for kind, _ in edges].count(1) == want, edges


def _early_weight_cases() -> dict:
    from conv_cases import resnet_block_constant_weights
    from cuda_cases import decoder_mlp

    return {"mlp": decoder_mlp(16, 2048), "resnet": resnet_block_constant_weights(1)}


@pytest.mark.parametrize("early", ["on", "off"])
@pytest.mark.parametrize("case", ["mlp", "resnet"])
def test_kernels_loading_constant_weights_early_read_what_the_kernel_before_wrote(
    monkeypatch, case, early
) -> None:
    """softmax -> GEMM + relu -> GEMM at batch 16, and a ResNet block at batch 1 (copy ->
    conv -> conv), weights constant: each GEMM or conv issues its weights' first loads
    before it waits for the kernel before it (programmatic edges), whose output it reads.
    Nine replays with fresh inputs, each right: a kernel that read its input before its
    producer finished would see the previous call's values."""
    torch = pytest.importorskip("torch")
    import fusec
    from fusec.runtime.reference import run_reference

    monkeypatch.setenv("FUSEC_PDL", "1")
    monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", early)
    compiled = fusec.compile(_early_weight_cases()[case], target="cuda")
    kind = "matmul" if case == "mlp" else "conv"
    specs = [s for k in compiled.kernels if k.kind == kind for s in k.specs]
    assert len(specs) == 2 and all(s.waits_in_body is (early == "on") for s in specs)
    calls = [random_inputs(compiled.module, 400 + seed) for seed in range(10)]
    outs = [compiled(*_torch_args(torch, arrays)).clone() for arrays in calls]
    torch.cuda.synchronize()
    (recorded,) = compiled._runner.graphs.recorded.values()
    assert recorded.replays == 9  # (the second call records and replays)
    between_kernels = [kind for kind, kernels in _edge_types(recorded.graph) if kernels]
    assert len(between_kernels) >= 2 and set(between_kernels) == {1}, between_kernels
    for arrays, out in zip(calls, outs, strict=True):
        (ref,) = run_reference(compiled.module, arrays, rounding="groups")
        assert_close(out.float().cpu().numpy(), ref.astype(np.float32), "f16")


def test_maps_missed_while_recording_are_no_nodes_of_the_graph(monkeypatch) -> None:
    """Every tensor map misses the cache while the graph records (the slots are dropped
    after the rehearsal, as when the capture's buffers are not the rehearsal's): the
    maps are written before the graph exists, so the graph is kernels alone (a map copied
    on the capturing stream was a copy node made again at every replay: 28-38 copies a
    call on the H200, EfficientNet-B0 b1 0.626 -> 0.720 ms) and the replays are right."""
    torch = pytest.importorskip("torch")
    from cuda.bindings import driver as drv

    import fusec
    from fusec.runtime.reference import run_reference
    from fusec.targets.cuda import graphs, tensormaps

    rehearse = graphs.DriverCapture._rehearse

    def rehearse_then_forget_the_maps(self, *args, **kwargs) -> None:
        rehearse(self, *args, **kwargs)
        with tensormaps._maps.lock:
            tensormaps._maps._drop_slots(tensormaps.driver())

    monkeypatch.setattr(graphs.DriverCapture, "_rehearse", rehearse_then_forget_the_maps)
    compiled = fusec.compile(_f16("ln_matmul_softmax_small.mlir"), target="cuda")
    calls = [random_inputs(compiled.module, 300 + seed) for seed in range(4)]
    results = [compiled(*_torch_args(torch, arrays)) for arrays in calls]
    torch.cuda.synchronize()
    (recorded,) = compiled._runner.graphs.recorded.values()
    assert recorded.replays == 3
    types = _node_types(recorded.graph)
    kernel = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
    assert kernel in types and drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMCPY not in types
    for arrays, result in zip(calls, results, strict=True):
        (ref,) = run_reference(compiled.module, arrays, rounding="groups")
        assert_close(result.float().cpu().numpy(), ref.astype(np.float32), "f16")


def test_arguments_that_outweigh_the_launches_run_launch_by_launch() -> None:
    """An elementwise program of 16 MB of arguments for one launch: a replay would copy
    them all into the graph's inputs (``program.graph_copies_pay``), so no graph."""
    torch = pytest.importorskip("torch")
    import fusec

    compiled = fusec.compile(pointwise_broadcast(4096, 2048, "f16"), target="cuda")
    for seed in range(3):
        compiled(*_torch_args(torch, random_inputs(compiled.module, seed)))
    torch.cuda.synchronize()
    assert not compiled._runner.graphs.recorded


WIDTHS = """
func.func @f(%a: tensor<3x5xi32>, %b: tensor<3x5xi64>, %c: tensor<3x5xbf16>)
    -> (tensor<3x5xi32>, tensor<3x5xi64>, tensor<3x5xbf16>) {
  %y = ai.add %a, %a : tensor<3x5xi32> * tensor<3x5xi32>
  %z = ai.mul %b, %b : tensor<3x5xi64> * tensor<3x5xi64>
  %w = ai.relu %c : tensor<3x5xbf16>
  return %y, %z, %w : tensor<3x5xi32>, tensor<3x5xi64>, tensor<3x5xbf16>
}
"""


def test_a_capture_uploads_numpy_arguments_of_every_width() -> None:
    """``capture`` of numpy arguments uploads each as its element type's storage (it viewed
    every non-f32 array as int16: an int32 argument had twice its columns, an int64 one
    four times, and the capture failed)."""
    torch = pytest.importorskip("torch")
    import fusec
    from fusec.ir.dtypes import numpy_dtype
    from fusec.runtime.reference import run_reference

    compiled = fusec.compile(WIDTHS, target="cuda")
    arrays = random_inputs(compiled.module, 5)
    graph = compiled.capture(*arrays)
    graph.replay()
    torch.cuda.synchronize()
    refs = run_reference(compiled.module, arrays)
    for out, ref, dtype in zip(graph.outputs, refs, ("i32", "i64", "bf16"), strict=True):
        got = out.copy_to_host().view(numpy_dtype(dtype)).reshape(ref.shape)  # (the storage)
        np.testing.assert_array_equal(got.astype(np.float64), ref.astype(np.float64))
