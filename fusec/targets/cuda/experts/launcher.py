"""``MoeLaunch``: what a generated experts module calls: the five launches of the layer (six
with the SwiGLU kernel; the package docstring) on the caller's stream, with their scratch
per stream."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from fusec.targets.cuda import tensormaps
from fusec.targets.cuda.experts.cpp import THREADS, MoeKernelSpec
from fusec.targets.cuda.gemm import cpp, host
from fusec.targets.cuda.linked import LinkedLaunch

#: the op's operands, in order (``MoeLaunch.order`` maps them to the group's inputs)
X, WEIGHTS, EXPERTS, GATE_UP, DOWN = range(5)


@dataclass(frozen=True)
class MoeShape:
    """T tokens of width D, K experts a token of E, each of hidden width F; row tiles of
    ``bm`` rows (both GEMMs')."""

    tokens: int
    width: int
    hidden: int
    experts: int
    k: int
    bm: int

    @property
    def pairs(self) -> int:
        return self.tokens * self.k

    @property
    def rows_max(self) -> int:
        """Rows of the sorted order at most: the groups' tiles, sum of ceil(c_e / bm) over
        the experts' pair counts c_e, are at most (P + E (bm - 1)) // bm, and at most P
        (a group has a pair)."""
        tiles = min((self.pairs + self.experts * (self.bm - 1)) // self.bm, self.pairs)
        return tiles * self.bm

    def scratch_bytes(self, gated: bool = False) -> dict[str, int]:
        """Bytes of each scratch buffer (``gated``: the gate/up GEMM stores h, no g)."""
        rows, d, f = self.rows_max, self.width, self.hidden
        return {
            "groups": 4 * (1 + rows // self.bm),
            "pair_row": 4 * self.pairs,
            "row_token": 4 * rows,
            "row_weight": 4 * rows,
            "xs": 2 * rows * d,
            "g": 0 if gated else 2 * rows * 2 * f,
            "h": 2 * rows * f,
            "y": 4 * rows * d,
        }


class MoeLaunch(LinkedLaunch):
    """One experts group: the light kernels' specs (three, four with the SwiGLU kernel), the
    two grouped GEMMs' and the layer's sizes. Cubins are built (or read from the cache) on
    the first call (``load``: ``kernel`` is then every kernel by name); the launches of one
    (stream, addresses) key are prepared once (parameter blocks, tensor maps) and queued as
    they are on later calls. ``LinkedLaunch`` gives the runtime's ``direct`` and the
    module's ``__call__``."""

    what = "MoE"

    def __init__(
        self,
        shape: MoeShape,
        *,
        order: tuple[int, ...] = (0, 1, 2, 3, 4),
        route: MoeKernelSpec,
        gather: MoeKernelSpec,
        combine: MoeKernelSpec,
        up: cpp.GemmSpec,
        down: cpp.GemmSpec,
        swiglu: MoeKernelSpec | None = None,
    ) -> None:
        if not (up.grouped and down.grouped):
            raise ValueError("the experts' projections are grouped GEMMs")
        if up.swiglu == (swiglu is not None):
            raise ValueError("the SwiGLU runs in the gate/up GEMM's epilogue or in its kernel")
        super().__init__(route)
        self.shape = shape
        self.order = order  # the group input of each operand (x, weights, experts, ...)
        self.light = {"route": route, "gather": gather, "combine": combine}
        if swiglu is not None:
            self.light["swiglu"] = swiglu
        self.gemm_specs = {"up": up, "down": down}
        #: one call's launches are queued whole (the scratch is per stream)
        self.queue_lock = threading.Lock()
        self.calls: dict[tuple, list] = {}
        self.scratch: dict[int, dict[str, int]] = {}

    @property
    def specs(self) -> tuple:
        """Every linked kernel, in launch order."""
        light, gemm = self.light, self.gemm_specs
        swiglu = (light["swiglu"],) if "swiglu" in light else ()
        return (light["route"], light["gather"], gemm["up"], *swiglu, gemm["down"],
                light["combine"])  # fmt: skip

    # ------------------------------------------------------------------ load
    def load(self, sms: int | None = None) -> dict[str, Any]:
        """Build (or read from the cache) and load every kernel of the layer, by name."""
        with self.lock:
            if sms is not None:
                self.sms = sms
            if self.kernel is None:
                from fusec.targets.cuda import build

                kernels: dict[str, Any] = {
                    name: tensormaps.LoadedKernel(build.build(spec).cubin)
                    for name, spec in self.light.items()
                }
                for name, spec in self.gemm_specs.items():
                    kernels[name] = host.GemmKernel(spec, build.build(spec).cubin)
                self.kernel = kernels
            return self.kernel

    # ---------------------------------------------------------------- launch
    def raw(self, stream: int, inputs: list[int], outputs: list[int]) -> None:
        key = (stream, outputs[0], *inputs)
        steps = self.calls.get(key)
        if steps is None or steps[0] != tensormaps.maps_generation():
            steps = self._prepare(key)
        with self.queue_lock:
            for launch in steps[1]:
                launch()

    def _prepare(self, key: tuple) -> list:
        k = self.load()
        stream, out, *group_inputs = key
        inputs = [group_inputs[i] for i in self.order]
        generation = tensormaps.maps_generation()
        s = self.shape
        scratch = self._scratch(stream)
        handle = tensormaps.driver().CUstream(stream)
        rows, keep, launches = s.rows_max, [], []

        def light(name: str, grid: int, pointers: tuple, ints: tuple) -> None:
            params, kept = tensormaps.parameter_block(pointers, ints)
            keep.append(kept)
            kernel, threads = k[name], self.light[name].threads
            launches.append(lambda: kernel.launch_raw(grid, threads, handle, params))

        def grouped(name: str, a: int, a_cols: int, b: int, n: int, out_ptr: int, extras: tuple):
            b_rows = 2 * n if self.gemm_specs[name].swiglu else n  # gated: gates, then ups
            prepared = k[name].prepare(
                host.GemmCall(
                    stream,
                    tensormaps.Operand(a, rows, a_cols, 1),
                    tensormaps.Operand(b, b_rows, a_cols, s.experts),
                    out_ptr,
                    extras,
                    rows,
                    n,
                    a_cols,
                    1,
                    self.sms,
                    scratch["groups"],
                )
            )
            launches.append(lambda: k[name].launch(prepared))

        sc = scratch
        route = (inputs[EXPERTS], inputs[WEIGHTS], sc["groups"], sc["pair_row"], sc["row_token"],
                 sc["row_weight"])  # fmt: skip
        light("route", 1, route, (s.pairs, s.k, rows))
        light("gather", self._grid(rows * s.width // 8),
              (inputs[X], sc["row_token"], sc["groups"], sc["xs"]), (rows, s.width))  # fmt: skip
        if "swiglu" in self.light:  # the GEMM stores gate and up, the kernel makes h
            grouped("up", sc["xs"], s.width, inputs[GATE_UP], 2 * s.hidden, sc["g"], ())
            light("swiglu", self._grid(rows * s.hidden // 8), (sc["g"], sc["groups"], sc["h"]),
                  (rows, s.hidden))  # fmt: skip
        else:  # the gated epilogue stores h
            grouped("up", sc["xs"], s.width, inputs[GATE_UP], s.hidden, sc["h"], ())
        grouped("down", sc["h"], s.hidden, inputs[DOWN], s.width, sc["y"], (sc["row_weight"],))
        light("combine", self._grid(s.tokens * s.width // 4), (sc["y"], sc["pair_row"], out),
              (s.tokens, s.k, s.width))  # fmt: skip
        if tensormaps.maps_generation() != generation:  # a map slab was retired meanwhile
            return self._prepare(key)
        steps = [generation, launches, keep]
        if len(self.calls) >= 64:
            self.calls.clear()
        self.calls[key] = steps
        return steps

    def _grid(self, work: int) -> int:
        """Blocks of a grid-stride kernel over ``work`` items: a few waves at most."""
        return max(1, min(-(-work // THREADS), 8 * self.sms))

    def _scratch(self, stream: int) -> dict[str, int]:
        buffers = self.scratch.get(stream)
        if buffers is None:
            sizes = self.shape.scratch_bytes(self.gemm_specs["up"].swiglu)
            buffers = self.scratch[stream] = tensormaps.allocate(sizes)
        return buffers
