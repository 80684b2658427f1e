"""Whole-program CUDA graphs (``fusec.targets.cuda.graphs``) without a GPU.

A fake torch records what the program's ``run`` launches while a graph captures it and
re-executes that on replay, as a CUDA graph does: during the capture nothing runs (the
outputs hold NaN until the first replay). The tests pin the policy: warm-up calls, one
recording per (device, stream), copies in and out, the limit, and a failed capture
falling back to launch by launch with one warning. ``test_cuda_graphs_gpu.py`` runs the
same on the H200.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from fusec.dialect.shapes import TensorSpec
from fusec.targets.cuda import graphs as graphs_module
from fusec.targets.cuda.graphs import ProgramGraphs

DEVICE = SimpleNamespace(index=0)


class FakeTensor:
    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape = tuple(data.shape)
        self.dtype = "float32"
        self.device = DEVICE

    def data_ptr(self) -> int:
        return self.data.__array_interface__["data"][0]

    def copy_(self, other: FakeTensor) -> FakeTensor:
        self.data[...] = other.data
        return self

    def clone(self) -> FakeTensor:
        return FakeTensor(self.data.copy())


class FakeGraph:
    capturing: FakeGraph | None = None

    def __init__(self) -> None:
        self.ops: list = []


class FakeCapture:
    """``DriverCapture``'s part: records the kernels ``run`` launches, replays them."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.launches: list[int] = []

    def record(self, run, inputs, adapter, fns):
        graph = FakeGraph.capturing = FakeGraph()
        try:
            outputs = run(inputs, adapter, "capture-stream", fns, False)
        finally:
            FakeGraph.capturing = None
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return graph, tuple(outputs), list(inputs)

    def launch(self, graph: FakeGraph, stream_ptr: int) -> None:
        self.launches.append(stream_ptr)
        for op in graph.ops:
            op()


class FakeTorch:
    @staticmethod
    def empty(shape, dtype, device) -> FakeTensor:
        return FakeTensor(np.full(shape, np.nan, np.float32))


def add_one(launched: list):
    """A program's ``run``: one kernel computing ``x + 1`` into a fresh output."""

    def run(args, adapter, stream_ref, fns, poison):
        (x,) = args
        out = FakeTensor(np.empty(x.shape, np.float32))

        def kernel() -> None:
            out.data[...] = x.data + 1

        launched.append(stream_ref)
        if FakeGraph.capturing is not None:  # recorded, not run
            FakeGraph.capturing.ops.append(kernel)
            out.data[...] = np.nan
        else:
            kernel()
        return (out,)

    return run


@pytest.fixture
def setup():
    def make(fail: bool = False, limit: int = 4):
        launched: list = []
        adapter = SimpleNamespace(torch=FakeTorch(), device=DEVICE, torch_dtypes={"f32": "float32"})
        capture = FakeCapture(fail)
        program = ProgramGraphs(
            add_one(launched), [TensorSpec((2, 3), "f32")], capture, limit=limit
        )
        return program, adapter, launched

    return make


def _x(rng) -> FakeTensor:
    return FakeTensor(rng.standard_normal((2, 3)).astype(np.float32))


def test_warm_up_then_one_recording_then_replays(setup, rng) -> None:
    program, adapter, launched = setup()
    stream = SimpleNamespace(ptr=5)
    results = []
    inputs = [_x(rng) for _ in range(4)]
    for x in inputs:
        results.append(program([x], adapter, stream, []))
    # call 1 launch by launch on the caller's stream; call 2 recorded, then replayed
    assert launched == [stream, "capture-stream"]
    assert program.capture.launches == [5, 5, 5]  # replays on the caller's stream
    assert list(program.recorded) == [(0, 5)]
    assert program.recorded[(0, 5)].replays == 3
    for x, (y,) in zip(inputs, results, strict=True):  # every result its own call's
        np.testing.assert_array_equal(y.data, x.data + 1)
    assert len({id(y) for (y,) in results}) == 4  # copies: no result overwritten later


def test_each_stream_has_its_own_graph_up_to_the_limit(setup, rng) -> None:
    program, adapter, launched = setup(limit=2)
    for ptr in (5, 6, 8):
        for _ in range(3):
            x = _x(rng)
            (y,) = program([x], adapter, SimpleNamespace(ptr=ptr), [])
            np.testing.assert_array_equal(y.data, x.data + 1)
    assert sorted(program.recorded) == [(0, 5), (0, 6)]
    # the third stream is past the limit: all three of its calls ran launch by launch
    assert sum(1 for s in launched if getattr(s, "ptr", None) == 8) == 3


