"""The GEMM host path without a GPU: which driver calls a launch makes (a recording fake).

A call on buffers seen before must make exactly one ``cuLaunchKernel`` on the
caller's stream: no encoding, allocation, copy or synchronisation. New tensor
maps are uploaded asynchronously on the launching stream; another stream waits
for such an upload only while it may still be in flight; full slabs of map slots
are retired without synchronising the device.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_driver import FakeDriver

from fusec.targets.cuda import tensormaps
from fusec.targets.cuda.gemm import cpp, host
from fusec.targets.cuda.gemm.config import TileConfig
from fusec.targets.cuda.gemm.launcher import GemmLaunch

SYNCHRONOUS = {
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuMemcpyHtoD",
    "cuMemcpyDtoH",
    "cuEventSynchronize",
    "cuMemcpy",
    "cuMemcpy2D",
}


@pytest.fixture
def drv(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(tensormaps, "driver", lambda: fake)
    monkeypatch.setattr(tensormaps, "make_context_current", lambda: None)
    monkeypatch.setattr(tensormaps, "_maps", tensormaps._MapCache())
    return fake


def _launch(spec: cpp.GemmSpec, m=256, n=512, k=128) -> GemmLaunch:
    launch = GemmLaunch(
        spec,
        a=(0, m, k, 1),
        b=(1, k, n, 1),
        extras=tuple(range(2, 2 + len(spec.epilogue.extras))),
        m=m,
        n=n,
        k=k,
        batches=1,
    )
    launch.kernel = host.GemmKernel(spec, b"cubin")
    return launch


def _bufs(*ptrs: int) -> list:
    return [SimpleNamespace(ptr=p) for p in ptrs]


SPEC = cpp.GemmSpec(TileConfig(), "f16", "f16", "k", "n")


def test_second_call_is_one_launch_on_the_callers_stream(drv: FakeDriver) -> None:
    launch = _launch(SPEC)
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    first = drv.names()
    assert first.count("cuTensorMapEncodeTiled") == 2
    assert first.count("cuMemcpyHtoDAsync") == 2  # the two maps, on stream 7
    assert all(args[-1] == 7 for name, args in drv.calls if name == "cuMemcpyHtoDAsync")
    assert not SYNCHRONOUS & set(first)
    drv.calls.clear()
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    assert drv.names() == ["cuLaunchKernel"]
    grid, threads, smem, stream = (drv.calls[0][1][i] for i in (1, 4, 7, 8))
    assert (grid, threads, smem, stream) == (4, 384, SPEC.config.smem_bytes, 7)


def test_new_output_buffer_needs_no_new_map(drv: FakeDriver) -> None:
    launch = _launch(SPEC)
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    drv.calls.clear()
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x40000))  # the output is not a map
    assert drv.names() == ["cuLaunchKernel"]


def test_other_stream_waits_for_an_upload_in_flight(drv: FakeDriver) -> None:
    launch = _launch(SPEC)
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    assert drv.names().count("cuEventCreate") == 2
    drv.pending = {args[0] for name, args in drv.calls if name == "cuEventRecord"}
    drv.calls.clear()
    launch.direct(9, _bufs(0x10000, 0x20000), _bufs(0x30000))
    names = drv.names()
    assert names.count("cuStreamWaitEvent") == 2 and names[-1] == "cuLaunchKernel"
    assert not SYNCHRONOUS & set(names)
    drv.pending.clear()
    drv.calls.clear()
    launch.direct(11, _bufs(0x10000, 0x20000), _bufs(0x30000))  # uploads done: no wait
    assert "cuStreamWaitEvent" not in drv.names()


def test_full_slab_used_by_the_default_stream_is_retired_without_synchronising(
    drv: FakeDriver, monkeypatch
) -> None:
    monkeypatch.setattr(tensormaps, "_SLOTS", 4)
    launch = _launch(SPEC)
    for k in range(5):  # 2 maps per new A/B pair: the third pair overflows the slab
        launch.direct(1, _bufs(0x100000 * (k + 1), 0x200000 * (k + 1)), _bufs(0x30000))
    names = drv.names()
    assert names.count("cuMemAlloc") >= 2 and not SYNCHRONOUS & set(names)
    assert [int(args[1]) for name, args in drv.calls if name == "cuEventRecord"].count(1) >= 4
    assert tensormaps._maps.retired or "cuMemFree" in names
    drv.calls.clear()
    # a launch prepared against the retired slab is rebuilt, not launched with stale maps
    launch.direct(1, _bufs(0x100000, 0x200000), _bufs(0x30000))
    assert drv.names().count("cuTensorMapEncodeTiled") == 2


def test_a_slab_a_callers_stream_used_is_freed_after_a_synchronisation_not_an_event(
    drv: FakeDriver, monkeypatch
) -> None:
    """The caller's own stream may be destroyed before the slab it used fills (``fusec
    tune`` timed each candidate on a Numba stream it then dropped; on the H200 the next
    call's retirement recorded an event on that handle: CUDA_ERROR_CONTEXT_IS_DESTROYED).
    So such a slab is freed after a context synchronisation; its stale handle is never
    passed to the driver again."""
    monkeypatch.setattr(tensormaps, "_SLOTS", 4)
    launch = _launch(SPEC)
    launch.direct(7, _bufs(0x100000, 0x200000), _bufs(0x30000))  # stream 7, then gone
    first = tensormaps._maps.slab
    drv.calls.clear()
    for k in range(2, 5):  # the default stream fills the slab
        launch.direct(1, _bufs(0x100000 * k, 0x200000 * k), _bufs(0x30000))
    names = drv.names()
    assert names.count("cuCtxSynchronize") == 1
    touched = [args for name, args in drv.calls if name.startswith(("cuEvent", "cuStream"))]
    assert not any(7 in [int(a) for a in args if isinstance(a, int)] for args in touched)
    freed = [int(args[0]) for name, args in drv.calls if name == "cuMemFree"]
    assert int(first.device) in freed and tensormaps._maps.slab is not first


def test_a_slab_filled_during_a_graph_capture_is_pinned_not_retired(
    drv: FakeDriver, monkeypatch
) -> None:
    """Retiring a slab records an event on every stream that used it; inside a capture
    that is illegal on the legacy stream (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT on the H200,
    BERT-base's maps overflowing a slab while its call was recorded). So a slab that
    fills during a capture is pinned instead, and nothing is freed while capturing."""
    monkeypatch.setattr(tensormaps, "_SLOTS", 4)
    launch = _launch(SPEC)
    launch.direct(1, _bufs(0x100000, 0x200000), _bufs(0x30000))  # the legacy stream
    first = tensormaps._maps.slab
    drv.capturing.add(9)
    drv.calls.clear()
    for k in range(2, 5):  # new operands on the capturing stream: the slab overflows
        launch.direct(9, _bufs(0x100000 * k, 0x200000 * k), _bufs(0x30000))
    names = drv.names()
    assert "cuEventRecord" not in names and "cuMemFree" not in names
    assert first.pinned and tensormaps._maps.slab is not first
    drv.capturing.clear()
    tensormaps.pin_live_tensor_maps()  # the end of the capture: every live slab is the graph's
    for k in range(5, 12):  # later calls retire slabs again, never freeing a pinned one
        launch.direct(1, _bufs(0x100000 * k, 0x200000 * k), _bufs(0x30000))
    freed = [args[0] for name, args in drv.calls if name == "cuMemFree"]
    assert int(first.device) not in [int(p) for p in freed]


def test_maps_missed_inside_a_capture_are_written_before_the_graph_exists(
    drv: FakeDriver,
) -> None:
    """A map that misses the cache while a graph captures is copied at once, on a stream of
    its own (never the capturing one) that the call waits for: queued on the capturing
    stream it would be a copy node, made again at every replay (H200: 28-38 such copies a
    call made EfficientNet-B0 b1 0.626 -> 0.720 ms). The slot is written, so a launch on
    the same buffers after the capture (failed or not) reads it: one launch, no upload."""
    launch = _launch(SPEC)
    drv.capturing.add(9)
    launch.direct(9, _bufs(0x100000, 0x200000), _bufs(0x30000))
    uploads = [args for name, args in drv.calls if name == "cuMemcpyHtoDAsync"]
    assert uploads and all(int(args[-1]) not in (9, 1) for args in uploads)
    streams = {int(args[-1]) for args in uploads}
    assert len(streams) == 1 and drv.names().count("cuStreamSynchronize") == len(uploads)
    assert "cuEventRecord" not in drv.names()
    drv.capturing.clear()
    drv.calls.clear()
    launch.direct(1, _bufs(0x100000, 0x200000), _bufs(0x30000))
    assert drv.names() == ["cuLaunchKernel"]


def test_padded_operand_is_copied_on_every_call(drv: FakeDriver) -> None:
    launch = _launch(SPEC, m=256, n=512, k=77)  # a row of 77 halves: not a 16-byte pitch
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    drv.calls.clear()
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    assert drv.names() == ["cuMemcpy2DAsync", "cuLaunchKernel"]
    copy, stream = drv.calls[0][1]
    assert stream == 7 and copy.srcPitch == 154 and copy.dstPitch == 160


STAGED = cpp.GemmSpec(TileConfig(64, 256, 64, 4, 2, 8, "pingpong", "smem"), "f16", "f16", "k", "n")


def _u64_params(launch: GemmLaunch) -> list[int]:
    (call,) = launch.calls.values()
    prepared = call.steps[-1][1]
    values, _ = prepared.keep
    return [v.value for v in values[: launch.spec.arg_count()[0]]]


def test_smem_epilogue_gets_the_outputs_tensor_map(drv: FakeDriver) -> None:
    launch = _launch(STAGED)
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    encodes = [args for name, args in drv.calls if name == "cuTensorMapEncodeTiled"]
    assert len(encodes) == 3  # A, B and the output
    kind, _, ptr, dims, _, box = encodes[2][:6]
    assert (kind, ptr, dims, box) == (6, 0x30000, [512, 256, 1], [64, 16, 1])
    map_a, map_b, out, map_out = _u64_params(launch)
    assert out == 0x30000 and map_out not in (0, map_a, map_b)
    drv.calls.clear()
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    assert drv.names() == ["cuLaunchKernel"]
    assert drv.calls[0][1][7] == STAGED.config.smem_bytes


@pytest.mark.parametrize("n, out", [(511, 0x30000), (512, 0x30008)])
def test_smem_epilogue_without_a_tma_addressable_output_gets_no_map(drv, n, out) -> None:
    launch = _launch(STAGED, n=n)  # 1022-byte rows, or a base off 16 bytes: no tensor map
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(out))
    assert drv.names().count("cuTensorMapEncodeTiled") == 2
    assert _u64_params(launch)[3] == 0  # the kernel stores from shared memory itself


def test_three_maps_survive_a_slab_retired_in_between(drv: FakeDriver, monkeypatch) -> None:
    monkeypatch.setattr(tensormaps, "_SLOTS", 4)
    launch = _launch(STAGED)
    for k in range(4):
        launch.direct(1, _bufs(0x100000 * (k + 1), 0x200000 * (k + 1)), _bufs(0x30000 * (k + 1)))
        map_a, map_b, _, map_out = _u64_params(launch)
        live = {slot.address for slot in tensormaps._maps.slots.values()}
        assert {map_a, map_b, map_out} <= live  # none of them in a retired slab
        launch.calls.clear()


SPLIT = cpp.GemmSpec(TileConfig.parse("64x128x64 s8 c1 g8 sk=4"), "f16", "f16", "k", "n")


def test_split_k_gets_its_workspace_once_per_stream_with_zeroed_counters(drv: FakeDriver) -> None:
    """Split-K's partials (4 splits x 8 tiles x 64 x 128 f32) and one counter per tile are
    allocated on the first call on a stream, the counters zeroed on that stream (queued, not
    synchronous); the grid has a block per (tile, split) unit; a second call is one launch."""
    launch = _launch(SPLIT, m=128, n=512, k=768)
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    allocs = [args[0] for name, args in drv.calls if name == "cuMemAlloc"]
    tiles = 2 * 4
    assert 4 * tiles * 4 * 64 * 128 in allocs and 4 * tiles in allocs
    (memset,) = [args for name, args in drv.calls if name == "cuMemsetD32Async"]
    assert memset[1:] == (0, tiles, 7)
    assert not SYNCHRONOUS & set(drv.names())
    map_a, map_b, out, ws, counters = _u64_params(launch)
    assert out == 0x30000 and memset[0] == counters and ws not in (0, counters)
    drv.calls.clear()
    launch.direct(7, _bufs(0x10000, 0x20000), _bufs(0x30000))
    assert drv.names() == ["cuLaunchKernel"]
    assert drv.calls[0][1][1] == tiles * 4  # grid: every unit has its block (32 <= 132 SMs)
    drv.calls.clear()
    launch.direct(8, _bufs(0x10000, 0x20000), _bufs(0x30000))  # another stream: its own
    assert [n for n in drv.names() if n in ("cuMemAlloc", "cuMemsetD32Async")] == [
        "cuMemAlloc",
        "cuMemAlloc",
        "cuMemsetD32Async",
    ]
