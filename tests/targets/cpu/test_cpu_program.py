"""The cpu target's compiled launcher (``fusec.targets.cpu.program``, issue 30).

A compiled program runs its kernels from generated Numba segments over an arena
planned at compile time. Checked here: results against the float64 reference on
fresh random inputs with outputs poisoned (NaN) first, for a conv -> relu -> pool ->
matmul network and a transformer block (layout views, attention, layernorms); and,
in steady state, that a call allocates nothing but its outputs (tracemalloc's peak,
Numba's own allocation counter) and enters as many Python frames with 9 kernels as
with 3 (``sys.setprofile``; a chain of one kernel source, compiled once), where the
Python launch loop enters more per kernel.
Counts, not times.
"""

from __future__ import annotations

import sys
import threading
import tracemalloc

import numpy as np
import pytest
from cpu_check import poison
from numerics import assert_close

import fusec
from fusec.ir.module import entry_function
from fusec.runtime.launch import Program
from fusec.runtime.reference import run_reference
from fusec.targets.cpu.program import ENV_VAR, CpuProgram, _Arena
from fusec.tools import runner

CNN = """
func.func @cnn(%x: tensor<2x8x16x16xf32>, %w: tensor<16x8x3x3xf32>, %b: tensor<16xf32>,
               %w2: tensor<16x16x1x1xf32>, %fc: tensor<1024x10xf32>) -> tensor<2x10xf32> {
  %c = ai.conv2d %x, %w {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>} : tensor<2x8x16x16xf32> * tensor<16x8x3x3xf32>
  %cb = ai.bias_add %c, %b : tensor<2x16x8x8xf32> * tensor<16xf32>
  %r = ai.relu %cb : tensor<2x16x8x8xf32>
  %c2 = ai.conv2d %r, %w2 : tensor<2x16x8x8xf32> * tensor<16x16x1x1xf32>
  %r2 = ai.relu %c2 : tensor<2x16x8x8xf32>
  %p = ai.max_pool2d %r2 {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<2x16x8x8xf32>
  %f = ai.reshape %p {shape = array<i64: 2, 256>} : tensor<2x16x4x4xf32>
  %f4 = ai.concat %f, %f, %f, %f {axis = 1 : i64} : tensor<2x256xf32> * tensor<2x256xf32> * tensor<2x256xf32> * tensor<2x256xf32>
  %y = ai.matmul %f4, %fc : tensor<2x1024xf32> * tensor<1024x10xf32>
  return %y : tensor<2x10xf32>
}
"""  # noqa: E501

# conv -> relu -> pool -> matmul with no copy kernel: all compiled
CNN_COMPILED = """
func.func @cnn(%x: tensor<2x8x16x16xf32>, %w: tensor<16x8x3x3xf32>, %b: tensor<16xf32>,
               %fc: tensor<256x10xf32>) -> tensor<2x10xf32> {
  %c = ai.conv2d %x, %w {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>} : tensor<2x8x16x16xf32> * tensor<16x8x3x3xf32>
  %cb = ai.bias_add %c, %b : tensor<2x16x8x8xf32> * tensor<16xf32>
  %r = ai.relu %cb : tensor<2x16x8x8xf32>
  %p = ai.max_pool2d %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : tensor<2x16x8x8xf32>
  %f = ai.reshape %p {shape = array<i64: 2, 256>} : tensor<2x16x4x4xf32>
  %y = ai.matmul %f, %fc : tensor<2x256xf32> * tensor<256x10xf32>
  return %y : tensor<2x10xf32>
}
"""  # noqa: E501

_T = "tensor<1x16x64xf32>"
_H = "tensor<1x4x16x16xf32>"
_S = "tensor<1x16x4x16xf32>"
_Q = "tensor<1x16x16xf32>"


def _heads(name: str, source: str, at: int) -> str:
    """Lines splitting columns ``at:at+64`` of the 1x16x192 ``source`` into 4 heads."""
    return f"""
  %{name}s = ai.slice %{source} {{offsets = array<i64: 0, 0, {at}>, sizes = array<i64: 1, 16, 64>, strides = array<i64: 1, 1, 1>}} : tensor<1x16x192xf32>
  %{name}r = ai.reshape %{name}s {{shape = array<i64: 1, 16, 4, 16>}} : {_T}
  %{name} = ai.transpose %{name}r {{perm = array<i64: 0, 2, 1, 3>}} : {_S}"""  # noqa: E501