def test_a_failed_capture_runs_launch_by_launch_and_warns_once(setup, rng) -> None:
    program, adapter, launched = setup(fail=True)
    stream = SimpleNamespace(ptr=5)
    with pytest.warns(RuntimeWarning, match="capture failed .*not permitted"):
        for _ in range(2):
            x = _x(rng)
            (y,) = program([x], adapter, stream, [])
            np.testing.assert_array_equal(y.data, x.data + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = _x(rng)
        (y,) = program([x], adapter, stream, [])
    np.testing.assert_array_equal(y.data, x.data + 1)
    assert not program.recorded and (0, 5) in program.failed


def test_arguments_the_graph_cannot_take_run_launch_by_launch(setup, rng) -> None:
    program, adapter, launched = setup()
    stream = SimpleNamespace(ptr=5)
    for _ in range(2):
        program([_x(rng)], adapter, stream, [])
    other = FakeTensor(rng.standard_normal((3, 2)).astype(np.float32))  # wrong shape
    program([other], adapter, stream, [])
    assert launched[-1] is stream  # not replayed: the eager path reports the mismatch


def test_the_environment_turns_graphs_off(monkeypatch) -> None:
    monkeypatch.setenv("FUSEC_CUDA_GRAPHS", "0")
    assert not graphs_module.graphs_enabled()
    monkeypatch.setenv("FUSEC_CUDA_GRAPHS", "1")
    assert graphs_module.graphs_enabled()


def test_the_capture_stream_is_kept_per_thread_and_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tensor-map cache records events on every stream that uploaded maps, so a capture
    stream must outlive the capture (an event on a destroyed stream's handle crashed the
    process on the H200): one stream per thread and device, created once."""
    import threading

    class FakeCuda:
        def __init__(self) -> None:
            self.made: list[object] = []

        def get_current_device(self):
            return SimpleNamespace(id=0)

    cuda = FakeCuda()

    def make(cuda: FakeCuda) -> object:
        cuda.made.append(object())
        return cuda.made[-1]

    monkeypatch.setattr(graphs_module, "_nonblocking_stream", make)
    monkeypatch.setattr(graphs_module, "_CAPTURE_STREAMS", {})
    first = graphs_module.capture_stream(cuda)
    assert graphs_module.capture_stream(cuda) is first and len(cuda.made) == 1
    other: list = []
    thread = threading.Thread(target=lambda: other.append(graphs_module.capture_stream(cuda)))
    thread.start()
    thread.join()
    assert other[0] is not first and len(cuda.made) == 2


def test_the_capture_stream_is_non_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocking stream that captures fails whatever synchronises with the legacy stream
    meanwhile: PyTorch's allocator growing its pool for an output of the recorded call
    ("operation would make the legacy stream depend on a capturing blocking stream", H200).
    The capture stream is a driver stream made with CU_STREAM_NON_BLOCKING."""
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver as drv

    made: list = []

    def create(flags):
        made.append(flags)
        return (drv.CUresult.CUDA_SUCCESS, 0x1234)

    monkeypatch.setattr(drv, "cuStreamCreate", create)
    wrapped = SimpleNamespace(external_stream=lambda ptr: ("numba stream over", ptr))
    assert graphs_module._nonblocking_stream(wrapped) == ("numba stream over", 0x1234)
    assert made == [drv.CUstream_flags.CU_STREAM_NON_BLOCKING]


def test_the_rehearsal_waits_for_the_static_inputs() -> None:
    """The capture stream is non-blocking, so nothing orders it after the copies into the
    static inputs on torch's stream: the rehearsal (which reads this call's data, token ids
    included) starts after a device synchronisation."""
    log: list[str] = []
    cuda = SimpleNamespace(synchronize=lambda device: log.append("synchronize"))
    adapter = SimpleNamespace(torch=SimpleNamespace(cuda=cuda), device="cuda:0")
    capture = graphs_module.DriverCapture(keeping=lambda kept: None)

    def run(inputs, adapter, ref, fns, poison):
        log.append("run")
        return ()

    capture._rehearse(run, [], adapter, None, [])
    assert log[:2] == ["synchronize", "run"]


def test_a_call_whose_argument_copies_cost_more_than_its_launches_is_not_graphed() -> None:
    """A replay copies the arguments into the graph's static inputs: an MoE layer called
    with its 1.4 GB of expert weights (5 launches) runs launch by launch; a model's
    activations (ResNet-50 at batch 32: 9.6 MB for 56 launches) go through the graph."""
    from fusec.targets.cuda.program import graph_copies_pay

    assert not graph_copies_pay(1_400_000_000, 5)
    assert graph_copies_pay(32 * 3 * 224 * 224 * 2, 56)
    assert graph_copies_pay(0, 0)
