"""``GemmLaunch``: what a generated matmul kernel module calls (build once, then launch).

A matmul group is one GEMM launch, preceded by the LayerNorm pre-pass when the
group has a LayerNorm prologue (or by the K-major copies of a tf32 GEMM's operands stored
MN-major, ``at`` and ``bt``: ``Transpose``) and followed by the softmax finalise pass when
its softmax rows are longer than one block tile (``fusec.targets.cuda.gemm.aux``).
Operands and epilogue inputs name their ``Source``: a group input (its index)
or a scratch buffer of the group (its name: ``w`` the folded weight, ``stats``
the row statistics, ``cd`` the fold's column sums, ``partials`` the softmax
partials). Scratch buffers are allocated once per stream and reused by every
later call on that stream (stream order keeps calls from overlapping).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from fusec.targets.cuda import tensormaps
from fusec.targets.cuda.caps import H200
from fusec.targets.cuda.gemm import aux, cpp, host
from fusec.targets.cuda.gemm.config import tile_count
from fusec.targets.cuda.linked import device_address

Source = int | str  # a group input's index, or a scratch buffer's name


def _address(array: Any) -> int:
    return device_address(array, "GEMM")


@dataclass(frozen=True)
class Prologue:
    """The LayerNorm pre-pass of a group: its spec and the group inputs it reads."""

    spec: aux.LayerNormPrep
    x: int
    gamma: int
    beta: int
    w: int


@dataclass(frozen=True)
class Transpose:
    """A tf32 or float8 GEMM operand's K-major copy (scratch ``scratch``: "at" or "bt", the
    operand that names it as its source), made from group input ``source`` (stored
    MN-major: A K x M, B K x N) before the GEMM: tf32 and float8 wgmma read K-major
    operands only."""

    spec: aux.TransposeF32  # (or its float8 kind, aux.TransposeCodes)
    source: int
    scratch: str


@dataclass(frozen=True)
class Finalise:
    """The softmax finalise pass of a group and the group inputs its post-ops read."""

    spec: aux.SoftmaxFinalise
    extras: tuple[int, ...] = ()


@dataclass
class _Call:
    """The prepared launches of one (stream, addresses) key, in order."""

    generation: int
    steps: list  # ("memset", ptr, words) | ("kernel", kernel, grid, threads, params) | ("gemm", p)
    keep: list


class GemmLaunch:
    """One GEMM group: its specs, problem sizes and operand sources. The cubins are built
    (or read from the cache) on the first call.

    The runtime calls ``direct`` with raw addresses (no array objects are made per
    call); ``__call__`` takes device arrays (the module's ``launch``, for other callers).
    """

    def __init__(
        self,
        spec: cpp.GemmSpec,
        *,
        a: tuple[Source, int, int, int],
        b: tuple[Source, int, int, int],
        extras: tuple[Source, ...],
        m: int,
        n: int,
        k: int,
        batches: int,
        prologue: Prologue | None = None,
        finalise: Finalise | None = None,
        transposes: tuple[Transpose, ...] = (),
        w4: tuple[Source, ...] = (),
    ) -> None:
        self.spec = spec
        self.w4 = w4  # an int4 B's scales and zero points (b: its packed codes)
        self.a, self.b, self.extras = a, b, extras  # (source, rows, cols, batch)
        self.m, self.n, self.k, self.batches = m, n, k, batches
        self.prologue, self.finalise = prologue, finalise
        self.transposes = transposes
        self.kernel: host.GemmKernel | None = None
        self.prep: tensormaps.LoadedKernel | None = None
        self.trans: tensormaps.LoadedKernel | None = None
        self.fin: tensormaps.LoadedKernel | None = None
        self.lock = threading.Lock()
        #: held while one call queues its steps: the scratch buffers are per stream, so two
        #: threads calling on one stream must not interleave their steps (A's statistics
        #: pass, B's statistics pass, A's GEMM would read B's statistics)
        self.queue_lock = threading.Lock()
        self.sms = H200.sms
        #: (stream, output address, input addresses) -> prepared launches: the per-call path
        self.calls: dict[tuple, _Call] = {}
        self.scratch: dict[int, dict[str, int]] = {}  # stream -> name -> device address

    # ----------------------------------------------------------------- sizes
    def scratch_bytes(self) -> dict[str, int]:
        """Bytes of each scratch buffer a call needs."""
        sizes = {}
        if self.prologue is not None:
            sizes["w"] = self.k * self.n * 2
            sizes["stats"] = 8 * self.m * self.batches
            sizes["cd"] = 8 * (-(-self.n // 4) * 4)  # c, then d at n rounded up to 4
        if self.finalise is not None:
            tiles_n = -(-self.n // self.spec.config.bn)
            sizes["partials"] = 8 * self.batches * self.m * tiles_n
        for t in self.transposes:  # an operand's K-major copy: batch x rows x K
            _, rows, cols, batch = self._operand_of(t.scratch)
            sizes[t.scratch] = t.spec.ELEMENT_BYTES * rows * cols * batch
        return sizes

    def _operand_of(self, scratch: str) -> tuple[Source, int, int, int]:
        """The operand (A or B) read from scratch buffer ``scratch``."""
        return self.a if self.a[0] == scratch else self.b

    # ------------------------------------------------------------------ load
    def load(self, sms: int | None = None) -> host.GemmKernel:
        """Build (or read from the cache) and load the cubins; ``sms`` sizes the grid."""
        with self.lock:
            if sms is not None:
                self.sms = sms
            if self.kernel is None:
                from fusec.targets.cuda import build

                if self.prologue is not None:
                    self.prep = tensormaps.LoadedKernel(build.build(self.prologue.spec).cubin)
                if self.finalise is not None:
                    self.fin = tensormaps.LoadedKernel(build.build(self.finalise.spec).cubin)
                if self.transposes:
                    self.trans = tensormaps.LoadedKernel(build.build(self.transposes[0].spec).cubin)
                self.kernel = host.GemmKernel(self.spec, build.build(self.spec).cubin)
            return self.kernel

    # ---------------------------------------------------------------- launch
    def direct(self, stream: int, inputs: list, outputs: list) -> None:
        """Launch on the raw stream handle ``stream``; ``inputs``/``outputs`` have ``.ptr``."""
        key = (stream, outputs[0].ptr, *[b.ptr for b in inputs])
        call = self.calls.get(key)
        if call is None or call.generation != tensormaps.maps_generation():
            call = self._prepare(key)
        self._run(call)

    def __call__(self, inputs: tuple, output: Any, stream: Any = 0, sms: int = H200.sms) -> None:
        from fusec.targets.cuda.streams import explicit_handle

        self.sms = sms
        key = (explicit_handle(stream), _address(output), *[_address(x) for x in inputs])
        call = self.calls.get(key)
        if call is None or call.generation != tensormaps.maps_generation():
            call = self._prepare(key)
        self._run(call)

    def _run(self, call: _Call) -> None:
        kernel = self.kernel
        assert kernel is not None  # loaded by _prepare
        if len(call.steps) == 1:  # the plain GEMM: one launch
            kernel.launch(call.steps[0][1])
            return
        drv = tensormaps.driver()
        with self.queue_lock:
            self._queue(call, kernel, drv)

    @staticmethod
    def _queue(call: _Call, kernel: host.GemmKernel, drv: Any) -> None:
        for step in call.steps:
            if step[0] == "gemm":
                kernel.launch(step[1])
            elif step[0] == "kernel":  # an auxiliary kernel (LN statistics, softmax finalise)
                _, auxiliary, grid, threads, stream, params = step
                auxiliary.launch_raw(grid, threads, stream, params)
            else:
                _, ptr, words, stream = step
                tensormaps._check(drv.cuMemsetD32Async(drv.CUdeviceptr(ptr), 0, words, stream))

    def _prepare(self, key: tuple) -> _Call:
        kernel = self.kernel or self.load()
        stream, out, *inputs = key
        generation = tensormaps.maps_generation()
        call = _Call(generation, [], [])
        if self.m <= 0 or self.n <= 0 or self.batches <= 0:
            return call
        scratch = self._scratch(stream)

        def address(source: Source) -> int:
            return inputs[source] if isinstance(source, int) else scratch[source]

        handle = tensormaps.driver().CUstream(stream)
        if self.prologue is not None:
            call.steps.extend(self._prologue_steps(address, handle, call.keep))
        for t in self.transposes:  # an operand stored C x R -> its copy R x C, per batch
            _, rows, cols, batch = self._operand_of(t.scratch)
            params, kept = tensormaps.parameter_block(
                (address(t.source), address(t.scratch)), (cols, rows, batch)
            )
            call.keep.append(kept)
            grid = aux.TransposeF32.blocks(cols, rows, batch)
            call.steps.append(("kernel", self.trans, grid, aux.THREADS, handle, params))
        a_source, a_rows, a_cols, a_batch = self.a
        b_source, b_rows, b_cols, b_batch = self.b
        prepared = kernel.prepare(
            host.GemmCall(
                stream,
                tensormaps.Operand(address(a_source), a_rows, a_cols, a_batch),
                tensormaps.Operand(address(b_source), b_rows, b_cols, b_batch),
                out,
                tuple(address(s) for s in self.extras),
                self.m,
                self.n,
                self.k,
                self.batches,
                self.sms,
                w4=tuple(address(s) for s in self.w4),
            )
        )
        call.steps.append(("gemm", prepared))
        if self.finalise is not None:
            tiles_n = tile_count(self.spec.config, 1, self.n, 1)
            params, keep = tensormaps.parameter_block(
                (out, scratch["partials"], *[inputs[i] for i in self.finalise.extras]),
                (self.m, self.n, tiles_n, self.batches),
            )
            call.keep.append(keep)
            grid = self.m * self.batches
            call.steps.append(("kernel", self.fin, grid, aux.THREADS, handle, params))
        if tensormaps.maps_generation() != generation:  # a map slab was retired meanwhile
            return self._prepare(key)
        if len(self.calls) >= 64:
            self.calls.clear()
        self.calls[key] = call
        return call

    def _prologue_steps(self, address, handle: Any, keep: list) -> list[tuple]:
        """Zero the fold's column sums (W stored K x N: atomics add into them), then the
        pre-pass."""
        p = self.prologue
        assert p is not None
        rows = self.m * self.batches
        fold_blocks = p.spec.fold_blocks(self.k, self.n)
        grid = fold_blocks + p.spec.stat_blocks(rows)
        params, kept = tensormaps.parameter_block(
            (
                address(p.x),
                address(p.gamma),
                address(p.beta),
                address(p.w),
                address("w"),
                address("stats"),
                address("cd"),
            ),
            (rows, self.k, self.n, fold_blocks),
        )
        keep.append(kept)
        steps: list[tuple] = []
        if p.spec.b_major == "n":
            steps.append(("memset", address("cd"), 2 * (-(-self.n // 4) * 4), handle))
        steps.append(("kernel", self.prep, grid, aux.THREADS, handle, params))
        return steps

    def _scratch(self, stream: int) -> dict[str, int]:
        buffers = self.scratch.get(stream)
        if buffers is None:
            buffers = self.scratch[stream] = tensormaps.allocate(self.scratch_bytes())
        return buffers