BLOCK = f"""
func.func @block(%x: {_T}, %g1: tensor<64xf32>, %b1: tensor<64xf32>, %wqkv: tensor<64x192xf32>,
                 %bqkv: tensor<192xf32>, %wo: tensor<64x64xf32>, %g2: tensor<64xf32>,
                 %b2: tensor<64xf32>, %w1: tensor<64x128xf32>, %w2: tensor<128x64xf32>) -> {_T} {{
  %n = ai.layernorm %x, %g1, %b1 : {_T} * tensor<64xf32> * tensor<64xf32>
  %qkv0 = ai.matmul %n, %wqkv : {_T} * tensor<64x192xf32>
  %qkv = ai.bias_add %qkv0, %bqkv {{axis = 2 : i64}} : tensor<1x16x192xf32> * tensor<192xf32>
  {_heads("q", "qkv", 0)}
  {_heads("k", "qkv", 64)}
  {_heads("v", "qkv", 128)}
  %s = ai.matmul %q, %k {{transpose_b = true}} : {_H} * {_H}
  %scale = arith.constant dense<0.25> : tensor<f32>
  %t = ai.mul %s, %scale : {_H} * tensor<f32>
  %p = ai.softmax %t : {_H}
  %o = ai.matmul %p, %v : {_H} * {_H}
  %ot = ai.transpose %o {{perm = array<i64: 0, 2, 1, 3>}} : {_H}
  %om = ai.reshape %ot {{shape = array<i64: 1, 16, 64>}} : {_S}
  %a = ai.matmul %om, %wo : {_T} * tensor<64x64xf32>
  %h = ai.add %a, %x : {_T} * {_T}
  %n2 = ai.layernorm %h, %g2, %b2 : {_T} * tensor<64xf32> * tensor<64xf32>
  %u = ai.matmul %n2, %w1 : {_T} * tensor<64x128xf32>
  %ug = ai.gelu %u : tensor<1x16x128xf32>
  %d = ai.matmul %ug, %w2 : tensor<1x16x128xf32> * tensor<128x64xf32>
  %y = ai.add %d, %h : {_T} * {_T}
  return %y : {_T}
}}
"""


def _compiled(text: str) -> fusec.CompiledModule:
    return fusec.compile(text, target="cpu")


def _inputs(compiled: fusec.CompiledModule, seed: int) -> list[np.ndarray]:
    return runner.random_inputs(entry_function(compiled.module), seed)


def _check(compiled: fusec.CompiledModule, seed: int) -> None:
    """Poisoned outputs, fresh inputs, against the float64 reference of the compiled IR."""
    program = compiled.program
    inputs = _inputs(compiled, seed)
    got = program(inputs, alloc=poison)
    want = run_reference(compiled.module, inputs, precision="float64", rounding="groups")
    for k, (out, ref) in enumerate(zip(got, want, strict=True)):
        assert_close(out, ref, what=f"result #{k}")


@pytest.mark.parametrize("text", [CNN_COMPILED, BLOCK], ids=["cnn", "transformer"])
def test_compiled_program_matches_reference(text: str) -> None:
    compiled = _compiled(text)
    program = compiled.program
    assert isinstance(program, CpuProgram)
    assert program.compiled_reason is None
    assert program.boundaries == 0
    for seed in (1, 2):  # a second call reuses the arena: nothing stale may leak through
        _check(compiled, seed)


@pytest.mark.slow  # four more kernels to compile
def test_a_copy_kernel_is_a_python_boundary() -> None:
    """The concat (numpy, in the matmul's launch) has no compiled form: that kernel's
    launch is called from Python after a compiled segment, on views of the same arena."""
    compiled = _compiled(CNN)
    assert compiled.program.boundaries == 1
    assert [k.compiled_entry is None for k in compiled.kernels].count(True) == 1
    _check(compiled, 3)


def _chain(kernels: int) -> str:
    """``kernels`` identical matmul + relu groups in a row (one kernel source, compiled once)."""
    t, w = "tensor<32x64xf32>", "tensor<64x64xf32>"
    lines = []
    for k in range(kernels):
        lines.append(f"%m{k + 1} = ai.matmul %y{k}, %w : {t} * {w}")
        lines.append(f"%y{k + 1} = ai.relu %m{k + 1} : {t}")
    body = "\n  ".join(lines)
    return (
        f"func.func @chain(%y0: {t}, %w: {w}) -> {t} {{\n  {body}\n  return %y{kernels} : {t}\n}}"
    )


def test_buffers_are_reused_by_liveness() -> None:
    """A chain of kernels needs two live values at a time: the arena holds two, not four."""
    compiled = _compiled(_chain(5))
    plan = compiled.program.plan
    assert plan is not None and len(plan.steps) == 5
    assert plan.value_bytes == 2 * 32 * 64 * 4
    _check(compiled, 4)


def test_arena_first_fit_merges_neighbours() -> None:
    arena = _Arena()
    a, b, c = arena.take(100), arena.take(64), arena.take(10)
    assert (a, b, c) == (0, 128, 192)
    arena.give(a, 100)
    arena.give(b, 64)
    assert arena.free == [(0, 192)]
    assert arena.take(150) == 0 and arena.end == 256


def test_python_launcher_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "python")
    compiled = _compiled(CNN_COMPILED)
    assert compiled.program.compiled_reason == f"{ENV_VAR}=python"
    _check(compiled, 5)


def test_threads_get_arenas_of_their_own() -> None:
    compiled = _compiled(BLOCK)
    program = compiled.program
    inputs = [_inputs(compiled, seed) for seed in (6, 7)]
    want = [Program.__call__(program, i)[0] for i in inputs]
    errors: list[str] = []

    def worker(k: int) -> None:
        for _ in range(20):
            got = program(inputs[k])[0]
            if not np.array_equal(got, want[k]):
                errors.append(f"thread {k}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


# ------------------------------------------------------------- steady-state counts


def _python_frames(call) -> int:
    """Python frames entered by ``call()`` (the fewest of three calls: an occasional
    re-read of the thread's CPU mask adds a few, ``affinity.MASK_CHECK_S``)."""
    counts = []
    for _ in range(3):
        count = 0

        def profile(frame, event, arg) -> None:
            nonlocal count
            if event == "call":
                count += 1

        sys.setprofile(profile)
        try:
            call()
        finally:
            sys.setprofile(None)
        counts.append(count)
    return min(counts)


def _peak_bytes(call) -> int:
    """Bytes traced by tracemalloc at the peak of ``call()`` above those before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
        del result
    finally:
        tracemalloc.stop()
    return peak - before


def _nrt_allocations(call) -> int:
    """Allocations Numba's runtime made during ``call()`` (its own counter)."""
    from numba.core.runtime import _nrt_python, rtsys

    enabled = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()
    try:
        before = rtsys.get_allocation_stats().alloc
        call()
        return rtsys.get_allocation_stats().alloc - before
    finally:
        if not enabled:
            _nrt_python.memsys_disable_stats()


def test_steady_state_call_allocates_nothing_and_enters_no_frame_per_kernel() -> None:
    small, large = _compiled(_chain(3)), _compiled(_chain(9))
    frames, old_frames = {}, {}
    for name, compiled in (("small", small), ("large", large)):
        program = compiled.program
        inputs = _inputs(compiled, 8)
        for _ in range(3):  # warm: compiled, arena made, BLAS and threads placed
            program(inputs)
            Program.__call__(program, inputs)
        frames[name] = _python_frames(lambda p=program, i=inputs: p(i))
        old_frames[name] = _python_frames(lambda p=program, i=inputs: Program.__call__(p, i))
        out_bytes = sum(o.nbytes for o in program(inputs))
        # outputs, the result tuple and a few small Python objects; every intermediate
        # value of these programs is larger than the slack
        peak = _peak_bytes(lambda p=program, i=inputs: p(i))
        assert peak <= out_bytes + 2048, (name, peak, out_bytes)
        assert _peak_bytes(lambda p=program, i=inputs: Program.__call__(p, i)) > peak + 2048
        # Numba allocates one descriptor per array argument of the segment call, no more
        segment_arrays = 5 + len(inputs) + len(program.plan.outputs)
        assert _nrt_allocations(lambda p=program, i=inputs: p(i)) == segment_arrays
    assert frames["large"] == frames["small"], frames
    # the Python launch loop enters frames per kernel: the count above would see that
    per_kernel = (old_frames["large"] - old_frames["small"]) / (
        len(large.kernels) - len(small.kernels)
    )
    assert per_kernel >= 2, old_frames


def test_parallel_entries_are_cacheable() -> None:
    """A parallel kernel's entry takes the thread count from its caller: an entry that
    called numba.get_num_threads() held a ctypes pointer, and Numba refused to cache it
    (every process compiled it again)."""
    t = "tensor<256x256xf32>"
    text = (
        f"func.func @f(%x: {t}, %w: {t}) -> {t} {{\n  %m = ai.matmul %x, %w : {t} * {t}\n"
        f"  %r = ai.relu %m : {t}\n  return %r : {t}\n}}"
    )
    compiled = _compiled(text)
    (kernel,) = compiled.kernels
    assert kernel.compiled_entry is not None and kernel.compiled_entry.max_tasks > 1
    _check(compiled, 9)
    (launch,) = compiled.program.load()
    entry = sys.modules[launch.__module__].entry
    assert entry.overloads
    for result in entry.overloads.values():
        assert not result.library.has_dynamic_globals
